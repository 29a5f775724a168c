package functionruntime

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// UnixSocketMode is the permission of a Unix socket created by Listen: only
// the owner may connect, because the Runtime Server does not authenticate
// callers and relies on being reachable only by runtimed.
const UnixSocketMode os.FileMode = 0o600

// Listen opens the listener for a server address: "host:port" for TCP, or
// "unix:///absolute/path" (also "unix:relative/path") for a Unix socket. A
// stale socket file left by a dead server is removed first; a socket some
// live server still accepts on is an error, and so is any other file at
// the path.
func Listen(address string) (net.Listener, error) {
	path, isUnix := unixPath(address)
	if !isUnix {
		if address == "" {
			return nil, errors.New("listen address is empty: want host:port or unix:///path")
		}
		lis, err := net.Listen("tcp", address)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", address, err)
		}
		return lis, nil
	}
	if path == "" {
		return nil, fmt.Errorf("listen address %q names no socket path", address)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", address, err)
	}
	if err := os.Chmod(path, UnixSocketMode); err != nil {
		lis.Close()
		return nil, fmt.Errorf("restrict permissions of %s: %w", path, err)
	}
	return lis, nil
}

// unixPath extracts the socket path from a unix: address.
func unixPath(address string) (string, bool) {
	switch {
	case strings.HasPrefix(address, "unix://"):
		return strings.TrimPrefix(address, "unix://"), true
	case strings.HasPrefix(address, "unix:"):
		return strings.TrimPrefix(address, "unix:"), true
	}
	return "", false
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
