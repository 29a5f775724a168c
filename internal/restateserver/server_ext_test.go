package restateserver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// groupGone reports whether no process of group pgid is left.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// The life cycle the e2e tests rely on: start on free loopback ports, serve
// admin and ingress, restart on the same ports and base directory, stop
// without leaving any process of the server's group.
func TestStartRestartStop(t *testing.T) {
	s := restateserver.Start(t, restateserver.Options{})
	ctx := context.Background()

	for _, u := range []string{s.AdminURL() + "/health", s.IngressURL() + "/restate/health"} {
		if code := get(t, u); code != http.StatusOK {
			t.Fatalf("GET %s = %d, want 200", u, code)
		}
	}
	if !strings.HasPrefix(s.AdminURL(), "http://127.0.0.1:") || !strings.HasPrefix(s.IngressURL(), "http://127.0.0.1:") {
		t.Errorf("URLs must be loopback: %s %s", s.AdminURL(), s.IngressURL())
	}
	if _, err := s.Query(ctx, "SELECT id FROM sys_invocation LIMIT 1"); err != nil {
		t.Fatalf("query after start: %v", err)
	}

	// The invoker's per-partition directories go to the server's own
	// temporary directory, removed with it, not to the machine's /tmp
	// (3,000 of them had piled up there after a day of test runs).
	if !testtool.Poll(10*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(filepath.Dir(s.BaseDir()), "tmp", "invoker-*"))
		return len(m) > 0
	}) {
		t.Errorf("no invoker-* directory under %s within 10s: the server's temporary files go elsewhere", filepath.Join(filepath.Dir(s.BaseDir()), "tmp"))
	}

	admin, ingress, base, pgid := s.AdminURL(), s.IngressURL(), s.BaseDir(), s.Pgid()
	if pgid == 0 || groupGone(pgid) {
		t.Fatalf("server process group %d is not running", pgid)
	}
	s.Restart(t)
	if s.AdminURL() != admin || s.IngressURL() != ingress || s.BaseDir() != base {
		t.Fatalf("restart moved the server: %s %s %s -> %s %s %s", admin, ingress, base, s.AdminURL(), s.IngressURL(), s.BaseDir())
	}
	if !groupGone(pgid) {
		t.Errorf("the first server's process group %d survived the restart", pgid)
	}
	if code := get(t, s.AdminURL()+"/health"); code != http.StatusOK {
		t.Fatalf("health after restart = %d", code)
	}
	if _, err := s.Query(ctx, "SELECT id FROM sys_invocation LIMIT 1"); err != nil {
		t.Fatalf("query after restart: %v", err)
	}

	pgid = s.Pgid()
	// A slow graceful stop ends in SIGKILL and an error; either way the
	// group must be gone.
	if err := s.Stop(); err != nil {
		t.Logf("stop: %v", err)
	}
	if !groupGone(pgid) {
		t.Fatalf("process group %d still has processes after Stop", pgid)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop must be a no-op: %v", err)
	}
	if _, err := http.Get(s.AdminURL() + "/health"); err == nil {
		t.Fatal("admin API still answers after Stop")
	}
}

// Errors from the admin API and the ingress carry the server's message.
func TestAdminAndIngressErrors(t *testing.T) {
	// The long subtest name guards the base-directory choice: the server
	// binds unix sockets there, whose paths are limited to 108 bytes.
	t.Run("with_a_deliberately_long_test_name_that_would_overflow_the_unix_socket_path_limit", testAdminAndIngressErrors)
}

func testAdminAndIngressErrors(t *testing.T) {
	s := restateserver.Start(t, restateserver.Options{})
	ctx := context.Background()

	// Nothing listens on the port of a just-closed listener.
	_, err := s.TryRegister(ctx, "http://127.0.0.1:1", false)
	var he *restateserver.HTTPError
	if !errors.As(err, &he) || he.Status/100 == 2 || !strings.Contains(he.Body, "127.0.0.1:1") {
		t.Fatalf("register of an unreachable deployment: %v, want an HTTPError naming the uri", err)
	}

	status, body, err := s.Call(ctx, "NoSuchService", "handler", []byte(`{}`), nil)
	if err != nil || status != http.StatusNotFound {
		t.Fatalf("call of an unknown service = %d %s %v, want 404", status, body, err)
	}
	if _, err := s.Send(ctx, "NoSuchService", "handler", []byte(`{}`), nil); !errors.As(err, &he) || he.Status != http.StatusNotFound {
		t.Fatalf("send to an unknown service: %v, want 404", err)
	}

	if err := s.CancelInvocation(ctx, "'; DROP"); err == nil || !strings.Contains(err.Error(), "invalid invocation id") {
		t.Fatalf("cancel with a bad id: %v", err)
	}
	if _, err := s.InvocationStatus(ctx, "x' OR '1'='1"); err == nil || !strings.Contains(err.Error(), "invalid invocation id") {
		t.Fatalf("status with a bad id: %v", err)
	}
	// A well-formed id the server does not know.
	const unknown = "inv_1gdJBtdVEcM942bjcDmb1c1khoaJe11Hbz"
	if _, err := s.InvocationStatus(ctx, unknown); !errors.Is(err, restateserver.ErrNoInvocation) {
		t.Fatalf("status of an unknown invocation: %v, want ErrNoInvocation", err)
	}
	if err := s.CancelInvocation(ctx, unknown); !errors.As(err, &he) || he.Status/100 == 2 {
		t.Fatalf("cancel of an unknown invocation: %v, want an HTTPError", err)
	}
}

type fakeTB struct {
	testing.TB
	fatal, skip string
}

func (f *fakeTB) Helper()                           {}
func (f *fakeTB) Fatalf(format string, args ...any) { f.fatal = fmt.Sprintf(format, args...) }
func (f *fakeTB) Skipf(format string, args ...any)  { f.skip = fmt.Sprintf(format, args...) }

// "if it is empty or missing: t.Fatal when os.Getenv("CI")=="true", else
// t.Skip with a clear message" (common rules).
func TestBinaryMissing(t *testing.T) {
	for _, ci := range []string{"true", ""} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			t.Setenv(restateserver.BinaryEnv, "")
			f := &fakeTB{TB: t}
			if got := restateserver.Binary(f); got != "" {
				t.Fatalf("Binary = %q", got)
			}
			msg := f.skip
			if ci == "true" {
				msg = f.fatal
				if f.skip != "" {
					t.Errorf("skipped in CI: %s", f.skip)
				}
			} else if f.fatal != "" {
				t.Errorf("failed outside CI: %s", f.fatal)
			}
			if !strings.Contains(msg, "RESTATE_SERVER_BIN is not set") {
				t.Errorf("message %q does not say what is missing", msg)
			}
		})
	}
	t.Run("not executable", func(t *testing.T) {
		t.Setenv("CI", "")
		t.Setenv(restateserver.BinaryEnv, t.TempDir())
		f := &fakeTB{TB: t}
		restateserver.Binary(f)
		if !strings.Contains(f.skip, "not an executable file") {
			t.Errorf("skip message %q", f.skip)
		}
	})
}
