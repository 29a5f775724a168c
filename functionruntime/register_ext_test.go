package functionruntime_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

const (
	stateReady    = executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_READY
	stateFailed   = executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_FAILED
	stateDraining = executorv1.FunctionRegistrationState_FUNCTION_REGISTRATION_STATE_DRAINING
)

// "RegisterFunction validates its working directory, handler, environment,
// timeout, digest, and one-based registration_attempt before accepting
// work." Each bad field is InvalidArgument naming the field, and no worker
// starts.
func TestRegisterValidatesBeforeAcceptingWork(t *testing.T) {
	ad := &fakeAdapter{}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	file := filepath.Join(h.dir, "plain-file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("v", 70<<10)
	tests := []struct {
		name  string
		edit  func(r *executorv1.RegisterFunctionRequest)
		field string
	}{
		{"empty run_uid", func(r *executorv1.RegisterFunctionRequest) { r.RunUid = "" }, "run_uid"},
		{"run_uid with a slash", func(r *executorv1.RegisterFunctionRequest) { r.RunUid = "a/b" }, "run_uid"},
		{"run_uid with a space", func(r *executorv1.RegisterFunctionRequest) { r.RunUid = "a b" }, "run_uid"},
		{"run_uid starting with a dot", func(r *executorv1.RegisterFunctionRequest) { r.RunUid = ".hidden" }, "run_uid"},
		{"run_uid over 128 bytes", func(r *executorv1.RegisterFunctionRequest) { r.RunUid = strings.Repeat("a", 129) }, "run_uid"},
		{"one-based registration_attempt: zero", func(r *executorv1.RegisterFunctionRequest) { r.RegistrationAttempt = 0 }, "registration_attempt"},
		{"one-based registration_attempt: negative", func(r *executorv1.RegisterFunctionRequest) { r.RegistrationAttempt = -3 }, "registration_attempt"},
		{"working_dir empty", func(r *executorv1.RegisterFunctionRequest) { r.WorkingDir = "" }, "working_dir"},
		{"working_dir relative", func(r *executorv1.RegisterFunctionRequest) { r.WorkingDir = "runs/x" }, "working_dir"},
		{"working_dir missing", func(r *executorv1.RegisterFunctionRequest) { r.WorkingDir = filepath.Join(h.dir, "nope") }, "working_dir"},
		{"working_dir is a file", func(r *executorv1.RegisterFunctionRequest) { r.WorkingDir = file }, "working_dir"},
		{"handler empty", func(r *executorv1.RegisterFunctionRequest) { r.Handler = "" }, "handler"},
		{"handler rejected by the adapter", func(r *executorv1.RegisterFunctionRequest) { r.Handler = "nodot" }, "handler"},
		{"handler too long", func(r *executorv1.RegisterFunctionRequest) { r.Handler = "m." + strings.Repeat("f", 300) }, "handler"},
		{"env name with a dash", func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"BAD-NAME": "x"} }, `env["BAD-NAME"]`},
		{"env name starting with a digit", func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"1X": "x"} }, `env["1X"]`},
		{"env name empty", func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"": "x"} }, `env[""]`},
		{"env name reserved", func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"FNBRIDGE_PROTOCOL": "x"} }, `env["FNBRIDGE_PROTOCOL"]`},
		{"env name reserved in lower case", func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"fnbridge_x": "x"} }, `env["fnbridge_x"]`},
		{"env name that changes how bash starts", func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"BASH_ENV": "/tmp/x"} }, `env["BASH_ENV"]`},
		// Read by bash while the worker's loop runs: TMOUT times out its
		// idle reads (the worker ends), FUNCNEST stops its functions.
		{"env name that bounds bash's reads", func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"TMOUT": "1"} }, `env["TMOUT"]`},
		{"env name that bounds bash's function nesting", func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"FUNCNEST": "2"} }, `env["FUNCNEST"]`},
		{"env name that changes bash's semantics", func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"BASH_COMPAT": "31"} }, `env["BASH_COMPAT"]`},
		{"env name that changes how the loader starts", func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"LD_PRELOAD": "/tmp/x.so"} }, `env["LD_PRELOAD"]`},
		{"env value with NUL", func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"A": "x\x00y"} }, `env["A"]`},
		{"env total size", func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"A": big, "B": big} }, "env"},
		{"idle_timeout_seconds negative", func(r *executorv1.RegisterFunctionRequest) { r.IdleTimeoutSeconds = -1 }, "idle_timeout_seconds"},
		{"idle_timeout_seconds over 7 days", func(r *executorv1.RegisterFunctionRequest) { r.IdleTimeoutSeconds = 7*24*3600 + 1 }, "idle_timeout_seconds"},
		{"digest empty", func(r *executorv1.RegisterFunctionRequest) { r.RegistrationDigest = "" }, "registration_digest"},
		{"digest upper-case hex", func(r *executorv1.RegisterFunctionRequest) {
			r.RegistrationDigest = strings.ToUpper(digest("x")[:7]) + strings.ToUpper(digest("x")[7:])
		}, "registration_digest"},
		{"digest without prefix", func(r *executorv1.RegisterFunctionRequest) { r.RegistrationDigest = digest("x")[7:] }, "registration_digest"},
		{"digest too short", func(r *executorv1.RegisterFunctionRequest) { r.RegistrationDigest = digest("x")[:70] }, "registration_digest"},
		{"digest of another algorithm", func(r *executorv1.RegisterFunctionRequest) { r.RegistrationDigest = "sha512:" + digest("x")[7:] }, "registration_digest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := h.registerReq("run-1", 1, digest("x"))
			tt.edit(req)
			_, err := h.cli.RegisterFunction(context.Background(), req)
			st := wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument)
			if !strings.HasPrefix(st.Message(), tt.field+":") {
				t.Errorf("message %q does not start with the field %q", st.Message(), tt.field)
			}
			if got := functionruntime.ErrorInfo(err).GetMetadata()["field"]; got != tt.field {
				t.Errorf("ErrorInfo field = %q, want %q", got, tt.field)
			}
		})
	}
	if n := ad.starts.Load(); n != 0 {
		t.Errorf("adapter Start called %d times for invalid requests, want 0", n)
	}
	// Nothing else is affected: a valid request still works.
	h.mustReady("run-1", 1)
}

