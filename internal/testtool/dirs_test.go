package testtool

import (
	"net"
	"strconv"
	"testing"
)

// Rule: an address handed out is never one an outgoing connection can
// take meanwhile (its port lies below the ephemeral range) nor one handed
// out before in this process.
func TestFreeAddrsBelowEphemeralAndDistinct(t *testing.T) {
	low := ephemeralLow()
	if low-1-10000 < 1000 {
		t.Skipf("the ephemeral range starts at %d: addresses come from the kernel", low)
	}
	seen := map[string]bool{}
	addrs := FreeAddrs(t, 20)
	for range 20 {
		addrs = append(addrs, FreeAddr(t))
	}
	for _, a := range addrs {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		if port, err := strconv.Atoi(p); err != nil || port >= low || port < 10000 {
			t.Errorf("%s: port outside 10000..%d", a, low-1)
		}
		if seen[a] {
			t.Errorf("%s handed out twice", a)
		}
		seen[a] = true
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("%s: not free: %v", a, err)
			continue
		}
		_ = l.Close()
	}
}
