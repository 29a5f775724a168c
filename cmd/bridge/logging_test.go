package main

import (
	"os"
	"testing"
)

// bridge invoke's log defaults: on a terminal, warn and console for each
// flag left unset; a flag the user set always wins; redirected, the
// defaults stay info and json.
func TestInteractiveLogDefaults(t *testing.T) {
	tests := []struct {
		name                  string
		levelSet, formatSet   bool
		terminal              bool
		wantLevel, wantFormat string
	}{
		{"terminal, nothing set", false, false, true, "warn", "console"},
		{"redirected, nothing set", false, false, false, "info", "json"},
		{"terminal, level set", true, false, true, "info", "console"},
		{"terminal, format set", false, true, true, "warn", "json"},
		{"terminal, both set", true, true, true, "info", "json"},
		{"redirected, both set", true, true, false, "info", "json"},
	}
	for _, tt := range tests {
		// "info" and "json" stand for what the flags hold: their defaults,
		// or what the user set them to.
		level, format := interactiveLogDefaults("info", "json", tt.levelSet, tt.formatSet, tt.terminal)
		if level != tt.wantLevel || format != tt.wantFormat {
			t.Errorf("%s: %s/%s, want %s/%s", tt.name, level, format, tt.wantLevel, tt.wantFormat)
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
