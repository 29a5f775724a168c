package e2e

// Bad input, end to end through the bridge: each case asserts the exact
// error the caller gets, and after each one a good invocation of another
// handler (Python and Bash) still works ("bad input gets a clear error
// naming what was wrong; nothing else is affected").
//
// Wire- and function-level cases drive the bridge's own HTTP handler
// (bridge.New + restate.NewHTTPServer on a loopback listener, as `bridge
// serve` does) with restatetest over h2c, playing restate-server's side;
// configuration cases run `bridge serve` with bad files. Cases the package
// tests already cover exactly are not repeated here:
//
//	case                                           covered by
//	---------------------------------------------  -----------------------------------------------------------------
//	first message not StartMessage (571)           restate: TestGoldenBidi ".../first message not Start is 571";
//	                                               journal: TestBootstrapping
//	messages after End                             journal: TestOutput ".../messages after the stream ended emit nothing"
//	second StartMessage, ack for unknown id        journal: TestBootstrapping, TestRunProcessing
//	wrong content-type, v4/v8/none (415)           restate: TestHTTPErrors
//	unknown service or handler, bad path (404)     restate: TestHTTPErrors
//	malformed discovery Accept (415)               restate: TestHTTPErrors; restate/discovery: TestNegotiateRejects
//	JWT: expired, wrong audience, wrong key,       restate/identity: TestVerifyRejects (every claim and header case);
//	unsigned, malformed                            the bridge-level 401 + keeps serving is TestBadInputIdentity here
//	invalid identity key in the endpoint config    restate: TestIdentityKeysGuardEverythingButHealth
//	frame length over the limit (reader level)     restate/wire: TestReaderRejectsOversizeBeforeReading;
//	                                               restate: TestMaxMessageSizeEnforced
//	invocation_id over 128 bytes (direct call)     functionruntime: TestInvokeInvocationID "limited to 128 bytes"
//	digest mismatch, same attempt (AlreadyExists)  functionruntime: TestRegisterDifferentDigestSameAttemptIsAlreadyExists
//	stale registration ID (FailedPrecondition)     functionruntime: TestRegisterHigherAttemptSupersedesAndFencesStaleID;
//	                                               e2e: TestRuntimeServeContractExamples
//	handler strings with '..', '/', metachars      functionruntime/python, /bash: TestValidateHandler, FuzzPythonHandler,
//	(adapter level)                                FuzzBashHandler
//	shell metacharacters in a Bash payload         functionruntime/bash: TestPayloadIsNeverEvaluated
//	NUL in a Bash payload                          functionruntime/bash: TestNULPayloadRejected
//	env names and sizes (runtime level)            functionruntime: TestRegisterValidatesBeforeAcceptingWork
//	config fields (parse level)                    bridge: TestConfigErrorsNameLineFieldAndWhatIsAllowed,
//	                                               TestLoadConfigRejectsInvalidNamingFieldPath, FuzzParseConfig

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/internal/procstat"
	"github.com/fnbridge/fnbridge/internal/testtool"
	servicev1 "github.com/fnbridge/fnbridge/proto/restate/service/v1"
	"github.com/fnbridge/fnbridge/restate/identity"
	"github.com/fnbridge/fnbridge/restate/restatetest"
	"github.com/fnbridge/fnbridge/restate/wire"
)

// badFunctions are the fixture's handlers in testdata/: two good ones (the
// "other registrations") and one per kind of misbehaviour.
var badFunctions = []string{"echo.py", "echo.sh", "hang.py", "fork.sh", "loud.sh", "outs.sh", "big.sh", "noack.py"}

