package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// bridge invoke's log defaults: on a terminal, warn and console for each
// flag left unset, and the function's own lines from info while the level
// is the default; a flag the user set always wins; redirected, the
// defaults stay info and json.
func TestInteractiveLogDefaults(t *testing.T) {
	tests := []struct {
		name                  string
		levelSet, formatSet   bool
		terminal              bool
		wantLevel, wantFormat string
		wantHandler           string
	}{
		{"terminal, nothing set", false, false, true, "warn", "console", "info"},
		{"redirected, nothing set", false, false, false, "info", "json", ""},
		{"terminal, level set", true, false, true, "info", "console", ""},
		{"terminal, format set", false, true, true, "warn", "json", "info"},
		{"terminal, both set", true, true, true, "info", "json", ""},
		{"redirected, both set", true, true, false, "info", "json", ""},
	}
	for _, tt := range tests {
		// "info" and "json" stand for what the flags hold: their defaults,
		// or what the user set them to.
		d := interactiveLogDefaults("info", "json", tt.levelSet, tt.formatSet, tt.terminal)
		if d.level != tt.wantLevel || d.format != tt.wantFormat || d.handlerLevel != tt.wantHandler {
			t.Errorf("%s: %s/%s, function's lines from %q; want %s/%s from %q", tt.name, d.level, d.format, d.handlerLevel, tt.wantLevel, tt.wantFormat, tt.wantHandler)
		}
	}
}

// On a terminal the bridge's own records below warn are held back and the
// function's lines pass at their level: the writer decides by the record's
// source field, which a message cannot fake.
func TestHandlerLinesWriterKeepsTheFunctionsLines(t *testing.T) {
	var out bytes.Buffer
	l, err := newLogger("info", "", handlerLinesWriter{w: zerolog.LevelWriterAdapter{Writer: &out}, min: zerolog.WarnLevel})
	if err != nil {
		t.Fatal(err)
	}
	l.Info().Msg("registering function")
	l.Info().Msg(`"source":"handler"`)
	l.Info().Str("source", "handler").Msg("a plain line")
	l.Debug().Str("source", "handler").Msg("below the logger's level")
	l.Warn().Msg("the bridge warns")
	got := out.String()
	for _, want := range []string{"a plain line", "the bridge warns"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"registering function", `\"source\"`, "below the logger's level"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("shows %q:\n%s", unwanted, got)
		}
	}
}

// A pipe and /dev/null (a character device) are not terminals; the e2e
// test TestInvokeLogsOnATerminal runs the binary on a real one.
func TestIsTerminalRefusesPipesAndDevNull(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for _, f := range []*os.File{r, w, null} {
		if isTerminal(f) {
			t.Errorf("%s is taken for a terminal", f.Name())
		}
	}
}

// Every command refuses a bad --log-level or --log-format before it does
// anything, those that log nothing (version, keygen) included.
func TestEveryCommandChecksTheLogFlags(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--log-level", "bogus", "version"},
		{"--log-format", "xml", "version"},
		{"--log-level", "bogus", "keygen", "--out", filepath.Join(dir, "k.pem")},
	} {
		var stdout, stderr bytes.Buffer
		code := runBridge(args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "want ") || stdout.Len() != 0 {
			t.Errorf("bridge %q: exit %d, stdout %q, stderr %q; want exit 2 and a refusal naming the flag, nothing done", args, code, stdout.String(), stderr.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "k.pem")); !os.IsNotExist(err) {
		t.Errorf("keygen with a bad --log-level wrote its key (stat: %v)", err)
	}
}

