package restateserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// HTTPError is a non-2xx answer of the admin API or the ingress; Body holds
// the server's message (restate answers {"message": ...}).
type HTTPError struct {
	Method, URL string
	Status      int
	Body        string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s %s: status %d: %s", e.Method, e.URL, e.Status, e.Body)
}

// TryRegister registers the deployment at uri (POST /deployments with
// force, so a re-registration replaces it) and returns the admin API's
// answer (deployment id, services); a refused registration, e.g. when
// discovery of the deployment failed, is an *HTTPError. [Server.Register]
// is the same for a test.
func (s *Server) TryRegister(ctx context.Context, uri string, useHTTP11 bool) ([]byte, error) {
	req := map[string]any{"uri": uri, "use_http_11": useHTTP11, "force": true}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return s.do(ctx, http.MethodPost, s.AdminURL()+"/deployments", b, map[string]string{"content-type": "application/json"})
}

// KnowsService reports whether the server's admin API knows service (GET
// /services/{name}): in a cluster a node learns a registration made through
// another node's admin a moment later, and until then its ingress answers
// 404 for the service.
func (s *Server) KnowsService(ctx context.Context, service string) (bool, error) {
	status, _, err := s.roundTrip(ctx, http.MethodGet, s.AdminURL()+"/services/"+url.PathEscape(service), nil, nil)
	if status == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}

// invocationIDPattern keeps ids that go into URLs and SQL to the alphabet
// restate uses (inv_ + base62).
var invocationIDPattern = regexp.MustCompile(`^inv_[0-9A-Za-z]+$`)

// CancelInvocation asks the server to cancel an invocation gracefully
// (PATCH /invocations/{id}/cancel; the deprecated DELETE is not used). The
// server answers 200 when done and 202 when the cancellation was appended;
// both are success.
func (s *Server) CancelInvocation(ctx context.Context, id string) error {
	if !invocationIDPattern.MatchString(id) {
		return fmt.Errorf("restateserver: invalid invocation id %q", id)
	}
	_, err := s.do(ctx, http.MethodPatch, s.AdminURL()+"/invocations/"+url.PathEscape(id)+"/cancel", nil, nil)
	return err
}

// ErrNoInvocation is returned by [Server.InvocationStatus] for an id the
// server does not (or no longer) know.
var ErrNoInvocation = errors.New("restateserver: no such invocation")

// InvocationStatus returns the status column of sys_invocation for id
// (pending, scheduled, ready, running, paused, backing-off, suspended,
// completed).
func (s *Server) InvocationStatus(ctx context.Context, id string) (string, error) {
	if !invocationIDPattern.MatchString(id) {
		return "", fmt.Errorf("restateserver: invalid invocation id %q", id)
	}
	rows, err := s.Query(ctx, "SELECT status FROM sys_invocation WHERE id = '"+id+"'")
	if err != nil {
		return "", err
	}
	if len(rows) == 0 {
		return "", fmt.Errorf("%w: %s", ErrNoInvocation, id)
	}
	status, _ := rows[0]["status"].(string)
	return status, nil
}

// Query runs SQL on the admin query endpoint (POST /query with
// Accept: application/json; without it the answer is Arrow IPC) and returns
// the rows.
func (s *Server) Query(ctx context.Context, sql string) ([]map[string]any, error) {
	b, err := json.Marshal(map[string]string{"query": sql})
	if err != nil {
		return nil, err
	}
	var body []byte
	// Right after a (re)start, partitions move between node generations and
	// a query can fail with errors the server itself calls benign; retry
	// those for a bounded while instead of failing the caller.
	deadline := time.Now().Add(transientQueryWindow)
	for {
		body, err = s.do(ctx, http.MethodPost, s.AdminURL()+"/query", b,
			map[string]string{"content-type": "application/json", "accept": "application/json"})
		if err == nil || !transientQueryError(err) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, err
	}
	var out struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("restateserver: query answer is not JSON rows: %v: %s", err, body)
	}
	return out.Rows, nil
}

// do sends one request and returns the body of a 2xx answer, an *HTTPError
// otherwise.
func (s *Server) do(ctx context.Context, method, url string, body []byte, headers map[string]string) ([]byte, error) {
	_, respBody, err := s.roundTrip(ctx, method, url, body, headers)
	return respBody, err
}

func (s *Server) roundTrip(ctx context.Context, method, url string, body []byte, headers map[string]string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, respBody, &HTTPError{Method: method, URL: url, Status: resp.StatusCode, Body: string(respBody)}
	}
	return resp.StatusCode, respBody, nil
}

// transientQueryWindow bounds Query's retries of transient cluster errors.
const transientQueryWindow = 30 * time.Second

// transientQueryError reports the query failures restate-server 1.7 gives
// while partitions are still being placed after a start or restart.
func transientQueryError(err error) bool {
	var he *HTTPError
	if !errors.As(err, &he) || he.Status < 500 {
		return false
	}
	body := he.Body
	return strings.Contains(body, "doesn't exist on this node") ||
		strings.Contains(body, "was shut down or removed") ||
		strings.Contains(body, "not the leader") ||
		strings.Contains(body, "expecting a partition store")
}
