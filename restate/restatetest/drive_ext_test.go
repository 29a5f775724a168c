package restatetest_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
)

func TestDriveCompletesEveryInvocation(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{})
	runs := make(chan struct{}, 1000)
	_ = ep.Bind(restate.Service{Name: "S", Handlers: []restate.Handler{{Name: "h", Fn: func(ctx restate.Context, in []byte) ([]byte, error) {
		return ctx.Run("invoke", func(context.Context) ([]byte, error) { runs <- struct{}{}; return in, nil })
	}}}})
	srv := httptest.NewUnstartedServer(ep)
	srv.Config = restate.NewHTTPServer("", ep)
	srv.Start()
	defer srv.Close()
	for _, v := range []int{5, 6, 7} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err := restatetest.Drive(ctx, srv.URL, "S", "h", v, 8, 200)
		cancel()
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if st.Invocations != 200 || st.P50 <= 0 || st.P99 < st.P50 || st.Duration <= 0 {
			t.Fatalf("v%d stats %+v", v, st)
		}
	}
	if len(runs) != 600 {
		t.Fatalf("%d run executions, want one per invocation (600)", len(runs))
	}
	if _, err := restatetest.Drive(context.Background(), srv.URL, "S", "nope", 6, 1, 1); err == nil {
		t.Fatal("Drive against an unknown handler reported success")
	}
}
