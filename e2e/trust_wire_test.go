package e2e

// The endpoint's bounds, set in bridge.yaml (start_timeout,
// max_concurrent_invocations, max_journal_bytes), against `bridge serve`:
// over h2c with restatetest playing restate-server's side, and the journal
// bound also through restate-server. Each case asserts the exact error
// and that a bystander registration of the same bridge serves during and
// after it.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
	"github.com/fnbridge/fnbridge/internal/testtool"
	"github.com/fnbridge/fnbridge/journal"
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/restatetest"
)

const trustWireConfig = `start_timeout: 1s
max_concurrent_invocations: 2
max_journal_bytes: 64Ki
services:
  - name: TrustWire
    handlers:
      - {name: gated, runtime: python, dir: fn, handler: trust_workers_gate.gated, concurrency: 2}
      - {name: echo, runtime: python, dir: fn, handler: echo.echo}
  - name: TrustWireBystander
    handlers:
      - {name: echo, runtime: python, dir: fn, handler: echo.echo}
`

func TestTrustWire(t *testing.T) {
	requireInterpreters(t)
	ws := newWorkspace(t, "trust_workers_gate.py", "echo.py")
	b := startBridge(t, ws.config(t, trustWireConfig), testtool.FreeAddr(t))
	client := restatetest.NewH2CClient()
	t.Cleanup(client.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := 0
	// play runs one whole invocation of service/handler on a fresh
	// journal, speaking protocol version. A slot is freed as a stream's
	// handler returns, just after its client read End, so a stream opened
	// right after another ended may be refused with 503: it is retried,
	// as restate-server retries it after Retry-After.
	play := func(t *testing.T, version int, service, handler string, input []byte) []restatetest.Frame {
		t.Helper()
		var got []restatetest.Frame
		testtool.Eventually(t, 5*time.Second, "a slot for "+service+"/"+handler, func() (bool, string) {
			n++
			s := restatetest.Open(ctx, client, restatetest.InvokeURL(b.URI(), service, handler), version)
			defer s.Close()
			var err error
			got, err = s.Play([]any{restatetest.Start(fmt.Sprintf("inv_wire_%d", n), 1), restatetest.Input(input)}, nil)
			if err != nil && !strings.HasPrefix(err.Error(), "HTTP 503: ") {
				t.Fatalf("invocation of %s/%s: %v (frames %v)", service, handler, err, got)
			}
			return err == nil, fmt.Sprint(err)
		})
		return got
	}
	// bystander invokes the other service's handler.
	bystander := func(t *testing.T) {
		t.Helper()
		in := fmt.Sprintf(`{"n":%d}`, n)
		wantOutput(t, play(t, 6, "TrustWireBystander", "echo", []byte(in)), `{"echo":`+in+`}`)
	}
	bystander(t)

	t.Run("a stream that sends nothing within start_timeout 1s is ended with 571", func(t *testing.T) {
		s := restatetest.Open(ctx, client, restatetest.InvokeURL(b.URI(), "TrustWire", "echo"), 6)
		defer s.Close()
		start := time.Now()
		// The stalled stream holds one of the two slots: the bystander is
		// served in the other meanwhile.
		bystander(t)
		f, err := s.Next()
		if err != nil {
			t.Fatalf("stalled stream: %v, want an ErrorMessage after the start timeout", err)
		}
		elapsed := time.Since(start)
		wantError(t, []restatetest.Frame{f}, 571, "timed out after 1s waiting for the StartMessage and the journal it announces (restate-server sends them at once; the endpoint's start timeout ended this stream)")
		if elapsed < 900*time.Millisecond || elapsed > 10*time.Second {
			t.Errorf("the stalled stream ended after %s, want about start_timeout 1s", elapsed)
		}
		if f, err := s.Next(); err == nil {
			t.Fatalf("frame %v after the ErrorMessage, want the stream ended", f)
		}
		bystander(t)
	})

	t.Run("with max_concurrent_invocations 2 a third stream gets 503 with Retry-After while two run", func(t *testing.T) {
		gate := filepath.Join(ws.fn, "gate")
		writeFile(t, gate, "")
		type result struct {
			frames []restatetest.Frame
			err    error
		}
		results := make([]chan result, 2)
		for i, in := range []string{"a", "b"} {
			results[i] = make(chan result, 1)
			s := restatetest.Open(ctx, client, restatetest.InvokeURL(b.URI(), "TrustWire", "gated"), 6)
			defer s.Close()
			go func() {
				got, err := s.Play([]any{restatetest.Start("inv_gated_"+in, 1), restatetest.Input([]byte(`"` + in + `"`))}, nil)
				results[i] <- result{got, err}
			}()
		}
		testtool.Eventually(t, 20*time.Second, "both gated invocations run their function", func() (bool, string) {
			var missing []string
			for _, in := range []string{"a", "b"} {
				if _, err := os.Stat(filepath.Join(ws.fn, "started-"+in)); err != nil {
					missing = append(missing, in)
				}
			}
			return len(missing) == 0, fmt.Sprint("not started: ", missing)
		})
		for _, target := range [][2]string{{"TrustWire", "echo"}, {"TrustWireBystander", "echo"}} {
			s := restatetest.Open(ctx, client, restatetest.InvokeURL(b.URI(), target[0], target[1]), 6)
			resp, err := s.Response()
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Next()
			s.Close()
			want := "HTTP 503: too many concurrent invocation streams: this endpoint serves at most 2 at once; retry later"
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || err == nil || err.Error() != want {
				t.Errorf("third stream to %s/%s: HTTP %d, Retry-After %q, %v; want %q with Retry-After 1",
					target[0], target[1], resp.StatusCode, resp.Header.Get("Retry-After"), err, want)
			}
		}
		if err := os.Remove(gate); err != nil {
			t.Fatal(err)
		}
		for i, in := range []string{"a", "b"} {
			r := <-results[i]
			if r.err != nil {
				t.Fatalf("gated invocation %s: %v (frames %v)", in, r.err, r.frames)
			}
			wantOutput(t, r.frames, `{"gated":"`+in+`"}`)
		}
		bystander(t)
		if !strings.Contains(b.logs(), "refused an invocation stream: too many concurrent invocation streams") {
			t.Errorf("the bridge did not log the refused streams")
		}
	})

	big := []byte(`"` + strings.Repeat("j", 100<<10) + `"`)
	const journalErr = "the invocation's journal exceeds the 65536 bytes this endpoint holds per invocation (InputCommand of "
	t.Run("a journal over max_journal_bytes 64Ki fails that invocation only", func(t *testing.T) {
		got := play(t, 6, "TrustWire", "echo", big)
		e := wantError(t, got, 571, journalErr, "raise the endpoint's journal bound and resume the invocation")
		if want := uint64(journal.PauseFallbackDelay.Milliseconds()); e.GetNextRetryDelay() != want {
			t.Errorf("v6 cannot pause: next_retry_delay %d ms, want journal.PauseFallbackDelay (%d ms)", e.GetNextRetryDelay(), want)
		}
		// v7 asks Restate to pause the invocation instead.
		if e := wantError(t, play(t, 7, "TrustWire", "echo", big), 571, journalErr); e.GetBehavior() != servicev1.ErrorBehavior_ERROR_BEHAVIOR_PAUSE {
			t.Errorf("v7 ErrorMessage behaviour %v, want PAUSE", e.GetBehavior())
		}
		// The same handler, with an input under the bound, and the bystander.
		wantOutput(t, play(t, 6, "TrustWire", "echo", []byte(`{"small":1}`)), `{"echo":{"small":1}}`)
		bystander(t)
	})

	t.Run("through restate-server: the over-bound invocation is stopped with the error, others complete", func(t *testing.T) {
		srv := restateserver.Start(t, restateserver.Options{})
		srv.Register(t, b.URI(), false)
		id, err := srv.Send(ctx, "TrustWire", "echo", big, nil)
		if err != nil {
			t.Fatal(err)
		}
		var row map[string]any
		testtool.Eventually(t, 20*time.Second, "Restate records the journal bound's failure", func() (bool, string) {
			row = invocationRow(ctx, t, srv, id, "status, retry_count, last_failure")
			return strings.Contains(fmt.Sprint(row["last_failure"]), journalErr), fmt.Sprint(row)
		})
		t.Logf("over-bound invocation: %v", row)
		// Paused (v7), or backing off for journal.PauseFallbackDelay (a
		// version that cannot pause): never retried at once, never completed.
		if st := row["status"]; st != "paused" && st != "backing-off" {
			t.Errorf("status %v, want the invocation paused or backing off, not completed", st)
		}
		if n, _ := row["retry_count"].(float64); row["status"] == "backing-off" && n != 1 {
			t.Errorf("retry_count %v while backing off, want 1: the retry must wait journal.PauseFallbackDelay", row["retry_count"])
		}
		out := callOK(ctx, t, srv, "TrustWire", "echo", `{"small":2}`, nil)
		assertJSON(t, "same handler under the bound", out, `{"echo":{"small":2}}`)
		out = callOK(ctx, t, srv, "TrustWireBystander", "echo", `{"n":2}`, nil)
		assertJSON(t, "bystander", out, `{"echo":{"n":2}}`)
		if err := srv.CancelInvocation(ctx, id); err != nil {
			t.Logf("cancelling the over-bound invocation: %v", err)
		}
	})

	if e, ok := b.waitExit(0); ok {
		t.Fatalf("the bridge exited: %v", e)
	}
}
