package procstat_test

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/procstat"
)

func TestParseCommWithSpacesAndParens(t *testing.T) {
	// proc(5): the comm field is parenthesised and may itself hold ") (".
	line := "4242 (a) (b c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 1 0 98765 1000 10 18446744073709551615"
	st, err := procstat.Parse(line)
	if err != nil {
		t.Fatal(err)
	}
	want := procstat.Stat{PID: 4242, Comm: "a) (b c", State: 'S', PPID: 17, PGID: 4242,
		Utime: 2500 * time.Millisecond, Stime: 500 * time.Millisecond, Cutime: 70 * time.Millisecond, Cstime: 30 * time.Millisecond,
		StartTime: 98765}
	if st != want {
		t.Fatalf("Parse = %+v, want %+v", st, want)
	}
	if st.CPU() != 3*time.Second || st.Dead() {
		t.Fatalf("CPU %v Dead %v", st.CPU(), st.Dead())
	}
}

func TestParseRejectsTruncatedLines(t *testing.T) {
	for _, line := range []string{"", "12 sleep S 1", "12 (sleep) S 1 2", "12 (y) S 1 1 1 0 -1 0 0 0 0 0 a 0 0 0 20 0 1 0 5", "x (sleep) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19"} {
		if _, err := procstat.Parse(line); err == nil {
			t.Errorf("Parse(%q) succeeded", line)
		}
	}
}

func TestReadSelfAndChild(t *testing.T) {
	self, err := procstat.Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.PID != os.Getpid() || self.PPID != os.Getppid() || self.Dead() || self.StartTime == 0 {
		t.Fatalf("self = %+v", self)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatalf("sleep: %v", err)
	}
	pid := cmd.Process.Pid
	reaped := false
	t.Cleanup(func() { // a failed check leaves no sleep behind
		if !reaped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	if !procstat.Alive(pid) {
		t.Fatalf("running child %d not alive", pid)
	}
	found := false
	for _, st := range procstat.All() {
		if st.PID == pid && st.PPID == os.Getpid() {
			found = true
		}
	}
	if !found {
		t.Fatalf("All() misses child %d", pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	reaped = true
	if procstat.Alive(pid) {
		t.Fatalf("reaped child %d still alive", pid)
	}
	if _, err := procstat.Read(pid); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read(reaped) = %v, want not exist", err)
	}
}
