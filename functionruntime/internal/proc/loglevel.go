package proc

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/rs/zerolog"
)

// A function's log line keeps the level it gives itself, so a handler's
// errors are errors in the server's logs and its debug output can be
// filtered out, without the handler knowing anything about them. Two forms
// are recognised; any other line is info.
//
//   - A line starting with a level word, in any case, bracketed or followed
//     by ':' or a space or nothing: "ERROR db down", "[warn] slow",
//     "WARNING:root:disk low" (Python logging's default format), "Error:
//     no such file". The line is kept whole as the message.
//   - A JSON object with a string "level" holding such a word: the
//     message is its "msg" or "message" (the whole line without either),
//     and its other members go under "fields".

// levelWords maps the words a line may start with to levels. CRITICAL and
// FATAL (Python's and Go's highest) are errors: the handler's fatal is
// not the server's.
var levelWords = map[string]zerolog.Level{
	"trace":    zerolog.TraceLevel,
	"debug":    zerolog.DebugLevel,
	"info":     zerolog.InfoLevel,
	"warn":     zerolog.WarnLevel,
	"warning":  zerolog.WarnLevel,
	"error":    zerolog.ErrorLevel,
	"critical": zerolog.ErrorLevel,
	"fatal":    zerolog.ErrorLevel,
}

// handlerLine is one log line as the server logs it.
type handlerLine struct {
	level   zerolog.Level
	message string
	fields  []byte // a JSON object, or nil
}

// parseHandlerLine reads the level (and, for JSON, the message and the
// other fields) a handler's line gives itself.
func parseHandlerLine(text []byte) handlerLine {
	if l, ok := parseJSONLine(text); ok {
		return l
	}
	level, _ := leadingLevel(text)
	return handlerLine{level: level, message: string(text)}
}

// leadingLevel is the level word a line starts with, if any.
func leadingLevel(text []byte) (zerolog.Level, bool) {
	s := text
	bracketed := len(s) > 0 && s[0] == '['
	if bracketed {
		s = s[1:]
	}
	n := 0
	for n < len(s) && n < len("critical") && isASCIILetter(s[n]) {
		n++
	}
	level, ok := levelWords[strings.ToLower(string(s[:n]))]
	if !ok {
		return zerolog.InfoLevel, false
	}
	rest := s[n:]
	if bracketed {
		if len(rest) == 0 || rest[0] != ']' {
			return zerolog.InfoLevel, false
		}
		return level, true
	}
	if len(rest) == 0 || rest[0] == ':' || rest[0] == ' ' || rest[0] == '\t' {
		return level, true
	}
	return zerolog.InfoLevel, false // "errors", "info-only", "warned"
}

func isASCIILetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// parseJSONLine reads a JSON log line with a recognised string level.
func parseJSONLine(text []byte) (handlerLine, bool) {
	t := bytes.TrimSpace(text)
	if len(t) < 2 || t[0] != '{' || t[len(t)-1] != '}' {
		return handlerLine{}, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(t, &obj) != nil {
		return handlerLine{}, false
	}
	var word string
	if json.Unmarshal(obj["level"], &word) != nil {
		return handlerLine{}, false
	}
	level, ok := levelWords[strings.ToLower(strings.TrimSpace(word))]
	if !ok {
		return handlerLine{}, false
	}
	l := handlerLine{level: level, message: string(text)}
	for _, key := range []string{"msg", "message"} {
		var msg string
		if json.Unmarshal(obj[key], &msg) == nil {
			l.message = msg
			delete(obj, key)
			delete(obj, "level")
			if len(obj) > 0 {
				l.fields, _ = json.Marshal(obj) // re-encoding decoded JSON cannot fail
			}
			break
		}
	}
	return l, true
}
