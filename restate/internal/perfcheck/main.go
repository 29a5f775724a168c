package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fnbridge/fnbridge/restate/restatetest"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		err = serve(os.Args[2:])
	} else {
		err = run(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "perfcheck:", err)
		os.Exit(1)
	}
}

// point is one (version, concurrency) load point.
type point struct{ version, conc int }

// sample is one measurement of one peer at one point.
type sample struct {
	perInv time.Duration // endpoint CPU per invocation
	rate   float64       // invocations per second
	sys    float64       // read+write system calls per invocation
}

func run(args []string) error {
	fs := flag.NewFlagSet("perfcheck", flag.ContinueOnError)
	sdkgo := fs.String("sdkgo", "", "sdk-go reference peer binary (bench/sdkgo); empty: measure ours only")
	baseline := fs.String("baseline", "", "another perfcheck binary (e.g. built from the previous commit) measured as peer \"before\"")
	concs := fs.String("c", "1,8,32", "concurrency levels")
	versions := fs.String("v", "6,7", "protocol versions")
	n := fs.Int("n", 5000, "invocations per load point")
	reps := fs.Int("reps", 3, "repetitions (the median is reported)")
	warm := fs.Int("warmup", 500, "invocations before each peer's first point")
	cpuProfile := fs.String("cpuprofile", "", "profile our endpoint (first c and v only) to this file")
	memProfile := fs.String("memprofile", "", "allocation profile of our endpoint to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cs, err := ints(*concs)
	if err != nil {
		return fmt.Errorf("-c: %w", err)
	}
	vs, err := ints(*versions)
	if err != nil {
		return fmt.Errorf("-v: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ourArgs := []string{"serve"}
	profiling := *cpuProfile != "" || *memProfile != ""
	if *cpuProfile != "" {
		ourArgs = append(ourArgs, "-cpuprofile", *cpuProfile)
	}
	if *memProfile != "" {
		ourArgs = append(ourArgs, "-memprofile", *memProfile)
	}
	ours, err := startPeer("ours", "", self, ourArgs...)
	if err != nil {
		return err
	}
	defer ours.stop()
	peers := []*peer{ours}
	if *baseline != "" && !profiling {
		before, err := startPeer("before", "", *baseline, "serve")
		if err != nil {
			return err
		}
		defer before.stop()
		peers = append(peers, before)
	}
	if *sdkgo != "" && !profiling {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		ref, err := startPeer("sdk-go", addr, *sdkgo, "--listen", addr)
		if err != nil {
			return err
		}
		defer ref.stop()
		peers = append(peers, ref)
	}
	ctx := context.Background()
	for _, p := range peers {
		if _, err := restatetest.Drive(ctx, p.url, "Echo", "echo", vs[0], cs[len(cs)-1], *warm); err != nil {
			return fmt.Errorf("%s warmup: %w", p.name, err)
		}
	}
	if profiling {
		_, err := measure(ctx, ours, point{vs[0], cs[0]}, *n)
		return err
	}
	var points []point
	for _, v := range vs {
		for _, c := range cs {
			points = append(points, point{v, c})
		}
	}
	res := map[point]map[string][]sample{}
	load0 := loadavg()
	for r := 0; r < *reps; r++ {
		for _, pt := range points {
			if res[pt] == nil {
				res[pt] = map[string][]sample{}
			}
			// Alternate which peer goes first so neither always
			// inherits the other's warm caches or background bursts.
			order := slices.Clone(peers)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, p := range order {
				s, err := measure(ctx, p, pt, *n)
				if err != nil {
					return err
				}
				res[pt][p.name] = append(res[pt][p.name], s)
			}
		}
	}
	fmt.Printf("load average before: %s, after: %s; %d cores; n=%d per point, median of %d\n", load0, loadavg(), numCPU(), *n, *reps)
	head := fmt.Sprintf("%-3s %-4s", "v", "c")
	for _, p := range peers {
		head += fmt.Sprintf(" %14s %9s %8s", p.name+" µs/inv", "inv/s", "sys/inv")
	}
	for _, p := range peers[1:] {
		head += fmt.Sprintf(" %13s", "ours/"+p.name)
	}
	fmt.Println(head)
	for _, pt := range points {
		line := fmt.Sprintf("v%-2d %-4d", pt.version, pt.conc)
		meds := make([]sample, len(peers))
		for i, p := range peers {
			meds[i] = median(res[pt][p.name])
			line += fmt.Sprintf(" %14.1f %9.0f %8.1f", us(meds[i].perInv), meds[i].rate, meds[i].sys)
		}
		for i := range peers[1:] {
			line += fmt.Sprintf(" %13.2f", float64(meds[0].perInv)/float64(meds[i+1].perInv))
		}
		fmt.Println(line)
	}
	return nil
}

// measure drives p at pt and returns the endpoint's CPU per invocation.
func measure(ctx context.Context, p *peer, pt point, n int) (sample, error) {
	sys0 := syscalls(p.pid())
	before, err := cpuTime(p.pid())
	if err != nil {
		return sample{}, err
	}
	st, err := restatetest.Drive(ctx, p.url, "Echo", "echo", pt.version, pt.conc, n)
	if err != nil {
		return sample{}, fmt.Errorf("%s v%d c=%d: %w", p.name, pt.version, pt.conc, err)
	}
	after, err := cpuTime(p.pid())
	if err != nil {
		return sample{}, err
	}
	sys := float64(syscalls(p.pid())-sys0) / float64(n)
	return sample{perInv: (after - before) / time.Duration(n), rate: float64(n) / st.Duration.Seconds(), sys: sys}, nil
}

func median(s []sample) sample {
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b sample) int { return int(a.perInv - b.perInv) })
	return s[len(s)/2]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list")
	}
	return out, nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
