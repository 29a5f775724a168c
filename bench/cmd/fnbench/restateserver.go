package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// restateServer is a restate-server the benchmark owns. The test harness in
// internal/restateserver is bound to a testing.TB, so this is the small
// stand-alone equivalent: loopback ports, a fresh base directory, the same
// readiness probes.
type restateServer struct {
	proc           *child
	ingress, admin string // base URLs
}

func startRestateServer(ctx context.Context, bin, dir string) (*restateServer, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	base := filepath.Join(dir, "restate-data")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	var env []string
	for _, kv := range os.Environ() {
		// Inherited RESTATE_* variables (RESTATE_SERVER_BIN from the
		// Makefile) would be read as server settings.
		if !strings.HasPrefix(kv, "RESTATE_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"RESTATE_DISABLE_TELEMETRY=true",
		"RESTATE_LOG_FILTER=warn",
		"RESTATE_LOG_DISABLE_ANSI_CODES=true",
		"RESTATE_INGRESS__BIND_ADDRESS="+addrs[0],
		"RESTATE_ADMIN__BIND_ADDRESS="+addrs[1],
		"RESTATE_BIND_ADDRESS="+addrs[2],
		"RESTATE_ADVERTISED_ADDRESS=http://"+addrs[2],
	)
	proc, err := startChild("restate-server", filepath.Join(dir, "restate-server.log"), env, bin, "--no-logo", "--base-dir", base)
	if err != nil {
		return nil, err
	}
	s := &restateServer{proc: proc, ingress: "http://" + addrs[0], admin: "http://" + addrs[1]}
	ready := func() error {
		if err := waitHTTP(ctx, proc, s.admin+"/health", 60*time.Second); err != nil {
			return err
		}
		if err := waitHTTP(ctx, proc, s.ingress+"/restate/health", 60*time.Second); err != nil {
			return err
		}
		// The SQL endpoint answers once the partitions have leaders, which
		// is also when invocations can run.
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, err := s.post(ctx, "/query", `{"query":"SELECT id FROM sys_invocation LIMIT 1"}`, "application/json")
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) || proc.exited() {
				return fmt.Errorf("restate-server query endpoint not ready: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := ready(); err != nil {
		_ = proc.stop(15 * time.Second)
		return nil, fmt.Errorf("%v (log: %s)", err, filepath.Join(dir, "restate-server.log"))
	}
	return s, nil
}

// register registers the deployment at uri (h2c, as restate-server does by
// default), replacing any earlier one.
func (s *restateServer) register(ctx context.Context, uri string) error {
	body, _ := json.Marshal(map[string]any{"uri": uri, "force": true})
	_, err := s.post(ctx, "/deployments", string(body), "")
	return err
}

func (s *restateServer) post(ctx context.Context, path, body, accept string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.admin+path, bytes.NewReader([]byte(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("content-type", "application/json")
	if accept != "" {
		req.Header.Set("accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("POST %s: status %d: %s", path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, nil
}
