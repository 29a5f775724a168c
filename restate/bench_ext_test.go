package restate_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
)

func benchEndpoint(b *testing.B, mode restate.ProtocolMode) *restate.Endpoint {
	b.Helper()
	ep := restate.NewEndpoint(restate.Config{ProtocolMode: mode})
	err := ep.Bind(restate.Service{Name: "S", Handlers: []restate.Handler{{Name: "h", Fn: func(ctx restate.Context, in []byte) ([]byte, error) {
		return ctx.Run("invoke", func(context.Context) ([]byte, error) { return in, nil })
	}}}})
	if err != nil {
		b.Fatal(err)
	}
	return ep
}

// The endpoint's hot path over real h2c: Input, Run, Output per invocation.
func BenchmarkInvokeH2C(b *testing.B) {
	for _, v := range []int{6, 7} {
		b.Run("v"+strconv.Itoa(v), func(b *testing.B) {
			ep := benchEndpoint(b, restate.BidiStream)
			srv := httptest.NewUnstartedServer(ep)
			srv.Config = restate.NewHTTPServer("", ep)
			srv.Start()
			defer srv.Close()
			b.ReportAllocs()
			b.ResetTimer()
			if _, err := restatetest.Drive(context.Background(), srv.URL, "S", "h", v, 8, b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// The endpoint alone, without a network: one REQUEST_RESPONSE attempt
// that proposes its run and suspends.
func BenchmarkInvokeRequestResponse(b *testing.B) {
	ep := benchEndpoint(b, restate.RequestResponse)
	body := restatetest.Encode(restatetest.Start("inv_bench", 1), restatetest.Input([]byte(`{"n":1}`)))
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/invoke/S/h", bytes.NewReader(body))
		req.Header.Set("Content-Type", restatetest.ContentType(7))
		rec := httptest.NewRecorder()
		ep.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("HTTP %d", rec.Code)
		}
	}
}
