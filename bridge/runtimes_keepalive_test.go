package bridge

import (
	"testing"
	"time"
)

// serverMinPingInterval is gRPC's default keepalive enforcement MinTime,
// what `bridge runtime serve` enforces: functionruntime.NewGRPCServer and
// cmd/bridge set no grpc.KeepaliveEnforcementPolicy. A client pinging more
// often gets GOAWAY too_many_pings, which ends the calls under way.
const serverMinPingInterval = 5 * time.Minute

// A remote runtime connection pings a peer that stopped answering, and
// closes the connection when it does not answer, at an interval the
// runtime server accepts.
func TestRemoteRuntimeKeepaliveIsOnAndAccepted(t *testing.T) {
	ka := remoteKeepalive
	if ka.Time == 0 || ka.Timeout <= 0 {
		t.Fatalf("keepalive %+v: a hung or partitioned runtime would hold its connection for ever", ka)
	}
	if ka.Time < serverMinPingInterval {
		t.Fatalf("keepalive time %s: the runtime server answers pings sooner than %s apart with GOAWAY too_many_pings", ka.Time, serverMinPingInterval)
	}
	if ka.PermitWithoutStream {
		t.Fatalf("keepalive pings without a call under way: the runtime server answers them with GOAWAY too_many_pings")
	}
	if ka.Timeout >= ka.Time {
		t.Fatalf("keepalive timeout %s not below its time %s", ka.Timeout, ka.Time)
	}
}