const badConfig = `services:
  - name: Bad
    handlers:
      - {name: pyecho, runtime: python, dir: fn, handler: echo.echo}
      - {name: shecho, runtime: bash, dir: fn, handler: echo.respond}
      - {name: pyhang, runtime: python, dir: fn, handler: hang.hang, timeout: 1s}
      - {name: shfork, runtime: bash, dir: fn, handler: fork.spawn}
      - {name: shloud, runtime: bash, dir: fn, handler: loud.shout}
      - {name: shouts, runtime: bash, dir: fn, handler: outs.many}
      - {name: shbig, runtime: bash, dir: fn, handler: big.big}
      - {name: shescape, runtime: bash, dir: fn, handler: escape.f}
      - {name: pyescape, runtime: python, dir: fn, handler: pyescape.f}
      - {name: pynoack, runtime: python, dir: fn, handler: noack.steps, durability: steps, timeout: 2s}
`

// badFixture is an in-process bridge serving badConfig over h2c.
type badFixture struct {
	root   string // holds fn/ (the working directory) and outside/
	url    string
	client *http.Client
	b      *bridge.Bridge
	logs   *lockedBuffer
	n      atomic.Int64
}

func newBadFixture(t *testing.T, identityKeys []string) *badFixture {
	t.Helper()
	requireInterpreters(t)
	ws := newWorkspace(t, badFunctions...)
	root := ws.root
	// escape.sh and pyescape.py are symlinks to files outside the working
	// directory; evil.py leaves outside/imported behind if it is ever
	// imported.
	for link, target := range map[string]string{"escape.sh": "evil.sh", "pyescape.py": "evil.py"} {
		copyTestdata(t, target, filepath.Join(root, "outside", target))
		if err := os.Symlink(filepath.Join(root, "outside", target), filepath.Join(ws.fn, link)); err != nil {
			t.Fatal(err)
		}
	}
	yaml := badConfig
	if len(identityKeys) > 0 {
		yaml = "identity_keys: [" + strings.Join(identityKeys, ", ") + "]\n" + yaml
	}
	cfgPath := ws.config(t, yaml)
	cfg, err := bridge.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	f := &badFixture{root: root, logs: &lockedBuffer{}, client: restatetest.NewH2CClient()}
	f.b, err = bridge.New(cfg, bridge.Options{Logger: zerolog.New(f.logs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Registered before serveHTTP's own cleanup, so it runs after the
	// listener is shut down.
	t.Cleanup(func() {
		f.close(t)
		f.client.CloseIdleConnections()
		if t.Failed() {
			t.Logf("bridge logs:\n%s", f.logs)
		}
	})
	f.url = serveHTTP(t, f.b.Handler())
	return f
}

// close unregisters everything (Bridge.Close is idempotent).
func (f *badFixture) close(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.b.Close(ctx); err != nil {
		t.Errorf("closing the bridge: %v", err)
	}
}

func (f *badFixture) nextID() string { return fmt.Sprintf("inv_bad_%d", f.n.Add(1)) }

// play runs one invocation of Bad/handler with the given start frames,
// answering run proposals as restate-server does.
func (f *badFixture) play(t *testing.T, v int, handler string, start []any) []restatetest.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := restatetest.Open(ctx, f.client, restatetest.InvokeURL(f.url, "Bad", handler), v)
	defer s.Close()
	got, err := s.Play(start, nil)
	if err != nil {
		t.Fatalf("invocation of %s: %v (frames %v)", handler, err, got)
	}
	return got
}

// input invokes handler with one JSON input on a fresh journal.
func (f *badFixture) input(t *testing.T, v int, handler string, in []byte) []restatetest.Frame {
	t.Helper()
	return f.play(t, v, handler, []any{restatetest.Start(f.nextID(), 1), restatetest.Input(in)})
}

// raw POSTs body as a whole invocation request (it ends with the body)
// and returns the status and the decoded response frames.
func (f *badFixture) raw(t *testing.T, path string, v int, body []byte, header http.Header) (int, []restatetest.Frame, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", restatetest.ContentType(v))
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the answer: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, string(b)
	}
	frames, err := restatetest.Decode(b)
	if err != nil {
		t.Fatalf("POST %s: answer is not a frame stream: %v", path, err)
	}
	return resp.StatusCode, frames, ""
}

// mustServe is the "nothing else is affected" check: the good Python and
// Bash handlers still answer.
func (f *badFixture) mustServe(t *testing.T) {
	t.Helper()
	for _, h := range []string{"pyecho", "shecho"} {
		n := f.n.Load()
		in := []byte(fmt.Sprintf(`{"n":%d}`, n))
		got := f.input(t, 6, h, in)
		wantOutput(t, got, fmt.Sprintf(`{"echo":{"n":%d}}`, n))
	}
}

// wantOutput asserts the stream ends with OutputCommand(value) and End.
func wantOutput(t *testing.T, got []restatetest.Frame, value string) {
	t.Helper()
	if len(got) < 2 || got[len(got)-1].Type() != wire.EndMessageType {
		t.Fatalf("stream %v does not end with Output, End", got)
	}
	out, ok := restatetest.Message[*servicev1.OutputCommandMessage](got[len(got)-2])
	if !ok || out.GetValue() == nil {
		t.Fatalf("stream %v: no output value before End", got)
	}
	if string(out.GetValue().GetContent()) != value {
		t.Fatalf("output %s, want %s", out.GetValue().GetContent(), value)
	}
}

// wantFailure asserts the invocation ended with a terminal failure (an
// OutputCommand failure and End) of code whose message contains each of
// parts.
func wantFailure(t *testing.T, got []restatetest.Frame, code uint32, parts ...string) {
	t.Helper()
	if len(got) < 2 || got[len(got)-1].Type() != wire.EndMessageType {
		t.Fatalf("stream %v does not end with Output, End", got)
	}
	out, ok := restatetest.Message[*servicev1.OutputCommandMessage](got[len(got)-2])
	if !ok || out.GetFailure() == nil {
		t.Fatalf("stream %v: no failure output before End", got)
	}
	if out.GetFailure().GetCode() != code {
		t.Errorf("failure code %d (%s), want %d", out.GetFailure().GetCode(), out.GetFailure().GetMessage(), code)
	}
	for _, p := range parts {
		if !strings.Contains(out.GetFailure().GetMessage(), p) {
			t.Errorf("failure message %q does not contain %q", out.GetFailure().GetMessage(), p)
		}
	}
}

// errorMessage returns the ErrorMessage the attempt ended with.
func errorMessage(t *testing.T, got []restatetest.Frame) *servicev1.ErrorMessage {
	t.Helper()
	if len(got) == 0 {
		t.Fatal("no frames")
	}
	e, ok := restatetest.Message[*servicev1.ErrorMessage](got[len(got)-1])
	if !ok {
		t.Fatalf("stream %v does not end with an ErrorMessage", got)
	}
	return e
}

// wantError asserts the attempt ended with exactly one ErrorMessage of
// code (after any journal entries) whose message contains each of parts.
func wantError(t *testing.T, got []restatetest.Frame, code uint32, parts ...string) *servicev1.ErrorMessage {
	t.Helper()
	if len(got) == 0 {
		t.Fatal("no frames")
	}
	e, ok := restatetest.Message[*servicev1.ErrorMessage](got[len(got)-1])
	if !ok {
		t.Fatalf("stream %v does not end with an ErrorMessage", got)
	}
	for _, f := range got[:len(got)-1] {
		if restatetest.Terminal(f.Type()) || f.Type() == wire.OutputCommandType {
			t.Fatalf("stream %v has output or a terminal frame before the ErrorMessage", got)
		}
	}
	if e.GetCode() != code {
		t.Errorf("error code %d (%s), want %d", e.GetCode(), e.GetMessage(), code)
	}
	for _, p := range parts {
		if !strings.Contains(e.GetMessage(), p) {
			t.Errorf("error message %q does not contain %q", e.GetMessage(), p)
		}
	}
	return e
}

func frameBytes(msgs ...any) []byte { return restatetest.Encode(msgs...) }

// TestBadInputWire sends malformed protocol streams, and misbehaving
// functions, to the bridge's endpoint.
func TestBadInputWire(t *testing.T) {
	f := newBadFixture(t, nil)
	f.mustServe(t)
	invokePath := "/invoke/Bad/pyecho"

	t.Run("truncated frame: the body ends inside the InputCommand", func(t *testing.T) {
		full := frameBytes(restatetest.Start(f.nextID(), 1), restatetest.Input([]byte(`{"a":1}`)))
		_, got, _ := f.raw(t, invokePath, 6, full[:len(full)-3], nil)
		wantError(t, got, 571, "reading the request body", "unexpected EOF")
	})
	// After the journal, too: a frame cut short is a broken peer, never
	// the end of its input. The handler is one that cannot finish before
	// the reader meets the cut: its step waits for the acknowledgement the
	// cut frame would have been (a durability: function handler may send
	// its Output with the run's proposal, before the reader gets there,
	// and the stream then ends as answered: a race, not the rule).
	t.Run("truncated frame after the journal is 571", func(t *testing.T) {
		hdr := make([]byte, wire.HeaderSize)
		wire.PutHeader(hdr, wire.Header{Type: wire.RunCompletionNotificationType, Length: 9})
		body := append(frameBytes(restatetest.Start(f.nextID(), 1), restatetest.Input([]byte(`{}`))), append(hdr, 0x08, 0x01)...)
		_, got, _ := f.raw(t, "/invoke/Bad/pynoack", 6, body, nil)
		wantError(t, got, 571, "reading the request body", "unexpected EOF")
	})
	// A step whose result is never acknowledged (a runtime that keeps the
	// stream open and answers nothing): the function is killed at its
	// timeout, and the attempt's ErrorMessage (504) follows at once, not
	// when an acknowledgement or the end of the stream comes.
	t.Run("steps: a run never acknowledged ends at the function's timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		s := restatetest.Open(ctx, f.client, restatetest.InvokeURL(f.url, "Bad", "pynoack"), 6)
		defer s.Close()
		if err := s.Send(restatetest.Start(f.nextID(), 1), restatetest.Input([]byte(`{}`))); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var got []restatetest.Frame
		for {
			fr, err := s.Next()
			if err != nil {
				t.Fatalf("after %v (%s): %v", got, time.Since(start), err)
			}
			got = append(got, fr)
			if restatetest.Terminal(fr.Type()) {
				break
			}
		}
		wantError(t, got, 504)
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("the ErrorMessage came %s after the start, with a 2s timeout", d)
		}
	})
	t.Run("truncated header: the body ends inside a frame header", func(t *testing.T) {
		full := frameBytes(restatetest.Start(f.nextID(), 1))
		_, got, _ := f.raw(t, invokePath, 6, append(full, 0x04, 0x00, 0x00), nil)
		wantError(t, got, 571, "unexpected EOF")
	})
	// The bound is restate-server's 32 MiB message limit plus a 32nd, the
	// room restate-server itself takes beyond it (eager state).
	t.Run("frame length beyond the 33 MiB maximum is refused before reading it", func(t *testing.T) {
		hdr := make([]byte, wire.HeaderSize)
		wire.PutHeader(hdr, wire.Header{Type: wire.InputCommandType, Length: 0xFFFFFFF0})
		body := append(frameBytes(restatetest.Start(f.nextID(), 1)), hdr...)
		_, got, _ := f.raw(t, invokePath, 6, body, nil)
		wantError(t, got, 571, "InputCommand frame of 4294967280 bytes exceeds the limit of 34603008 bytes")
	})
	t.Run("unknown message type", func(t *testing.T) {
		hdr := make([]byte, wire.HeaderSize)
		wire.PutHeader(hdr, wire.Header{Type: 0x0777, Length: 0})
		body := append(frameBytes(restatetest.Start(f.nextID(), 2), restatetest.Input(nil)), hdr...)
		_, got, _ := f.raw(t, invokePath, 6, body, nil)
		wantError(t, got, 571, "unknown message type 0x0777")
	})
	t.Run("StartMessage whose payload is not protobuf", func(t *testing.T) {
		hdr := make([]byte, wire.HeaderSize)
		wire.PutHeader(hdr, wire.Header{Type: wire.StartMessageType, Length: 4})
		_, got, _ := f.raw(t, invokePath, 6, append(hdr, 0xFF, 0xFF, 0xFF, 0xFF), nil)
		wantError(t, got, 571, "StartMessage")
	})
	t.Run("known_entries announces entries that never come", func(t *testing.T) {
		body := frameBytes(restatetest.Start(f.nextID(), 3), restatetest.Input([]byte(`{}`)))
		_, got, _ := f.raw(t, invokePath, 6, body, nil)
		wantError(t, got, 571)
	})
	t.Run("replayed run value that is not an fnbridge record", func(t *testing.T) {
		// The journal holds something this bridge did not write: refusing it
		// beats returning a wrong result, and a journal mismatch (570,
		// retried) beats ending the invocation: the bridge version that
		// wrote it may come back.
		got := f.play(t, 6, "pyecho", []any{restatetest.Start(f.nextID(), 3), restatetest.Input([]byte(`{}`)),
			restatetest.Run(1, "invoke"), restatetest.RunValue(1, []byte("not json"))})
		wantError(t, got, 570, "journaled run value is not an fnbridge record")
	})
	t.Run("replayed journal of another handler shape (journal mismatch 570)", func(t *testing.T) {
		got := f.play(t, 6, "pyecho", []any{restatetest.Start(f.nextID(), 3), restatetest.Input([]byte(`{}`)),
			restatetest.Run(1, "something-else"), restatetest.RunValue(1, []byte(`{}`))})
		wantError(t, got, 570, "something-else")
	})
	t.Run("GET on an invoke path is 405", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, f.url+invokePath, nil)
		resp, err := f.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(string(b), "invoke needs POST, got GET") {
			t.Fatalf("HTTP %d %q, want 405 naming the method", resp.StatusCode, b)
		}
	})
	// The runtime refuses an invocation_id over 128 bytes (covered by
	// functionruntime's TestInvokeInvocationID); the id Restate sends is not
	// the caller's input, so the bridge sends a digest instead of failing.
	t.Run("invocation id over the runtime's 128-byte bound still runs", func(t *testing.T) {
		got := f.play(t, 6, "pyecho", []any{restatetest.Start("inv_"+strings.Repeat("x", 200), 1), restatetest.Input([]byte(`{}`))})
		wantOutput(t, got, `{"echo":{}}`)
	})
	f.mustServe(t)
}

