package functionruntime

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/internal/unixsock"
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
	if err := CheckListenAddress(address); err != nil {
		return nil, err
	}
	path, isUnix := unixPath(address)
	if !isUnix {
		lis, err := net.Listen("tcp", address)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", address, err)
		}
		return lis, nil
	}
	return unixsock.Listen(path, UnixSocketMode)
}

// UnixSocketGroupMode is the permission of a Unix socket ListenGroup
// creates: its owner and its group may connect.
const UnixSocketGroupMode os.FileMode = 0o660

// ListenGroup is Listen for a unix: address whose socket the members of
// group (a name or a numeric id) may connect to as well: mode 0660, that
// group. It lets a bridge running as another user reach a runtime that
// runs functions as its own user. A TCP address is an error: its callers
// are not users the socket's permissions could pick.
func ListenGroup(address, group string) (net.Listener, error) {
	if err := CheckListenAddress(address); err != nil {
		return nil, err
	}
	path, isUnix := unixPath(address)
	if !isUnix {
		return nil, fmt.Errorf("a socket group applies to a unix:///path address, not %q", address)
	}
	gid, err := LookupGroup(group)
	if err != nil {
		return nil, err
	}
	return unixsock.ListenGroup(path, UnixSocketGroupMode, gid)
}

// LookupGroup resolves a group name to its id; a number is an id as it
// is, listed in the group database or not (a container's fsGroup or
// supplemental group seldom is).
func LookupGroup(group string) (int, error) {
	if group == "" {
		return 0, errors.New("the socket group is empty: want a group name or id")
	}
	if gid, err := strconv.Atoi(group); err == nil {
		if gid < 0 {
			return 0, fmt.Errorf("group id %d is negative", gid)
		}
		return gid, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("no group %q on this machine (want a group name or id)", group)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0, fmt.Errorf("group %q has the id %q, which is not a number", group, g.Gid)
	}
	return gid, nil
}

// CheckListenAddress reports what is wrong with the form of a listen
// address, before anything is bound: a command line can then tell a
// mistake in it (exit 2) from an address it could not bind.
func CheckListenAddress(address string) error {
	path, isUnix := unixPath(address)
	if !isUnix {
		if address == "" {
			return errors.New("listen address is empty: want host:port or unix:///path")
		}
		_, port, err := net.SplitHostPort(address)
		if err != nil {
			return fmt.Errorf("listen address %q is not host:port or unix:///path: %v", address, err)
		}
		if n, err := strconv.Atoi(port); err == nil && (n < 0 || n > 65535) {
			return fmt.Errorf("listen address %q: port %d is not from 0 to 65535", address, n)
		} else if err != nil {
			if _, err := net.LookupPort("tcp", port); err != nil {
				return fmt.Errorf("listen address %q: port %q is neither a number from 0 to 65535 nor a known service name", address, port)
			}
		}
		return nil
	}
	if path == "" {
		return fmt.Errorf("listen address %q names no socket path", address)
	}
	if strings.HasPrefix(path, "@") {
		return fmt.Errorf("listen address %q is an abstract socket, which has no permissions: use a socket path", address)
	}
	if rest, ok := strings.CutPrefix(address, "unix://"); ok && !strings.HasPrefix(rest, "/") {
		// gRPC's naming, which the bridge's runtimes: setting follows: a
		// path after unix:// is absolute; unix:path may be relative.
		return fmt.Errorf("listen address %q: a path after unix:// must be absolute (unix:///run/x.sock); write unix:%s for one relative to the working directory", address, rest)
	}
	return nil
}

// WarnIfExposed logs one warning when addr is a TCP address that is not
// loopback, and reports whether it did. The server authenticates no
// caller: the contract makes it Pod-local, so whoever can connect can run
// handlers and read their results.
func WarnIfExposed(log zerolog.Logger, addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsLoopback() {
		return false
	}
	log.Warn().Str("listen", addr.String()).Msg("the FunctionRuntime server authenticates no caller and listens on a non-loopback address, so anyone who can reach it can run handlers: listen on 127.0.0.1:port or unix:///path, or let only runtimed connect with a network policy")
	return true
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
