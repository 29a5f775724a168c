package stepctx

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/fnbridge/fnbridge/internal/unixsock"
)

// Environment variables through which a function process (and its
// children) find the context endpoint.
const (
	// EnvAddr is the endpoint: unix:///absolute/path or tcp://host:port.
	EnvAddr = "FNBRIDGE_CONTEXT"
	// EnvToken is the attempt's bearer token.
	EnvToken = "FNBRIDGE_CONTEXT_TOKEN"
	// EnvAfter is "<pid>:<k>": process pid has sent the run/start of its
	// attempt whose "ahead" is k without waiting for its answer, and runs
	// the step's function, which may start this process. A client in
	// another process names k in its preface (" after=<k>"), and the
	// endpoint serves that connection's requests only once it has served
	// that start, so a child's call is never journaled ahead of the step
	// it was started in (see "Pipelined steps").
	EnvAfter = "FNBRIDGE_CONTEXT_AFTER"
)

// ParseAddr splits an endpoint address into a net.Dial network and
// address: unix:///absolute/path gives ("unix", "/absolute/path"),
// tcp://host:port and a bare host:port give ("tcp", "host:port").
func ParseAddr(addr string) (network, address string, err error) {
	switch {
	case strings.HasPrefix(addr, "unix://"):
		p := strings.TrimPrefix(addr, "unix://")
		if !filepath.IsAbs(p) {
			return "", "", fmt.Errorf("context address %q: want unix:///absolute/path", addr)
		}
		return "unix", p, nil
	case strings.HasPrefix(addr, "tcp://"):
		addr = strings.TrimPrefix(addr, "tcp://")
	case strings.Contains(addr, "://"):
		return "", "", fmt.Errorf("context address %q: want unix:///path or tcp://host:port", addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", "", fmt.Errorf("context address %q: want unix:///path or tcp://host:port", addr)
	}
	return "tcp", net.JoinHostPort(host, port), nil
}

// Listen listens on an endpoint address (ParseAddr). A unix socket is
// accessible to its owner only (0600) from the moment it exists; a socket
// file left by an earlier process is replaced, one a live server still
// accepts on (another bridge given the same path) or any other file is an
// error.
func Listen(addr string) (net.Listener, error) {
	network, address, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	if network == "tcp" {
		return net.Listen(network, address)
	}
	l, err := unixsock.Listen(address, 0o600)
	if err != nil {
		return nil, fmt.Errorf("context socket: %w", err)
	}
	return l, nil
}

// URL is the address as the environment carries it (EnvAddr) for a
// listener returned by Listen.
func URL(l net.Listener) string {
	if l.Addr().Network() == "unix" {
		return "unix://" + l.Addr().String()
	}
	return "tcp://" + l.Addr().String()
}

// Environ is the environment entries a function process needs to reach
// attempt a through the endpoint at addr.
func Environ(addr string, a *Attempt) []string {
	return []string{EnvAddr + "=" + addr, EnvToken + "=" + a.Token()}
}
