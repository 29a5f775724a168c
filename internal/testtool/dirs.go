package testtool

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
)

// SocketDir returns a new directory with a short path, removed when the
// test ends, for unix sockets: t.TempDir's paths can pass the 108 bytes a
// socket's path may have.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fnb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// FreeAddr returns a loopback TCP address no one listened on a moment
// ago, for a listener the test (or a process it starts) opens next. See
// FreeAddrs.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return FreeAddrs(t, 1)[0]
}

// FreeAddrs returns n distinct loopback TCP addresses no one listened on
// a moment ago. Their ports lie below the kernel's ephemeral range: a
// port the kernel chose for a listener on :0 is free again once that
// listener closes, and an outgoing connection (restate-server's, a test
// client's) may take it as its local port before the process the test
// starts binds it (CI saw "bind: address already in use"). Below that range only a listener can take a port, and
// this process never hands out one port twice (another test process may
// pick the same one, rarely: that race remains). When that range is too
// small or full, the ports come from the kernel, as before.
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := freeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// ports holds what freeAddrs handed out, so that two tests of one process
// never get the same port.
var ports struct {
	sync.Mutex
	given map[int]bool
}

// freeAddrs picks n ports at random between 10000 and the start of the
// ephemeral range, checking each by listening on it (the listeners stay
// open until all are picked), or from the kernel when that range is too
// small.
func freeAddrs(n int) ([]string, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.given = map[int]bool{}
	}
	const lo = 10000
	hi := ephemeralLow() - 1
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	addrs := make([]string, 0, n)
	for tries := 0; len(addrs) < n; tries++ {
		if tries == 2000 {
			return nil, fmt.Errorf("find a free loopback port: none of 2000 tried was free and not handed out before")
		}
		addr := "127.0.0.1:0"
		if hi-lo >= 1000 && tries < 1000 {
			p := lo + rand.IntN(hi-lo+1)
			if ports.given[p] {
				continue
			}
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				return nil, fmt.Errorf("find a free loopback port: %w", err)
			}
			continue
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if ports.given[p] {
			continue // from the kernel, handed out before
		}
		ports.given[p] = true
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		_, _ = fmt.Sscan(string(b), &low)
	}
	return low
}
