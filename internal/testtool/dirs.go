package testtool

import (
	"net"
	"os"
	"testing"
)

// SocketDir returns a new directory with a short path, removed when the
// test ends, for unix sockets: t.TempDir's paths can pass the 108 bytes a
// socket's path may have.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fnb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// FreeAddr returns a loopback TCP address no one listened on a moment
// ago. Another process may take it before the test listens there: use it
// only for a listener the test starts at once.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