func TestRegisterAcceptsBoundaryValues(t *testing.T) {
	h := newHarness(t, &fakeAdapter{}, functionruntime.Limits{}, nil)
	req := h.registerReq("2b5d"+strings.Repeat("x", 124), 1, digest("boundary"))
	req.IdleTimeoutSeconds = 7 * 24 * 3600
	req.Env = map[string]string{"_A1": "", "PATH": "/usr/bin"}
	resp, err := h.cli.RegisterFunction(context.Background(), req)
	if err != nil {
		t.Fatalf("RegisterFunction: %v", err)
	}
	if resp.GetState() != stateReady {
		t.Fatalf("state = %v, want READY", resp.GetState())
	}
	// The example UID "2b5d..." of
	// docs/spec/function-runtime-server-contract.md is accepted as written.
	h.mustReady("2b5d...", 1)
}

// "Repeating the same Run UID, registration attempt, and digest returns
// the current registration reference without reinitializing the
// function." (for an identical request: see the next test)
func TestRegisterRepeatReturnsCurrentWithoutReinitializing(t *testing.T) {
	ad := &fakeAdapter{}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	first := h.mustReady("run-1", 1)
	if !strings.HasPrefix(first.GetRegistrationId(), functionruntime.RegistrationIDPrefix) {
		t.Errorf("registration_id %q lacks prefix %q", first.GetRegistrationId(), functionruntime.RegistrationIDPrefix)
	}
	if first.GetRunUid() != "run-1" {
		t.Errorf("run_uid = %q", first.GetRunUid())
	}
	for i := 0; i < 3; i++ {
		again := h.mustReady("run-1", 1)
		if again.GetRegistrationId() != first.GetRegistrationId() {
			t.Fatalf("repeat %d returned ID %s, want %s", i, again.GetRegistrationId(), first.GetRegistrationId())
		}
	}
	if n := ad.starts.Load(); n != 1 {
		t.Errorf("Start called %d times, want 1", n)
	}
}

