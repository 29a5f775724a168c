package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// loadPlan is one point of the load generator: a warm-up and then the
// measured window, one closed loop on the same connections that nothing
// interrupts in between.
type loadPlan struct {
	Concurrency int
	// The warm-up ends (T0) once WarmRequests requests have completed or
	// WarmUp has passed, whichever comes first; either being 0 means no
	// warm-up.
	WarmRequests int
	WarmUp       time.Duration
	// The window ends (T1) once Requests requests have completed in it or
	// Duration after T0, whichever comes first (Requests 0: no cap).
	// Duration 0 is no window (priming: only the warm-up and the drain).
	Requests int
	Duration time.Duration
	// Mark, when set, is called at T0 (edge 0) and at T1 (edge 1) while
	// the requests keep flowing: where the caller samples CPU. Either
	// edge is called right after the window's bound moves, so both CPU
	// edges lag their counting edge by one sampling time.
	Mark func(edge int) error
}

// loadCount is a number of answered and failed requests.
type loadCount struct {
	OK, Errors int
	FirstError string
}

// loadResult is one load-generator run.
type loadResult struct {
	// OK is the requests that completed successfully within [T0, T1],
	// whenever they were sent (one sent before T0 counts, like one sent
	// before T1 and answered after it does not: the edges balance);
	// Latencies are theirs, sorted.
	OK        int
	Latencies []time.Duration
	// Errors is the requests that failed after T0: in the window or while
	// draining after T1, so that no failure past the warm-up goes unseen.
	Errors     int
	FirstError string
	Duration   time.Duration // T1 − T0
	// Warm is the requests that completed before T0; Drained those sent
	// before T1 that answered successfully after it.
	Warm    loadCount
	Drained int
}

func (r loadResult) rps() float64 { return float64(r.OK) / r.Duration.Seconds() }

// total is every request of the run, warm-up and drain included.
func (r loadResult) total() loadCount {
	c := r.Warm
	c.OK += r.OK + r.Drained
	c.Errors += r.Errors
	if c.FirstError == "" {
		c.FirstError = r.FirstError
	}
	return c
}

// newIngressClient is the load generator's connection pool: HTTP/1.1 with
// keep-alive, exactly one connection per concurrent caller, so what is
// measured is the server and the deployment, not connection setup. Its
// Timeout is the only thing that ever cuts a request short: a safety net
// (an error), never a bound of the measurement.
func newIngressClient(concurrency int) *http.Client {
	var p http.Protocols
	p.SetHTTP1(true)
	return &http.Client{
		Timeout: requestTimeout,
		Transport: &http.Transport{
			Protocols:           &p,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        concurrency,
			MaxIdleConnsPerHost: concurrency,
			MaxConnsPerHost:     concurrency,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
	}
}

// requestTimeout is the safety timeout of one request through the ingress.
const requestTimeout = 60 * time.Second

// The phases of a load run; a request belongs to the phase in which it
// completes.
const (
	warming = iota
	measuring
	draining
)

// load sends POST url with a JSON body {"n":i} from plan.Concurrency
// callers in a closed loop: the warm-up, then the window [T0, T1] (see
// loadPlan). After T1 no caller sends another request, and load returns
// only when every request in flight has finished: restate-server runs an
// invocation to its end whether or not its caller waits, so a request
// given up on would run on into whatever is measured next. Only ctx (the
// run being interrupted) cancels requests. A request is OK when the
// answer is 200 and, when want is set, its body is want(request body)
// (JSON, compared compacted); every request is checked, warm-up and drain
// included. The error is Mark's.
func load(ctx context.Context, client *http.Client, url string, plan loadPlan, want func(sent []byte) []byte) (loadResult, error) {
	var (
		next     atomic.Int64
		stopped  atomic.Bool // after T1: send nothing more
		mu       sync.Mutex  // guards the rest
		phase    = warming
		res      loadResult
		warmN    int // requests completed in the warm-up
		windowN  int // and in the window
		warmDone = make(chan struct{})
		capDone  = make(chan struct{})
		wg       sync.WaitGroup
	)
	fail := func(c *int, first *string, err error) {
		*c++
		if *first == "" {
			*first = err.Error()
		}
	}
	// record files one completed request under the phase it completed in.
	record := func(d time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch phase {
		case warming:
			if err != nil {
				fail(&res.Warm.Errors, &res.Warm.FirstError, err)
			} else {
				res.Warm.OK++
			}
			if warmN++; warmN == plan.WarmRequests {
				close(warmDone)
			}
		case measuring:
			if err != nil {
				fail(&res.Errors, &res.FirstError, err)
			} else {
				res.OK++
				res.Latencies = append(res.Latencies, d)
			}
			if windowN++; windowN == plan.Requests {
				close(capDone)
			}
		default:
			if err != nil {
				fail(&res.Errors, &res.FirstError, err)
			} else {
				res.Drained++
			}
		}
	}
	// enter moves the bound between two phases, and says when.
	enter := func(p int) time.Time {
		mu.Lock()
		defer mu.Unlock()
		phase = p
		if p == draining {
			stopped.Store(true)
		}
		return time.Now()
	}
	for range plan.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopped.Load() && ctx.Err() == nil {
				i := next.Add(1)
				body := []byte(`{"n":` + strconv.FormatInt(i, 10) + `}`)
				t0 := time.Now()
				err := callOnce(ctx, client, url, body, want)
				d := time.Since(t0)
				if err != nil && ctx.Err() != nil {
					return // the run was interrupted: not the peer's error
				}
				record(d, err)
			}
		}()
	}
	wait := func(d time.Duration, done <-chan struct{}) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	if plan.WarmRequests > 0 && plan.WarmUp > 0 {
		wait(plan.WarmUp, warmDone)
	}
	t0 := enter(measuring)
	var err error
	if plan.Mark != nil {
		err = plan.Mark(0)
	}
	if err == nil && plan.Duration > 0 {
		wait(plan.Duration-time.Since(t0), capDone)
	}
	t1 := enter(draining)
	if err == nil && plan.Mark != nil {
		err = plan.Mark(1)
	}
	wg.Wait()
	res.Duration = t1.Sub(t0)
	slices.Sort(res.Latencies)
	return res, err
}

func callOnce(ctx context.Context, client *http.Client, url string, body []byte, want func(sent []byte) []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, got)
	}
	if want != nil {
		if w := want(body); !sameJSON(got, w) {
			return fmt.Errorf("wrong answer: sent %s, want %s, got %.200s", body, w, got)
		}
	}
	return nil
}

// sameJSON compares two JSON documents ignoring insignificant whitespace.
func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
