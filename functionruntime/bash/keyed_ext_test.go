package bash_test

import (
	"context"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/bridge/stepctx"
	"github.com/fnbridge/fnbridge/bridge/stepctx/stepctxtest"
	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/bash"
	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
	"github.com/fnbridge/fnbridge/functionruntime/internal/proc/steptest"
)

// keyedSh is the test file keyed.sh: Bash functions of a virtual object
// and of awakeables, through the fnbridge command.
const keyedSh = `
counter() {
	local n
	n=$(fnbridge state get count) || n=0
	fnbridge state set count "$((n + $1))" || exit
	printf '%s|%s|%s' "$(fnbridge key)" "$(fnbridge state get count)" "$(fnbridge state keys | tr '\n' ,)"
}

shared_write() {
	fnbridge state set count 1
	echo "status $?"
	fnbridge state get count
}

approval() {
	local id v
	id=$(fnbridge awakeable) || exit
	fnbridge run publish -- printf '%s' "$id" >/dev/null || exit
	v=$(fnbridge await "$id") || exit
	echo "$id $v"
}

function_key() {
	echo "$FNBRIDGE_KEY|$(fnbridge key)"
	fnbridge state get x 2>&1
	echo "status $?"
}
`

func (e *stepsEnv) keyed(t *testing.T, fn string) *steps {
	t.Helper()
	f := conformance.NewFixture(t, "keyed."+fn, map[string]string{"keyed.sh": keyedSh})
	f.A = bash.New(bash.Options{Grace: adaptertest.Grace, ContextCommand: e.bridge})
	return &steps{stepsEnv: e, f: f, w: f.Start(t)}
}

// invokeKeyed runs one invocation with the key and the step context of a
// (nil: function mode).
func (s *steps) invokeKeyed(t *testing.T, a *stepctx.Attempt, key, input string) (functionruntime.Result, error) {
	t.Helper()
	inv := s.Invocation(s.f, a, input)
	inv.Env = map[string]string{functionruntime.EnvKey: key}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.w.Invoke(ctx, inv)
}

// TestKeyed runs the keyed commands of Bash functions against a real
// context endpoint; the subtests share one build of the bridge.
func TestKeyed(t *testing.T) {
	adaptertest.Require(t, "bash")
	adaptertest.Require(t, "go")
	e := newStepsEnv(t)
	exclusive := stepctx.WithHandler(stepctx.HandlerInfo{Name: "Counter/add", Keyed: true})

	// The key is fnbridge key and $FNBRIDGE_KEY; state reads and writes
	// go through the journal.
	t.Run("counter", func(t *testing.T) {
		s := e.keyed(t, "counter")
		j := &stepctxtest.Journal{State: map[string][]byte{"count": []byte("40"), "a": []byte("1")}}
		res, err := s.invokeKeyed(t, e.Open(t, j, exclusive), "k 1", "2")
		steptest.MustOutput(t, res, err, "k 1|42|a,count,")
		j = &stepctxtest.Journal{}
		res, err = s.invokeKeyed(t, e.Open(t, j, exclusive), "k2", "5")
		steptest.MustOutput(t, res, err, "k2|5|count,")
	})

	// Rule (issue 12): a state write from a shared handler: the message on
	// stderr naming the handler as shared, exit 100; reads work.
	t.Run("shared write", func(t *testing.T) {
		s := e.keyed(t, "shared_write")
		j := &stepctxtest.Journal{State: map[string][]byte{"count": []byte("7")}}
		a := e.Open(t, j, stepctx.WithHandler(stepctx.HandlerInfo{Name: "Counter/get", Keyed: true, Shared: true}))
		res, err := s.invokeKeyed(t, a, "k", "")
		steptest.MustOutput(t, res, err, "status 100\n7")
		found := false
		for _, l := range s.f.Logs.Messages() {
			found = found || l == "fnbridge: state set refused: Counter/get is a shared handler (shared: true): shared handlers read state but cannot change it; change it from an exclusive handler"
		}
		if !found {
			t.Fatalf("logs %q lack the refusal", s.f.Logs.Messages())
		}
	})

	// An awakeable: fnbridge await suspends the invocation until it is
	// resolved; the next attempt gets the same id and prints the value; a
	// rejection is exit status 100, a terminal failure.
	t.Run("awakeable", func(t *testing.T) {
		s := e.keyed(t, "approval")
		j := &stepctxtest.Journal{}
		_, err := s.invokeKeyed(t, e.Open(t, j), "", "")
		steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: functionruntime.AttemptEndedType, ExitCode: 75, Message: "suspended"})
		id := stepctxtest.AwakeableID(0)
		j.ResolveAwakeable(id, stepctx.Result{Value: []byte(`{"approved":true}`)})
		j.Restart()
		res, err := s.invokeKeyed(t, e.Open(t, j), "", "")
		steptest.MustOutput(t, res, err, id+` {"approved":true}`)

		j = &stepctxtest.Journal{}
		j.ResolveAwakeable(id, stepctx.Result{Failure: &stepctx.Failure{Code: 500, Message: "not approved"}})
		_, err = s.invokeKeyed(t, e.Open(t, j), "", "")
		steptest.WantHandlerError(t, err, functionruntime.HandlerError{Type: "exit", Terminal: true, ExitCode: 100, Message: "not approved"})
	})

	// In durability: function the key is there; state says it needs
	// durability: steps.
	t.Run("function mode", func(t *testing.T) {
		s := e.keyed(t, "function_key")
		res, err := s.invokeKeyed(t, nil, "k9", "")
		steptest.MustOutput(t, res, err, "k9|k9\nfnbridge: FNBRIDGE_CONTEXT and FNBRIDGE_CONTEXT_TOKEN are not set: context calls work only inside a function that fnbridge runs with durable steps (durability: steps), and in the processes it starts with its environment (not under env -i or a scrubbed environment)\nstatus 3")
	})
}
