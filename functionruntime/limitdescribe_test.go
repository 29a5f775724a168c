package functionruntime

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/functionruntime/internal/proc"
)

// limitHitWorker fails every invocation with its limit error.
type limitHitWorker struct{ err error }

func (w limitHitWorker) Invoke(context.Context, Invocation) (Result, error) { return Result{}, w.err }
func (w limitHitWorker) Close() error                                       { return nil }

// A limit hit names the limit the worker ran under: one lowered to the
// server's hard limit says so, with the configured value beside it.
func TestLimitHitNamesTheLimitInForce(t *testing.T) {
	configured := DefaultWorkerLimits()
	configured.OpenFiles = 10000000
	cases := []struct {
		inForce proc.Limits
		limit   string
		want    string
	}{
		{proc.Limits{OpenFiles: 20000}, proc.LimitOpenFiles,
			"open_files limit of 20000 (10000000 configured, lowered to the server's hard limit) exceeded"},
		{proc.Limits(configured), proc.LimitOpenFiles, "open_files limit of 10000000 exceeded"},
		{proc.Limits{FileSize: 512 << 20}, proc.LimitFileSize,
			"file_size limit of 512Mi (1Gi configured, lowered to the server's hard limit) exceeded"},
		{proc.Limits(configured), proc.LimitMemory, "memory limit of 1Gi exceeded"},
		// A limit error that does not know the limits in force names
		// the configured one.
		{proc.Limits{}, proc.LimitOpenFiles, "open_files limit of 10000000 exceeded"},
	}
	for _, c := range cases {
		w := &limitedWorker{Worker: limitHitWorker{&proc.LimitError{Limit: c.limit, Detail: "d", InForce: c.inForce, Err: errors.New("e")}}, limits: configured}
		_, err := w.Invoke(context.Background(), Invocation{})
		var he *HandlerError
		if !errors.As(err, &he) || he.Terminal == (c.limit == proc.LimitCPU) || !strings.HasPrefix(he.Message, c.want+" (d)") {
			t.Errorf("%s in force %+v: %v, want a HandlerError (terminal but for cpu) starting %q", c.limit, c.inForce, err, c.want)
		}
	}
}
