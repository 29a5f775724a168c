package restateserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A cluster is several restate-server nodes on loopback that form one
// Restate cluster with a replicated log and metadata: every node has its
// own ports and base directory, one node provisions the cluster, and every
// node's metadata client lists all the nodes' fabric addresses. Each node
// is a [Server] started by the same core as a single server ([Launch]),
// so it is owned, probed for readiness, killed and restarted the same way.

// ClusterOptions configure a cluster.
type ClusterOptions struct {
	// Nodes is the number of nodes (default 3).
	Nodes int
	// Replication is the default replication of logs and partitions
	// (RESTATE_DEFAULT_REPLICATION; default 2), so the cluster keeps
	// serving with one node down.
	Replication int
	// Node is every node's base: protocol v7, the signing key, ExtraEnv
	// (added after the cluster's own settings, so it overrides them),
	// LogWriter and Binary apply to each; Dir and Ports are the cluster's.
	Node Options
}

// Cluster is a running restate-server cluster.
type Cluster struct {
	// Nodes are the cluster's nodes, n1 (the one that provisioned it)
	// first. Each serves ingress and admin: kill and restart one with
	// [Server.Kill] and [Server.Relaunch].
	Nodes []*Server
	Name  string // RESTATE_CLUSTER_NAME
	root  string
}

// LaunchCluster starts the nodes of a cluster at once (none becomes ready
// without the others) and waits until every one is ready as [Launch]
// defines it. ctx bounds only the start; the caller owes [Cluster.Close].
// A start that lost a port race is retried on new ports.
func LaunchCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	return launchCluster(ctx, opts, nil)
}

func launchCluster(ctx context.Context, opts ClusterOptions, logf func(format string, args ...any)) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Replication == 0 {
		opts.Replication = 2
	}
	if opts.Nodes < opts.Replication || opts.Replication < 1 {
		return nil, fmt.Errorf("restateserver: a cluster of %d nodes cannot replicate %d times", opts.Nodes, opts.Replication)
	}
	root, err := shortTempDir()
	if err != nil {
		return nil, fmt.Errorf("restateserver: %w", err)
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	c := &Cluster{Name: "fnbridge-" + hex.EncodeToString(id[:]), root: root}
	var lastErr error
	for attempt := 1; attempt <= bindAttempts; attempt++ {
		var race bool
		if race, lastErr = c.start(ctx, opts, filepath.Join(root, "attempt-"+strconv.Itoa(attempt))); lastErr == nil {
			return c, nil
		}
		if !race {
			break
		}
		if logf != nil {
			logf("restateserver: cluster attempt %d lost a port race, retrying: %v", attempt, lastErr)
		}
	}
	return nil, errors.Join(fmt.Errorf("restateserver: cluster start: %w", lastErr), os.RemoveAll(root))
}

// start chooses every node's ports, then starts all nodes together; when
// one fails the others are stopped (race: a node lost a port).
func (c *Cluster) start(ctx context.Context, opts ClusterOptions, dir string) (race bool, err error) {
	ports, err := freePorts(3 * opts.Nodes)
	if err != nil {
		return false, err
	}
	fabric := make([]string, opts.Nodes)
	for i := range opts.Nodes {
		fabric[i] = `"http://127.0.0.1:` + strconv.Itoa(ports[3*i+2]) + `"`
	}
	metadata := "[" + strings.Join(fabric, ",") + "]"

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodes := make([]*Server, opts.Nodes)
	errs := make([]error, opts.Nodes)
	var wg sync.WaitGroup
	for i := range opts.Nodes {
		no := opts.Node
		no.Dir = filepath.Join(dir, "n"+strconv.Itoa(i+1))
		no.Ports = &Ports{Ingress: ports[3*i], Admin: ports[3*i+1], Fabric: ports[3*i+2]}
		no.ExtraEnv = append([]string{
			// Warnings, and which partitions a node leads (LeaderChanges).
			"RESTATE_LOG_FILTER=warn," + leadershipTarget + "=info",
			"RESTATE_NODE_NAME=n" + strconv.Itoa(i+1),
			"RESTATE_CLUSTER_NAME=" + c.Name,
			// One node provisions the cluster; the others join it.
			"RESTATE_AUTO_PROVISION=" + strconv.FormatBool(i == 0),
			"RESTATE_DEFAULT_REPLICATION=" + strconv.Itoa(opts.Replication),
			"RESTATE_METADATA_CLIENT__ADDRESSES=" + metadata,
		}, opts.Node.ExtraEnv...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = launch(ctx, no, nil)
			if errs[i] != nil {
				cancel() // the others cannot form a cluster without it
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, n := range nodes {
			if n != nil {
				_ = n.Stop()
			}
		}
		for _, e := range errs {
			var se *startError
			race = race || errors.As(e, &se) && se.portRace
		}
		return race, err
	}
	c.Nodes = nodes
	return false, nil
}

// Close stops every node (TERM, then KILL after the grace period) and
// removes the cluster's directory.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Stop())
	}
	if err := os.RemoveAll(c.root); err != nil {
		errs = append(errs, fmt.Errorf("restateserver: remove %s: %w", c.root, err))
	}
	return errors.Join(errs...)
}

// leadershipTarget is the restate-server 1.7 log target of partition
// leadership: "Processor became Leader of epoch eN" when a node takes a
// partition over.
const leadershipTarget = "restate_worker::partition::leadership"

// leaderHeader is the first line of a leadership record in the log; its
// message follows on the next line.
var leaderHeader = regexp.MustCompile(`^(\S+Z) INFO ` + regexp.QuoteMeta(leadershipTarget) + `$`)

// LeaderChanges lists when this node became the leader of a partition, as
// its log tells (a cluster node logs it; [Launch] alone does not). A new
// leader re-invokes what its partition had in flight, so tests attribute
// re-executions no fault of theirs explains to these moments: restate-
// server moves partitions on its own, after a start and when a node
// rejoins.
func (s *Server) LeaderChanges() ([]time.Time, error) {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return nil, fmt.Errorf("restateserver: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	var out []time.Time
	for i := 0; i+1 < len(lines); i++ {
		m := leaderHeader.FindStringSubmatch(lines[i])
		if m == nil || !strings.Contains(lines[i+1], "became Leader") {
			continue
		}
		if at, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
			out = append(out, at)
		}
	}
	return out, nil
}
