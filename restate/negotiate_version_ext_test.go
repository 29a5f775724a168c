package restate_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fnbridge/fnbridge/restate"
	"github.com/fnbridge/fnbridge/restate/restatetest"
)

// The deployment answers an invocation with the content type it was sent
// (the service invocation protocol): only the canonical decimal version
// is served, and any other spelling of a version is 415, not answered
// with a content type the runtime did not send.
func TestInvocationContentTypeNeedsCanonicalVersion(t *testing.T) {
	ep := restate.NewEndpoint(restate.Config{ProtocolMode: restate.RequestResponse})
	if err := ep.Bind(restate.Service{Name: "Svc", Handlers: []restate.Handler{{Name: "echo",
		Fn: func(_ restate.Context, in []byte) ([]byte, error) { return in, nil }}}}); err != nil {
		t.Fatal(err)
	}
	if err := ep.Err(); err != nil {
		t.Fatal(err)
	}
	invoke := func(ct string) *httptest.ResponseRecorder {
		body := restatetest.Encode(restatetest.Start("inv_ct", 1), restatetest.Input([]byte("hi")))
		req := httptest.NewRequest(http.MethodPost, "/invoke/Svc/echo", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		rec := httptest.NewRecorder()
		ep.ServeHTTP(rec, req)
		return rec
	}
	const prefix = "application/vnd.restate.invocation.v"
	for _, ct := range []string{prefix + "+5", prefix + "05", prefix + "006", prefix + "-7", prefix + "0", prefix + " 5", prefix + "5x"} {
		if rec := invoke(ct); rec.Code != http.StatusUnsupportedMediaType {
			t.Errorf("content-type %q: HTTP %d (content-type %q), want 415", ct, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
	for _, v := range versions {
		ct := restatetest.ContentType(v)
		rec := invoke(ct)
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != ct {
			t.Errorf("content-type %q: HTTP %d with content-type %q, want 200 with the same (%s)", ct, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
	}
}
