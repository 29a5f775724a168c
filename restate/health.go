package restate

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Health for load balancers and orchestrators. Probes carry no Restate
// request identity, so these paths are answered before it is verified:
//
//	GET {prefix}/health        200 while the process serves (as ever)
//	GET {prefix}/health/live   200 while the process serves
//	GET {prefix}/health/ready  200 when it can take invocations; 503 while
//	                           draining or while the readiness check fails
//
// Drain turns readiness off and refuses new invocation streams with 503,
// Retry-After and Connection: close (a GOAWAY on HTTP/2, once the
// connection's streams in flight have ended), so restate-server retries
// them on a fresh connection, which the load balancer sends to another
// replica, while the streams in flight finish.

// readinessTimeout bounds one readiness check: a probe must not hang on
// a remote runtime that stopped answering.
const readinessTimeout = 2 * time.Second

// health is an Endpoint's readiness and drain state.
type health struct {
	check    atomic.Pointer[func(context.Context) error]
	draining atomic.Bool
	idleOnce sync.Once
	idle     chan struct{} // closed once draining with no stream left
}

func newHealth() health { return health{idle: make(chan struct{})} }

// SetReadiness installs the check GET /health/ready runs (bounded by
// readinessTimeout): an error answers 503 with its text. Without one the
// endpoint is ready whenever it is not draining.
func (e *Endpoint) SetReadiness(check func(context.Context) error) {
	e.health.check.Store(&check)
}

// Drain stops taking invocations: readiness answers 503 from now on, new
// invocation streams are refused (503, Retry-After, Connection: close),
// and Drain waits until the streams in flight have ended or ctx is done,
// whose error it then returns. It does not close any listener: probes keep
// getting their answer while the replica drains. Calling it again waits
// again.
func (e *Endpoint) Drain(ctx context.Context) error {
	e.health.draining.Store(true)
	if e.active.Load() == 0 {
		e.markIdle()
	}
	select {
	case <-e.health.idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Draining reports whether Drain was called.
func (e *Endpoint) Draining() bool { return e.health.draining.Load() }

// InFlight is the number of invocation streams being served.
func (e *Endpoint) InFlight() int { return int(e.active.Load()) }

func (e *Endpoint) markIdle() { e.health.idleOnce.Do(func() { close(e.health.idle) }) }

// admit counts a new invocation stream in, unless the endpoint drains; then
// it answers the refusal itself and returns false. Drain stores its flag
// before it reads the count and admit adds to the count before it reads
// the flag, so a stream is either refused or waited for.
func (e *Endpoint) admit(w http.ResponseWriter) (n int64, ok bool) {
	n = e.active.Add(1)
	if !e.health.draining.Load() {
		return n, true
	}
	e.streamDone()
	e.refused(RefusedDraining)
	h := w.Header()
	h["Retry-After"] = retryAfterOne
	// HTTP/1.1: close after this answer; HTTP/2: the server sends GOAWAY
	// once the connection's other streams have finished. Either way a retry
	// after that opens a new connection, which can reach another replica.
	h.Set("Connection", "close")
	httpError(w, http.StatusServiceUnavailable, "draining: this deployment is shutting down and takes no new invocations; retry (another replica)")
	return n, false
}

// streamDone counts an invocation stream out.
func (e *Endpoint) streamDone() {
	if e.active.Add(-1) == 0 && e.health.draining.Load() {
		e.markIdle()
	}
}

// serveHealth answers the health paths; false: path is none of them.
func (e *Endpoint) serveHealth(w http.ResponseWriter, r *http.Request, path string) bool {
	switch path {
	case "/health", "/health/live":
		writeHealth(w, http.StatusOK, "ok")
	case "/health/ready":
		switch {
		case e.health.draining.Load():
			writeHealth(w, http.StatusServiceUnavailable, "draining")
		default:
			if check := e.health.check.Load(); check != nil {
				ctx, cancel := context.WithTimeout(r.Context(), readinessTimeout)
				defer cancel()
				if err := (*check)(ctx); err != nil {
					writeHealth(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
					return true
				}
			}
			writeHealth(w, http.StatusOK, "ready")
		}
	default:
		return false
	}
	return true
}

func writeHealth(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body + "\n"))
}
