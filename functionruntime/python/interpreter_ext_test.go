package python_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fnbridge/fnbridge/functionruntime"
	"github.com/fnbridge/fnbridge/functionruntime/internal/adaptertest"
	"github.com/fnbridge/fnbridge/functionruntime/python"

	"github.com/fnbridge/fnbridge/internal/testtool"
)

// venvHandler imports a package only the test's virtual environment has,
// and reports where it runs from.
const venvHandler = `
import os, shutil, sys
import venvpkg

def run(event):
    return {
        "shout": venvpkg.shout(event),
        "prefix": sys.prefix,
        "in_venv": sys.prefix != sys.base_prefix,
        "package": venvpkg.__file__,
        "virtual_env": os.environ.get("VIRTUAL_ENV"),
        "path": os.environ["PATH"],
        "python_on_path": shutil.which("python"),
    }
`

// makeVenv makes a virtual environment at dir with `python3 -m venv
// --without-pip` and writes the package venvpkg into its site-packages.
func makeVenv(t *testing.T, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "python3", "-m", "venv", "--without-pip", dir).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v\n%s", err, out)
	}
	sites, _ := filepath.Glob(filepath.Join(dir, "lib", "python3*", "site-packages"))
	if len(sites) != 1 {
		t.Fatalf("site-packages of %s: %q", dir, sites)
	}
	adaptertest.WriteFiles(t, sites[0], map[string]string{"venvpkg/__init__.py": "def shout(s):\n    return s.upper() + '!'\n"})
}

// venvResult is what venvHandler returns.
type venvResult struct {
	Shout        string `json:"shout"`
	Prefix       string `json:"prefix"`
	InVenv       bool   `json:"in_venv"`
	Package      string `json:"package"`
	VirtualEnv   string `json:"virtual_env"`
	Path         string `json:"path"`
	PythonOnPath string `json:"python_on_path"`
}

// interpreterLine is the registration's "python interpreter" log record.
func interpreterLine(t *testing.T, f *adaptertest.Fixture) map[string]any {
	t.Helper()
	recs := f.Logs.Records("python interpreter")
	if len(recs) != 1 {
		t.Fatalf("%d \"python interpreter\" log lines, want 1", len(recs))
	}
	return recs[0]
}

var versionRE = regexp.MustCompile(`^3\.[0-9]+\.[0-9]+$`)

// A .venv in dir is used without being named, activated as bin/activate
// would (VIRTUAL_ENV, its bin first on PATH): its packages import and
// sys.prefix is the venv. The same handler without the venv fails its
// registration naming the missing module.
func TestVenvInDirIsUsedAndActivated(t *testing.T) {
	f := conformance.NewFixture(t, "h.run", map[string]string{"h.py": venvHandler})
	venv := filepath.Join(f.Dir, ".venv")
	makeVenv(t, venv)
	w := f.Start(t)
	var got venvResult
	if err := json.Unmarshal(f.MustInvoke(t, w, `"hi"`).Output, &got); err != nil {
		t.Fatal(err)
	}
	if got.Shout != "HI!" || got.Prefix != venv || !got.InVenv || !strings.HasPrefix(got.Package, venv+"/lib/") {
		t.Errorf("ran as %+v, want venvpkg imported from %s with sys.prefix the venv", got, venv)
	}
	if got.VirtualEnv != venv || got.Path != venv+"/bin:/usr/local/bin:/usr/bin:/bin" || got.PythonOnPath != venv+"/bin/python" {
		t.Errorf("environment %+v, want VIRTUAL_ENV=%s and its bin first on the default PATH", got, venv)
	}
	rec := interpreterLine(t, f)
	if rec["interpreter"] != venv+"/bin/python" || rec["chosen_by"] != ".venv in dir" || rec["virtual_env"] != venv || rec["level"] != "info" ||
		!versionRE.MatchString(rec["python_version"].(string)) {
		t.Errorf("registration log line %v, want the venv's python, how it was chosen and its version", rec)
	}

	without := conformance.NewFixture(t, "h.run", map[string]string{"h.py": venvHandler})
	err := without.StartErr(t)
	if want := `python handler "h.run": import module 'h': ModuleNotFoundError: No module named 'venvpkg'`; err.Error() != want {
		t.Errorf("without the venv: %v, want %q", err, want)
	}
	if rec := interpreterLine(t, without); rec["chosen_by"] != "PATH" || rec["virtual_env"] != "" {
		t.Errorf("without the venv the registration log line is %v, want python3 from PATH", rec)
	}
}

