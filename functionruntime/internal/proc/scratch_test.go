package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A server SIGKILLed before it could remove its workers' scratch
// directories leaks them only until the next server starts: directories of
// dead servers are swept, those of live ones (this process) are kept.
func TestSweepScratchRemovesOnlyDeadServersDirs(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := dead.Process.Pid // exited and reaped: no such process now
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gone := mk(fmt.Sprintf("fnbridge-bash-%d-123", deadPID))
	mine := mk(fmt.Sprintf("fnbridge-bash-%d-456", os.Getpid()))
	parent := mk(fmt.Sprintf("fnbridge-bash-%d-789", os.Getppid()))
	otherKind := mk(fmt.Sprintf("fnbridge-python-%d-123", deadPID))
	unrelated := mk("fnbridge-bash-notapid")

	SweepScratch(dir, "bash")

	for _, p := range []string{mine, parent, otherKind, unrelated} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("dead server's %s was kept", gone)
	}
}

func TestScratchDirNamesKindAndPID(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	p, err := ScratchDir("python")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("fnbridge-python-%d-", os.Getpid())
	if !strings.HasPrefix(filepath.Base(p), want) {
		t.Fatalf("scratch dir %s does not start with %s", p, want)
	}
}

// Without TMPDIR the scratch directory is on the memory file system when
// there is one; an explicit TMPDIR always wins.
func TestScratchDirPrefersShmUnlessTMPDIRIsSet(t *testing.T) {
	shm := t.TempDir()
	old := shmDir
	shmDir = shm
	t.Cleanup(func() { shmDir = old })
	t.Setenv("TMPDIR", "")
	p, err := ScratchDir("bash")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p) != shm {
		t.Fatalf("without TMPDIR the scratch dir is %s, want it in %s", p, shm)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	if p, err = ScratchDir("bash"); err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p) != tmp {
		t.Fatalf("with TMPDIR=%s the scratch dir is %s", tmp, p)
	}
	shmDir = filepath.Join(shm, "missing")
	t.Setenv("TMPDIR", "")
	if p, err = ScratchDir("bash"); err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p) != os.TempDir() {
		t.Fatalf("without a memory file system the scratch dir is %s, want it in %s", p, os.TempDir())
	}
}
