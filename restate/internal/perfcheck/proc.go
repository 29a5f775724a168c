package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is USER_HZ, the unit of utime/stime in /proc/PID/stat; it is
// 100 on every Linux platform Go supports.
const clockTick = 100

// cpuTime reads utime+stime of pid.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised comm, which may contain spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no comm field", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime %q %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTick, nil
}

// syscalls reads syscr+syscw (read- and write-family system calls) of
// pid from /proc/PID/io; 0 when the file is not readable.
func syscalls(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok && (k == "syscr" || k == "syscw") {
			x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			n += x
		}
	}
	return n
}

// peer is one endpoint child process.
type peer struct {
	name string
	cmd  *exec.Cmd
	url  string
}

// startPeer starts bin args in its own process group (killed with us),
// and waits until addr answers HTTP. When addr is empty the child prints
// its address as the first stdout line.
func startPeer(name, addr, bin string, args ...string) (*peer, error) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// The peers log per invocation (sdk-go at INFO); that cost stays in
	// their CPU, but the text goes nowhere.
	cmd.Stderr = nil
	var out *bufio.Reader
	if addr == "" {
		pr, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		out = bufio.NewReader(pr)
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &peer{name: name, cmd: cmd}
	if out != nil {
		line, err := out.ReadString('\n')
		if err != nil {
			p.stop()
			return nil, fmt.Errorf("%s: reading its address: %w", name, err)
		}
		addr = strings.TrimSpace(line)
	}
	p.url = "http://" + addr
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s did not listen on %s: %w", name, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p, nil
}

func (p *peer) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM to the group, then SIGKILL after a grace, and reaps.
func (p *peer) stop() {
	pg := -p.cmd.Process.Pid
	_ = syscall.Kill(pg, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(pg, syscall.SIGKILL)
		<-done
	}
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func numCPU() int { return runtime.NumCPU() }
