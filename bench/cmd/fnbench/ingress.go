package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
)

// ingressPoint is one measured point through restate-server.
type ingressPoint struct {
	Peer string
	C    int
	Load loadResult
	// CPU of the deployment process itself, of its descendants (workers),
	// of restate-server, and of the load generator (this process).
	Self, Workers, Server, Gen time.Duration
	// Machine is the busy CPU time of the whole machine meanwhile (all
	// cores), so what other processes took is visible too.
	Machine time.Duration
}

func (p ingressPoint) cpuPerInv(d time.Duration) time.Duration {
	if p.Load.OK == 0 {
		return 0
	}
	return d / time.Duration(p.Load.OK)
}

// measureIngress runs one point: one closed loop whose unrecorded
// warm-up (10·c requests or warmUp) flows straight into the measured
// window of dur, CPU sampled at both edges of the window while the load
// keeps running, and every request left in flight at its end finished
// before it returns (see load).
func measureIngress(ctx context.Context, rs *restateserver.Server, p *peer, c int, dur, warmUp time.Duration) (ingressPoint, error) {
	client := newIngressClient(c)
	defer client.CloseIdleConnections()
	url := rs.IngressURL() + "/" + p.Service + "/" + p.Handler
	var before, after cpuMark
	mark := func(edge int) (err error) {
		if edge == 0 {
			before, err = markCPU(p.proc.pid(), rs.PID(), false)
		} else {
			after, err = markCPU(p.proc.pid(), rs.PID(), true)
		}
		return err
	}
	res, err := load(ctx, client, url, loadPlan{Concurrency: c, WarmRequests: 10 * c, WarmUp: warmUp, Requests: 1_000_000, Duration: dur, Mark: mark}, p.want)
	if err != nil {
		return ingressPoint{}, err
	}
	if ctx.Err() != nil {
		return ingressPoint{}, ctx.Err()
	}
	if res.Warm.Errors > 0 {
		return ingressPoint{}, fmt.Errorf("%s warm-up at c=%d: %d errors, first: %s", p.Key, c, res.Warm.Errors, res.Warm.FirstError)
	}
	if res.OK == 0 {
		// A handler that never answers (a paused invocation) shows here,
		// after the safety timeout of the requests left in flight.
		return ingressPoint{}, fmt.Errorf("%s at c=%d: no request answered within %s (%d errors, first: %s)", p.Key, c, dur, res.Errors, res.FirstError)
	}
	u := cpuBetween(before, after)
	return ingressPoint{Peer: p.Key, C: c, Load: res, Self: u.Self, Workers: u.Workers, Server: u.Server, Gen: u.Gen, Machine: u.Machine}, nil
}

// prime sends requests at concurrency c to p through rs, unrecorded,
// until 10·c have answered or dur has passed; like a point, it returns
// once every request it sent has finished.
func prime(ctx context.Context, rs *restateserver.Server, p *peer, c int, dur time.Duration) loadCount {
	client := newIngressClient(c)
	defer client.CloseIdleConnections()
	res, _ := load(ctx, client, rs.IngressURL()+"/"+p.Service+"/"+p.Handler, loadPlan{Concurrency: c, WarmRequests: 10 * c, WarmUp: dur}, p.want)
	return res.total()
}
