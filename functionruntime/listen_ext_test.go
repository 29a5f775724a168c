//go:build linux

package functionruntime_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
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