// "Retrying an uncertain Pod-local RegisterFunction RPC for the same
// registration attempt is idempotent": concurrent duplicates while Start is
// still running share one registration and one worker.
func TestRegisterConcurrentDuplicatesStartOneWorker(t *testing.T) {
	g := newGate()
	ad := &fakeAdapter{start: g.start}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := h.register("run-1", 1, digest("d"))
			ids[i], errs[i] = resp.GetRegistration().GetRegistrationId(), err
		}()
	}
	g.waitEntered(t)
	g.open()
	wg.Wait()
	for i := range ids {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("call %d got ID %s, call 0 got %s", i, ids[i], ids[0])
		}
	}
	if got := ad.starts.Load(); got != 1 {
		t.Errorf("Start called %d times, want 1", got)
	}
}

// "A different digest for the same Run UID and registration attempt returns
// AlreadyExists and does not replace the registration."
func TestRegisterDifferentDigestSameAttemptIsAlreadyExists(t *testing.T) {
	ad := &fakeAdapter{}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ref := h.mustReady("run-1", 1)
	_, err := h.register("run-1", 1, digest("something else"))
	wantCode(t, err, codes.AlreadyExists, functionruntime.ReasonDigestMismatch)
	if functionruntime.Classify(err) != functionruntime.ClassInvalid {
		t.Errorf("Classify = %v, want invalid", functionruntime.Classify(err))
	}
	st, err := h.status(ref)
	if err != nil || st.GetState() != stateReady {
		t.Fatalf("original registration after conflict: %v, %v; want READY", st.GetState(), err)
	}
	if _, err := h.invoke(ref, "", "{}"); err != nil {
		t.Fatalf("original registration no longer invokable: %v", err)
	}
	if got := ad.starts.Load(); got != 1 {
		t.Errorf("Start called %d times, want 1", got)
	}
}

// Our departure from "Repeating the same Run UID, registration attempt,
// and digest returns the current registration reference without
// reinitializing the function." (docs/ARCHITECTURE.md, "Where the
// runtime contract is silent, and where we depart from it"): only an
// identical request does; the same three with any other field different
// (working_dir, handler, env, idle_timeout_seconds, or registration
// metadata such as worker limits or the interpreter) is AlreadyExists,
// names the differing field, and does not replace the registration. The
// digest is public, so a caller that registered first with its own
// handler must not be handed to the owner of the Run UID (nor the
// owner's registration to it).
// The kind a registration was configured for travels as metadata: a
// server of another kind refuses it before anything starts (a bash
// handler's file.function must never be imported as a python module);
// the server's own kind, or none given, registers.
func TestRegisterRefusesAnotherKind(t *testing.T) {
	ad := &fakeAdapter{}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"another kind", metadata.AppendToOutgoingContext(context.Background(), functionruntime.KindMetadata, "bash"),
			`fnbridge-runtime-kind metadata: this FunctionRuntime server runs fake handlers, not "bash" ones: the address configured for "bash" serves another kind`},
		{"given twice", metadata.AppendToOutgoingContext(context.Background(), functionruntime.KindMetadata, "fake", functionruntime.KindMetadata, "fake"),
			"fnbridge-runtime-kind metadata: given 2 times, want once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.cli.RegisterFunction(tc.ctx, h.registerReq("run-"+strings.ReplaceAll(tc.name, " ", "-"), 1, digest("x")))
			if st := wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument); st.Message() != tc.want {
				t.Errorf("message %q, want %q", st.Message(), tc.want)
			}
		})
	}
	if n := ad.starts.Load(); n != 0 {
		t.Fatalf("%d workers started for refused registrations", n)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), functionruntime.KindMetadata, "fake")
	if resp, err := h.cli.RegisterFunction(ctx, h.registerReq("run-own", 1, digest("x"))); err != nil || resp.GetState() != stateReady {
		t.Fatalf("a registration of the server's own kind: %v %v", resp.GetState(), err)
	}
}

