//go:build linux

package functionruntime_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fnbridge/fnbridge/functionruntime"
)

// The socket never exists at its final path with the umask's mode: it
// appears there already restricted, and its attributes never change while
// it is there. inotify reports every creation and every chmod of a name in
// the directory, so a bind-then-chmod shows up as an IN_ATTRIB event on the
// socket's name, however short the window was.
func TestListenUnixSocketHasNoChmodWindow(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ATTRIB); err != nil {
		t.Fatal(err)
	}
	const starts = 20
	path := filepath.Join(dir, "rt.sock")
	for i := 0; i < starts; i++ {
		lis, err := functionruntime.Listen("unix://" + path)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != functionruntime.UnixSocketMode || fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("start %d: %s has mode %v, want a socket with %v", i, path, fi.Mode(), functionruntime.UnixSocketMode)
		}
		if err := lis.Close(); err != nil {
			t.Fatal(err)
		}
	}

	appeared, changed := 0, 0
	for _, ev := range inotifyEvents(t, fd) {
		if ev.name != "rt.sock" {
			continue
		}
		if ev.mask&unix.IN_ATTRIB != 0 {
			changed++
		}
		if ev.mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			appeared++
		}
	}
	if changed > 0 {
		t.Errorf("the socket's attributes changed %d times at its final path: it existed there with another mode before a chmod", changed)
	}
	if appeared != starts {
		t.Errorf("socket appeared %d times, want %d: the watch saw no creation", appeared, starts)
	}
}

type inotifyEvent struct {
	mask uint32
	name string
}

// inotifyEvents drains the queued events of a non-blocking inotify fd.
func inotifyEvents(t *testing.T, fd int) []inotifyEvent {
	t.Helper()
	var evs []inotifyEvent
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+nameLen]
			evs = append(evs, inotifyEvent{mask: mask, name: string(bytes.TrimRight(name, "\x00"))})
			off += unix.SizeofInotifyEvent + nameLen
		}
	}
}

// --socket-group: the socket appears with mode 0660 and the group asked
// for, so that group's members (a bridge running as another user) can
// connect; and, where the test runs as root, a process of another user
// in that group connects while one outside it is refused.
func TestListenGroupLetsTheGroupConnect(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rt.sock")
	gid := os.Getgid()
	if os.Geteuid() == 0 {
		gid = 65534 // another group than root's own
	}
	lis, err := functionruntime.ListenGroup("unix://"+path, strconv.Itoa(gid))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != functionruntime.UnixSocketGroupMode || int(st.Gid) != gid {
		t.Fatalf("socket mode %v group %d, want %v and group %d", fi.Mode().Perm(), st.Gid, functionruntime.UnixSocketGroupMode, gid)
	}
	if os.Geteuid() == 0 {
		// t.TempDir's parent is private: open both to the other user.
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		// uid 65534 in group 65534 connects; uid 65534 in group 65533 not.
		// The helper is this test binary (TestMain), copied where that
		// user may run it.
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "connect")
		data, err := os.ReadFile(self)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			gid  uint32
			want bool
		}{{65534, true}, {65533, false}} {
			cmd := exec.Command(bin)
			cmd.Env = []string{connectHelperEnv + "=" + path}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: c.gid}}
			out, err := cmd.CombinedOutput()
			if (err == nil) != c.want {
				t.Errorf("uid 65534 gid %d connecting: %v %s, want connected %v", c.gid, err, out, c.want)
			}
		}
	}
	if os.Geteuid() == 0 {
		// A numeric id the group database does not list (a container's
		// fsGroup) is taken as it is.
		p := filepath.Join(dir, "fsgroup.sock")
		l, err := functionruntime.ListenGroup("unix://"+p, "4242")
		if err != nil {
			t.Fatalf("an unlisted numeric group: %v", err)
		}
		fi, _ := os.Lstat(p)
		if g := fi.Sys().(*syscall.Stat_t).Gid; g != 4242 {
			t.Errorf("socket group %d, want 4242", g)
		}
		l.Close()
	}
	for _, c := range []struct{ address, group, want string }{
		{"127.0.0.1:0", strconv.Itoa(gid), "applies to a unix:///path address"},
		{"unix://" + filepath.Join(dir, "x.sock"), "no-such-group-fnbridge", `no group "no-such-group-fnbridge"`},
	} {
		if l, err := functionruntime.ListenGroup(c.address, c.group); err == nil || !strings.Contains(err.Error(), c.want) {
			if l != nil {
				l.Close()
			}
			t.Errorf("ListenGroup(%q, %q) = %v, want an error saying %q", c.address, c.group, err, c.want)
		}
	}
}

// connectHelperEnv makes the test binary a helper that connects to the
// unix socket it names (see TestMain).
const connectHelperEnv = "FNBRIDGE_TEST_UNIX_CONNECT"
