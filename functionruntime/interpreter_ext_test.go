package functionruntime_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/fnbridge/fnbridge/functionruntime"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// choosingAdapter is a fakeAdapter whose registrations may name their
// interpreter.
type choosingAdapter struct{ *fakeAdapter }

func (a choosingAdapter) CheckInterpreter(s string) error { return a.checkInterpreter(s) }

func refuseBad(s string) error {
	if s == "bad" {
		return errors.New(`"bad" is no interpreter`)
	}
	return nil
}

// withInterpreter is a context whose RegisterFunction carries the
// interpreter metadata, once per value.
func withInterpreter(values ...string) context.Context {
	return withMetadata(functionruntime.InterpreterMetadata, values...)
}

// withMetadata is a context whose RegisterFunction carries metadata key,
// once per value.
func withMetadata(key string, values ...string) context.Context {
	ctx := context.Background()
	for _, v := range values {
		ctx = metadata.AppendToOutgoingContext(ctx, key, v)
	}
	return ctx
}

// The interpreter a registration names travels as metadata (the
// contract's messages stay as they are) and reaches the adapter's
// WorkerSpec; a bad one is InvalidArgument naming the metadata before
// anything starts, and so is one sent to a runtime kind that has no
// interpreter to choose.
func TestRegisterCarriesTheInterpreterMetadata(t *testing.T) {
	ad := &fakeAdapter{checkInterpreter: refuseBad}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	if _, err := h.cli.RegisterFunction(withInterpreter(".venv/bin/python"), h.registerReq("run-named", 1, digest("a"))); err != nil {
		t.Fatal(err)
	}
	h.mustReady("run-default", 1)
	specs := map[string]string{}
	for _, w := range ad.allWorkers() {
		specs[w.spec.RunUID] = w.spec.Interpreter
	}
	if specs["run-named"] != ".venv/bin/python" || specs["run-default"] != "" {
		t.Errorf("interpreters in the worker specs: %q, want .venv/bin/python and none", specs)
	}

	for _, tc := range []struct {
		name   string
		ctx    context.Context
		want   string
		choose bool
	}{
		{"refused by the adapter", withInterpreter("bad"), `fnbridge-interpreter metadata: "bad" is no interpreter`, true},
		{"given twice", withInterpreter("python3", "python3"), "fnbridge-interpreter metadata: given 2 times, want once", true},
		{"a kind without interpreters", withInterpreter("python3"), "fnbridge-interpreter metadata: the fake runtime has no interpreter a registration can choose", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ad := &fakeAdapter{}
			if tc.choose {
				ad.checkInterpreter = refuseBad
			}
			wantRefusedBeforeStart(t, ad, tc.ctx, tc.want)
		})
	}
}

// wantRefusedBeforeStart registers run-x with ctx's metadata on a server
// of ad: InvalidArgument with message want, and no worker started.
func wantRefusedBeforeStart(t *testing.T, ad *fakeAdapter, ctx context.Context, want string) {
	t.Helper()
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	_, err := h.cli.RegisterFunction(ctx, h.registerReq("run-x", 1, digest("x")))
	if st := wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument); st.Message() != want {
		t.Errorf("message %q, want %q", st.Message(), want)
	}
	if n := ad.starts.Load(); n != 0 {
		t.Errorf("%d workers started", n)
	}
}

// With AllowedRoots, an interpreter named by path must be within a root
// once its directory's links are resolved (the program itself may link
// out, as a venv's python does); the adapter gets the resolved path. A
// command name is the runtime's own PATH's business.
func TestGRPCServerAllowedRootsConfineTheInterpreter(t *testing.T) {
	ad := &fakeAdapter{checkInterpreter: refuseBad}
	h := newHarness(t, ad, functionruntime.Limits{}, nil)
	root, err := filepath.EvalSymlinks(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	for _, dir := range []string{filepath.Join(root, "venv", "bin"), filepath.Join(outside, "bin")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// venv/bin/python links out, like a real venv's; lib links its
	// directory out of the root.
	if err := os.Symlink("/usr/bin/python3", filepath.Join(root, "venv", "bin", "python")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "bin"), filepath.Join(root, "lib")); err != nil {
		t.Fatal(err)
	}
	cli := confinedClient(t, h, root)

	for i, tc := range []struct{ interpreter, want string }{
		{"venv/bin/python", filepath.Join(root, "venv", "bin", "python")},
		{filepath.Join(root, "venv", "bin", "python"), filepath.Join(root, "venv", "bin", "python")},
		{"python3.12", "python3.12"},
	} {
		uid := "run-in-" + string(rune('a'+i))
		if _, err := cli.RegisterFunction(withInterpreter(tc.interpreter), h.registerReq(uid, 1, digest(uid))); err != nil {
			t.Fatalf("%s: %v", tc.interpreter, err)
		}
		for _, w := range ad.allWorkers() {
			if w.spec.RunUID == uid && w.spec.Interpreter != tc.want {
				t.Errorf("%s reached the adapter as %q, want %q", tc.interpreter, w.spec.Interpreter, tc.want)
			}
		}
	}
	started := ad.starts.Load()
	for _, interp := range []string{filepath.Join(outside, "bin", "python"), "lib/python", "../" + filepath.Base(outside) + "/bin/python"} {
		_, err := cli.RegisterFunction(withInterpreter(interp), h.registerReq("run-out", 1, digest("out")))
		st := wantCode(t, err, codes.InvalidArgument, functionruntime.ReasonInvalidArgument)
		if !strings.HasPrefix(st.Message(), "fnbridge-interpreter metadata: ") || !strings.Contains(st.Message(), "not within an allowed root") {
			t.Errorf("%s: message %q, want the interpreter refused as outside the roots", interp, st.Message())
		}
	}
	if n := ad.starts.Load(); n != started {
		t.Errorf("%d workers started for refused interpreters", n-started)
	}
}

// confinedClient serves h's server over gRPC with AllowedRoots(root) and
// returns a client of it.
func confinedClient(t *testing.T, h *harness, root string) executorv1.FunctionRuntimeClient {
	t.Helper()
	opt, err := functionruntime.AllowedRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	conn, _, _ := served(t, h, time.Second, opt)
	return executorv1.NewFunctionRuntimeClient(conn)
}
