package devloop

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fnbridge/fnbridge/bridge"
)

func TestBatchIsDueWhenQuietOrAtTheLatestAfterMaxDelay(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := batch{quiet: 100 * time.Millisecond, maxDelay: time.Second}
	if b.pending() {
		t.Fatal("an empty batch is pending")
	}
	b.add("/w/b.sh", t0)
	b.add("/w/a.py", t0.Add(60*time.Millisecond))
	b.add("/w/b.sh", t0.Add(90*time.Millisecond))
	if got, want := b.deadline(), t0.Add(190*time.Millisecond); !got.Equal(want) {
		t.Fatalf("deadline %v, want quiet after the last event (%v)", got, want)
	}
	// Events that never pause: due maxDelay after the first.
	for d := 100 * time.Millisecond; d < 2*time.Second; d += 50 * time.Millisecond {
		b.add("/w/a.py", t0.Add(d))
	}
	if got, want := b.deadline(), t0.Add(time.Second); !got.Equal(want) {
		t.Fatalf("deadline %v under a steady stream of events, want maxDelay after the first (%v)", got, want)
	}
	if got := b.take(); !slices.Equal(got, []string{"/w/a.py", "/w/b.sh"}) || b.pending() {
		t.Fatalf("take = %v (pending %v), want each path once, sorted, and an empty batch", got, b.pending())
	}
}

// watchFixture is a watcher over dir with a long enough quiet window that
// a burst of writes in a loop is one batch even on a loaded machine.
func watchFixture(t *testing.T) (*watcher, string) {
	t.Helper()
	dir := t.TempDir()
	w, err := newWatcher(zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.close() })
	w.quiet = 300 * time.Millisecond
	return w, dir
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// saveByRename saves as many editors do: a new file renamed over the old
// one, which gets a new inode.
func saveByRename(t *testing.T, path, content string) {
	t.Helper()
	write(t, path+".tmp", content)
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func nextBatch(t *testing.T, w *watcher) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := w.next(ctx)
	if err != nil {
		t.Fatalf("no change reported: %v", err)
	}
	return got
}

func TestWatcherReportsEverySaveOfAWatchedFileOnce(t *testing.T) {
	w, dir := watchFixture(t)
	py, sh := filepath.Join(dir, "h.py"), filepath.Join(dir, "h.sh")
	write(t, py, "v1")
	write(t, sh, "v1")
	w.set(watchSpec{sources: []string{py, sh}})

	// Replacing the inode does not lose the watch: the second rename-over
	// save is seen too.
	for _, v := range []string{"v2", "v3"} {
		saveByRename(t, py, v)
		if got := nextBatch(t, w); !slices.Equal(got, []string{py}) {
			t.Fatalf("rename-over save %s reported %v, want [%s]", v, got, py)
		}
	}
	// A burst of writes is one batch: had it split, the next batch would
	// hold h.py again instead of h.sh alone. Events of files not watched,
	// and a chmod alone, open no batch.
	// The window is long here: a writer descheduled for 300ms on a loaded
	// machine would split the burst and fail the test for no fault.
	w.quiet = 2 * time.Second
	for i := range 5 {
		write(t, py, "burst "+string(rune('a'+i)))
	}
	if got := nextBatch(t, w); !slices.Equal(got, []string{py}) {
		t.Fatalf("a burst of writes reported %v, want [%s]", got, py)
	}
	w.quiet = 300 * time.Millisecond
	write(t, filepath.Join(dir, "notes.txt"), "not watched")
	if err := os.Chmod(py, 0o600); err != nil {
		t.Fatal(err)
	}
	write(t, sh, "v2")
	if got := nextBatch(t, w); !slices.Equal(got, []string{sh}) {
		t.Fatalf("reported %v, want [%s] only", got, sh)
	}
}

// A handler whose module does not exist yet has its directory watched:
// creating the module is a change.
func TestWatcherSeesAFileCreatedInAWatchedDirectory(t *testing.T) {
	w, dir := watchFixture(t)
	sub := filepath.Join(dir, "fn")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	w.set(watchSpec{files: []string{filepath.Join(dir, "bridge.yaml")}, anyIn: []string{sub}})
	created := filepath.Join(sub, "new.py")
	write(t, created, "def f(x):\n    return x\n")
	if got := nextBatch(t, w); !slices.Equal(got, []string{created}) {
		t.Fatalf("reported %v, want [%s]", got, created)
	}
}

