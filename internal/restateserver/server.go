package restateserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Timeouts of the server's life cycle. Readiness covers a cold start on a
// loaded 2-core CI machine (about 2 s when idle); the stop grace covers the
// server's own orderly shutdown (about 1.5 s).
const (
	readyTimeout = 60 * time.Second
	stopGrace    = 15 * time.Second
	bindAttempts = 3
)

// Options configure a server. The zero value starts a plain server that
// negotiates service protocol v6 and sends unsigned requests.
type Options struct {
	// EnableProtocolV7 lets the server choose service protocol v7
	// (RESTATE_EXPERIMENTAL_ENABLE_PROTOCOL_V7); without it 1.7.12 uses v6.
	EnableProtocolV7 bool
	// IdentityPrivateKeyPEM is the path of an ed25519 PKCS#8 PEM private key;
	// when set the server signs every discovery and invocation request
	// (request identity v1).
	IdentityPrivateKeyPEM string
	// ExtraEnv entries ("KEY=value") are added last and so override the
	// defaults, e.g. RESTATE_LOG_FILTER=info or
	// RESTATE_DEFAULT_NUM_PARTITIONS=4.
	ExtraEnv []string
	// LogWriter also receives the server's stdout and stderr. The log is
	// always kept in the server's directory; [Start] prints its tail when
	// the test fails.
	LogWriter io.Writer
	// Binary is the restate-server executable; empty means the one
	// RESTATE_SERVER_BIN names.
	Binary string
	// Dir holds the server's data and log (a fresh base directory per start
	// attempt, so a node never sees another one's metadata). Empty means a
	// new short temporary directory that [Server.Close] removes; a given
	// Dir is the caller's and is left in place.
	Dir string
	// Ports, when set, are the loopback ports to bind instead of free ones
	// chosen at start: the nodes of a cluster must know each other's
	// fabric ports before any of them starts ([LaunchCluster]). A start
	// that loses one of them to another process is not retried here.
	Ports *Ports
}

// Ports are a server's loopback ports.
type Ports struct {
	Ingress, Admin, Fabric int
}

// Server is a running restate-server and its loopback ports.
type Server struct {
	bin     string
	opts    Options
	root    string // Dir, or the temporary directory Launch made
	ownRoot bool   // root was made by Launch and is removed by Close
	baseDir string
	logPath string
	ingress int
	admin   int
	fabric  int
	client  *http.Client

	mu   sync.Mutex
	proc *process // nil when stopped
}

// Launch starts restate-server on free loopback ports with a fresh base
// directory and waits until it is ready: admin /health, ingress
// /restate/health and the SQL query endpoint all answer 200. ctx bounds
// only the start; the server runs until [Server.Stop] or [Server.Close],
// which the caller owes. A start that lost a race for a port is retried on
// new ports.
func Launch(ctx context.Context, opts Options) (*Server, error) {
	return launch(ctx, opts, nil)
}

// launch is [Launch]; logf, when set, hears about retried port races.
func launch(ctx context.Context, opts Options, logf func(format string, args ...any)) (*Server, error) {
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = binaryFromEnv(); err != nil {
			return nil, fmt.Errorf("restateserver: %w", err)
		}
	}
	s := &Server{bin: bin, opts: opts, root: opts.Dir, client: &http.Client{Timeout: 30 * time.Second}}
	if s.root == "" {
		dir, err := shortTempDir()
		if err != nil {
			return nil, fmt.Errorf("restateserver: %w", err)
		}
		s.root, s.ownRoot = dir, true
	}
	var lastErr error
	for attempt := 1; attempt <= bindAttempts; attempt++ {
		if p := opts.Ports; p != nil {
			if attempt > 1 {
				break
			}
			s.ingress, s.admin, s.fabric = p.Ingress, p.Admin, p.Fabric
		} else {
			ports, err := freePorts(3)
			if err != nil {
				lastErr = err
				break
			}
			s.ingress, s.admin, s.fabric = ports[0], ports[1], ports[2]
		}
		// A fresh directory per attempt: a node that once started records
		// its advertised address in its metadata.
		s.baseDir = filepath.Join(s.root, "attempt-"+strconv.Itoa(attempt))
		s.logPath = filepath.Join(s.root, "restate-server-"+strconv.Itoa(attempt)+".log")
		if err := os.MkdirAll(s.baseDir, 0o755); err != nil {
			lastErr = err
			break
		}
		lastErr = s.start(ctx)
		if lastErr == nil {
			return s, nil
		}
		var se *startError
		if !errors.As(lastErr, &se) || !se.portRace {
			break
		}
		if logf != nil {
			logf("restateserver: attempt %d lost a port race, retrying: %v", attempt, se.err)
		}
	}
	return nil, errors.Join(fmt.Errorf("restateserver: start: %w", lastErr), s.removeDir())
}

