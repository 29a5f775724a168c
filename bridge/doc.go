// Package bridge joins the two halves of fnbridge: it loads the YAML
// configuration, keeps a pool of warm FunctionRuntime registrations per
// handler (lease, grow, idle-unregister, re-register), translates each
// Restate invocation into one journaled Run("invoke") around
// InvokeFunction, and classifies FunctionRuntime errors into Restate's
// terminal and retryable failures.
//
// It never parses frames (package restate does) nor spawns processes
// (the functionruntime adapters do).
package bridge
