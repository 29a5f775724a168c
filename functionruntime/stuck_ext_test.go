package functionruntime_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/fnbridge/fnbridge/functionruntime"
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
	cli, ref := bashRegistration(t, dir, "run-stop", "h.run", io.Discard)
	ctx := context.Background()
	invoke := func(in string) (*executorv1.InvokeFunctionResponse, error) {
		return cli.InvokeFunction(ctx, &executorv1.InvokeFunctionRequest{Registration: ref, Input: []byte(in), ContentType: "text/plain", TimeoutMillis: 1000})
	}
	if r, err := invoke("stop"); err != nil || string(r.GetOutput()) != "stop" {
		t.Fatalf("stop: %v, %v", r, err)
	}
	_, err := invoke("next")
	st := wantCode(t, err, codes.DeadlineExceeded, functionruntime.ReasonInvocationTimeout)
	if !strings.Contains(st.Message(), "worker process was stopped") {
		t.Errorf("timeout message %q, want it to say the worker was stopped", st.Message())
	}
	if r, err := invoke("after"); err != nil || string(r.GetOutput()) != "after" {
		t.Fatalf("after: %v, %v; want a fresh worker's answer", r, err)
	}
}
