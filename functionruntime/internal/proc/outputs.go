package proc

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// OutputsEnv names the environment variable that holds the path of the
// per-invocation outputs file.
const OutputsEnv = "FNBRIDGE_OUTPUTS"

// MaxOutputsFile bounds the outputs file a handler may write, in bytes.
const MaxOutputsFile = 1 << 20

// ParseOutputs parses the outputs file: one key=value per line; the value
// is everything after the first '=' up to the end of the line (a trailing
// "\r" is dropped); blank lines are ignored; a later key replaces an
// earlier one. Keys follow [CheckOutput].
func ParseOutputs(data []byte) (map[string]string, error) {
	if len(data) > MaxOutputsFile {
		return nil, fmt.Errorf("%s file is %d bytes, more than the %d allowed", OutputsEnv, len(data), MaxOutputsFile)
	}
	out := map[string]string{}
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		eq := bytes.IndexByte(line, '=')
		if eq < 0 {
			return nil, fmt.Errorf("%s line %d: missing '=' (want key=value): %q", OutputsEnv, n, Clip(string(line), 80))
		}
		k, v := string(line[:eq]), string(line[eq+1:])
		if err := CheckOutput(k, v); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", OutputsEnv, n, err)
		}
		out[k] = v
	}
	return out, nil
}

// CheckOutput validates one output: the key is ASCII letters, digits, '_',
// '.' and '-', starting with a letter or '_'; the value is valid UTF-8
// without NUL bytes. How long a key and a value may be is the server's
// OutputLimits, checked on every result (here the file's size bounds them).
func CheckOutput(k, v string) error {
	if k == "" {
		return fmt.Errorf("empty output key")
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		letter := c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if i == 0 && !letter || !letter && !('0' <= c && c <= '9') && c != '.' && c != '-' {
			return fmt.Errorf("invalid output key %q: use letters, digits, '_', '.', '-', starting with a letter or '_'", Clip(k, 80))
		}
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("output %q: value is not valid UTF-8", k)
	}
	if bytes.IndexByte([]byte(v), 0) >= 0 {
		return fmt.Errorf("output %q: value contains a NUL byte", k)
	}
	return nil
}

// Clip shortens s to at most n bytes (plus an ellipsis) for an error message.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
