package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fnbridge/fnbridge/bridge"
)

// bridge invoke's exit statuses, as its help and the README give them:
// 100 a terminal failure, 1 any other failure of the invocation (a call
// that needs Restate included), 2 what never
// ran (arguments, configuration, an unknown handler), 130 a stop signal.
func TestInvokeExitStatus(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"terminal", invocationFailed{&bridge.Error{Class: bridge.ClassTerminal}}, invokeExitTerminal},
		{"input over the runtime's bound", invocationFailed{&bridge.Error{Class: bridge.ClassInvalidInput}}, invokeExitTerminal},
		{"cancelled", invocationFailed{&bridge.Error{Class: bridge.ClassCancelled}}, invokeExitTerminal},
		{"needs Restate", invocationFailed{&bridge.NeedsRestateError{Op: "a call"}}, invokeExitFailed},
		{"retryable", invocationFailed{&bridge.Error{Class: bridge.ClassHandler}}, invokeExitFailed},
		{"paused", invocationFailed{&bridge.Error{Class: bridge.ClassPermanent}}, invokeExitFailed},
		{"not classified", invocationFailed{errors.New("writing the output")}, invokeExitFailed},
		{"interrupted", invocationFailed{interrupted{&bridge.Error{Class: bridge.ClassUnavailable, Cause: context.Canceled}}}, invokeExitSignal},
		{"usage", errors.New("want Service/handler"), invokeExitUsage},
		{"unknown handler", &bridge.UnknownHandlerError{Name: "S/h"}, invokeExitUsage},
		{"key refused", &bridge.KeyNotAllowedError{Name: "S/h"}, invokeExitUsage},
	}
	for _, tt := range tests {
		if got := invokeExitStatus(tt.err); got != tt.want {
			t.Errorf("%s: exit %d, want %d", tt.name, got, tt.want)
		}
	}
}

// A --key that no Restate key could be is refused before anything runs.
func TestInvokeRefusesAKeyNoRestateKeyCouldBe(t *testing.T) {
	for key, want := range map[string]string{
		"\xff":                    "is not UTF-8",
		strings.Repeat("k", 8193): "--key is 8193 bytes, at most 8192",
	} {
		var stdout, stderr strings.Builder
		code := runBridge([]string{"invoke", "--config", writeServeConfig(t, ""), "--key", key, "S/f", "{}"}, &stdout, &stderr)
		if code != invokeExitUsage || !strings.Contains(stderr.String(), want) {
			t.Errorf("--key of %d bytes: exit %d, stderr %q; want %d and %q", len(key), code, stderr.String(), invokeExitUsage, want)
		}
	}
}
