package proc

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

func requireSh(t *testing.T) string {
	t.Helper()
	sh := testtool.Require(t, "", "sh", "to run the probes")
	return sh
}

// deadOrZombie reports whether pid is gone or a zombie.
func deadOrZombie(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// Rule: "Processes you start are owned: own process group (Setpgid),
// Pdeathsig on Linux, killed ... and reaped, no orphans" — also the
// one-off interpreter probe: it runs in its own group, and what it leaves
// running in the background is killed before Probe returns.
func TestProbeOwnsItsGroup(t *testing.T) {
	sh := requireSh(t)
	out, err := Probe(context.Background(), sh, "-c", `sleep 60 & echo "$$ $(cut -d' ' -f5 /proc/$$/stat) $!"`)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	if len(f) != 3 {
		t.Fatalf("probe printed %q", out)
	}
	if f[0] != f[1] {
		t.Fatalf("probe pid %s is in group %s, want its own group", f[0], f[1])
	}
	bg, _ := strconv.Atoi(f[2])
	if !deadOrZombie(bg) {
		_ = syscall.Kill(bg, syscall.SIGKILL)
		t.Fatalf("the probe's background child %d survived Probe", bg)
	}
}

// A probe that hangs is killed, with its group, when ctx ends.
func TestProbeKilledWithContext(t *testing.T) {
	sh := requireSh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Probe(ctx, sh, "-c", `sleep 60 & sleep 60`)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("Probe returned after %v", elapsed)
	}
}

// A failing probe's error says how it ended and quotes its stderr.
func TestProbeFailureQuotesStderr(t *testing.T) {
	sh := requireSh(t)
	_, err := Probe(context.Background(), sh, "-c", `echo "no such module" >&2; exit 3`)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "no such module") {
		t.Fatalf("error = %v, want exit status 3 and the stderr line", err)
	}
}

// The lifeline (fd 5) reads end of file once the server's end is gone, which
// is what a worker's guardian waits for; Terminate closes it only after the
// group is gone.
func TestLifelineEndsWithServerEnd(t *testing.T) {
	p := startSh(t, `cat <&5 >/dev/null; echo eof >&4; read x <&3`, []string{"PATH=/usr/bin:/bin"})
	_ = p.life.Close() // what the kernel does when the server dies
	if got := readLine(t, p); got != "eof" {
		t.Fatalf("worker said %q, want eof", got)
	}
}

// A program that prints without end cannot fill the server's memory: the
// probe keeps the start of its output and still returns once it exits.
func TestProbeKeepsABoundedOutput(t *testing.T) {
	sh := requireSh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := Probe(ctx, sh, "-c", "echo first; head -c 8388608 /dev/zero; head -c 8388608 /dev/zero >&2")
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != maxProbeOutput || !strings.HasPrefix(string(out), "first\n") {
		t.Fatalf("kept %d bytes starting %q, want the first %d", len(out), out[:min(len(out), 6)], maxProbeOutput)
	}
}
