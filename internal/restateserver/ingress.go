package restateserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Call invokes service/handler through the ingress and waits for the
// result. For keyed services pass service as "Service/key". The body is sent
// as application/json unless headers set another content-type; headers may
// carry e.g. "idempotency-key". A non-2xx answer is not an error: status and
// body are returned as the ingress gave them (restate maps a terminal
// failure to an HTTP status with the failure message).
func (s *Server) Call(ctx context.Context, service, handler string, body []byte, headers map[string]string) (int, []byte, error) {
	status, resp, err := s.roundTrip(ctx, http.MethodPost, s.target(service, handler), body, withJSON(headers))
	var he *HTTPError
	if errors.As(err, &he) {
		return status, resp, nil
	}
	return status, resp, err
}

// Send starts service/handler without waiting (the ingress /send suffix)
// and returns the invocation id.
func (s *Server) Send(ctx context.Context, service, handler string, body []byte, headers map[string]string) (string, error) {
	resp, err := s.do(ctx, http.MethodPost, s.target(service, handler)+"/send", body, withJSON(headers))
	if err != nil {
		return "", err
	}
	var out struct {
		InvocationID string `json:"invocationId"`
	}
	if err := json.Unmarshal(resp, &out); err != nil || out.InvocationID == "" {
		return "", fmt.Errorf("restateserver: send answer has no invocationId: %s", resp)
	}
	return out.InvocationID, nil
}

func (s *Server) target(service, handler string) string {
	return s.IngressURL() + "/" + strings.Trim(service, "/") + "/" + strings.Trim(handler, "/")
}

func withJSON(headers map[string]string) map[string]string {
	out := map[string]string{"content-type": "application/json"}
	for k, v := range headers {
		out[strings.ToLower(k)] = v
	}
	return out
}