// TestBadInputFunctions: inputs and handlers the functions cannot cope
// with, each ending with the documented error class (README, "What Restate
// sees"), and the other registrations unaffected.
func TestBadInputFunctions(t *testing.T) {
	f := newBadFixture(t, nil)
	f.mustServe(t)

	cases := []struct {
		name  string
		check func(t *testing.T)
	}{
		{"invalid JSON input to a Python handler is a terminal 400", func(t *testing.T) {
			got := f.input(t, 6, "pyecho", []byte(`{"unclosed":`))
			wantFailure(t, got, 400, "input is not valid JSON")
		}},
		{"input over the runtime's 6 MiB bound is a terminal 400", func(t *testing.T) {
			big := []byte(`"` + strings.Repeat("a", 6<<20) + `"`)
			got := f.input(t, 6, "shecho", big)
			wantFailure(t, got, 400, "invalid invocation", "input")
		}},
		// An invalid result is terminal (functionruntime's error table:
		// "invalid result: Unknown, OUTPUTS_INVALID, terminal").
		{"outputs over their bound (40 keys, at most 32) are a terminal failure", func(t *testing.T) {
			got := f.input(t, 6, "shouts", []byte(`{}`))
			wantFailure(t, got, 500, "the handler returned, but its result is invalid: 40 outputs, at most 32 allowed")
		}},
		// The worker's adapter refuses it first, naming stdout.
		{"stdout over the 6 MiB output bound is a terminal failure", func(t *testing.T) {
			got := f.input(t, 6, "shbig", []byte(`{}`))
			wantFailure(t, got, 500, "stdout is 7000000 bytes, more than the 6291456 allowed")
		}},
		{"a handler printing 3 MB to stderr in one line still returns its result", func(t *testing.T) {
			got := f.input(t, 6, "shloud", []byte(`{}`))
			wantOutput(t, got, `{"ok":true}`)
		}},
		{"a handler that never returns times out (504); the next invocation gets a fresh worker", func(t *testing.T) {
			start := time.Now()
			got := f.input(t, 6, "pyhang", []byte(`{}`))
			wantError(t, got, 504, "timed out after 1s")
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("the timeout took %s to be reported (handler timeout 1s)", d)
			}
			// Again: the killed worker is replaced, and the bound holds again.
			got = f.input(t, 6, "pyhang", []byte(`{}`))
			wantError(t, got, 504, "timed out after 1s")
		}},
		{"a Bash file that is a symlink out of the working directory never runs; after a few rounds the invocation pauses (v7)", func(t *testing.T) {
			// One failed initialization is not proof of a permanent fault
			// (a worker killed while starting looks the same), so the first
			// rounds answer 503 and Restate retries; a fault that persists
			// for bridge's permanentAfter rounds of backoff pauses.
			deadline := time.Now().Add(20 * time.Second)
			var codes []uint32
			for {
				got := f.input(t, 7, "shescape", []byte(`{}`))
				e := errorMessage(t, got)
				if !strings.Contains(e.GetMessage(), "outside the working directory") {
					t.Fatalf("error %q does not say the file is outside the working directory", e.GetMessage())
				}
				codes = append(codes, e.GetCode())
				if e.GetBehavior() == servicev1.ErrorBehavior_ERROR_BEHAVIOR_PAUSE {
					break
				}
				if e.GetCode() != 503 {
					t.Fatalf("before pausing: code %d, want a retryable 503", e.GetCode())
				}
				if time.Now().After(deadline) {
					t.Fatalf("never paused; codes %v", codes)
				}
				time.Sleep(250 * time.Millisecond) // Restate's own retry cadence, roughly
			}
			if len(codes) < 2 || codes[0] != 503 {
				t.Errorf("codes %v: want retryable 503s before the pause", codes)
			}
		}},
		{"a Python module that is a symlink out of the working directory is never imported", func(t *testing.T) {
			got := f.input(t, 7, "pyescape", []byte(`{}`))
			e := errorMessage(t, got)
			if !strings.Contains(e.GetMessage(), "outside the working directory") || !strings.Contains(e.GetMessage(), "module 'pyescape'") {
				t.Fatalf("error %q does not say module 'pyescape' is outside the working directory", e.GetMessage())
			}
			if e.GetCode() != 503 {
				t.Errorf("first round: code %d, want a retryable 503", e.GetCode())
			}
			if _, err := os.Stat(filepath.Join(f.root, "outside", "imported")); err == nil {
				t.Fatalf("the module outside the working directory was imported")
			}
		}},
		{"the same on v6, which cannot pause: a long retry delay instead of a hot loop", func(t *testing.T) {
			// The registration is already known broken (previous case).
			got := f.input(t, 6, "shescape", []byte(`{}`))
			e := wantError(t, got, 500, "outside the working directory")
			// v5/v6 cannot pause: the bridge asks for a retry after
			// bridge.PermanentRetryDelay instead of at once.
			if e.GetNextRetryDelay() < uint64(bridge.PermanentRetryDelay.Milliseconds()) {
				t.Errorf("next_retry_delay %d ms, want at least %d", e.GetNextRetryDelay(), bridge.PermanentRetryDelay.Milliseconds())
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.check(t)
			f.mustServe(t)
		})
	}
}