func TestRegisterSameDigestOtherFieldsIsAlreadyExists(t *testing.T) {
	ad := &fakeAdapter{checkInterpreter: refuseBad, inline: true}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	other := filepath.Join(h.dir, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	limits := functionruntime.DefaultWorkerLimits()
	limits.Memory /= 2
	withLimits := metadata.AppendToOutgoingContext(context.Background(), functionruntime.WorkerLimitsMetadata, limits.Encode())
	dig := digest("run-1")
	first, err := h.cli.RegisterFunction(context.Background(), h.registerReq("run-1", 1, dig))
	if err != nil || first.GetState() != stateReady {
		t.Fatalf("first registration: %v, %v", first.GetState(), err)
	}
	tests := []struct {
		name, field, words string
		ctx                context.Context
		edit               func(r *executorv1.RegisterFunctionRequest)
	}{
		{"handler", "handler", "another handler", nil, func(r *executorv1.RegisterFunctionRequest) { r.Handler = "evil.run" }},
		{"working_dir", "working_dir", "another working_dir", nil, func(r *executorv1.RegisterFunctionRequest) { r.WorkingDir = other }},
		{"handler and working_dir", "working_dir,handler", "another working_dir and another handler", nil, func(r *executorv1.RegisterFunctionRequest) {
			r.Handler, r.WorkingDir = "evil.run", other
		}},
		{"env value", "env", "another env", nil, func(r *executorv1.RegisterFunctionRequest) { r.Env = map[string]string{"GREETING": "bye"} }},
		{"env added", "env", "another env", nil, func(r *executorv1.RegisterFunctionRequest) { r.Env["PYTHONPATH"] = other }},
		{"env removed", "env", "another env", nil, func(r *executorv1.RegisterFunctionRequest) { r.Env = nil }},
		{"idle_timeout_seconds", "idle_timeout_seconds", "another idle_timeout_seconds", nil, func(r *executorv1.RegisterFunctionRequest) { r.IdleTimeoutSeconds = 1 }},
		{"worker limits", functionruntime.WorkerLimitsMetadata, "another set of worker limits (fnbridge-worker-limits metadata)", withLimits, func(*executorv1.RegisterFunctionRequest) {}},
		{"interpreter", functionruntime.InterpreterMetadata, "another interpreter (fnbridge-interpreter metadata)", withInterpreter("/tmp/evil/python"), func(*executorv1.RegisterFunctionRequest) {}},
		{"subshell", functionruntime.SubshellMetadata, "another choice of subshell (fnbridge-subshell metadata)", withSubshell("false"), func(*executorv1.RegisterFunctionRequest) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			req := h.registerReq("run-1", 1, dig)
			tt.edit(req)
			_, err := h.cli.RegisterFunction(ctx, req)
			st := wantCode(t, err, codes.AlreadyExists, functionruntime.ReasonRegistrationMismatch)
			want := "run_uid run-1 attempt 1 is already registered with " + tt.words + "; the registration was not replaced"
			if st.Message() != want {
				t.Errorf("message %q, want %q", st.Message(), want)
			}
			if got := functionruntime.ErrorInfo(err).GetMetadata()["field"]; got != tt.field {
				t.Errorf("ErrorInfo field = %q, want %q", got, tt.field)
			}
		})
	}
	// The registration still runs what it was registered with, in its one
	// worker.
	ref := first.GetRegistration()
	if _, err := h.invoke(ref, "", "{}"); err != nil {
		t.Fatalf("original registration no longer invokable: %v", err)
	}
	ws := ad.allWorkers()
	if len(ws) != 1 || ws[0].spec.Handler != "handler.handle" || ws[0].spec.Dir != h.dir || ws[0].invokes.Load() != 1 {
		t.Fatalf("workers after the conflicts: %d, first %+v", len(ws), ws[0].spec)
	}
	// An exact repeat is still a retry of the same registration.
	again, err := h.cli.RegisterFunction(context.Background(), h.registerReq("run-1", 1, dig))
	if err != nil || again.GetState() != stateReady || again.GetRegistration().GetRegistrationId() != ref.GetRegistrationId() {
		t.Fatalf("exact repeat: %v, %v, %v; want READY with %s", again.GetRegistration(), again.GetState(), err, ref.GetRegistrationId())
	}
	if n := ad.starts.Load(); n != 1 {
		t.Errorf("Start called %d times, want 1", n)
	}
}

