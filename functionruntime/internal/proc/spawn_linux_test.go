//go:build linux

package proc

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The goroutine that waits for a worker to exit is parked in the poller
// ("IO wait"), holding no thread: a thread blocked in waitid would keep
// its P, and with sysmon polling at 10 ms (internal/sysmon) every other
// goroutine of the bridge would wait 10-20 ms for it at GOMAXPROCS 1.
func TestAwaitExitParksInThePoller(t *testing.T) {
	testAwaitExitParks(t)
}

// Where the kernel has pidfds but not PIDFD_NONBLOCK (Linux 5.3-5.9) the
// wait parks in the poller too.
func TestAwaitExitParksInThePollerWithoutPidfdNonblock(t *testing.T) {
	// Restored after the waiting goroutine has ended: cleanups run last
	// registered first.
	old := pidfdFlags
	t.Cleanup(func() { pidfdFlags = old })
	pidfdFlags = 1 << 30 // refused with EINVAL, as PIDFD_NONBLOCK is there
	testAwaitExitParks(t)
}

func testAwaitExitParks(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("sleep: %v", err)
	}
	done := make(chan struct{})
	go func() {
		awaitExit(cmd.Process.Pid)
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done // the exit ends the wait
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			if !strings.Contains(g, "proc.awaitExit(") {
				continue
			}
			if strings.Contains(g, "[IO wait") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the goroutine waiting for the exit is not parked in the poller:\n%s", g)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no goroutine in awaitExit")
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitExit returns once the process has exited, before it is reaped.
func TestAwaitExitReturnsAtTheExit(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skipf("true: %v", err)
	}
	awaitExit(cmd.Process.Pid)
	if !hasExited(cmd.Process.Pid) {
		t.Error("awaitExit returned while the process runs")
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("Wait after awaitExit: %v", err)
	}
}
