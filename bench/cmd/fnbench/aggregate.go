package main

import (
	"slices"
	"time"
)

// ingressRow is the median over repetitions of one (peer, concurrency)
// point through restate-server.
type ingressRow struct {
	RPS, P50, P99     float64 // req/s, ms, ms
	RPSMin, RPSMax    float64 // spread over repetitions
	ServerUS          float64 // restate-server CPU µs per request
	SelfUS, WorkersUS float64 // CPU µs per invocation, each its own median
	// TotalUS is the median of the per-point sums self+workers, not the
	// sum of the two medians (which may come from different repetitions).
	TotalUS                 float64
	ServerCores, GenCores   float64 // CPU used, in cores
	PeerCores, MachineCores float64
	Errors, OK              int
	FirstError              string
}

func aggregateIngress(pts []ingressPoint, peer string, c int) (ingressRow, bool) {
	var rps, p50, p99, self, workers, total, server, serverUS, gen, peerC, mach []float64
	var row ingressRow
	for _, p := range pts {
		if p.Peer != peer || p.C != c {
			continue
		}
		wall := p.Load.Duration.Seconds()
		rps = append(rps, p.Load.rps())
		p50 = append(p50, ms(percentile(p.Load.Latencies, 50)))
		p99 = append(p99, ms(percentile(p.Load.Latencies, 99)))
		self = append(self, us(p.cpuPerInv(p.Self)))
		workers = append(workers, us(p.cpuPerInv(p.Workers)))
		total = append(total, us(p.cpuPerInv(p.Self+p.Workers)))
		server = append(server, p.Server.Seconds()/wall)
		serverUS = append(serverUS, us(p.cpuPerInv(p.Server)))
		gen = append(gen, p.Gen.Seconds()/wall)
		peerC = append(peerC, (p.Self+p.Workers).Seconds()/wall)
		mach = append(mach, p.Machine.Seconds()/wall)
		row.Errors += p.Load.Errors
		row.OK += p.Load.OK
		if row.FirstError == "" {
			row.FirstError = p.Load.FirstError
		}
	}
	if len(rps) == 0 {
		return row, false
	}
	row.RPS, row.P50, row.P99 = median(rps), median(p50), median(p99)
	row.RPSMin, row.RPSMax = slices.Min(rps), slices.Max(rps)
	row.ServerUS = median(serverUS)
	row.SelfUS, row.WorkersUS, row.TotalUS = median(self), median(workers), median(total)
	row.ServerCores, row.GenCores, row.PeerCores, row.MachineCores = median(server), median(gen), median(peerC), median(mach)
	return row, true
}

// directRow is the median over repetitions of one Drive point.
type directRow struct {
	IPS, P50, P99          float64
	IPSMin, IPSMax         float64 // spread over repetitions
	SelfUS, WorkersUS      float64 // CPU µs per invocation, each its own median
	TotalUS                float64 // median of the per-point sums
	GenCores, MachineCores float64
	N                      int
}

func aggregateDirect(pts []directPoint, peer string, c int) (directRow, bool) {
	var ips, p50, p99, self, workers, total, gen, mach []float64
	var row directRow
	for _, p := range pts {
		if p.Peer != peer || p.C != c {
			continue
		}
		n := float64(p.Stats.Invocations)
		wall := p.Stats.Duration.Seconds()
		ips = append(ips, n/wall)
		p50 = append(p50, ms(p.Stats.P50))
		p99 = append(p99, ms(p.Stats.P99))
		self = append(self, us(p.Self)/n)
		workers = append(workers, us(p.Workers)/n)
		total = append(total, us(p.Self+p.Workers)/n)
		gen = append(gen, p.Gen.Seconds()/wall)
		mach = append(mach, p.Machine.Seconds()/wall)
		row.N += p.Stats.Invocations
	}
	if len(ips) == 0 {
		return row, false
	}
	row.IPS, row.P50, row.P99 = median(ips), median(p50), median(p99)
	row.IPSMin, row.IPSMax = slices.Min(ips), slices.Max(ips)
	row.SelfUS, row.WorkersUS, row.TotalUS = median(self), median(workers), median(total)
	row.GenCores, row.MachineCores = median(gen), median(mach)
	return row, true
}

// adapterRow is the median over repetitions of one runtime's latencies, ms.
type adapterRow struct {
	WarmP50, WarmP99, IdleP50, IdleP99, FreshP50, FreshP99, ColdP50, ColdP99 float64
}

func aggregateAdapter(pts []adapterPoint, runtime string) (adapterRow, bool) {
	var v [8][]float64
	for _, p := range pts {
		if p.Runtime != runtime {
			continue
		}
		for i, d := range []time.Duration{
			percentile(p.Warm, 50), percentile(p.Warm, 99),
			percentile(p.WarmIdle, 50), percentile(p.WarmIdle, 99),
			percentile(p.Fresh, 50), percentile(p.Fresh, 99),
			percentile(p.AdapterCold, 50), percentile(p.AdapterCold, 99),
		} {
			v[i] = append(v[i], ms(d))
		}
	}
	if len(v[0]) == 0 {
		return adapterRow{}, false
	}
	var row [8]float64
	for i := range v {
		row[i] = median(v[i])
	}
	return adapterRow{row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7]}, true
}

// memoryRow summarises the in-flight measurements.
type memoryRow struct {
	IdleKB, PeakKB float64
	MinInFlight    int
	Errors         int
}

func aggregateMemory(ms []inFlightRSS) memoryRow {
	var peak []float64
	row := memoryRow{MinInFlight: -1}
	if len(ms) > 0 {
		// Only the first repetition starts from a bridge that never had
		// 32 in flight; later ones start from the previous peak.
		row.IdleKB = float64(ms[0].IdleKB)
	}
	for _, m := range ms {
		peak = append(peak, float64(m.PeakKB))
		if row.MinInFlight < 0 || m.MaxInFlight < row.MinInFlight {
			row.MinInFlight = m.MaxInFlight
		}
		row.Errors += m.Errors
	}
	row.PeakKB = median(peak)
	return row
}