// "A higher registration attempt supersedes an older local registration and
// creates a new opaque registration ID." The older one's in-flight
// invocation is cancelled and its worker closed; "a stale ID must never
// change, invoke, or remove a newer registration".
func TestRegisterHigherAttemptSupersedesAndFencesStaleID(t *testing.T) {
	g := newGate()
	ad := &fakeAdapter{invoke: g.invoke}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	old := h.mustReady("run-1", 1)

	invErr := make(chan error, 1)
	go func() {
		_, err := h.invoke(old, "inv-old", "{}")
		invErr <- err
	}()
	g.waitEntered(t)

	resp, err := h.register("run-1", 2, digest("run-1"))
	if err != nil || resp.GetState() != stateReady {
		t.Fatalf("attempt 2: %v, %v", resp.GetState(), err)
	}
	cur := resp.GetRegistration()
	if cur.GetRegistrationId() == old.GetRegistrationId() {
		t.Fatalf("attempt 2 reused registration ID %s", old.GetRegistrationId())
	}
	// The in-flight invocation of attempt 1 was cancelled.
	err = <-invErr
	wantCode(t, err, codes.Aborted, functionruntime.ReasonInvocationAborted)
	workers := ad.allWorkers()
	if len(workers) != 2 || !workers[0].closed.Load() || workers[1].closed.Load() {
		t.Fatalf("after supersede: %d workers, first closed=%v; want the old closed and the new open", len(workers), workers[0].closed.Load())
	}

	// The stale ID is fenced everywhere.
	_, err = h.status(old)
	wantCode(t, err, codes.FailedPrecondition, functionruntime.ReasonRegistrationStale)
	_, err = h.invoke(old, "", "{}")
	wantCode(t, err, codes.FailedPrecondition, functionruntime.ReasonRegistrationStale)
	if c := functionruntime.Classify(err); c != functionruntime.ClassStale {
		t.Errorf("Classify(stale invoke) = %v, want stale", c)
	}
	_, err = h.cli.UnregisterFunction(context.Background(), &executorv1.UnregisterFunctionRequest{Registration: old, CancelInFlight: true})
	wantCode(t, err, codes.FailedPrecondition, functionruntime.ReasonRegistrationStale)

	// The newer registration is untouched.
	g.open()
	out, err := h.invoke(cur, "inv-new", `{"a":1}`)
	if err != nil || string(out.GetOutput()) != `{"a":1}` {
		t.Fatalf("invoke on attempt 2: %q, %v", out.GetOutput(), err)
	}
}

// "A lower attempt returns FailedPrecondition."
func TestRegisterLowerAttemptIsFailedPrecondition(t *testing.T) {
	ad := &fakeAdapter{}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	cur := h.mustReady("run-1", 3)
	for _, attempt := range []int32{1, 2} {
		_, err := h.register("run-1", attempt, digest("run-1"))
		wantCode(t, err, codes.FailedPrecondition, functionruntime.ReasonAttemptSuperseded)
	}
	if st, err := h.status(cur); err != nil || st.GetState() != stateReady {
		t.Fatalf("current registration after lower attempts: %v, %v", st.GetState(), err)
	}
	if got := ad.starts.Load(); got != 1 {
		t.Errorf("Start called %d times, want 1", got)
	}
}

// "Permanent initialization failure is surfaced as FAILED with a bounded
// fatal_error through FunctionStatus."
func TestRegisterInitFailureIsFailedWithBoundedFatalError(t *testing.T) {
	long := "ImportError: " + strings.Repeat("é", 2000) + "\xff"
	tests := []struct {
		name    string
		err     error
		wantSub string
	}{
		{"short error", errors.New("ModuleNotFoundError: No module named 'handler'"), "No module named 'handler'"},
		{"long error with invalid UTF-8", errors.New(long), "ImportError: éé"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ad := &fakeAdapter{start: func(context.Context, functionruntime.WorkerSpec) error { return tt.err }}
			h := newHarness(t, ad, functionruntime.Limits{}, nil)
			resp, err := h.register("run-1", 1, digest("d"))
			if err != nil {
				t.Fatalf("RegisterFunction: %v", err)
			}
			if resp.GetState() != stateFailed {
				t.Fatalf("state = %v, want FAILED", resp.GetState())
			}
			st, err := h.status(resp.GetRegistration())
			if err != nil {
				t.Fatalf("FunctionStatus on a FAILED registration: %v; FAILED must be readable", err)
			}
			fe := st.GetFatalError()
			if st.GetState() != stateFailed || !strings.Contains(fe, tt.wantSub) {
				t.Fatalf("status = %v %q, want FAILED containing %q", st.GetState(), fe, tt.wantSub)
			}
			if len(fe) > functionruntime.MaxFatalErrorBytes || !utf8.ValidString(fe) {
				t.Fatalf("fatal_error is %d bytes (valid UTF-8: %v), want at most %d valid", len(fe), utf8.ValidString(fe), functionruntime.MaxFatalErrorBytes)
			}
			// Invoking a FAILED registration is refused before dispatch.
			_, err = h.invoke(resp.GetRegistration(), "", "{}")
			wantCode(t, err, codes.FailedPrecondition, functionruntime.ReasonRegistrationFailed)
			if c := functionruntime.Classify(err); c != functionruntime.ClassRegistrationFailed {
				t.Errorf("Classify = %v, want registration_failed", c)
			}
			// Repeating the attempt does not re-initialize; a higher attempt does.
			again, err := h.register("run-1", 1, digest("d"))
			if err != nil || again.GetState() != stateFailed || again.GetRegistration().GetRegistrationId() != resp.GetRegistration().GetRegistrationId() {
				t.Fatalf("repeat of a FAILED attempt: %v %v", again, err)
			}
			if n := ad.starts.Load(); n != 1 {
				t.Fatalf("Start called %d times, want 1", n)
			}
		})
	}
}

