package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// child is a process the benchmark started and owns: the leader of its own
// process group (so stopping it reaches whatever it forked, e.g. a
// bridge's workers if the bridge itself died), killed by the kernel if the
// benchmark dies (Pdeathsig), stopped with TERM then KILL and reaped.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startChild starts bin with args and env (nil: inherit), its stdout and
// stderr appended to logPath.
func startChild(name, logPath string, env []string, bin string, args ...string) (*child, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		_ = logf.Close()
		close(c.done)
	}()
	return c, nil
}

// pid of the process (its group id too).
func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the process has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends TERM to the group, KILL after grace, waits for the reaper,
// and KILLs the group once more for stragglers.
func (c *child) stop(grace time.Duration) error {
	var result error
	if !c.exited() {
		_ = syscall.Kill(-c.pid(), syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(grace):
			_ = syscall.Kill(-c.pid(), syscall.SIGKILL)
			<-c.done
			result = fmt.Errorf("%s did not exit within %s of SIGTERM and was killed", c.name, grace)
		}
	}
	_ = syscall.Kill(-c.pid(), syscall.SIGKILL)
	return result
}

// waitTCP polls addr until it accepts a connection, the child exits, or
// timeout: the endpoints are ready once they listen.
func waitTCP(ctx context.Context, c *child, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		if c.exited() {
			return fmt.Errorf("%s exited before listening on %s: %v", c.name, addr, c.err)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not listening on %s within %s: %v", c.name, addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeAddr returns a loopback host:port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
