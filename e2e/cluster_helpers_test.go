package e2e

// The parts of the cluster run (cluster_test.go) that are not the chaos
// run's: HAProxy in front of the bridge replicas, its view of them, and
// the figures only a cluster has (per-replica share, recovery times).

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
)

// requireHAProxy returns the haproxy program: $HAPROXY_BIN when set, else
// haproxy from PATH (`make haproxy`, which `make test` runs, installs Debian's package). Missing, the
// test skips, and fails under CI=true, as testtool.Require does.
func requireHAProxy(t testing.TB) string {
	t.Helper()
	const why = "to balance restate-server's connections over the bridge replicas (make tools installs it)"
	if os.Getenv("HAPROXY_BIN") != "" {
		return testtool.Require(t, "HAPROXY_BIN", "haproxy", why)
	}
	return testtool.Require(t, "", "haproxy", why)
}

// haproxy is HAProxy in TCP mode in front of the bridge replicas, as a
// Kubernetes Service is: restate-server's h2c connections pass through
// whole, each to the replica with the fewest, and a replica whose
// /health/ready fails (a drain) or that does not answer (a crash) gets no
// new connection. A connection refused by a dead replica is redispatched
// to another one. Its stats page tells which replicas it sees up.
type haproxy struct {
	*bridgeChild
	addr, stats string
	servers     []string // r1, r2, ... in backend order
}

// haproxyCheckEvery is how often HAProxy probes each replica's readiness;
// one failed probe takes it out, one good probe brings it back.
const haproxyCheckEvery = 250 * time.Millisecond

// startHAProxy starts HAProxy for the replicas at backends (host:port) and
// waits until its stats page answers.
func startHAProxy(t *testing.T, backends []string) *haproxy {
	t.Helper()
	bin := requireHAProxy(t)
	dir := t.TempDir()
	h := &haproxy{addr: testtool.FreeAddr(t), stats: testtool.FreeAddr(t)}
	var b strings.Builder
	fmt.Fprintf(&b, `global
  maxconn 4096
defaults
  mode tcp
  timeout connect 1s
  timeout check 1s
  # restate-server keeps its h2c connections open and the bridge pings idle
  # ones every minute: longer than that, so only dead peers time out.
  timeout client 10m
  timeout server 10m
  retries 3
  option redispatch 1
frontend bridges
  bind %s
  default_backend replicas
backend replicas
  balance leastconn
  option httpchk
  http-check send meth GET uri /health/ready ver HTTP/1.1 hdr Host replica
  http-check expect status 200
  default-server inter %dms fall 1 rise 1
`, h.addr, haproxyCheckEvery.Milliseconds())
	for i, be := range backends {
		name := fmt.Sprintf("r%d", i+1)
		h.servers = append(h.servers, name)
		fmt.Fprintf(&b, "  server %s %s check\n", name, be)
	}
	fmt.Fprintf(&b, "listen stats\n  mode http\n  bind %s\n  stats enable\n  stats uri /stats\n", h.stats)
	cfg := filepath.Join(dir, "haproxy.cfg")
	writeFile(t, cfg, b.String())
	h.bridgeChild = newBridgeChild(t, dir, func() error { _, err := h.serverStats(); return err }, "-db", "-f", cfg)
	h.bridgeChild.bin = bin
	h.start()
	return h
}

// URI is the deployment address to register: HAProxy's, once for all
// replicas.
func (h *haproxy) URI() string { return "http://" + h.addr }

// haproxyServer is HAProxy's view of one replica.
type haproxyServer struct {
	status   string // UP, DOWN, ...
	current  int    // connections now
	sessions int    // connections since HAProxy started
}

// serverStats reads the backend's servers from the stats page (CSV).
func (h *haproxy) serverStats() (map[string]haproxyServer, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + h.stats + "/stats;csv")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("stats: HTTP %d", resp.StatusCode)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	rows, err := csv.NewReader(strings.NewReader(strings.TrimPrefix(string(body), "# "))).ReadAll()
	if err != nil || len(rows) < 1 {
		return nil, fmt.Errorf("stats CSV: %v", err)
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	out := map[string]haproxyServer{}
	for _, row := range rows[1:] {
		if len(row) <= col["status"] || row[col["pxname"]] != "replicas" || row[col["svname"]] == "BACKEND" {
			continue
		}
		cur, _ := strconv.Atoi(row[col["scur"]])
		tot, _ := strconv.Atoi(row[col["stot"]])
		out[row[col["svname"]]] = haproxyServer{status: row[col["status"]], current: cur, sessions: tot}
	}
	return out, nil
}

