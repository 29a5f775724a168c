package functionruntime_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"

	"github.com/fnbridge/fnbridge/functionruntime/internal/proctest"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// "Permanent initialization failure is surfaced as FAILED with a bounded
// fatal_error through FunctionStatus", also when it is the worker's
// restart that fails: after an invocation reached its timeout the worker
// is killed and restarts in the background, and when that restart fails
// (the handler file broke meanwhile) FunctionStatus reads FAILED with its
// fatal_error at once, not READY until the next InvokeFunction finds out.
// The real bash adapter runs the worker: the failure comes from its
// supervisor.
func TestFailedBackgroundRestartIsFailedInStatus(t *testing.T) {
	testtool.Require(t, "", "bash", "to start a worker")
	dir := t.TempDir()
	file := filepath.Join(dir, "h.sh")
	if err := os.WriteFile(file, []byte("slow() { sleep 60; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cli, ref := bashRegistration(t, dir, "run-broken", "h.slow", logs)
	ctx := context.Background()

	// The running worker has the function; a restart sources the file again.
	if err := os.WriteFile(file, []byte("slow() {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := cli.InvokeFunction(ctx, &executorv1.InvokeFunctionRequest{Registration: ref, TimeoutMillis: 500})
	wantCode(t, err, codes.DeadlineExceeded, functionruntime.ReasonInvocationTimeout)

	var st *executorv1.FunctionStatusResponse
	proctest.Eventually(t, 10*time.Second, "FunctionStatus to read FAILED", func() bool {
		st, err = cli.FunctionStatus(ctx, &executorv1.FunctionStatusRequest{Registration: ref})
		if err != nil {
			t.Fatalf("FunctionStatus: %v", err)
		}
		return st.GetState() == stateFailed
	})
	if !strings.Contains(st.GetFatalError(), "syntax error") || len(st.GetFatalError()) > 4096 {
		t.Fatalf("fatal_error = %q, want the bounded restart failure naming the syntax error", st.GetFatalError())
	}
	// The next invocation finds the same state and error.
	_, err = cli.InvokeFunction(ctx, &executorv1.InvokeFunctionRequest{Registration: ref, TimeoutMillis: 500})
	wantCode(t, err, codes.FailedPrecondition, functionruntime.ReasonRegistrationFailed)
	if got := functionruntime.ErrorInfo(err).GetMetadata()["fatal_error"]; got != st.GetFatalError() {
		t.Fatalf("next invocation's fatal_error = %q, want FunctionStatus's %q", got, st.GetFatalError())
	}
}

// bashRegistration starts a FunctionRuntime server whose adapter is the
// real bash one, logging to logs, and registers handler (file.function)
// of dir as runUID: its client and the READY registration.
func bashRegistration(t *testing.T, dir, runUID, handler string, logs io.Writer) (executorv1.FunctionRuntimeClient, *executorv1.FunctionRegistration) {
	t.Helper()
	srv := functionruntime.NewServer(functionruntime.Options{
		Adapter: bash.New(bash.Options{Grace: 100 * time.Millisecond, NoContextCommand: true}),
		Logger:  zerolog.New(logs),
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	cli := functionruntime.NewLocalClient(srv)
	reg, err := cli.RegisterFunction(context.Background(), &executorv1.RegisterFunctionRequest{
		RunUid: runUID, RegistrationAttempt: 1, WorkingDir: dir, Handler: handler,
		IdleTimeoutSeconds: 300, RegistrationDigest: digest(runUID),
	})
	if err != nil || reg.GetState() != stateReady {
		t.Fatalf("RegisterFunction: %v, %v\n%s", reg.GetState(), err, logs)
	}
	return cli, reg.GetRegistration()
}