func TestRegisterHigherAttemptRecoversFromFailed(t *testing.T) {
	var fail = true
	var mu sync.Mutex
	ad := &fakeAdapter{start: func(context.Context, functionruntime.WorkerSpec) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			fail = false
			return errors.New("SyntaxError: invalid syntax")
		}
		return nil
	}}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	resp, err := h.register("run-1", 1, digest("d"))
	if err != nil || resp.GetState() != stateFailed {
		t.Fatalf("attempt 1: %v %v, want FAILED", resp.GetState(), err)
	}
	cur := h.mustReady("run-1", 2)
	if _, err := h.invoke(cur, "", "{}"); err != nil {
		t.Fatalf("invoke attempt 2: %v", err)
	}
}

// Initialization is bounded: a Start that outlives RegistrationTimeout makes
// the registration FAILED instead of hanging it in REGISTERING.
func TestRegisterInitTimeoutIsFailed(t *testing.T) {
	g := newGate()
	defer g.open()
	ad := &fakeAdapter{start: g.start}
	h := newHarness(t, ad, functionruntime.Limits{RegistrationTimeout: 50 * time.Millisecond}, nil)
	resp, err := h.register("run-1", 1, digest("d"))
	if err != nil || resp.GetState() != stateFailed {
		t.Fatalf("RegisterFunction = %v, %v; want FAILED", resp.GetState(), err)
	}
	st, err := h.status(resp.GetRegistration())
	if err != nil || !strings.Contains(st.GetFatalError(), "did not finish within 50ms") {
		t.Fatalf("FunctionStatus = %q, %v", st.GetFatalError(), err)
	}
}

// A caller that gives up waiting gets its context error; initialization goes
// on, and the retry finds the same registration.
func TestRegisterCallerCancelDoesNotAbortInitialization(t *testing.T) {
	g := newGate()
	ad := &fakeAdapter{start: g.start}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.cli.RegisterFunction(ctx, h.registerReq("run-1", 1, digest("run-1")))
		errc <- err
	}()
	g.waitEntered(t)
	cancel()
	wantCode(t, <-errc, codes.Canceled, "")

	g.open()
	ref := h.mustReady("run-1", 1)
	if n := ad.starts.Load(); n != 1 {
		t.Fatalf("Start called %d times, want 1", n)
	}
	if _, err := h.invoke(ref, "", "{}"); err != nil {
		t.Fatal(err)
	}
}

// The worker gets what registration asked for.
func TestRegisterPassesSpecToAdapter(t *testing.T) {
	ad := &fakeAdapter{}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	req := h.registerReq("run-1", 1, digest("d"))
	req.WorkingDir = h.dir + "/./"
	if _, err := h.cli.RegisterFunction(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	spec := ad.allWorkers()[0].spec
	if spec.RunUID != "run-1" || spec.Dir != h.dir || spec.Handler != "handler.handle" || spec.Env["GREETING"] != "hello" {
		t.Fatalf("spec = %+v", spec)
	}
}
