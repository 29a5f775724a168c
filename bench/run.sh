#!/usr/bin/env bash
# bench/run.sh: `make bench`. Builds the reference peer (bench/sdkgo, its own
# module) and the benchmark driver (bench/cmd/fnbench) into a temporary
# directory, then runs every peer side by side and writes bench/RESULTS.md.
# fnbench owns every process it starts (own process group, Pdeathsig, TERM
# then KILL); this script only owns the temporary directory. Extra
# arguments go to `fnbench run` (e.g. --quick for a smoke run of every
# section in under a minute, or --reps 1 --point 2s for a quick look).
set -euo pipefail
cd "$(dirname "$0")/.."

: "${RESTATE_SERVER_BIN:?RESTATE_SERVER_BIN must name restate-server 1.7.12 (run via make bench)}"
[ -x bin/bridge ] || { echo "bin/bridge missing: run make build (make bench does)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fnbench-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "building bench/sdkgo and bench/cmd/fnbench into $tmp"
(cd bench/sdkgo && go build -o "$tmp/sdkgo" .)
go build -o "$tmp/fnbench" ./bench/cmd/fnbench

echo "cores: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$tmp/fnbench" run \
	--bridge bin/bridge \
	--sdkgo "$tmp/sdkgo" \
	--restate-server "$RESTATE_SERVER_BIN" \
	--out bench/RESULTS.md \
	--notes bench/NOTES.md \
	"$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
