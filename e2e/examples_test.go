package e2e

// The examples `make demo` runs, behind the real restate-server 1.7.12 on
// protocol v6 and v7, so that what the demo shows stays true.

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/internal/restateserver"
)

func TestExamples(t *testing.T) {
	requireInterpreters(t)
	cases := []bridgeCase{
		{"the Bash provisioning script resumes where it failed: its DNS step fails once, the VM step never runs again", testExampleProvision},
	}
	runBridgeGroups(t, []bridgeGroup{
		{name: "protocol v6", setup: func(t *testing.T, env *bridgeEnv) { env.srv = restateserver.Start(t, restateserver.Options{}) }, cases: cases},
		{name: "protocol v7", setup: func(t *testing.T, env *bridgeEnv) {
			env.srv = restateserver.Start(t, restateserver.Options{EnableProtocolV7: true})
		}, cases: cases},
	})
}

// Rule (issue 10, README: Durable steps): "a function that failed
// half-way resumes where it failed": Restate retries the attempt the DNS
// step failed, the VM step returns its journaled value without running,
// and the output holds every step's value.
func testExampleProvision(t *testing.T, env *bridgeEnv) {
	cfg, err := filepath.Abs(filepath.Join("..", "examples", "bridge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	serveAndRegister(t, env, cfg)
	host := fmt.Sprintf("e2e-%d-%d", os.Getpid(), time.Now().UnixNano())
	log := "/tmp/fnbridge-provision." + host + ".log"
	t.Cleanup(func() { _ = os.Remove(log) })
	out := callOK(caseContext(t), t, env.srv, "Provision", "provision", `"`+host+`"`, nil)
	if want := fmt.Sprintf(`{"host":"%s","vm":"vm-%s","dns":"%s.example.com","cert":"cert-for-vm-%s"}`, host, host, host, host); string(out) != want {
		t.Fatalf("Provision/provision answered %s, want %s", out, want)
	}
	b, err := os.ReadFile(log)
	if want := "create vm\nregister dns: timed out\nregister dns\nissue certificate\n"; err != nil || string(b) != want {
		t.Fatalf("the steps' commands ran %q (%v), want %q: each once, the DNS step twice", b, err, want)
	}
}
