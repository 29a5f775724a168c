package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// bridgeEnv is what one group of bridge tests shares: the restate-server
// the group's bridges register with (nil for the CLI tests, which need no
// server).
type bridgeEnv struct {
	srv *restateserver.Server
	// identityKey is the publickeyv1_ key matching the server's signing
	// key, when the server signs its requests.
	identityKey string
}

// assertJSON compares got with the JSON text want by value, so formatting
// differences (spacing, key order) do not matter.
func assertJSON(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %q is not JSON: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad expectation %q: %v", what, want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s = %s, want %s", what, got, want)
	}
}

// callOK invokes service/handler through the ingress and fails the test
// unless the answer is 200.
func callOK(ctx context.Context, t *testing.T, srv *restateserver.Server, service, handler, body string, headers map[string]string) []byte {
	t.Helper()
	status, out, err := srv.Call(ctx, service, handler, []byte(body), headers)
	if err != nil {
		t.Fatalf("call %s/%s: %v", service, handler, err)
	}
	if status != http.StatusOK {
		t.Fatalf("call %s/%s: status %d: %s", service, handler, status, out)
	}
	return out
}

// invocationRows returns sys_invocation rows of every invocation of
// service (each test uses its own service names).
func invocationRows(ctx context.Context, t *testing.T, srv *restateserver.Server, service, columns string) []map[string]any {
	t.Helper()
	rows, err := srv.Query(ctx, fmt.Sprintf("SELECT %s FROM sys_invocation WHERE target_service_name = '%s'", columns, service))
	if err != nil {
		t.Fatalf("query sys_invocation for %s: %v", service, err)
	}
	return rows
}

// invocationRow returns the sys_invocation row of one invocation.
func invocationRow(ctx context.Context, t *testing.T, srv *restateserver.Server, id, columns string) map[string]any {
	t.Helper()
	rows, err := srv.Query(ctx, fmt.Sprintf("SELECT %s FROM sys_invocation WHERE id = '%s'", columns, id))
	if err != nil {
		t.Fatalf("query sys_invocation for %s: %v", id, err)
	}
	if len(rows) != 1 {
		t.Fatalf("sys_invocation has %d rows for %s", len(rows), id)
	}
	return rows[0]
}

// waitCompleted polls until the invocation's status is completed.
func waitCompleted(t *testing.T, srv *restateserver.Server, id string, timeout time.Duration) {
	t.Helper()
	testtool.Eventually(t, timeout, "invocation "+id+" completes", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := srv.InvocationStatus(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		return st == "completed", st
	})
}

// invocationOutput fetches a completed invocation's result through the
// ingress (GET /restate/invocation/{id}/output, which answers 470 while the
// invocation has not completed) and returns the final status and body.
func invocationOutput(t *testing.T, srv *restateserver.Server, id string, timeout time.Duration) (int, []byte) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	var (
		status int
		body   []byte
	)
	testtool.Eventually(t, timeout, "output of "+id, func() (bool, string) {
		resp, err := client.Get(srv.IngressURL() + "/restate/invocation/" + id + "/output")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, err = io.ReadAll(resp.Body)
		if err != nil {
			return false, err.Error()
		}
		status = resp.StatusCode
		// 470: not done yet. 404: not known yet, as a one-way call's
		// callee is until restate-server applied the send (under load,
		// after the sender's answer); a callee that never comes fails
		// at the deadline all the same.
		return status != 470 && status != http.StatusNotFound, fmt.Sprintf("%d %s", status, body)
	})
	return status, body
}
