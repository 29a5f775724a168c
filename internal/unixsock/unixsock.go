// Package unixsock owns the creation of the bridge's Unix sockets (the
// FunctionRuntime server's, the durable-steps context endpoint's): bound
// with their final permissions from the start, never taking over a socket
// a live server still accepts on, and removed on Close.
package unixsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// maxUnixPathBytes is what fits in sockaddr_un.sun_path with its NUL on
// Linux.
const maxUnixPathBytes = 107

// Listen listens on the Unix socket at path with permissions mode. A
// stale socket file left by a dead server is removed first; a socket some
// live server still accepts on is an error, and so is any other file at
// the path.
func Listen(path string, mode os.FileMode) (net.Listener, error) {
	return ListenGroup(path, mode, -1)
}

// ListenGroup is Listen with the socket's group set to gid (-1: left as
// created) before it appears at path, so the group's members can connect
// from the first moment mode allows them to, and nobody else ever could.
func ListenGroup(path string, mode os.FileMode, gid int) (net.Listener, error) {
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	return listenUnix(path, mode, gid)
}

// listenUnix binds the socket inside a fresh owner-only directory next to
// path, restricts it to mode there, and only then links it to
// path. A bind directly at path followed by a chmod would leave a window
// in which the socket exists with the umask's mode; a process-wide umask
// change would race every other goroutine creating files. link, unlike
// rename, fails instead of replacing a file created at path meanwhile.
func listenUnix(path string, mode os.FileMode, gid int) (net.Listener, error) {
	// Clients connect by path, so it must fit in a socket address itself.
	if len(path) > maxUnixPathBytes {
		return nil, fmt.Errorf("socket path %s is too long: a socket address holds at most %d bytes", path, maxUnixPathBytes)
	}
	private, err := os.MkdirTemp(filepath.Dir(path), ".s")
	if err != nil {
		return nil, fmt.Errorf("create a private directory for socket %s: %w", path, err)
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, "s")
	if len(tmp) > maxUnixPathBytes {
		return nil, fmt.Errorf("socket path %s is too long: it is first bound at %s, longer than the %d bytes a socket address holds",
			path, tmp, maxUnixPathBytes)
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on unix://%s: %w", path, err)
	}
	// The temporary name is gone once linked; Close removes path instead.
	ul.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		ul.Close()
		return nil, err
	}
	if gid >= 0 {
		if err := os.Chown(tmp, -1, gid); err != nil {
			return fail(fmt.Errorf("give socket %s to group %d: %w (the server's user must be root or a member of the group)", path, gid, err))
		}
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(fmt.Errorf("restrict permissions of socket %s: %w", path, err))
	}
	if err := os.Link(tmp, path); err != nil {
		return fail(fmt.Errorf("put socket in place at %s: %w", path, err))
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail(fmt.Errorf("inspect socket %s: %w", path, err))
	}
	return &unixListener{UnixListener: ul, addr: &net.UnixAddr{Name: path, Net: "unix"}, file: fi}, nil
}

// unixListener reports the socket's final path and removes it on Close.
type unixListener struct {
	*net.UnixListener
	addr *net.UnixAddr
	file os.FileInfo
	once sync.Once
}

func (l *unixListener) Addr() net.Addr { return l.addr }

// Close stops accepting and removes the socket file, unless something else
// has been put at the path since.
func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		if fi, statErr := os.Lstat(l.addr.Name); statErr == nil && os.SameFile(fi, l.file) {
			_ = os.Remove(l.addr.Name)
		}
	})
	return err
}

// removeStaleSocket deletes path when it is a socket nobody accepts on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return fmt.Errorf("%s: another server is listening on this socket", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}
