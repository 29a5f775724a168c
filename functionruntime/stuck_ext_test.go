package functionruntime_test

import (
	"context"
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

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// An invocation that reaches its timeout because its worker could not run
// it (a Bash function's `kill -STOP $$` stopped the shell that forks the
// next invocation) says so, rather than only blaming itself: it never ran.
// The timeout stays retryable, and the next invocation gets a fresh worker.
func TestTimeoutOnAStoppedWorkerSaysSo(t *testing.T) {
	testtool.Require(t, "", "bash", "to start a worker")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "h.sh"), []byte(`run() { [[ $1 != stop ]] || kill -STOP $$; printf '%s' "$1"; }`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := functionruntime.NewServer(functionruntime.Options{
		Adapter: bash.New(bash.Options{Grace: 100 * time.Millisecond, NoContextCommand: true}),
		Logger:  zerolog.Nop(),
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	cli := functionruntime.NewLocalClient(srv)
	ctx := context.Background()
	reg, err := cli.RegisterFunction(ctx, &executorv1.RegisterFunctionRequest{
		RunUid: "run-stop", RegistrationAttempt: 1, WorkingDir: dir, Handler: "h.run",
		IdleTimeoutSeconds: 300, RegistrationDigest: digest("run-stop"),
	})
	if err != nil || reg.GetState() != stateReady {
		t.Fatalf("RegisterFunction: %v, %v", reg.GetState(), err)
	}
	ref := reg.GetRegistration()
	invoke := func(in string) (*executorv1.InvokeFunctionResponse, error) {
		return cli.InvokeFunction(ctx, &executorv1.InvokeFunctionRequest{Registration: ref, Input: []byte(in), ContentType: "text/plain", TimeoutMillis: 1000})
	}
	if r, err := invoke("stop"); err != nil || string(r.GetOutput()) != "stop" {
		t.Fatalf("stop: %v, %v", r, err)
	}
	_, err = invoke("next")
	st := wantCode(t, err, codes.DeadlineExceeded, functionruntime.ReasonInvocationTimeout)
	if !strings.Contains(st.Message(), "worker process was stopped") {
		t.Errorf("timeout message %q, want it to say the worker was stopped", st.Message())
	}
	if r, err := invoke("after"); err != nil || string(r.GetOutput()) != "after" {
		t.Fatalf("after: %v, %v; want a fresh worker's answer", r, err)
	}
}
