package restateserver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/restate"
)

// echoDeployment serves a Restate deployment in process (service Echo,
// handler echo) and returns its URI.
func echoDeployment(t *testing.T) string {
	t.Helper()
	ep := restate.NewEndpoint(restate.Config{})
	if err := ep.Bind(restate.Service{Name: "Echo", Handlers: []restate.Handler{{Name: "echo", Fn: func(_ restate.Context, in []byte) ([]byte, error) {
		return in, nil
	}}}}); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := restate.NewHTTPServer("", ep)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + lis.Addr().String()
}

// callWithin calls Echo/echo through node until it answers 200 with the
// input, for at most d (a node takes over the partitions of a dead one).
func callWithin(t *testing.T, node *restateserver.Server, body string, d time.Duration) {
	t.Helper()
	var last error
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		status, out, err := node.Call(ctx, "Echo", "echo", []byte(body), nil)
		cancel()
		if err == nil && status == http.StatusOK && string(out) == body {
			return
		}
		last = errors.Join(err, fmt.Errorf("status %d: %s", status, out))
	}
	t.Fatalf("call through %s: no answer within %s: %v", node.IngressURL(), d, last)
}

// The facts the cluster tests rely on: three nodes with replication 2
// start on loopback, a deployment registered through one node's admin is
// invoked through every node's ingress, the two others keep serving with
// one node SIGKILLed, and the killed node, restarted on its ports and base
// directory, serves again.
func TestClusterServesThroughEveryNodeAndSurvivesOne(t *testing.T) {
	c := restateserver.StartCluster(t, restateserver.ClusterOptions{})
	if len(c.Nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(c.Nodes))
	}
	uri := echoDeployment(t)
	c.Nodes[0].Register(t, uri, false)
	for i, n := range c.Nodes {
		var known bool
		for deadline := time.Now().Add(30 * time.Second); !known && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			known, _ = n.KnowsService(context.Background(), "Echo")
		}
		if !known {
			t.Fatalf("node n%d does not know the service registered through n1", i+1)
		}
		if ok, err := n.KnowsService(context.Background(), "Nope"); ok || err != nil {
			t.Fatalf("node n%d: KnowsService(Nope) = %v, %v", i+1, ok, err)
		}
	}
	for i, n := range c.Nodes {
		callWithin(t, n, fmt.Sprintf(`{"via":%d}`, i), 30*time.Second)
	}
	killed := c.Nodes[1]
	pgid := killed.Pgid()
	killed.Kill()
	if !groupGone(pgid) {
		t.Fatalf("node n2's group %d survived Kill", pgid)
	}
	killedAt := time.Now()
	for i, n := range []*restateserver.Server{c.Nodes[0], c.Nodes[2]} {
		for k := range 5 {
			callWithin(t, n, fmt.Sprintf(`{"survivor":%d,"k":%d}`, i, k), 60*time.Second)
		}
	}
	// The survivors took over the dead node's partitions, and say so: the
	// calls above need not have reached one of them, so the takeover may
	// still be under way.
	took := 0
	for deadline := time.Now().Add(30 * time.Second); took == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, n := range []*restateserver.Server{c.Nodes[0], c.Nodes[2]} {
			changes, err := n.LeaderChanges()
			if err != nil {
				t.Fatal(err)
			}
			for _, at := range changes {
				if at.After(killedAt.Add(-time.Second)) {
					took++
				}
			}
		}
	}
	if took == 0 {
		t.Error("no surviving node logged taking over a partition after n2 was killed")
	}
	if err := killed.Relaunch(context.Background()); err != nil {
		t.Fatal(err)
	}
	callWithin(t, killed, `{"back":true}`, 60*time.Second)
}
