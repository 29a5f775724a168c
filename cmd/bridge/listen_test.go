package main

import (
	"strings"
	"testing"
)

// --listen is checked as the file's listen is, before anything starts: a
// port out of range is refused naming the flag, not left to net.Listen
// once the workers are up; what the file's listen may hold, it may hold.
func TestServeChecksListenFlagLikeTheFile(t *testing.T) {
	cases := []struct{ name, listen, want string }{
		{"port out of range", "127.0.0.1:99999", `--listen "127.0.0.1:99999" is not host:port: port "99999" is not a number from 0 to 65535`},
		{"no port", "nine", `--listen "nine" is not host:port: missing port in address`},
		{"unknown service name", "127.0.0.1:nosuchservice", `--listen "127.0.0.1:nosuchservice" is not host:port: port "nosuchservice" is neither a number from 0 to 65535 nor a known service name`},
		{"a free port", "127.0.0.1:", ""},
		{"a service name", "localhost:http", ""},
		{"IPv6 loopback", "[::1]:9080", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeServeConfig(t, "listen: 127.0.0.1:9080\n")
			for _, load := range []func() error{
				func() error { _, err := loadConfig(path, tc.listen); return err },
				func() error { _, err := loadServeConfig(path, tc.listen, ""); return err },
			} {
				err := load()
				if tc.want == "" {
					if err != nil {
						t.Fatalf("--listen %s refused: %v", tc.listen, err)
					}
					continue
				}
				if err == nil || err.Error() != tc.want {
					t.Fatalf("err = %v, want %s", err, tc.want)
				}
			}
		})
	}
	// The exposure rule still names the flag once the address is valid.
	if _, err := loadServeConfig(writeServeConfig(t, ""), "0.0.0.0:9080", ""); err == nil || !strings.Contains(err.Error(), "--listen 0.0.0.0:9080 is reachable") {
		t.Fatalf("err = %v, want the exposure refusal naming --listen", err)
	}
}
