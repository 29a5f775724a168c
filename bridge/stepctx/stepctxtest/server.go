package stepctxtest

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
)

// Serve starts a context endpoint on a unix socket in a short temporary
// directory (a socket path has about 100 bytes) and shuts it down at the
// end of the test. It returns the server, its address (unix:///...) and
// the directory, which the test may use for other short paths.
func Serve(t testing.TB) (srv *stepctx.Server, addr, dir string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "fnbctx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	l, err := stepctx.Listen("unix://" + filepath.Join(dir, "ctx.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv = stepctx.NewServer(stepctx.Config{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("context endpoint: %v", err)
		}
	})
	return srv, stepctx.URL(l), dir
}