// TestBadInputBackgroundChild: a handler that forks a background child and
// exits returns promptly, and the child is killed when the registration
// goes away ("children the function leaves running in the background do
// not delay the invocation; they live in the worker's process group and
// are killed with it").
func TestBadInputBackgroundChild(t *testing.T) {
	f := newBadFixture(t, nil)
	start := time.Now()
	got := f.input(t, 6, "shfork", []byte(`{}`))
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the invocation took %s: the background child (sleep 300) held it up", d)
	}
	out, ok := restatetest.Message[*servicev1.OutputCommandMessage](got[len(got)-2])
	if !ok {
		t.Fatalf("frames %v", got)
	}
	var child int
	if _, err := fmt.Sscanf(string(out.GetValue().GetContent()), `{"child":%d}`, &child); err != nil || child <= 0 {
		t.Fatalf("output %q does not name the child", out.GetValue().GetContent())
	}
	if !procstat.Alive(child) {
		t.Fatalf("the background child %d is not running after the invocation returned", child)
	}
	f.mustServe(t)
	// The registration goes away: the bridge unregisters everything.
	f.close(t)
	testtool.Eventually(t, 15*time.Second, fmt.Sprintf("background child %d is killed once its registration is unregistered", child), func() (bool, string) {
		st, err := procstat.Read(child)
		return err != nil || st.Dead(), fmt.Sprintf("%+v", st)
	})
}

