package devloop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// Deployment is restate-server's answer to a registration.
type Deployment struct {
	// ID is the deployment id (dp_...). A forced registration of a URI
	// already registered keeps its id: restate-server updates that
	// deployment in place.
	ID       string `json:"id"`
	Services []struct {
		Name     string `json:"name"`
		Revision int    `json:"revision"`
	} `json:"services"`
}

// ServiceNames lists the registered services as "Name (revision N)".
func (d *Deployment) ServiceNames() []string {
	names := make([]string, len(d.Services))
	for i, s := range d.Services {
		names[i] = fmt.Sprintf("%s (revision %d)", s.Name, s.Revision)
	}
	return names
}

// Register registers the deployment at uri with the Restate admin API at
// admin: POST /deployments with force, as `restate deployments register
// --force` does, so a deployment already registered at uri is replaced
// rather than refused. restate-server calls uri back (discovery) before it
// answers, so the endpoint must serve by then.
func Register(ctx context.Context, client *http.Client, admin, uri string) (*Deployment, error) {
	body, err := json.Marshal(map[string]any{"uri": uri, "force": true})
	if err != nil {
		return nil, err
	}
	url := strings.TrimRight(admin, "/") + "/deployments"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("--admin %q: %w", admin, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("restate-server admin API at %s: %w", admin, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("restate-server admin API at %s: reading its answer: %w", admin, err)
	}
	if resp.StatusCode/100 != 2 {
		// restate-server says why in {"message": ...}; else quote the body.
		msg := strings.TrimSpace(string(answer))
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(answer, &e) == nil && e.Message != "" {
			msg = e.Message
		}
		return nil, fmt.Errorf("restate-server at %s refused to register %s (HTTP %d): %s", admin, uri, resp.StatusCode, msg)
	}
	var d Deployment
	if err := json.Unmarshal(answer, &d); err != nil || d.ID == "" {
		return nil, fmt.Errorf("restate-server admin API at %s: registration answer without a deployment id: %.200s", admin, answer)
	}
	return &d, nil
}

// registerWhenUp is Register that waits, up to wait, for an admin API that
// refuses connections: restate-server started together with the bridge
// may not listen yet. Any other failure is returned at once.
func registerWhenUp(ctx context.Context, client *http.Client, admin, uri string, wait time.Duration, waiting func(why error)) (*Deployment, error) {
	deadline := time.Now().Add(wait)
	delay := 100 * time.Millisecond
	for first := true; ; first = false {
		d, err := Register(ctx, client, admin, uri)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().Add(delay).After(deadline) {
			if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
				err = fmt.Errorf("%w (waited %s; is restate-server running there? --admin names its admin API)", err, wait)
			}
			return d, err
		}
		if first {
			waiting(err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}
