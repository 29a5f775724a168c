package functionruntime_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// A registration asking for fewer open files or processes than its
// runtime's worker starts with is refused before any worker starts,
// naming the limit and the least (InvalidArgument: the bridge gives up
// at once instead of starting workers that fail): the configuration can
// only refuse what no runtime's worker starts with.
func TestRegistrationBelowTheWorkersLeastIsRefused(t *testing.T) {
	testtool.Require(t, "", "bash", "to start a worker")
	srv := functionruntime.NewServer(functionruntime.Options{
		Adapter: bash.New(bash.Options{Grace: 100 * time.Millisecond, NoContextCommand: true}),
		Logger:  zerolog.Nop(),
	})
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	cli := functionruntime.NewLocalClient(srv)
	dir := t.TempDir()
	for _, c := range []struct {
		edit func(*functionruntime.WorkerLimits)
		want string
	}{
		{func(l *functionruntime.WorkerLimits) { l.OpenFiles = 13 },
			"fnbridge-worker-limits metadata: open_files 13 is fewer than 14, the fewest a bash worker starts with"},
		{func(l *functionruntime.WorkerLimits) { l.Processes = 2 },
			"fnbridge-worker-limits metadata: processes 2 is fewer than 3, the fewest a bash worker starts with"},
	} {
		limits := functionruntime.DefaultWorkerLimits()
		c.edit(&limits)
		ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(functionruntime.WorkerLimitsMetadata, limits.Encode()))
		_, err := cli.RegisterFunction(ctx, &executorv1.RegisterFunctionRequest{
			RunUid: "run-low", RegistrationAttempt: 1, WorkingDir: dir, Handler: "h.f",
			IdleTimeoutSeconds: 300, RegistrationDigest: digest("run-low"),
		})
		if st := wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument); st.Message() != c.want {
			t.Errorf("message %q, want %q", st.Message(), c.want)
		}
	}
}