// TestBadInputIdentity: with identity keys configured, requests restate-
// server did not sign with one of them get 401 naming the reason, and a
// correctly signed invocation still works after each.
func TestBadInputIdentity(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	kid := identity.EncodeKey(pub)
	f := newBadFixture(t, []string{kid})
	path := "/invoke/Bad/pyecho"
	token := func(key ed25519.PrivateKey, aud string, nbf, exp time.Duration) string {
		now := time.Now()
		tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"aud": aud, "iat": now.Unix(), "nbf": now.Add(nbf).Unix(), "exp": now.Add(exp).Unix()})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	signed := func(tok string) http.Header {
		h := http.Header{}
		h.Set("x-restate-signature-scheme", "v1")
		h.Set("x-restate-jwt-v1", tok)
		return h
	}
	good := func(t *testing.T) {
		t.Helper()
		id := f.nextID()
		_, got, body := f.raw(t, path, 6, frameBytes(restatetest.Start(id, 1), restatetest.Input([]byte(`{"ok":1}`))), signed(token(priv, path, -time.Minute, time.Minute)))
		if got == nil {
			t.Fatalf("signed invocation refused: %s", body)
		}
		// REQUEST_RESPONSE-like use of a BIDI endpoint: the invocation was
		// accepted, ran and ended with its output after the run proposal.
		if len(got) < 2 {
			t.Fatalf("signed invocation answered %v", got)
		}
		if _, ok := restatetest.Message[*servicev1.OutputCommandMessage](got[len(got)-2]); !ok {
			t.Fatalf("signed invocation answered %v", got)
		}
		if _, ok := restatetest.Message[*servicev1.EndMessage](got[len(got)-1]); !ok {
			t.Fatalf("signed invocation answered %v", got)
		}
	}
	good(t)
	for _, c := range []struct {
		name   string
		header http.Header
		want   string
	}{
		{"unsigned", http.Header{}, "request is unsigned"},
		{"expired", signed(token(priv, path, -time.Hour, -time.Minute)), "expired"},
		{"wrong audience", signed(token(priv, "/invoke/Bad/shecho", -time.Minute, time.Minute)), "/invoke/Bad/pyecho"},
		{"signed with another key", signed(token(otherPriv, path, -time.Minute, time.Minute)), kid},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, _, body := f.raw(t, path, 6, frameBytes(restatetest.Start(f.nextID(), 1), restatetest.Input(nil)), c.header)
			if status != http.StatusUnauthorized || !strings.HasPrefix(body, "unauthorized: ") || !strings.Contains(body, c.want) {
				t.Fatalf("HTTP %d %q, want 401 naming %q", status, body, c.want)
			}
			good(t)
		})
	}
}

