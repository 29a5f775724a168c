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

// measureIngress runs one point: a short warm-up on the same connections
// (not recorded), then the measured closed loop, with CPU sampled around it.
func measureIngress(ctx context.Context, rs *restateserver.Server, p *peer, c int, dur, warmUp time.Duration) (ingressPoint, error) {
	client := newIngressClient(c)
	defer client.CloseIdleConnections()
	url := rs.IngressURL() + "/" + p.Service + "/" + p.Handler
	if w := load(ctx, client, url, c, 10*c, warmUp, p.want); w.Errors > 0 {
		return ingressPoint{}, fmt.Errorf("%s warm-up at c=%d: %d errors, first: %s", p.Key, c, w.Errors, w.FirstError)
	}
	before, err := markCPU(p.proc.pid(), rs.PID(), false)
	if err != nil {
		return ingressPoint{}, err
	}
	res := load(ctx, client, url, c, 1_000_000, dur, p.want)
	after, err := markCPU(p.proc.pid(), rs.PID(), true)
	if err != nil {
		return ingressPoint{}, err
	}
	if res.OK == 0 && ctx.Err() == nil {
		// Requests cut off by the time bound are not errors, so a handler
		// that never answers (a paused invocation) shows here.
		return ingressPoint{}, fmt.Errorf("%s at c=%d: no request answered within %s (%d errors, first: %s)", p.Key, c, dur, res.Errors, res.FirstError)
	}
	u := cpuBetween(before, after)
	return ingressPoint{Peer: p.Key, C: c, Load: res, Self: u.Self, Workers: u.Workers, Server: u.Server, Gen: u.Gen, Machine: u.Machine}, ctx.Err()
}

// prime sends up to 10·c requests at concurrency c to p through rs for at
// most dur, unrecorded.
func prime(ctx context.Context, rs *restateserver.Server, p *peer, c int, dur time.Duration) loadResult {
	client := newIngressClient(c)
	defer client.CloseIdleConnections()
	return load(ctx, client, rs.IngressURL()+"/"+p.Service+"/"+p.Handler, c, 10*c, dur, p.want)
}
