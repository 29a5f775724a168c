#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given time each (default 10s).
# Targets are discovered with `go test -list`, so new ones join automatically.
set -euo pipefail
fuzztime=${1:-10s}
cd "$(dirname "$0")/.."
found=0
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    found=1
    echo "== fuzz $pkg $target ($fuzztime)"
    # No minimization of new coverage inputs: a minimization still running
    # when -fuzztime ends makes the run fail with "context deadline
    # exceeded" (seen in CI); crashers are still saved, unminimized.
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime "${FUZZ_MINIMIZE_TIME:-0}" "$pkg"
  done
done
[ "$found" = 1 ] || echo "no fuzz targets found"
