// Package restateserver starts a real restate-server (1.7.12, the binary
// named by RESTATE_SERVER_BIN) for tests and benchmarks, and talks to it: it
// owns the server process (own process group, Pdeathsig, TERM then KILL,
// reaped), its loopback ports and base directory, and small clients for the
// admin API (deployments, invocation cancel, SQL status queries) and the
// HTTP ingress (call, send).
//
// [Launch] is the core, for any caller with a context (the benchmark
// driver bench/cmd/fnbench): errors are returned and the caller stops the
// server. [Start] is the layer for tests: it binds the server to a
// testing.TB, skipping or failing the test when the binary is missing and
// stopping the server in the test's cleanup, so no restate-server outlives
// its test.
package restateserver
