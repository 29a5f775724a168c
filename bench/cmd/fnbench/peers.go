package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// peer is one Restate deployment under test.
type peer struct {
	Key     string // N, F, P, S (M: the memory bridge)
	Label   string
	Service string
	Handler string
	// echo: the handler returns its input, and the load generator checks it.
	echo bool
	addr string
	proc *child
}

func (p *peer) uri() string { return "http://" + p.addr }

// Handler sources shared by every bridge peer and the adapter measurements.
const (
	pyEcho = "def echo(event):\n    return event\n"
	shEcho = "respond() {\n  printf '%s' \"$1\"\n}\n\n" +
		"# nap keeps an invocation in flight for the memory measurement.\n" +
		"nap() {\n  sleep 4\n  printf '{\"slept\":true}'\n}\n"
)

// bridgeConfig is a one-handler bridge.yaml.
func bridgeConfig(service, handler, runtime, code string, concurrency, minWarm int) string {
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
`, service, handler, runtime, code, concurrency, minWarm)
}

// writeFixtures writes the handler sources and the bridge configurations
// into dir and returns the configuration paths by peer key.
func writeFixtures(dir string, workers int) (map[string]string, error) {
	fn := filepath.Join(dir, "functions")
	if err := os.MkdirAll(fn, 0o755); err != nil {
		return nil, err
	}
	for name, body := range map[string]string{"bench.py": pyEcho, "bench.sh": shEcho} {
		if err := os.WriteFile(filepath.Join(fn, name), []byte(body), 0o644); err != nil {
			return nil, err
		}
	}
	cfgs := map[string]string{
		// F's runtime kind is only a label: fake-serve answers every kind
		// with the in-process echo runtime, so registrations are free.
		"F": bridgeConfig("FakeEcho", "echo", "python", "bench.echo", 32, 32),
		"P": bridgeConfig("PyEcho", "echo", "python", "bench.echo", workers, workers),
		"S": bridgeConfig("BashEcho", "echo", "bash", "bench.respond", workers, workers),
		"M": bridgeConfig("Nap", "nap", "bash", "bench.nap", 32, 32),
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
