package bridge

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/kinds"
	executorv1 "github.com/fnbridge/fnbridge/proto/executor/v1"
)

// runUIDAlphabet is what the runtime accepts as run_uid (letters, digits,
// '.', '_', '-', starting with a letter or digit).
var runUIDAlphabet = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

func TestInstanceNormalisesAndRefuses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"replica-a", "replica-a"},
		{"Bridge-7d9c5b6f4-X2x7z", "bridge-7d9c5b6f4-x2x7z"}, // a pod name, case folded
		{"node1.example.com", "node1.example.com"},
		{"a_b", "a_b"},
	} {
		got, err := Instance(c.in, "--instance")
		if err != nil || got != c.want {
			t.Errorf("Instance(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "-lead", ".lead", "my pod", "ünï", "a/b", "a:b"} {
		_, err := Instance(in, "FNBRIDGE_INSTANCE")
		if err == nil || !strings.HasPrefix(err.Error(), "FNBRIDGE_INSTANCE: ") {
			t.Errorf("Instance(%q) = %v, want an error naming FNBRIDGE_INSTANCE", in, err)
		}
	}
}

// A 253-byte pod name is cut to MaxInstanceBytes; two that share their
// first 63 bytes stay distinct.
func TestInstanceLongIsCutAndStaysDistinct(t *testing.T) {
	base := strings.Repeat("deployment-name-", 15)
	a, err1 := Instance(base+"aaaa", "instance")
	b, err2 := Instance(base+"bbbb", "instance")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if len(a) != MaxInstanceBytes || len(b) != MaxInstanceBytes || a == b {
		t.Fatalf("cut identities %q (%d) and %q (%d): want %d bytes each and distinct", a, len(a), b, len(b), MaxInstanceBytes)
	}
	if !runUIDAlphabet.MatchString(a) || !strings.HasPrefix(a, base[:40]) {
		t.Fatalf("cut identity %q lost its start or its alphabet", a)
	}
}

func TestDefaultInstanceSanitisesHostname(t *testing.T) {
	for _, c := range []struct{ host, want string }{
		{"worker-3", "worker-3"},
		{"Build Host #2", "build-host--2"},
		{"_weird", "weird"},
		{"", "bridge"},
		{"---", "bridge"},
		{"héte", "h--te"}, // two bytes of UTF-8
	} {
		if got := sanitizeInstance(c.host); got != c.want {
			t.Errorf("sanitizeInstance(%q) = %q, want %q", c.host, got, c.want)
		}
	}
	if got := DefaultInstance(); !runUIDAlphabet.MatchString(got) || len(got) > MaxInstanceBytes {
		t.Errorf("DefaultInstance() = %q, not a valid identity", got)
	}
}

// Two instances never produce the same run UID, and it is deterministic
// (a restarted replica resumes its registrations).
func TestRunUIDIncludesInstance(t *testing.T) {
	a, b := runUID("replica-a", "Greeter", "greet", 3), runUID("replica-b", "Greeter", "greet", 3)
	if a != "replica-a-greeter-greet-3" || b != "replica-b-greeter-greet-3" {
		t.Fatalf("run UIDs %q, %q", a, b)
	}
	if runUID("replica-a", "Greeter", "greet", 3) != a {
		t.Fatal("run UID not deterministic")
	}
	// Service and handler names hold no '-': instance "x-y" with service
	// "s" is not instance "x" with service "y-s" (which cannot exist).
	if runUID("x-y", "S", "h", 0) == runUID("x", "Y", "S", 0) {
		t.Fatal("distinct instances produced one run UID")
	}
}

// The longest instance with long service and handler names still gives a
// run UID the FunctionRuntime server accepts: checked by the server's own
// validation, not a copy of its rule.
func TestRunUIDFitsTheRuntime(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.py"), []byte("def f(x):\n    return x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k, _ := kinds.Lookup("python")
	srv := functionruntime.NewServer(functionruntime.Options{Adapter: k.New(), Logger: zerolog.Nop()})
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	client := functionruntime.NewLocalClient(srv)
	inst := fitInstance(strings.Repeat("p", 200))
	long := strings.Repeat("Service_", 12)
	seen := map[string]bool{}
	for i := range 3 {
		uid := runUID(inst, long, long, i)
		if len(uid) > functionruntime.MaxRunUIDBytes || !runUIDAlphabet.MatchString(uid) || seen[uid] {
			t.Fatalf("run UID %q (%d bytes): too long, outside the alphabet or repeated", uid, len(uid))
		}
		seen[uid] = true
		digest, err := registrationDigest(&HandlerConfig{Runtime: "python", Dir: dir, Handler: "m.f"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.RegisterFunction(context.Background(), &executorv1.RegisterFunctionRequest{
			RunUid: uid, RegistrationAttempt: 1, WorkingDir: dir, Handler: "m.f", RegistrationDigest: digest, IdleTimeoutSeconds: 60,
		})
		if status.Code(err) == codes.InvalidArgument {
			t.Fatalf("the runtime refused run UID %q: %v", uid, err)
		}
	}
}

// A one-off run's identity starts with the replica's, differs on every
// call and stays within the bounds even for the longest identity.
func TestOneOffInstance(t *testing.T) {
	a, b := OneOffInstance("replica-a"), OneOffInstance("replica-a")
	if a == b || !strings.HasPrefix(a, "replica-a-invoke-") {
		t.Fatalf("one-off identities %q, %q: want distinct, starting replica-a-invoke-", a, b)
	}
	long := OneOffInstance(fitInstance(strings.Repeat("x", 300)))
	if len(long) > MaxInstanceBytes || !runUIDAlphabet.MatchString(long) {
		t.Fatalf("one-off identity %q (%d bytes) is not a valid identity", long, len(long))
	}
}
