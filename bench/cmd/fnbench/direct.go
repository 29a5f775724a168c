package main

import (
	"context"
	"time"

	"github.com/fnbridge/fnbridge/restate/restatetest"
)

// directPoint is one restatetest.Drive run against an endpoint, without
// restate-server: the driver plays the runtime's side over h2c.
type directPoint struct {
	Peer          string
	C             int
	Stats         restatetest.Stats
	Self, Workers time.Duration
	Gen           time.Duration
	Machine       time.Duration // busy CPU of the whole machine meanwhile
}

// driveProtocol is the service protocol version restate-server 1.7.12
// negotiates by default.
const driveProtocol = 6

// measureDirect calibrates the invocation count on a short warm-up so the
// measured run lasts about dur, then drives it with CPU sampled around it.
func measureDirect(ctx context.Context, p *peer, c int, dur time.Duration) (directPoint, error) {
	warm, err := restatetest.Drive(ctx, "http://"+p.addr, p.Service, p.Handler, driveProtocol, c, max(4*c, 20))
	if err != nil {
		return directPoint{}, err
	}
	rate := float64(warm.Invocations) / warm.Duration.Seconds()
	n := min(max(int(rate*dur.Seconds()), 100), 200_000)
	before, err := markCPU(p.proc.pid(), 0, false)
	if err != nil {
		return directPoint{}, err
	}
	st, err := restatetest.Drive(ctx, "http://"+p.addr, p.Service, p.Handler, driveProtocol, c, n)
	if err != nil {
		return directPoint{}, err
	}
	after, err := markCPU(p.proc.pid(), 0, true)
	if err != nil {
		return directPoint{}, err
	}
	u := cpuBetween(before, after)
	return directPoint{Peer: p.Key, C: c, Stats: st, Self: u.Self, Workers: u.Workers, Gen: u.Gen, Machine: u.Machine}, nil
}