// The dev loop watches what the registration digest covers: the handler's
// source files as its runtime kind names them (its module and the other
// modules beside it), and the configuration.
func TestWatchSetIsTheConfigurationAndTheDigestedSources(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "h.py"), "def f(x):\n    return x\n")
	write(t, filepath.Join(dir, "s.sh"), "g() { :; }\n")
	if err := os.Mkdir(filepath.Join(dir, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "lib", "util.py"), "X = 1\n")
	cfg, err := bridge.ParseConfig([]byte(`
services:
  - name: S
    handlers:
      - {name: f, runtime: python, dir: ., handler: h.f}
      - {name: g, runtime: bash, dir: ., handler: s.g}
      - {name: m, runtime: python, dir: ., handler: missing.f}
`), dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Path = filepath.Join(dir, "bridge.yaml")
	spec := watchSet(cfg)
	if want := []string{cfg.Path}; !slices.Equal(spec.files, want) {
		t.Errorf("files %v, want %v", spec.files, want)
	}
	if want := []string{filepath.Join(dir, "h.py"), filepath.Join(dir, "lib", "util.py"), filepath.Join(dir, "s.sh")}; !slices.Equal(spec.sources, want) {
		t.Errorf("sources %v, want %v", spec.sources, want)
	}
	if !slices.Equal(spec.anyIn, []string{dir}) {
		t.Errorf("directories %v, want [%s] for the handler whose module is missing", spec.anyIn, dir)
	}
	if want := []tree{{dir, ".py"}, {dir, ".sh"}}; !slices.Equal(spec.trees, want) {
		t.Errorf("trees %v, want %v", spec.trees, want)
	}
}

// A new file of a handler's language beside its sources is a change (a
// helper module just written, which the reload makes part of its code);
// another file there is not.
func TestWatcherSeesANewHelperBesideTheSources(t *testing.T) {
	w, dir := watchFixture(t)
	py := filepath.Join(dir, "h.py")
	write(t, py, "v1")
	w.set(watchSpec{sources: []string{py}})
	write(t, filepath.Join(dir, "notes.txt"), "not code")
	helper := filepath.Join(dir, "helper.py")
	write(t, helper, "X = 1\n")
	if got := nextBatch(t, w); !slices.Equal(got, []string{helper}) {
		t.Fatalf("reported %v, want [%s]", got, helper)
	}
}