// python.interpreter, relative to dir, picks another venv; a PATH the
// registration sets stays behind the venv's bin.
func TestNamedInterpreterRelativeToDir(t *testing.T) {
	f := conformance.NewFixture(t, "h.run", map[string]string{"h.py": venvHandler})
	venv := filepath.Join(f.Dir, "envs", "app")
	makeVenv(t, venv)
	f.Spec.Interpreter = "envs/app/bin/python"
	f.Spec.Env = map[string]string{"PATH": "/opt/tools/bin:/usr/bin:/bin"}
	w := f.Start(t)
	var got venvResult
	if err := json.Unmarshal(f.MustInvoke(t, w, `"x"`).Output, &got); err != nil {
		t.Fatal(err)
	}
	if got.Shout != "X!" || got.Prefix != venv || got.VirtualEnv != venv || got.Path != venv+"/bin:/opt/tools/bin:/usr/bin:/bin" {
		t.Errorf("ran as %+v, want the venv %s activated in front of the registration's PATH", got, venv)
	}
	if rec := interpreterLine(t, f); rec["interpreter"] != venv+"/bin/python" || rec["chosen_by"] != "python.interpreter" {
		t.Errorf("registration log line %v, want the named interpreter", rec)
	}
}

// fakeInterpreter writes an executable shell script at dir/name.
func fakeInterpreter(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// An interpreter that is missing, too old or not a Python fails the
// registration before any handler code runs, naming the interpreter, how
// it was chosen and what is wrong; nothing is started.
func TestInterpreterProblemsFailTheRegistration(t *testing.T) {
	bin := t.TempDir()
	old := fakeInterpreter(t, bin, "python3.8",
		`echo 'starting up'; echo 'fnbridge-python-probe {"version": [3, 8, 10], "executable": "", "prefix": "/usr", "base_prefix": "/usr"}'`)
	versionOnly := fakeInterpreter(t, bin, "versiononly", `echo "Python 3.12.1"`)
	py2 := fakeInterpreter(t, bin, "python2", `echo "Unknown option: -I" >&2; exit 2`)
	notExecutable := filepath.Join(bin, "plain")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, interpreter string
		setup             func(dir string)
		want              string
	}{
		{"missing, relative to dir", "missing/bin/python", nil,
			"python interpreter DIR/missing/bin/python (python.interpreter) does not exist"},
		{"command not on PATH", "python3.99", nil,
			`python interpreter "python3.99" (python.interpreter) is not on the runtime's PATH`},
		{"a directory", bin, nil,
			"python interpreter " + bin + " (python.interpreter) is a directory, not a program"},
		{"not executable", notExecutable, nil,
			"python interpreter " + notExecutable + " (python.interpreter) is not executable"},
		{"too old", old, nil,
			"python interpreter " + old + " (python.interpreter) is Python 3.8.10; fnbridge needs Python 3.9 or newer"},
		{"answers like python --version", versionOnly, nil,
			"python interpreter " + versionOnly + ` (python.interpreter) did not answer the version check like a Python 3.9 or newer would (its output: "Python 3.12.1")`},
		{"does not take -I", py2, nil,
			"python interpreter " + py2 + " (python.interpreter) does not run (is it Python 3.9 or newer?): exit status 2; last log lines: Unknown option: -I"},
		{"broken .venv", "", func(dir string) {
			if err := os.MkdirAll(filepath.Join(dir, ".venv", "bin"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/nonexistent/python3.11", filepath.Join(dir, ".venv", "bin", "python")); err != nil {
				t.Fatal(err)
			}
		}, "python interpreter DIR/.venv/bin/python (.venv in dir) is a link to /nonexistent/python3.11, which does not exist: recreate the virtual environment"},
		// As venv makes them: python -> python3 -> the base interpreter;
		// the missing one is named, not the intact link between.
		{"broken .venv through a chain", "", func(dir string) {
			bin := filepath.Join(dir, ".venv", "bin")
			if err := os.MkdirAll(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/nonexistent/python3.11", filepath.Join(bin, "python3")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("python3", filepath.Join(bin, "python")); err != nil {
				t.Fatal(err)
			}
		}, "python interpreter DIR/.venv/bin/python (.venv in dir) is a link to /nonexistent/python3.11, which does not exist: recreate the virtual environment"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := conformance.NewFixture(t, "h.run", map[string]string{"h.py": "raise SystemExit('handler code ran')\n"})
			if tc.setup != nil {
				tc.setup(f.Dir)
			}
			f.Spec.Interpreter = tc.interpreter
			err := f.StartErr(t)
			if want := strings.ReplaceAll(tc.want, "DIR", f.Dir); err.Error() != want {
				t.Errorf("Start error:\n%v\nwant:\n%s", err, want)
			}
			if lines := f.Logs.Messages(); len(lines) > 0 {
				t.Errorf("the interpreter ran handler code or printed: %q", lines)
			}
		})
	}
}

