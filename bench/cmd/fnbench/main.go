// Command fnbench is `make bench`: it measures fnbridge side by side with
// its reference peer, the native Restate Go SDK, in one run on this
// machine, and writes bench/RESULTS.md.
//
// Peers, each its own process started and stopped by fnbench:
//
//	N  bench/sdkgo: an sdk-go v1.2.0 echo wrapped in restate.Run
//	F  fnbench fake-serve: the bridge with an in-process echo FunctionRuntime (the bridge alone)
//	P  bin/bridge serve with a warm Python echo function
//	S  bin/bridge serve with a warm Bash echo function
//	N5 bench/sdkgo --service Steps: five restate.Run steps per invocation
//	P5 bin/bridge serve, a warm Python function (durability: steps) taking five fnbridge.run steps
//	S5 bin/bridge serve, a warm Bash function (durability: steps) taking five `fnbridge run` steps
//	M  bin/bridge serve with a Bash handler that sleeps (memory with 32 in flight)
//
// The five-step peers are measured through restate-server only, as ratios
// to N5. Measurements: through a real restate-server (own HTTP/1.1 keep-alive load
// generator on the ingress), directly against each endpoint with
// restatetest.Drive (no restate-server), warm against cold Python and Bash
// invocations through the adapters, and resident memory. CPU and memory
// come from /proc.
//
// Usage:
//
//	fnbench run --bridge bin/bridge --sdkgo PATH --restate-server PATH --out bench/RESULTS.md
//	fnbench run --quick ...   (a smoke run of every section, under a minute)
//	fnbench fake-serve --config F.yaml --listen 127.0.0.1:PORT   (started by run)
//	fnbench drive --url http://127.0.0.1:PORT --service S -c 1 -n 10000 --pid PID   (a steady direct load, for profiling one peer)
//	fnbench ingress --url http://127.0.0.1:8080 --target S/h -c 32 --pid PID --server-pid PID [--want steps]   (the same through a running restate-server)
//	fnbench notes --out bench/RESULTS.md --notes bench/NOTES.md   (the analysis, written after a run, into that run's report)
//	fnbench h2trace --listen 127.0.0.1:PORT --target 127.0.0.1:PEER   (a counting proxy: HTTP/2 frames and Restate messages per invocation)
//	fnbench ab --builds old=DIR1/bridge,new=DIR2/bridge@4 --shape function|steps|bashsteps --sdkgo PATH   (an interleaved A/B of bridge builds through one restate-server)
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/fnbridge/fnbridge/internal/sysmon"
)

// main starts on the process's first thread, where sysmon.Apply must run
// for fake-serve (it keeps a parent-death signal there).
func init() { runtime.LockOSThread() }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fnbench run [flags] | fnbench fake-serve [flags] | fnbench drive [flags] | fnbench ingress [flags] | fnbench notes [flags] | fnbench h2trace [flags] | fnbench ab [flags]")
		os.Exit(2)
	}
	if os.Args[1] != "fake-serve" {
		runtime.UnlockOSThread()
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:])
	case "fake-serve":
		// F is the bridge's serving process with another runtime: it runs
		// with the same scheduler tuning as bridge serve.
		if err := sysmon.Apply(); err != nil {
			fmt.Fprintln(os.Stderr, "fnbench fake-serve: serving without sysmon's tuning:", err)
		}
		runtime.UnlockOSThread()
		err = fakeServe(os.Args[2:])
	case "drive":
		err = driveCmd(os.Args[2:])
	case "ingress":
		err = ingressCmd(os.Args[2:])
	case "notes":
		err = notesCmd(os.Args[2:])
	case "ab":
		err = abCmd(os.Args[2:])
	case "h2trace":
		err = h2traceCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (run | fake-serve | drive | ingress | notes | h2trace | ab)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fnbench:", err)
		os.Exit(1)
	}
}
