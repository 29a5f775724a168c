package bridge

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"

	"github.com/fnbridge/fnbridge/restate/identity"
)

// IsLoopback reports whether a listen address (host:port) accepts
// connections from this machine only: 127.0.0.0/8, ::1 or localhost. An
// empty host, 0.0.0.0 and [::] listen on every interface; any other name is
// treated as reachable, since what it resolves to is not ours to know.
func IsLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// UnauthenticatedWarning is logged, as a warning with the listen address,
// whenever a bridge starts or reloads into serving unsigned requests on an
// address other machines can reach (CheckExposure's unsigned).
const UnauthenticatedWarning = "allow_unauthenticated: serving unsigned requests on an address other machines can reach; anyone who can connect can run these functions"

// CheckExposure refuses a configuration whose endpoint other machines can
// reach without identity keys, unless allow_unauthenticated says so: such a
// bridge runs functions for anyone who can connect, bypassing
// restate-server. source names where Listen came from ("listen" or
// "--listen"). unsigned is true when the endpoint is reachable and accepts
// unsigned requests (allowed), so the caller can warn.
func (c *Config) CheckExposure(source string) (unsigned bool, err error) {
	if len(c.IdentityKeys) > 0 || IsLoopback(c.Listen) {
		return false, nil
	}
	if c.AllowUnauthenticated {
		return true, nil
	}
	return false, fmt.Errorf("%s %s is reachable from other machines and identity_keys is empty, "+
		"so anyone who can connect could run these functions without going through restate-server. "+
		"Make restate-server sign its requests: run `bridge keygen --out restate-identity.pem`, start restate-server with "+
		"RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE=restate-identity.pem, and put the printed publickeyv1_ key "+
		"in identity_keys (or pass --identity-keys-file restate-identity.pem.pub). "+
		"To accept unsigned requests on this address anyway, set allow_unauthenticated: true; to stay local, listen on 127.0.0.1",
		source, c.Listen)
}

// ReadIdentityKeys reads the publickeyv1_ keys of a file, one per line, as
// `bridge keygen` writes them; blank lines and lines starting with # are
// skipped. Errors start with the file (and line); the caller names what
// the file is.
func ReadIdentityKeys(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s does not exist: write it with `bridge keygen --out FILE` (it writes FILE.pub) and give restate-server FILE", path)
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is named once
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var keys []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, err := identity.ParseKey(line); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, n, err)
		}
		keys = append(keys, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no publickeyv1_ key (write one with `bridge keygen`)", path)
	}
	return keys, nil
}
