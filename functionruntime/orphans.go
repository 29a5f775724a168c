package functionruntime

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultOrphanGrace is the OrphanGrace `bridge runtime serve` uses unless
// told otherwise. A live bridge polls each idle registration at most
// min(max(idle_timeout/4, 1s), 30s) apart, never more than its idle
// timeout, so the idle timeout alone covers its cadence; the grace covers
// a late poll (a slow sweep, a GC pause, a short network outage) four
// times over the 30 s cap.
const DefaultOrphanGrace = 2 * time.Minute

// orphanReaper is the Server's sweep for registrations whose caller is
// gone. The contract leaves idle unregistration to the caller (runtimed
// "polls it at a bounded cadence for health and idle timeout"); a caller
// killed outright never does it, and a shared server would keep its
// workers until it restarts.
type orphanReaper struct {
	grace time.Duration // zero: off
	// contact is when a FunctionStatus last named each registration, or
	// when a sweep first saw one without any activity (guarded by
	// Server.mu; pruned by each sweep).
	contact map[*registration]time.Time
	sweepMu sync.Mutex // one sweep at a time
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// startOrphanReaper turns reaping on for a positive grace and starts its
// periodic sweep.
func (s *Server) startOrphanReaper(grace time.Duration) {
	if grace <= 0 {
		return
	}
	s.orphans.grace = grace
	s.orphans.contact = make(map[*registration]time.Time)
	s.orphans.stop = make(chan struct{})
	s.orphans.done = make(chan struct{})
	// A registration is reaped at most a quarter of the grace late.
	every := min(max(grace/4, 10*time.Millisecond), 30*time.Second)
	go func() {
		defer close(s.orphans.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.orphans.stop:
				return
			case <-t.C:
				s.ReapOrphans()
			}
		}
	}()
}

// stopOrphanReaper ends the periodic sweep and waits for it.
func (s *Server) stopOrphanReaper() {
	if s.orphans.stop == nil {
		return
	}
	s.orphans.once.Do(func() { close(s.orphans.stop) })
	<-s.orphans.done
}

// contactLocked records that the registration's caller named it.
func (s *Server) contactLocked(reg *registration) {
	if s.orphans.contact != nil {
		s.orphans.contact[reg] = s.now()
	}
}

// ReapOrphans unregisters, now, every READY or FAILED registration with no
// invocation in flight whose last activity and last FunctionStatus call
// are both older than its idle_timeout_seconds plus Options.OrphanGrace,
// logs why at info, and returns how many it removed once their workers are
// closed. Nothing in flight is cancelled. The server calls it by itself
// every quarter of the grace (at most 30 s); it does nothing when
// Options.OrphanGrace is zero or the server is shutting down.
func (s *Server) ReapOrphans() int {
	o := &s.orphans
	if o.grace <= 0 {
		return 0
	}
	o.sweepMu.Lock()
	defer o.sweepMu.Unlock()

	type orphan struct {
		reg *registration
		why string
	}
	var found []orphan
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return 0
	}
	now := s.now()
	for reg := range o.contact {
		if s.regs[reg.runUID] != reg {
			delete(o.contact, reg)
		}
	}
	for _, reg := range s.regs {
		if reg.tearingDown || reg.active != nil || (reg.state != stateReady && reg.state != stateFailed) {
			continue
		}
		last := reg.lastActivity
		if c := o.contact[reg]; c.After(last) {
			last = c
		}
		if last.IsZero() {
			// FAILED at start and never polled: count from now.
			o.contact[reg] = now
			continue
		}
		limit := reg.idleTimeout + o.grace
		if quiet := now.Sub(last); quiet >= limit {
			why := fmt.Sprintf("no activity and no FunctionStatus from its caller for %s, over its idle_timeout_seconds (%s) plus the orphan grace (%s): its caller is presumed gone",
				quiet.Round(time.Millisecond), reg.idleTimeout, o.grace)
			// No deadline: nothing is in flight, and DRAINING admits nothing.
			if reg.beginTeardownLocked(time.Time{}, why) {
				found = append(found, orphan{reg, why})
			}
		}
	}
	s.mu.Unlock()

	var wg sync.WaitGroup
	for _, orph := range found {
		orph.reg.log.Info().Str("reason", orph.why).Msg("unregistering an orphaned registration")
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A Close failure is logged; the registration is gone either way.
			_ = s.teardown(orph.reg, goneCause("orphaned: its caller is presumed gone"), context.Background())
		}()
	}
	wg.Wait()
	return len(found)
}