// Every command exits 2 when nothing started because the configuration
// file or a flag is wrong, as bridge invoke does, and 1 on other failures.
func TestBadConfigurationOrFlagExitsTwo(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("protocl_mode: bidi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A configuration that loads: what is wrong is the flag or what it
	// names, refused before anything starts.
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("services:\n- name: S\n  handlers:\n  - {name: h, runtime: bash, dir: ., handler: f.f}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(dir, "private.yaml")
	if err := os.WriteFile(private, []byte("services:\n- name: S\n  handlers:\n  - {name: h, runtime: bash, dir: ., handler: f.f, ingress_private: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The refusal to serve a reachable address unsigned (README, Security)
	// is a mistake to fix, not a failure to retry, whichever command serves.
	reachable := []string{"--config", good, "--listen", "0.0.0.0:0"}
	for _, tc := range []struct {
		args []string
		want int
		says string
	}{
		{[]string{"manifest", "--config", bad}, 2, "protocl_mode"},
		{[]string{"serve", "--config", bad}, 2, "protocl_mode"},
		{[]string{"serve", "--no-such-flag"}, 2, "--no-such-flag"},
		{[]string{"manifest", "--config", filepath.Join(dir, "missing.yaml")}, 2, "missing.yaml"},
		{[]string{"manifest", "--config", bad, "--manifest-version", "9"}, 2, "manifest-version"},
		{append([]string{"serve"}, reachable...), 2, "identity_keys is empty"},
		{append([]string{"dev"}, reachable...), 2, "identity_keys is empty"},
		{[]string{"serve", "--config", good, "--identity-keys-file", filepath.Join(dir, "missing.pub")}, 2, "missing.pub does not exist"},
		{[]string{"serve", "--config", good, "--instance", "not a name!"}, 2, "--instance"},
		{[]string{"serve", "--config", good, "--context-listen", "unix://relative"}, 2, "--context-listen"},
		{[]string{"dev", "--config", good, "--admin", "ftp://x"}, 2, "--admin"},
		// cobra's own refusals are usage errors too, and a flag's error
		// says what the flag wants, not which Go parser refused it.
		{[]string{"servee"}, 2, `unknown command "servee"`},
		{[]string{"serve", "extra", "--config", good}, 2, `bridge serve takes no arguments (got "extra"): the configuration file is given with --config FILE`},
		{[]string{"invoke", "--config", good, "S/h", "{}", "{}"}, 2, `want Service/handler and its JSON input`},
		{[]string{"manifest", good}, 2, `bridge manifest takes no arguments (got "` + good + `"): the configuration file is given with --config FILE`},
		{[]string{"serve", "--config", ""}, 2, `the configuration file's path is empty (--config names the configuration file)`},
		{[]string{"manifest", "--config", dir}, 2, dir + ` is a directory (--config names the configuration file`},
		{[]string{"--log-level", "42", "version"}, 2, `--log-level "42": want trace, debug, info, warn or error`},
		{[]string{"--log-level", "disabled", "version"}, 2, `--log-level "disabled": want trace`},
		{[]string{"--log-level", "WARN", "version"}, 0, ``},
		{[]string{"version", "extra"}, 2, `unknown command "extra"`},
		{[]string{"completion", "tcsh"}, 2, `unknown shell "tcsh"`},
		{[]string{"manifest", "--config", good, "--manifest-version", "abc"}, 2, `"--manifest-version" flag: want a whole number`},
		{[]string{"manifest", "--config", private, "--manifest-version", "2"}, 2, "cannot keep S/h private"},
	} {
		var stdout, stderr bytes.Buffer
		if code := runBridge(tc.args, &stdout, &stderr); code != tc.want || !strings.Contains(stderr.String(), tc.says) {
			t.Errorf("bridge %q: exit %d, stderr %q; want exit %d saying %q", tc.args, code, stderr.String(), tc.want, tc.says)
		}
	}
}

// A console log line carries its date and seconds: console logs often land
// in files, where "10:29PM" says too little.
func TestConsoleLogLinesCarryDateAndSeconds(t *testing.T) {
	var buf bytes.Buffer
	w, err := logWriter("console", &buf)
	if err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(w).With().Timestamp().Logger()
	log.Info().Msg("hello")
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d INF hello`).MatchString(buf.String()) {
		t.Fatalf("console line %q, want it to start with the date and time to the second", buf.String())
	}
}