// A helper in a directory of the handler's tree that holds no source yet,
// or in a directory made after the watch began, is a change too: the
// digest covers every directory SourceTree walks. (The dev loop sets the
// watch again on every reload, as here after the new directory.)
func TestWatcherSeesAHelperInANewDirectory(t *testing.T) {
	w, dir := watchFixture(t)
	py := filepath.Join(dir, "h.py")
	write(t, py, "v1")
	lib := filepath.Join(dir, "lib")
	if err := os.Mkdir(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := watchSpec{sources: []string{py}, trees: []tree{{dir, ".py"}}}
	w.set(spec)
	util := filepath.Join(lib, "util.py")
	write(t, util, "X = 1\n")
	if got := nextBatch(t, w); !slices.Equal(got, []string{util}) {
		t.Fatalf("reported %v, want [%s]", got, util)
	}
	pkg := filepath.Join(dir, "pkg")
	if err := os.Mkdir(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := nextBatch(t, w); !slices.Equal(got, []string{pkg}) {
		t.Fatalf("reported %v, want the new directory [%s]", got, pkg)
	}
	w.set(spec)
	mod := filepath.Join(pkg, "mod.py")
	write(t, mod, "Y = 2\n")
	if got := nextBatch(t, w); !slices.Equal(got, []string{mod}) {
		t.Fatalf("reported %v, want [%s]", got, mod)
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// parseConfig is the configuration text as if read from dir/bridge.yaml.
func parseConfig(t *testing.T, dir, text string) *bridge.Config {
	t.Helper()
	cfg, err := bridge.ParseConfig([]byte(text), dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Path = filepath.Join(dir, "bridge.yaml")
	return cfg
}

// A directory of a handler's tree deleted and made again (rm -rf
// functions/app && cp -r backup/app functions/app) took its watch with it:
// the reload this starts watches the new directory.
func TestWatcherSeesEditsInADirectoryDeletedAndMadeAgain(t *testing.T) {
	w, dir := watchFixture(t)
	app := filepath.Join(dir, "app")
	mkdir(t, app)
	write(t, filepath.Join(dir, "h.py"), "def f(x):\n    return x\n")
	util := filepath.Join(app, "util.py")
	write(t, util, "X = 1\n")
	cfg := parseConfig(t, dir, "services:\n  - name: S\n    handlers:\n      - {name: f, runtime: python, dir: ., handler: h.f}\n")
	w.set(watchSet(cfg))
	if err := os.RemoveAll(app); err != nil {
		t.Fatal(err)
	}
	mkdir(t, app)
	write(t, util, "X = 2\n")
	if got := nextBatch(t, w); !slices.Contains(got, app) {
		t.Fatalf("deleting and making %s again reported %v, want it named", app, got)
	}
	w.set(watchSet(cfg)) // the reload's
	write(t, util, "X = 3\n")
	if got := nextBatch(t, w); !slices.Equal(got, []string{util}) {
		t.Fatalf("an edit in the directory made again reported %v, want [%s]", got, util)
	}
}

// The handler's directory itself moved away, and put back after a reload
// found it missing (a restore, a checkout): both are changes, and the
// directory put back is watched again.
func TestWatcherSeesAHandlerDirectoryReplaced(t *testing.T) {
	w, root := watchFixture(t)
	// The configuration apart, so that only the handler's tree is watched.
	conf, fn, backup := filepath.Join(root, "conf"), filepath.Join(root, "src", "fn"), filepath.Join(root, "backup", "fn")
	for _, d := range []string{conf, fn, backup} {
		mkdir(t, d)
	}
	py := filepath.Join(fn, "h.py")
	write(t, py, "def f(x):\n    return x\n")
	write(t, filepath.Join(backup, "h.py"), "def f(x):\n    return [x]\n")
	cfg := parseConfig(t, conf, "services:\n  - name: S\n    handlers:\n      - {name: f, runtime: python, dir: ../src/fn, handler: h.f}\n")
	w.set(watchSet(cfg))
	if err := os.Rename(fn, fn+".old"); err != nil {
		t.Fatal(err)
	}
	if got := nextBatch(t, w); !slices.Equal(got, []string{fn}) {
		t.Fatalf("moving the handler's directory away reported %v, want [%s]", got, fn)
	}
	w.set(watchSet(cfg)) // the reload's, which finds no directory
	if err := os.Rename(backup, fn); err != nil {
		t.Fatal(err)
	}
	if got := nextBatch(t, w); !slices.Equal(got, []string{fn}) {
		t.Fatalf("putting the handler's directory back reported %v, want [%s]", got, fn)
	}
	w.set(watchSet(cfg))
	write(t, py, "def f(x):\n    return {'x': x}\n")
	if got := nextBatch(t, w); !slices.Equal(got, []string{py}) {
		t.Fatalf("an edit in the directory put back reported %v, want [%s]", got, py)
	}
}

// A handler in a subpackage (app.handlers.run) whose module is deleted
// cannot be named, and so fails to reload; creating the module again is a
// change, so the fix is picked up.
func TestWatcherSeesAMissingModuleMadeAgain(t *testing.T) {
	w, dir := watchFixture(t)
	mod := filepath.Join(dir, "app", "handlers.py")
	mkdir(t, filepath.Dir(mod))
	write(t, mod, "def run(x):\n    return x\n")
	cfg := parseConfig(t, dir, "services:\n  - name: S\n    handlers:\n      - {name: run, runtime: python, dir: ., handler: app.handlers.run}\n")
	w.set(watchSet(cfg))
	if err := os.Remove(mod); err != nil {
		t.Fatal(err)
	}
	if got := nextBatch(t, w); !slices.Equal(got, []string{mod}) {
		t.Fatalf("deleting the module reported %v, want [%s]", got, mod)
	}
	w.set(watchSet(cfg)) // the reload's, which finds no module
	write(t, mod, "def run(x):\n    return [x]\n")
	if got := nextBatch(t, w); !slices.Equal(got, []string{mod}) {
		t.Fatalf("creating the module again reported %v, want [%s]", got, mod)
	}
}