// shortTempDir makes a server's root directory. The server binds unix
// sockets under its base directory (e.g. vm/ingress.sock), and a long path
// (such as t.TempDir's, derived from the test name) exceeds the 108-byte
// socket path limit.
func shortTempDir() (string, error) {
	parent := os.TempDir()
	if len(parent) > 40 {
		parent = "/tmp"
	}
	return os.MkdirTemp(parent, "rs-")
}

// IngressURL is the base URL of the HTTP ingress, e.g. http://127.0.0.1:PORT.
func (s *Server) IngressURL() string { return "http://127.0.0.1:" + strconv.Itoa(s.ingress) }

// AdminURL is the base URL of the admin API.
func (s *Server) AdminURL() string { return "http://127.0.0.1:" + strconv.Itoa(s.admin) }

// BaseDir is the server's data directory (kept across [Server.Restart]).
func (s *Server) BaseDir() string { return s.baseDir }

// Relaunch stops the server (as [Server.Stop], whose error it drops: call
// Stop first to see it) and starts it again on the same ports and base
// directory, so registered deployments and journals survive. It waits
// until the server is ready, as [Launch] does.
func (s *Server) Relaunch(ctx context.Context) error {
	_ = s.Stop()
	return s.start(ctx)
}

// Stop terminates the server's process group (TERM, then KILL after a
// grace period) and reaps it. It is idempotent; the error reports a server
// that had to be killed or whose group could not be signalled.
func (s *Server) Stop() error {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop(stopGrace)
}

// Kill SIGKILLs the server's process group at once (a crash: nothing of
// its orderly shutdown runs) and reaps it; [Server.Relaunch] starts it
// again on the same ports and base directory. Killing a stopped server
// does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// Close stops the server for good: [Server.Stop], then the removal of the
// temporary directory Launch made (a given [Options.Dir] stays).
func (s *Server) Close() error {
	return errors.Join(s.Stop(), s.removeDir())
}

func (s *Server) removeDir() error {
	if !s.ownRoot {
		return nil
	}
	if err := os.RemoveAll(s.root); err != nil {
		return fmt.Errorf("restateserver: remove %s: %w", s.root, err)
	}
	return nil
}

// PID is the server's process id (0 when stopped), for reading its CPU
// time from /proc.
func (s *Server) PID() int { return s.Pgid() }

// Pgid is the process group of the running server (0 when stopped); tests
// use it to check that nothing of the server is left. The server leads its
// group, so this is also its [Server.PID].
func (s *Server) Pgid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pgid
}

