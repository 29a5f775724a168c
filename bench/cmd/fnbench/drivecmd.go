package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fnbridge/fnbridge/restate/restatetest"
)

// driveCmd is `fnbench drive`: restatetest.Drive against one endpoint
// that is already running, reporting its CPU per invocation when --pid
// names it. It is for profiling one peer by hand (`strace -c -f -p PID`,
// `perf record -p PID`) while it serves a steady direct load.
func driveCmd(args []string) error {
	fs := flag.NewFlagSet("drive", flag.ContinueOnError)
	url := fs.String("url", "", "endpoint base URL, e.g. http://127.0.0.1:9080")
	service := fs.String("service", "", "service name")
	handler := fs.String("handler", "echo", "handler name")
	c := fs.Int("c", 1, "concurrency")
	n := fs.Int("n", 10000, "invocations")
	pid := fs.Int("pid", 0, "the endpoint's process, for its CPU per invocation (0: not measured)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" || *service == "" {
		return fmt.Errorf("--url and --service are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var before cpuMark
	var switchesBefore int64
	if *pid > 0 {
		var err error
		if before, err = markCPU(*pid, 0, false); err != nil {
			return err
		}
		switchesBefore = contextSwitches(*pid)
	}
	st, err := restatetest.Drive(ctx, *url, *service, *handler, driveProtocol, *c, *n)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "%d invocations in %s: %.0f inv/s, p50 %.3f ms, p99 %.3f ms\n",
		st.Invocations, st.Duration, float64(st.Invocations)/st.Duration.Seconds(), ms(st.P50), ms(st.P99))
	if *pid > 0 {
		after, err := markCPU(*pid, 0, true)
		if err != nil {
			return err
		}
		u := cpuBetween(before, after)
		inv := float64(st.Invocations)
		fmt.Fprintf(os.Stdout, "endpoint CPU %.1f µs/inv (+%.1f µs/inv workers), %.2f context switches/inv; this driver %.1f µs/inv\n",
			us(u.Self)/inv, us(u.Workers)/inv, float64(contextSwitches(*pid)-switchesBefore)/inv, us(u.Gen)/inv)
	}
	return nil
}

// contextSwitches is the voluntary and involuntary context switches of
// every thread of pid so far (threads that exited are not counted): a
// count that, unlike CPU time, other load on the machine hardly moves.
func contextSwitches(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches" {
				c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += c
			}
		}
	}
	return n
}

// ingressCmd is `fnbench ingress`: the load generator of section 1
// against a restate-server that is already running, reporting the
// deployment's CPU per invocation (--pid) and restate-server's per
// request (--server-pid). It is for comparing variants of one peer by
// hand; `fnbench run` is the measurement.
func ingressCmd(args []string) error {
	fs := flag.NewFlagSet("ingress", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:8080", "restate-server ingress base URL")
	target := fs.String("target", "", "Service/handler to call")
	c := fs.Int("c", 1, "concurrency")
	dur := fs.Duration("d", 4*time.Second, "measured duration")
	pid := fs.Int("pid", 0, "the deployment's process (0: not measured)")
	server := fs.Int("server-pid", 0, "restate-server's process (0: not measured)")
	want := fs.String("want", "echo", "how answers are checked: echo (the input back) or steps (a five-step handler's answer)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	check := echoAnswer
	switch *want {
	case "echo":
	case "steps":
		check = stepsAnswer
	default:
		return fmt.Errorf("--want %q: use echo or steps", *want)
	}
	if *target == "" || *pid == 0 {
		return fmt.Errorf("--target and --pid are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	client := newIngressClient(*c)
	defer client.CloseIdleConnections()
	u := *url + "/" + *target
	// The same closed loop as a point of `fnbench run`: the warm-up flows
	// into the window, CPU is sampled at its edges with the load running.
	var before, after cpuMark
	mark := func(edge int) (err error) {
		if edge == 0 {
			before, err = markCPU(*pid, *server, false)
		} else {
			after, err = markCPU(*pid, *server, true)
		}
		return err
	}
	res, err := load(ctx, client, u, loadPlan{Concurrency: *c, WarmRequests: 10 * *c, WarmUp: time.Second, Requests: 1_000_000, Duration: *dur, Mark: mark}, check)
	if err != nil {
		return err
	}
	if res.Warm.Errors > 0 {
		return fmt.Errorf("warm-up: %d errors, first: %s", res.Warm.Errors, res.Warm.FirstError)
	}
	cpu := cpuBetween(before, after)
	per := func(d time.Duration) float64 { return us(d) / float64(max(res.OK, 1)) }
	fmt.Printf("%.0f req/s, p50 %.2f ms, errors %d; deployment %.0f µs/inv (+%.0f workers); restate-server %.0f µs/req; machine busy %.2f cores\n",
		res.rps(), ms(percentile(res.Latencies, 50)), res.Errors, per(cpu.Self), per(cpu.Workers), per(cpu.Server), cpu.Machine.Seconds()/res.Duration.Seconds())
	return nil
}