// CheckInterpreter, the form a registration's interpreter must have: a
// path, or a python command name (no other program on PATH). The adapter
// is the server's InterpreterChooser with the same rule.
func TestCheckInterpreter(t *testing.T) {
	ic, ok := python.New(python.Options{}).(functionruntime.InterpreterChooser)
	if !ok {
		t.Fatal("the python adapter lets no registration choose its interpreter")
	}
	for _, good := range []string{"python", "python3", "python3.12", "python3.13t", "pypy3", "pypy3.10", ".venv/bin/python", "/usr/bin/python3", "./mypython"} {
		if err := ic.CheckInterpreter(good); err != nil {
			t.Errorf("%q refused: %v", good, err)
		}
	}
	for _, bad := range []string{"", "sh", "bash", "perl", "python-config", "python3 -S", "py\x00thon", "/opt/py\nthon", strings.Repeat("/a", 3000)} {
		if err := ic.CheckInterpreter(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Registrations that resolve one interpreter at once share one probe: a
// bridge starting 32 registrations through a pyenv shim ran 32 probes, a
// dozen bash processes each, while its first invocations waited.
func TestConcurrentResolutionsShareOneProbe(t *testing.T) {
	python3 := testtool.Require(t, "", "python3", "to probe")
	dir := t.TempDir()
	count := filepath.Join(dir, "probes")
	// Counts its runs, then waits for all resolutions to have begun.
	py := fakeInterpreter(t, dir, "py", `echo >> "`+count+`"; sleep 0.3; exec "`+python3+`" "$@"`)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			it, err := python.ResolveInterpreter(ctx, dir, py, "")
			if err == nil && !versionRE.MatchString(it.Version) {
				err = fmt.Errorf("version %q", it.Version)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 1 {
		t.Fatalf("%d probes for 16 resolutions at once, want 1", n)
	}
}

// A shared probe that dies (an OOM kill, a chaos test's SIGKILL) fails
// the registration that started it, not every one that waited for it:
// those ask on their own.
func TestASharedProbeThatDiesFailsOnlyItsOwnRegistration(t *testing.T) {
	python3 := testtool.Require(t, "", "python3", "to probe")
	dir := t.TempDir()
	first := filepath.Join(dir, "first")
	// The first run waits for the others to share it, then is killed.
	py := fakeInterpreter(t, dir, "py", `if mkdir "`+first+`" 2>/dev/null; then sleep 0.5; kill -KILL $$; fi; exec "`+python3+`" "$@"`)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := python.ResolveInterpreter(ctx, dir, py, "")
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			if !strings.Contains(err.Error(), "killed") {
				t.Errorf("failure %v, want the killed probe", err)
			}
		}
	}
	if failed != 1 {
		t.Fatalf("%d of 8 resolutions failed, want only the one whose probe was killed", failed)
	}
}
