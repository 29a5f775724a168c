package devloop

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/rs/zerolog"
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
	_, err = registerWhenUp(context.Background(), &http.Client{Timeout: time.Second}, admin, "http://127.0.0.1:9080", 500*time.Millisecond, func(why error) { waited = errors.Is(why, syscall.ECONNREFUSED) })
	if err == nil || !strings.Contains(err.Error(), admin) || !strings.Contains(err.Error(), "is restate-server running there? --admin") {
		t.Fatalf("err = %v, want one naming %s and --admin", err, admin)
	}
	if !waited || time.Since(start) > 5*time.Second {
		t.Fatalf("waited=%v after %s, want a bounded wait that was announced with its reason", waited, time.Since(start))
	}
}

// Stopped while it still waits for the admin API, the dev loop ends as
// gracefully as after it registered (nil: bridge dev exits 0), not with
// "context canceled".
func TestRunStoppedWhileWaitingForTheAdminAPIIsGraceful(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := "http://" + ln.Addr().String()
	ln.Close()
	logs := make(logLines, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Live: newTestLive(t), Admin: admin, Advertise: "http://127.0.0.1:9080", Log: zerolog.New(logs), registerWait: time.Hour})
	}()
	var line string
	for !strings.Contains(line, "waiting for restate-server's admin API") {
		select {
		case line = <-logs:
		case err := <-done:
			t.Fatalf("Run ended before it waited: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("no waiting line")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after a stop while waiting", err)
	}
	if !strings.Contains(line, `"level":"warn"`) || !strings.Contains(line, "connection refused") {
		t.Errorf("waiting line %q: want a warning with the dial error", line)
	}
}

// newTestLive is a Live serving one Bash handler, not started: Run reads
// only its configuration and manifest before it registers.
func newTestLive(t *testing.T) *bridge.Live {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "s.sh"), "g() { :; }\n")
	cfg, err := bridge.ParseConfig([]byte("services:\n  - name: S\n    handlers:\n      - {name: g, runtime: bash, dir: ., handler: s.g}\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Path = filepath.Join(dir, "bridge.yaml")
	live, err := bridge.NewLive(cfg, bridge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return live
}

// logLines is a log sink that hands each line to the test as it is
// written.
type logLines chan string

func (l logLines) Write(p []byte) (int, error) {
	l <- string(p)
	return len(p), nil
}
