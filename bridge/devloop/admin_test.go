package devloop

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// An admin API that refuses connections is waited for, then named in the
// error with what to check.
func TestRegisterWaitsForTheAdminAPIThenSaysWhatToCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	waited := false
	start := time.Now()
	_, err = registerWhenUp(context.Background(), &http.Client{Timeout: time.Second}, admin, "http://127.0.0.1:9080", 500*time.Millisecond, func() { waited = true })
	if err == nil || !strings.Contains(err.Error(), admin) || !strings.Contains(err.Error(), "is restate-server running there? --admin") {
		t.Fatalf("err = %v, want one naming %s and --admin", err, admin)
	}
	if !waited || time.Since(start) > 5*time.Second {
		t.Fatalf("waited=%v after %s, want a bounded wait that was announced", waited, time.Since(start))
	}
}
