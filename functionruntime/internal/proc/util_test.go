package proc

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	payloads := [][]byte{nil, []byte("x"), bytes.Repeat([]byte("ab"), 100<<10)}
	for i, p := range payloads {
		if err := WriteFrame(&buf, byte('A'+i), p); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&buf)
	for i, p := range payloads {
		kind, got, err := ReadFrame(r, 1<<20)
		if err != nil || kind != byte('A'+i) || !bytes.Equal(got, p) {
			t.Fatalf("frame %d: kind %q, %d bytes, %v", i, kind, len(got), err)
		}
	}
	if _, _, err := ReadFrame(r, 10); !errors.Is(err, io.EOF) {
		t.Fatalf("at end: %v, want EOF", err)
	}
}

func TestFrameLimitAndTruncation(t *testing.T) {
	var buf bytes.Buffer
	_ = WriteFrame(&buf, 'R', make([]byte, 100))
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(buf.Bytes())), 99); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(buf.Bytes()[:50])), 1000); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut frame: %v", err)
	}
}

// Rule: workers get "the registration env plus a minimal base (PATH, LANG,
// HOME)".
func TestBuildEnv(t *testing.T) {
	env, err := BuildEnv("/work", map[string]string{"LANG": "de_DE.UTF-8", "A": "1", "FNBRIDGE_OUTPUTS": "mine"},
		map[string]string{"FNBRIDGE_OUTPUTS": "/tmp/o"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A=1", "FNBRIDGE_OUTPUTS=/tmp/o", "HOME=/work", "LANG=de_DE.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin"}
	if !reflect.DeepEqual(env, want) {
		t.Fatalf("env = %q, want %q", env, want)
	}
	for _, bad := range []map[string]string{{"": "x"}, {"A=B": "x"}, {"A": "x\x00y"}} {
		if _, err := BuildEnv("/", bad, nil); err == nil {
			t.Fatalf("BuildEnv(%q) accepted", bad)
		}
	}
}

// Rule: outputs are "key=value lines ... bad lines ⇒ clear error".
func TestParseOutputs(t *testing.T) {
	got, err := ParseOutputs([]byte("a=1\r\n\n  \nb.c-d_e=x=y\na=2\nlast=no newline"))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"a": "2", "b.c-d_e": "x=y", "last": "no newline"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("outputs = %v, want %v", got, want)
	}
	for in, want := range map[string]string{
		"novalue\n":  "line 1: missing '='",
		"ok=1\n=x\n": "line 2: empty output key",
		"1a=x\n":     `invalid output key "1a"`,
		"a b=x\n":    `invalid output key "a b"`,
		"k=\xff\n":   "not valid UTF-8",
	} {
		if _, err := ParseOutputs([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseOutputs(%q) = %v, want %q", in, err, want)
		}
	}
	if _, err := ParseOutputs(make([]byte, MaxOutputsFile+1)); err == nil {
		t.Fatal("oversized outputs file accepted")
	}
}
