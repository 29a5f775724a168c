package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// peer is one Restate deployment under test.
type peer struct {
	Key     string // N, F, P, S; N5, P5, S5 (five steps); M: the memory bridge
	Label   string
	Service string
	Handler string
	// want is the answer the load generator expects for a request body
	// (nil: any 200 counts): echoAnswer or stepsAnswer.
	want func(sent []byte) []byte
	// steps: a five-step peer, measured through restate-server only and
	// compared with N5 instead of N.
	steps bool
	addr  string
	proc  *child
}

// base is the key of the peer p is compared with (×N columns, targets).
func (p *peer) base() string {
	if p.steps {
		return "N5"
	}
	return "N"
}

// echoAnswer: an echo handler returns its input.
func echoAnswer(sent []byte) []byte { return sent }

// stepsAnswer: a five-step handler given {"n":i} returns its fifth step's
// value, {"n":i,"s":5}.
func stepsAnswer(sent []byte) []byte {
	return append(bytes.TrimSuffix(bytes.TrimSpace(sent), []byte("}")), []byte(`,"s":`+strconv.Itoa(stepCount)+"}")...)
}

func (p *peer) uri() string { return "http://" + p.addr }

// stepCount is the number of durable steps of the N5, P5 and S5 handlers.
const stepCount = 5

// Handler sources shared by every bridge peer and the adapter measurements.
// The five-step handlers (durability: steps) live in files of their own,
// since they need the fnbridge module and command, which exist only
// inside a worker: each step returns {"n":n,"s":k} for the input {"n":n},
// like bench/sdkgo's Steps handler; the handler returns the fifth.
const (
	pySteps = "import fnbridge\n\n\n" +
		"def _step(n, k):\n    return {\"n\": n, \"s\": k}\n\n\n" +
		"def steps(event):\n    n = event[\"n\"]\n    out = None\n" +
		"    for k in range(1, 6):\n        out = fnbridge.run(\"s%d\" % k, _step, n, k)\n    return out\n"
	shSteps = "steps() {\n  local n=${1#*:} k v\n  n=${n%\\}}\n" +
		"  for k in 1 2 3 4 5; do\n" +
		"    fnbridge run --var v \"s$k\" -- printf '{\"n\":%s,\"s\":%d}' \"$n\" \"$k\" || exit\n" +
		"  done\n  printf '%s' \"$v\"\n}\n"

	pyEcho = "def echo(event):\n    return event\n"
	shEcho = "respond() {\n  printf '%s' \"$1\"\n}\n\n" +
		"# nap keeps an invocation in flight for the memory measurement.\n" +
		"nap() {\n  sleep 4\n  printf '{\"slept\":true}'\n}\n"
)

// bridgeConfig is a one-handler bridge.yaml; durability is function or
// steps.
func bridgeConfig(service, handler, runtime, code string, concurrency, minWarm int, durability string) string {
	return fmt.Sprintf(`services:
  - name: %s
    handlers:
      - name: %s
        runtime: %s
        dir: functions
        handler: %s
        timeout: 30s
        idle_timeout: 15m
        concurrency: %d
        min_warm: %d
        durability: %s
`, service, handler, runtime, code, concurrency, minWarm, durability)
}

// inlineBash, appended to a bash handler's bridgeConfig, runs its
// invocations in the worker's own shell.
const inlineBash = "        bash: {subshell: false}\n"

// registrations are the warm registrations (concurrency = min_warm) of
// the bridge peers that run real workers.
type registrations struct {
	// python is P's; bash is S's, as many as the highest concurrency by
	// default, so a Bash invocation never waits for a registration that
	// is still reaping its last subshell and forking the next.
	python, bash int
	// steps is P5's and S5's: a steps invocation holds its registration
	// through its five round trips to restate-server, so fewer
	// registrations than callers would cap throughput at registrations ÷
	// latency, a limit sdk-go's N5 does not have.
	steps int
}

// writeFixtures writes the handler sources and the bridge configurations
// into dir and returns the configuration paths by peer key.
func writeFixtures(dir string, regs registrations) (map[string]string, error) {
	fn := filepath.Join(dir, "functions")
	if err := os.MkdirAll(fn, 0o755); err != nil {
		return nil, err
	}
	for name, body := range map[string]string{"bench.py": pyEcho, "bench.sh": shEcho, "steps.py": pySteps, "steps.sh": shSteps} {
		if err := os.WriteFile(filepath.Join(fn, name), []byte(body), 0o644); err != nil {
			return nil, err
		}
	}
	cfgs := map[string]string{
		// F's runtime kind is only a label: fake-serve answers every kind
		// with the in-process echo runtime, so registrations are free.
		"F":   bridgeConfig("FakeEcho", "echo", "python", "bench.echo", 32, 32, "function"),
		"P":   bridgeConfig("PyEcho", "echo", "python", "bench.echo", regs.python, regs.python, "function"),
		"S":   bridgeConfig("BashEcho", "echo", "bash", "bench.respond", regs.bash, regs.bash, "function"),
		"M":   bridgeConfig("Nap", "nap", "bash", "bench.nap", 32, 32, "function"),
		"P5":  bridgeConfig("PySteps", "steps", "python", "steps.steps", regs.steps, regs.steps, "steps"),
		"S5":  bridgeConfig("BashSteps", "steps", "bash", "steps.steps", regs.steps, regs.steps, "steps"),
		"SI":  bridgeConfig("BashEchoInline", "echo", "bash", "bench.respond", regs.bash, regs.bash, "function") + inlineBash,
		"S5I": bridgeConfig("BashStepsInline", "steps", "bash", "steps.steps", regs.steps, regs.steps, "steps") + inlineBash,
	}
	out := map[string]string{}
	for k, c := range cfgs {
		p := filepath.Join(dir, k+".yaml")
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			return nil, err
		}
		out[k] = p
	}
	return out, nil
}

// startPeer starts one deployment on a free loopback port and waits until
// it listens (a bridge listens only after its min_warm registrations are
// READY).
func startPeer(ctx context.Context, p *peer, dir, bin string, args ...string) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	p.addr = addr
	args = append(args, "--listen", addr)
	p.proc, err = startChild(p.Key, filepath.Join(dir, "peer-"+p.Key+".log"), nil, bin, args...)
	if err != nil {
		return err
	}
	if err := waitTCP(ctx, p.proc, addr, 90*time.Second); err != nil {
		_ = p.proc.stop(10 * time.Second)
		return err
	}
	return nil
}
