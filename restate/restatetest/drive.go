package restatetest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fnbridge/fnbridge/restate/wire"
)

// Stats summarises a Drive run.
type Stats struct {
	// Invocations is the number that ended with EndMessage.
	Invocations int
	// Duration is the wall time of the whole run.
	Duration time.Duration
	// P50 and P99 are per-invocation latencies (stream open to terminal
	// frame).
	P50, P99 time.Duration
}

// Drive plays n BIDI_STREAM invocations of service/handler against the
// endpoint at base URL over h2c, concurrency at a time, each a fresh
// journal (StartMessage + InputCommand {"n":i}) whose run proposals are
// answered like restate-server does. It fails on the first invocation that
// does not end with EndMessage. CPU use of the endpoint process is for the
// caller to read (e.g. from /proc/<pid>/stat before and after).
func Drive(ctx context.Context, url, service, handler string, version, concurrency, n int) (Stats, error) {
	if concurrency < 1 || n < 1 {
		return Stats{}, fmt.Errorf("restatetest.Drive: concurrency (%d) and n (%d) must be positive", concurrency, n)
	}
	client := NewH2CClient()
	defer client.CloseIdleConnections()
	target := InvokeURL(url, service, handler)
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	begin := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				err := driveOne(ctx, client, target, version, i)
				lat[i] = time.Since(t0)
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("invocation %d: %w", i, err); cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	st := Stats{Duration: time.Since(begin)}
	if firstErr != nil {
		return st, firstErr
	}
	st.Invocations = n
	slices.Sort(lat)
	st.P50 = lat[(n-1)*50/100]
	st.P99 = lat[(n-1)*99/100]
	return st, nil
}

func driveOne(ctx context.Context, client *http.Client, url string, version, i int) error {
	s := Open(ctx, client, url, version)
	defer s.Close()
	id := "inv_drive_" + strconv.Itoa(i)
	frames, err := s.Play([]any{Start(id, 1), Input([]byte(`{"n":` + strconv.Itoa(i) + `}`))}, nil)
	if err != nil {
		return err
	}
	if last := frames[len(frames)-1]; last.Type() != wire.EndMessageType {
		return fmt.Errorf("ended with %v", last)
	}
	return nil
}
