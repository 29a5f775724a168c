package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// venvWithLib makes a virtual environment at dir with the real
// `python3 -m venv --without-pip` and puts the package venvlib, which no
// other Python has, in its site-packages.
func venvWithLib(t *testing.T, dir string) {
	t.Helper()
	if _, stderr, code := run(t, 60*time.Second, "python3", "-m", "venv", "--without-pip", dir); code != 0 {
		t.Fatalf("python3 -m venv %s: exit %d\n%s", dir, code, stderr)
	}
	site, err := filepath.Glob(filepath.Join(dir, "lib", "python3.*", "site-packages"))
	if err != nil || len(site) != 1 {
		t.Fatalf("the venv's site-packages: %q %v", site, err)
	}
	writeFile(t, filepath.Join(site[0], "venvlib", "__init__.py"), "def greet(name):\n    return 'hello, ' + name + ' (from the venv)'\n")
}

// venvRun is what venvuser.run returns.
type venvRun struct {
	Greeting   string `json:"greeting"`
	Prefix     string `json:"prefix"`
	VirtualEnv string `json:"virtual_env"`
	Path0      string `json:"path0"`
}

// assertRanIn checks that stdout is venvuser's answer from the venv at venv.
func assertRanIn(t *testing.T, stdout, venv string) {
	t.Helper()
	var got venvRun
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	want := venvRun{Greeting: "hello, x (from the venv)", Prefix: venv, VirtualEnv: venv, Path0: filepath.Join(venv, "bin")}
	if got != want {
		t.Errorf("the function ran as %+v, want %+v", got, want)
	}
}

// interpreterRecord returns the "python interpreter" registration log line
// among JSON log lines.
func interpreterRecord(t *testing.T, logs string) map[string]any {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["message"] == "python interpreter" {
			return rec
		}
	}
	t.Fatalf("no \"python interpreter\" log line in:\n%s", logs)
	return nil
}

var pythonVersionRE = regexp.MustCompile(`^3\.[0-9]+\.[0-9]+$`)

// Python environments with the real python3 and bridge binary: a .venv in
// dir is used without being named, activated (its packages import,
// sys.prefix and VIRTUAL_ENV are the venv, its bin leads PATH), and the
// registration says so in the log; the same function without the venv
// fails its registration naming the missing module. Through a remote
// `bridge runtime serve`, python.interpreter travels as metadata and is
// resolved (relative to dir) on the runtime's side, within its
// --allowed-root.
func TestPythonEnvironments(t *testing.T) {
	requireInterpreters(t)
	config := func(runtimes, python string) string {
		return runtimes + "services:\n  - name: Env\n    handlers:\n      - {name: run, runtime: python, dir: fn, handler: venvuser.run" + python + "}\n"
	}

	t.Run("venv in dir", func(t *testing.T) {
		ws := newWorkspace(t, "venvuser.py")
		venv := filepath.Join(ws.fn, ".venv")
		venvWithLib(t, venv)
		cfg := ws.config(t, config("", ""))
		stdout, stderr, code := runBridge(t, 60*time.Second, "invoke", "--config", cfg, "Env/run", `{"name":"x"}`)
		if code != 0 {
			t.Fatalf("bridge invoke: exit %d\n%s", code, stderr)
		}
		assertRanIn(t, stdout, venv)
		rec := interpreterRecord(t, stderr)
		if rec["interpreter"] != filepath.Join(venv, "bin", "python") || rec["chosen_by"] != ".venv in dir" || rec["virtual_env"] != venv ||
			!pythonVersionRE.MatchString(fmt.Sprint(rec["python_version"])) {
			t.Errorf("registration log line %v, want the venv's python, why and its version", rec)
		}
	})

	t.Run("no venv", func(t *testing.T) {
		ws := newWorkspace(t, "venvuser.py")
		cfg := ws.config(t, config("", ""))
		stdout, stderr, code := runBridge(t, 60*time.Second, "invoke", "--config", cfg, "Env/run", `{"name":"x"}`)
		if code == 0 {
			t.Fatalf("bridge invoke without the venv succeeded: %s", stdout)
		}
		if last := lastLine(stderr); !strings.Contains(last, `import module 'venvuser': ModuleNotFoundError: No module named 'venvlib'`) {
			t.Errorf("the failure %q does not name the missing module", last)
		}
		if rec := interpreterRecord(t, stderr); rec["chosen_by"] != "PATH" {
			t.Errorf("registration log line %v, want python3 from PATH", rec)
		}
	})

	t.Run("remote runtime", func(t *testing.T) {
		ws := newWorkspace(t, "venvuser.py")
		venv := filepath.Join(ws.fn, "envs", "app")
		venvWithLib(t, venv)
		elsewhere := filepath.Join(t.TempDir(), "bin")
		writeFile(t, filepath.Join(elsewhere, "python"), "")
		sock := filepath.Join(t.TempDir(), "py.sock")
		rt := newBridgeChild(t, "", grpcHealth("unix://"+sock), "runtime", "serve", "--runtime", "python", "--listen", "unix://"+sock,
			"--allowed-root", ws.root, "--log-format", "json", "--log-level", "info")
		rt.start()
		runtimes := "runtimes: {python: \"unix://" + sock + "\"}\n"

		cfg := ws.config(t, config(runtimes, ", python: {interpreter: envs/app/bin/python}"))
		stdout, stderr, code := runBridge(t, 60*time.Second, "invoke", "--config", cfg, "Env/run", `{"name":"x"}`)
		if code != 0 {
			t.Fatalf("bridge invoke through the runtime: exit %d\n%s", code, stderr)
		}
		assertRanIn(t, stdout, venv)
		if rec := interpreterRecord(t, rt.logs()); rec["interpreter"] != filepath.Join(venv, "bin", "python") || rec["chosen_by"] != "python.interpreter" {
			t.Errorf("the runtime's registration log line %v, want the named venv", rec)
		}

		cfg = ws.config(t, config(runtimes, ", python: {interpreter: "+filepath.Join(elsewhere, "python")+"}"))
		_, stderr, code = runBridge(t, 60*time.Second, "invoke", "--config", cfg, "Env/run", `{"name":"x"}`)
		if last := lastLine(stderr); code == 0 || !strings.Contains(last, "invalid registration: fnbridge-interpreter metadata: ") ||
			!strings.Contains(last, "not within an allowed root") {
			t.Errorf("an interpreter outside --allowed-root: exit %d, %q, want it refused", code, last)
		}
	})
}
