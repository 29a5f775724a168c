package restateserver

import (
	"context"
	"os"
	"testing"
	"time"
)

// This file is the testing.TB layer over [Launch] and [LaunchCluster]: a missing binary skips
// or fails the test, a server that cannot start fails it, and the test's
// cleanup stops the server, prints its log tail when the test failed and
// removes its directory, so no restate-server outlives its test.

// Binary returns the restate-server path from RESTATE_SERVER_BIN. When it is
// unset or not an executable file the test fails under CI (CI=true, where
// the tool must be installed) and is skipped elsewhere.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := binaryFromEnv()
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("restate-server is required in CI: %v (run `make tools`)", err)
		return ""
	}
	t.Skipf("skipping: restate-server not available: %v (run `make tools` and export %s, or use `make test`)", err, BinaryEnv)
	return ""
}

// Start is [Launch] for a test: it skips or fails the test as [Binary] does
// when the binary is missing (unless opts.Binary names one), fails the
// test when the server cannot start, and registers a cleanup that stops
// the server, prints its log tail if the test failed, and removes the
// temporary directory.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Binary == "" {
		opts.Binary = Binary(t)
	}
	s, err := launch(context.Background(), opts, t.Logf)
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	t.Cleanup(func() {
		start := time.Now()
		// Being killed after the grace period is not a test failure: the
		// process group is gone and reaped either way.
		if err := s.Stop(); err != nil {
			t.Logf("restateserver: stop: %v", err)
		} else if d := time.Since(start); d > 5*time.Second {
			t.Logf("restateserver: graceful stop took %s", d.Round(time.Millisecond))
		}
		if t.Failed() {
			t.Logf("restate-server log tail (%s):\n%s", s.logPath, s.logTail(100))
		}
		if err := s.removeDir(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return s
}

// Restart is [Server.Relaunch] for a test: a stop that had to kill the
// server is logged, a server that does not come back fails t.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.Stop(); err != nil {
		t.Logf("restateserver: restart: stop: %v", err)
	}
	if err := s.Relaunch(context.Background()); err != nil {
		t.Fatalf("restateserver: restart: %v", err)
	}
}

// Register registers the deployment at uri (POST /deployments with force,
// so a re-registration replaces it) and returns the admin API's answer
// (deployment id, services). It fails t with the server's message otherwise.
func (s *Server) Register(t testing.TB, uri string, useHTTP11 bool) []byte {
	t.Helper()
	body, err := s.TryRegister(context.Background(), uri, useHTTP11)
	if err != nil {
		t.Fatalf("restateserver: register %s: %v", uri, err)
	}
	return body
}

// StartCluster is [LaunchCluster] for a test, as [Start] is for one
// server: the binary is required like [Binary] does (unless opts.Node.Binary
// names one), a cluster that cannot start fails t, and the test's cleanup
// stops every node, prints each node's log tail when the test failed, and
// removes the directory.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if opts.Node.Binary == "" {
		opts.Node.Binary = Binary(t)
	}
	c, err := launchCluster(context.Background(), opts, t.Logf)
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	t.Cleanup(func() {
		start := time.Now()
		for i, n := range c.Nodes {
			if err := n.Stop(); err != nil {
				t.Logf("restateserver: stop node n%d: %v", i+1, err)
			}
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Logf("restateserver: stopping the cluster took %s", d.Round(time.Millisecond))
		}
		if t.Failed() {
			for i, n := range c.Nodes {
				t.Logf("restate-server node n%d log tail (%s):\n%s", i+1, n.logPath, n.logTail(60))
			}
		}
		if err := os.RemoveAll(c.root); err != nil {
			t.Errorf("restateserver: remove %s: %v", c.root, err)
		}
	})
	return c
}
