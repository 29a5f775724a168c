package main

import (
	"os"
	"os/signal"
	"slices"
	"syscall"
	"testing"
)

// SIGHUP stops a command gracefully, unless it was ignored when the
// command started (nohup): catching it then would undo nohup.
func TestStopSignalsKeepNohup(t *testing.T) {
	if !slices.Contains(stopSignals(), os.Signal(syscall.SIGHUP)) {
		t.Fatal("SIGHUP does not stop a command started normally")
	}
	signal.Ignore(syscall.SIGHUP)
	defer func() {
		// Reset alone leaves signal.Ignored true for the process (-count=N
		// would then fail above); Notify clears it.
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGHUP)
		signal.Reset(syscall.SIGHUP)
	}()
	if got := stopSignals(); slices.Contains(got, os.Signal(syscall.SIGHUP)) || !slices.Contains(got, os.Signal(syscall.SIGTERM)) {
		t.Fatalf("under nohup: %v, want SIGTERM and SIGINT only", got)
	}
}
