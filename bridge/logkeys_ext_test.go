package bridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
	"github.com/fnbridge/fnbridge/restate/wire"
	"google.golang.org/grpc/codes"
)

// logRecords is a zerolog sink keeping each record decoded.
type logRecords struct {
	mu   sync.Mutex
	recs []map[string]any
}

func (l *logRecords) Write(p []byte) (int, error) {
	var rec map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(p), &rec); err != nil {
		return 0, err
	}
	l.mu.Lock()
	l.recs = append(l.recs, rec)
	l.mu.Unlock()
	return len(p), nil
}

// withMessage returns the records whose message is msg.
func (l *logRecords) withMessage(msg string) []map[string]any { return l.with("message", msg) }

// withLevel returns the records logged at level (warn, info, ...).
func (l *logRecords) withLevel(level string) []map[string]any { return l.with("level", level) }

// with returns the records whose key holds value.
func (l *logRecords) with(key, value string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, r := range l.recs {
		if r[key] == value {
			out = append(out, r)
		}
	}
	return out
}

// A duration in a log line carries its unit in its key: the invocation
// line's duration_ms is a number of milliseconds, and no key is a bare
// "duration".
func TestInvocationLogLineDurationIsInMilliseconds(t *testing.T) {
	h := newHarness(t, "")
	wantTypes(t, h.play(6, fresh(`{"name":"x"}`), nil), wire.RunCommandType, wire.ProposeRunCompletionMessageType, wire.OutputCommandType, wire.EndMessageType)
	recs := h.logs.withMessage("invocation")
	if len(recs) != 1 {
		t.Fatalf("%d invocation lines, want 1", len(recs))
	}
	ms, ok := recs[0]["duration_ms"].(float64)
	if !ok || ms < 0 || ms > 20_000 {
		t.Errorf("invocation line %v: duration_ms %v, want milliseconds", recs[0], recs[0]["duration_ms"])
	}
	h.logs.mu.Lock()
	defer h.logs.mu.Unlock()
	for _, r := range h.logs.recs {
		for k := range r {
			if strings.Contains(k, "duration") && !strings.HasSuffix(k, "_ms") {
				t.Errorf("record %v has a duration key %q without a unit", r, k)
			}
		}
	}
}

// An attempt that failed retryably says why on its invocation line: the
// function's failure, not the endpoint's "this invocation attempt has
// ended", which every such line said.
func TestInvocationLineSaysWhyTheAttemptFailed(t *testing.T) {
	h := newHarness(t, "")
	h.fake.setInvoke(func(context.Context, *executorv1.InvokeFunctionRequest) (*executorv1.InvokeFunctionResponse, error) {
		return nil, runtimeError(codes.Unknown, functionruntime.ReasonHandlerError, "ValueError: boom")
	})
	h.play(6, fresh(`1`), nil)
	recs := h.logs.withMessage("invocation")
	if len(recs) != 1 || !strings.Contains(fmt.Sprint(recs[0]["error"]), "ValueError: boom") || recs[0]["outcome"] != "retryable_failure" {
		t.Fatalf("invocation lines %v, want one retryable_failure naming ValueError: boom", recs)
	}
}