func (s *Server) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		// Inherited RESTATE_* variables (RESTATE_SERVER_BIN, a developer's
		// own settings) would be read as server configuration; TMPDIR is
		// set below.
		if !strings.HasPrefix(kv, "RESTATE_") && !strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	fabric := "127.0.0.1:" + strconv.Itoa(s.fabric)
	env = append(env,
		// The invoker makes a directory per partition in the system's
		// temporary directory and leaves it there: keep them in the
		// server's own directory, which goes with it.
		"TMPDIR="+s.tmpDir(),
		"RESTATE_DISABLE_TELEMETRY=true",
		"RESTATE_LOG_FILTER=warn",
		"RESTATE_LOG_DISABLE_ANSI_CODES=true",
		"RESTATE_INGRESS__BIND_ADDRESS=127.0.0.1:"+strconv.Itoa(s.ingress),
		"RESTATE_ADMIN__BIND_ADDRESS=127.0.0.1:"+strconv.Itoa(s.admin),
		"RESTATE_BIND_ADDRESS="+fabric,
		"RESTATE_ADVERTISED_ADDRESS=http://"+fabric,
	)
	if s.opts.EnableProtocolV7 {
		env = append(env, "RESTATE_EXPERIMENTAL_ENABLE_PROTOCOL_V7=true")
	}
	if s.opts.IdentityPrivateKeyPEM != "" {
		env = append(env, "RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE="+s.opts.IdentityPrivateKeyPEM)
	}
	return append(env, s.opts.ExtraEnv...)
}

// tmpDir is the server's temporary directory: beside its base directory,
// whose subdirectories the server takes for nodes' data.
func (s *Server) tmpDir() string { return filepath.Join(s.root, "tmp") }

// startError is a start that did not become ready, with the tail of the
// server's log; portRace marks one that lost a port to another process.
type startError struct {
	err      error
	tail     string
	portRace bool
}

func (e *startError) Error() string {
	return fmt.Sprintf("%v\n--- restate-server log tail ---\n%s", e.err, e.tail)
}

func (e *startError) Unwrap() error { return e.err }

// start starts one server process and waits for readiness.
func (s *Server) start(ctx context.Context) error {
	if err := os.MkdirAll(s.tmpDir(), 0o700); err != nil {
		return err
	}
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	var out io.Writer = logFile
	if s.opts.LogWriter != nil {
		out = io.MultiWriter(logFile, s.opts.LogWriter)
	}
	p, err := startProcess(s.bin, []string{"--no-logo", "--base-dir", s.baseDir}, s.env(), out, logFile)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := s.waitReady(ctx, p); err != nil {
		_ = s.Stop()
		log := s.logTail(40)
		race := strings.Contains(strings.ToLower(log), "address already in use") || strings.Contains(log, "os error 98")
		return &startError{err: err, tail: log, portRace: race}
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context, p *process) error {
	probes := []func(context.Context) error{
		func(ctx context.Context) error { return s.expect200(ctx, http.MethodGet, s.AdminURL()+"/health") },
		func(ctx context.Context) error {
			return s.expect200(ctx, http.MethodGet, s.IngressURL()+"/restate/health")
		},
		// The SQL endpoint answers only once the partitions have leaders,
		// which is also when invocations can be processed.
		func(ctx context.Context) error {
			_, err := s.Query(ctx, "SELECT id FROM sys_invocation LIMIT 1")
			return err
		},
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for _, probe := range probes {
		for {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			last = probe(pctx)
			cancel()
			if last == nil {
				break
			}
			select {
			case <-p.done:
				return fmt.Errorf("restate-server exited before it was ready: %v (last probe: %v)", p.exitErr(), last)
			case <-ctx.Done():
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					return fmt.Errorf("restate-server not ready within %s: %v", readyTimeout, last)
				}
				return fmt.Errorf("restate-server start: %w (last probe: %v)", ctx.Err(), last)
			case <-tick.C:
			}
		}
	}
	return nil
}

func (s *Server) expect200(ctx context.Context, method, url string) error {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: status %d", method, url, resp.StatusCode)
	}
	return nil
}

func (s *Server) logTail(lines int) string { return LogTail(s.logPath, lines) }

// LogTail returns the last n lines of the log file at path, for a failure
// message; the e2e harness uses it for the bridge's logs too.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > n {
		all = all[len(all)-n:]
	}
	return strings.Join(all, "\n")
}