// TestBadInputConfig runs `bridge serve` with bad configuration files: each
// exits 1 before listening, naming the field and what is allowed ("Unknown
// fields and invalid values fail at start with the field path and what is
// allowed, before anything starts").
func TestBadInputConfig(t *testing.T) {
	ws := newWorkspace(t, "h.py", "h.sh")
	handler := func(runtime, h, extra string) string {
		return fmt.Sprintf("services:\n  - name: S\n    handlers:\n      - {name: h, runtime: %s, dir: fn, handler: %q%s}\n", runtime, h, extra)
	}
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"python handler climbing out with ..", handler("python", "../evil.f", ""),
			[]string{"services[0].handlers[0].handler", `"../evil.f" is not module.function`}},
		{"python handler as an absolute path", handler("python", "/etc/passwd.f", ""),
			[]string{"services[0].handlers[0].handler", `"/etc/passwd.f" is not module.function`}},
		{"bash handler climbing out with ..", handler("bash", "../h.f", ""),
			[]string{"services[0].handlers[0].handler", `"../h.f" is not file.function (file.sh in dir; no paths, no shell characters)`}},
		{"bash handler as an absolute path", handler("bash", "/tmp/h.f", ""),
			[]string{"services[0].handlers[0].handler", "no paths"}},
		{"bash handler with a command substitution", handler("bash", "$(touch pwned).f", ""),
			[]string{"services[0].handlers[0].handler", "no shell characters"}},
		{"bash handler with ; and a second command", handler("bash", "h.f;id", ""),
			[]string{"services[0].handlers[0].handler", "no shell characters"}},
		{"bash handler with a space", handler("bash", "h.f x", ""),
			[]string{"services[0].handlers[0].handler", "no shell characters"}},
		{"env name starting with a digit", handler("bash", "h.f", ", env: {1X: v}"),
			[]string{"services[0].handlers[0].env.1X", "not a valid environment variable name"}},
		{"env name with a dash", handler("bash", "h.f", ", env: {A-B: v}"),
			[]string{"services[0].handlers[0].env.A-B", "not a valid environment variable name"}},
		{"env name with = (would split NAME=value)", handler("python", "h.f", ", env: {\"A=B\": v}"),
			[]string{"services[0].handlers[0].env.A=B", "not a valid environment variable name"}},
		{"env name in the reserved FNBRIDGE_ space", handler("python", "h.f", ", env: {FNBRIDGE_OUTPUTS: /etc/passwd}"),
			[]string{"services[0].handlers[0].env.FNBRIDGE_OUTPUTS", "reserved"}},
		{"identity key that is not a Restate public key", "identity_keys: [secret]\n" + handler("python", "h.f", ""),
			[]string{"identity_keys[0]", "publickeyv1_"}},
		{"misspelt field", "protocl_mode: bidi\n" + handler("python", "h.f", ""),
			[]string{".yaml:1: unknown field \"protocl_mode\", did you mean \"protocol_mode\"? (known here: listen, protocol_mode, "}},
		{"word for a number", handler("python", "h.f", ", concurrency: abc"),
			[]string{".yaml:4: services[0].handlers[0].concurrency: want a whole number, got \"abc\"\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := filepath.Join(ws.root, strings.NewReplacer(" ", "_", "/", "_").Replace(c.name)+".yaml")
			writeFile(t, cfg, c.yaml)
			stdout, stderr, code := runBridge(t, 30*time.Second, "serve", "--config", cfg, "--listen", testtool.FreeAddr(t))
			if code != 2 {
				t.Fatalf("exit %d, want 2 (a bad configuration: nothing started)\nstdout: %s\nstderr: %s", code, stdout, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not name %q:\n%s", w, stderr)
				}
			}
			// The file is named once, as given; no Go type, no "yaml:" chain.
			if want := "bridge: " + cfg + ":"; !strings.HasPrefix(stderr, want) || strings.Count(stderr, "yaml: ") > 0 || strings.Contains(stderr, "in type") {
				t.Errorf("stderr does not start with %q or repeats a prefix:\n%s", want, stderr)
			}
			if _, err := os.Stat(filepath.Join(ws.fn, "pwned")); err == nil {
				t.Fatal("the handler string was executed")
			}
		})
	}
}
