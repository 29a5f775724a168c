// Package e2e owns fnbridge's end-to-end tests: the real restate-server
// 1.7.12 (RESTATE_SERVER_BIN), the real bridge binary (BRIDGE_BIN, or built
// once per test binary when unset), grpcurl (GRPCURL_BIN), python3 and
// bash. A missing tool skips a test with a message naming it, except in CI
// (CI=true), where it fails. The shared harness is harness_test.go; the
// Python and Bash functions the tests run are files in testdata/, copied
// into each test's workspace. TestChaos runs its short variant here and the
// full 10,000 invocations under `make chaos` (CHAOS_FULL=1).
package e2e
