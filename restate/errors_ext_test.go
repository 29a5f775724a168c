package restate_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fnbridge/fnbridge/restate"
)

// ErrCancelled reads as the terminal 409 it stands for, matches through
// wrapping, and converts to a *TerminalError for code that inspects codes.
func TestErrCancelledIsATerminal409(t *testing.T) {
	if got, want := restate.ErrCancelled.Error(), "terminal error 409: cancelled"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	wrapped := fmt.Errorf("run: %w", restate.ErrCancelled)
	if !errors.Is(wrapped, restate.ErrCancelled) {
		t.Error("errors.Is does not see ErrCancelled through wrapping")
	}
	var te *restate.TerminalError
	if !errors.As(wrapped, &te) || te.Code != restate.CodeCancelled || te.Message != "cancelled" {
		t.Fatalf("errors.As = %+v, want a TerminalError 409 cancelled", te)
	}
	var re *restate.RetryableError
	if errors.As(restate.ErrCancelled, &re) {
		t.Error("ErrCancelled converts to a RetryableError")
	}
}

// A caller altering what errors.As gave it must not change the sentinel
// every other invocation reports.
func TestErrCancelledCannotBeAltered(t *testing.T) {
	var te *restate.TerminalError
	if !errors.As(restate.ErrCancelled, &te) {
		t.Fatal("ErrCancelled is not a TerminalError")
	}
	te.Code, te.Message = 200, "fine"
	var again *restate.TerminalError
	if !errors.As(restate.ErrCancelled, &again) || again.Code != restate.CodeCancelled || again.Message != "cancelled" {
		t.Fatalf("after altering a copy, ErrCancelled converts to %+v", again)
	}
	if got := restate.ErrCancelled.Error(); got != "terminal error 409: cancelled" {
		t.Fatalf("after altering a copy, ErrCancelled reads %q", got)
	}
	// Only ErrCancelled itself matches: a look-alike built by a caller is
	// not the runtime's cancellation.
	if errors.Is(&restate.TerminalError{Code: 409, Message: "cancelled"}, restate.ErrCancelled) {
		t.Error("a caller's own TerminalError 409 matches ErrCancelled")
	}
}

// A zero code means 500 in what both error kinds say.
func TestZeroCodeReadsAs500(t *testing.T) {
	if got := (&restate.TerminalError{Message: "x"}).Error(); got != "terminal error 500: x" {
		t.Errorf("TerminalError = %q", got)
	}
	if got := (&restate.RetryableError{Message: "x"}).Error(); got != "retryable error 500: x" {
		t.Errorf("RetryableError = %q", got)
	}
}
