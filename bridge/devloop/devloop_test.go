package devloop

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/bridge"
	"github.com/fnbridge/fnbridge/restate/identity"
)

// A configuration refused as a whole (listen changed, which takes a
// restart) is not served, nor is the handler directory it names: the
// watch stays on the files of the configuration served, and on the file.
func TestRefusedReloadKeepsWatchingTheServedFiles(t *testing.T) {
	w, root := watchFixture(t)
	served, refused := filepath.Join(root, "a", "s.sh"), filepath.Join(root, "b", "s.sh")
	for _, f := range []string{served, refused} {
		mkdir(t, filepath.Dir(f))
		write(t, f, "g() { :; }\n")
	}
	const text = "services:\n  - name: S\n    handlers:\n      - {name: g, runtime: bash, dir: %s, handler: s.g}\n"
	cfg := parseConfig(t, root, fmt.Sprintf(text, "a"))
	next := parseConfig(t, root, "listen: 127.0.0.1:9081\n"+fmt.Sprintf(text, "b"))
	live, err := bridge.NewLive(cfg, bridge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logs := make(logLines, 64)
	l := &loop{c: Config{Live: live, Load: func() (*bridge.Config, error) { return next, nil }, Log: zerolog.New(logs)}, w: w}
	w.set(watchSet(cfg))

	l.reload(context.Background(), []string{cfg.Path})
	select {
	case line := <-logs:
		if !strings.Contains(line, "takes a restart") {
			t.Fatalf("reload logged %q, want the refusal", line)
		}
	default:
		t.Fatal("reload logged nothing")
	}
	// One batch: had the refused configuration's file stayed watched, it
	// would be named too.
	write(t, refused, "g() { echo b; }\n")
	write(t, served, "g() { echo a; }\n")
	if got := nextBatch(t, w); !slices.Equal(got, []string{served}) {
		t.Fatalf("edits reported %v, want the served handler's file only [%s]", got, served)
	}
	write(t, cfg.Path, "listen: 127.0.0.1:9080\n")
	if got := nextBatch(t, w); !slices.Equal(got, []string{cfg.Path}) {
		t.Fatalf("an edit of the configuration reported %v, want [%s]", got, cfg.Path)
	}
}

// A reload that turns request identity off on a reachable address (keys
// replaced by allow_unauthenticated: true) is a change, said as such, and
// warns as serve does at start: it was logged as "nothing changed".
func TestReloadIntoUnsignedExposureWarns(t *testing.T) {
	w, root := watchFixture(t)
	mkdir(t, filepath.Join(root, "a"))
	write(t, filepath.Join(root, "a", "s.sh"), "g() { :; }\n")
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	const svc = "services:\n  - name: S\n    handlers:\n      - {name: g, runtime: bash, dir: a, handler: s.g}\n"
	cfg := parseConfig(t, root, "listen: 0.0.0.0:9080\nidentity_keys: ["+identity.EncodeKey(pub)+"]\n"+svc)
	next := parseConfig(t, root, "listen: 0.0.0.0:9080\nallow_unauthenticated: true\n"+svc)
	live, err := bridge.NewLive(cfg, bridge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Close(context.Background()) })
	logs := make(logLines, 64)
	// Registered already: the manifest does not change.
	l := &loop{c: Config{Live: live, Load: func() (*bridge.Config, error) { return next, nil }, Log: zerolog.New(logs)}, w: w, registered: encode(live.Manifest())}
	l.reload(context.Background(), []string{cfg.Path})
	var lines []string
	for len(logs) > 0 {
		lines = append(lines, <-logs)
	}
	all := strings.Join(lines, "\n")
	if !strings.Contains(all, `"level":"warn","listen":"0.0.0.0:9080","message":"`+bridge.UnauthenticatedWarning+`"`) {
		t.Errorf("no warning that unsigned requests are now served on a reachable address:\n%s", all)
	}
	if strings.Contains(all, "nothing changed") || !strings.Contains(all, `"endpoint":["identity_keys","allow_unauthenticated"]`) {
		t.Errorf("the reload line does not name the endpoint settings changed:\n%s", all)
	}
}
