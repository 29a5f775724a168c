package main

import (
	"context"
	"fmt"
	"os"
	"time"
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
func measureIngress(ctx context.Context, rs *restateServer, p *peer, c int, dur time.Duration) (ingressPoint, error) {
	client := newIngressClient(c)
	defer client.CloseIdleConnections()
	url := rs.ingress + "/" + p.Service + "/" + p.Handler
	if w := load(ctx, client, url, c, 10*c, 2*time.Second, p.echo); w.Errors > 0 {
		return ingressPoint{}, fmt.Errorf("%s warm-up at c=%d: %d errors, first: %s", p.Key, c, w.Errors, w.FirstError)
	}
	peerBefore, err := sampleCPU(p.proc.pid())
	if err != nil {
		return ingressPoint{}, err
	}
	srvBefore, err := sampleCPU(rs.proc.pid())
	if err != nil {
		return ingressPoint{}, err
	}
	genBefore, err := readStat(os.Getpid())
	if err != nil {
		return ingressPoint{}, err
	}
	machBefore, err := readMachineCPU()
	if err != nil {
		return ingressPoint{}, err
	}
	res := load(ctx, client, url, c, 1_000_000, dur, p.echo)
	machAfter, err := readMachineCPU()
	if err != nil {
		return ingressPoint{}, err
	}
	peerAfter, err := sampleCPU(p.proc.pid())
	if err != nil {
		return ingressPoint{}, err
	}
	srvAfter, err := sampleCPU(rs.proc.pid())
	if err != nil {
		return ingressPoint{}, err
	}
	genAfter, err := readStat(os.Getpid())
	if err != nil {
		return ingressPoint{}, err
	}
	pt := ingressPoint{Peer: p.Key, C: c, Load: res}
	pt.Self, pt.Workers = cpuDelta(peerBefore, peerAfter)
	srvSelf, srvDesc := cpuDelta(srvBefore, srvAfter)
	pt.Server = srvSelf + srvDesc
	pt.Machine = machAfter.Busy - machBefore.Busy
	pt.Gen = (genAfter.Utime + genAfter.Stime) - (genBefore.Utime + genBefore.Stime)
	return pt, ctx.Err()
}
