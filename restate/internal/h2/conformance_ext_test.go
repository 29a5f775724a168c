package h2_test

import (
	"context"
	"encoding/xml"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/testtool"
	"github.com/fnbridge/fnbridge/restate/internal/h2"
)

// h2specReport is what h2spec's JUnit report says of each case.
type h2specReport struct {
	Suites []struct {
		Name  string `xml:"name,attr"`
		Cases []struct {
			Package   string    `xml:"package,attr"`
			ClassName string    `xml:"classname,attr"`
			Failure   *struct{} `xml:"failure"`
			Error     *struct{} `xml:"error"`
			Skipped   *struct{} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// TestH2specConformance runs h2spec, the HTTP/2 conformance suite (RFC
// 7540/9113 and RFC 7541, every "MUST" it checks: frame sizes and
// formats, stream states, flow control, SETTINGS, PING, GOAWAY, HPACK,
// malformed requests), against the server, and requires every case to
// pass. Beside restate-server, a load balancer or any other HTTP/2 client
// may speak to the endpoint; a frame it should not send must end in the
// error the specification names, never in a stream served wrongly.
//
// The connections are served the way the endpoint serves TLS ones
// (ServeConnPreface), so a connection with a bad preface is closed; on the bridge's cleartext port net/http takes such bytes for an
// HTTP/1.1 request and answers 400 instead, which is that port's job.
// The handler reads each request to its end before it answers, as the
// invocation endpoint does, so the checks of a request body's length run
// on every case rather than when the answer happens to come later.
func TestH2specConformance(t *testing.T) {
	bin := testtool.Require(t, "H2SPEC_BIN", "h2spec", "to run the HTTP/2 conformance suite")
	addr := serve(t, &h2.Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "conformance\n")
	}))
	host, port, _ := net.SplitHostPort(addr)

	report := filepath.Join(t.TempDir(), "h2spec.xml")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-h", host, "-p", port, "-o", "2", "-S", "-j", report)
	cmd.WaitDelay = 5 * time.Second
	out, runErr := cmd.CombinedOutput()
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("h2spec wrote no report (%v): %v\n%s", runErr, err, out)
	}
	var r h2specReport
	if err := xml.Unmarshal(data, &r); err != nil {
		t.Fatalf("h2spec's report: %v", err)
	}
	total, failed := 0, []string{}
	for _, s := range r.Suites {
		for _, c := range s.Cases {
			total++
			switch {
			case c.Failure != nil || c.Error != nil:
				failed = append(failed, c.Package+" "+c.ClassName)
			case c.Skipped != nil: // a case not run is no pass
				failed = append(failed, c.Package+" "+c.ClassName+" (skipped)")
			}
		}
	}
	// 146 cases in h2spec 2.2.1 with the strict ones (-S); far fewer means
	// it did not run them.
	if total < 140 {
		t.Fatalf("h2spec ran %d cases, want all 146 (exit: %v)\n%s", total, runErr, out)
	}
	if len(failed) > 0 {
		t.Errorf("h2spec: %d of %d cases failed:\n  %s\n%s", len(failed), total, strings.Join(failed, "\n  "), out)
	} else if runErr != nil {
		t.Errorf("h2spec exited with %v though every case passed:\n%s", runErr, out)
	}
	t.Logf("h2spec: %d of %d cases passed", total-len(failed), total)
}