// waitUp waits at most timeout until HAProxy sees server up; ok is false
// if it did not.
func (h *haproxy) waitUp(server string, timeout time.Duration) bool {
	return testtool.Poll(timeout, func() bool {
		st, err := h.serverStats()
		return err == nil && st[server].status == "UP"
	})
}

// replicaShares counts, per replica, the invocation attempts that ended
// with the invocation's output ("invocation" log records with outcome ok,
// every incarnation's), i.e. the invocations that replica completed.
func replicaShares(replicas []*bridgeServe) []int {
	out := make([]int, len(replicas))
	for i, b := range replicas {
		for _, rec := range invocationRecords(b.bridgeChild) {
			if rec["outcome"] == "ok" {
				out[i]++
			}
		}
	}
	return out
}

// knowsServices waits at most timeout until node's admin knows every one
// of services (a registration made through another node reaches it a
// moment later; until then its ingress answers 404).
func knowsServices(node *restateserver.Server, timeout time.Duration, services ...string) bool {
	return testtool.Poll(timeout, func() bool {
		for _, svc := range services {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ok, err := node.KnowsService(ctx, svc)
			cancel()
			if !ok || err != nil {
				return false
			}
		}
		return true
	})
}

// throughputLow is the lowest rate of completions over 1 s windows in the
// 10 s after at, as a fraction of their rate in the 5 s before at
// (startAt and doneAt hold every invocation's first call and completion,
// UnixNano). Only windows that end before the last invocation started
// count: from then on fewer calls are in flight. ok is false when there
// was no throughput before at to compare with.
func throughputLow(startAt, doneAt []int64, at time.Time) (lowest float64, ok bool) {
	ts := append([]int64(nil), doneAt...)
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	count := func(from, to int64) float64 {
		return float64(sort.Search(len(ts), func(i int) bool { return ts[i] >= to }) - sort.Search(len(ts), func(i int) bool { return ts[i] >= from }))
	}
	const window, before, after, step = time.Second, 5 * time.Second, 10 * time.Second, 50 * time.Millisecond
	t0 := at.UnixNano()
	pre := count(t0-int64(before), t0) / before.Seconds() * window.Seconds()
	if pre == 0 {
		return 0, false
	}
	end := slices.Max(startAt)
	lowest = math.Inf(1)
	for d := time.Duration(0); d <= after && t0+int64(d+window) <= end; d += step {
		lowest = math.Min(lowest, count(t0+int64(d), t0+int64(d+window))/pre)
	}
	return lowest, !math.IsInf(lowest, 1)
}

// inFlightAt counts the invocations whose client call had started but not
// returned at at, and how long after at the last of them returned.
func inFlightAt(startAt, doneAt []int64, at time.Time) (n int, last time.Duration) {
	t0 := at.UnixNano()
	for i := range startAt {
		if startAt[i] != 0 && startAt[i] <= t0 && doneAt[i] > t0 {
			n++
			last = max(last, time.Duration(doneAt[i]-t0))
		}
	}
	return n, last
}

// clusterRecovery is one fault of the cluster run and how it was
// recovered from.
type clusterRecovery struct {
	fault string
	at    time.Time
	// back: the faulted part serving again (HAProxy sees the replica up;
	// the node is ready and knows the services), measured from at; what
	// names it.
	back time.Duration
	what string
}

func (c clusterRecovery) String(startAt, doneAt []int64) string {
	n, last := inFlightAt(startAt, doneAt, c.at)
	out := fmt.Sprintf("%s\n        %d invocations in flight, the last done %s after it", c.fault, n, last.Round(10*time.Millisecond))
	if lowest, ok := throughputLow(startAt, doneAt, c.at); ok {
		out += fmt.Sprintf("; throughput at least %.0f%% of the rate before", 100*lowest)
	}
	if c.what != "" {
		out += fmt.Sprintf("; %s after %s", c.what, c.back.Round(10*time.Millisecond))
	}
	return out
}
