// Package restateserver starts a real restate-server (1.7.12, the binary
// named by RESTATE_SERVER_BIN) for tests and benchmarks, and talks to it: it
// owns the server process (own process group, Pdeathsig, TERM then KILL,
// reaped), its loopback ports and temporary base directory, and small
// clients for the admin API (deployments, invocation cancel, SQL status
// queries) and the HTTP ingress (call, send).
//
// Every server is bound to the testing.TB that started it and is stopped by
// that test's cleanup, so no restate-server outlives its test.
package restateserver
