#!/usr/bin/env bash
# make demo: restate-server + bridge serve with examples/, registered and
# invoked through the ingress, then everything this script started is
# stopped. Expects `make tools build` to have run (the Makefile does that).
set -euo pipefail
cd "$(dirname "$0")/.."

: "${RESTATE_SERVER_BIN:?run through make demo}"
: "${RESTATE_CLI_BIN:?run through make demo}"
BRIDGE=${BRIDGE_BIN:-bin/bridge}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
INGRESS=$(free_port); ADMIN=$(free_port); FABRIC=$(free_port); BRIDGE_PORT=$(free_port)
WORK=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_http() { # url, what
  for _ in $(seq 1 100); do
    if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "demo: $2 did not come up at $1" >&2; return 1
}

echo "== bridge keygen: restate-server signs its requests, the bridge checks them"
KEY=$("$BRIDGE" keygen --out "$WORK/restate-identity.pem" 2>/dev/null)
echo "   public key: $KEY"

echo "== starting restate-server (ingress :$INGRESS, admin :$ADMIN)"
# TMPDIR: the server leaves a directory per partition in the temporary
# directory; keep them in $WORK, which goes when the demo ends.
mkdir -p "$WORK/restate-tmp"
setsid env RESTATE_DISABLE_TELEMETRY=true TMPDIR="$WORK/restate-tmp" \
  RESTATE_WORKER__INVOKER__REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE="$WORK/restate-identity.pem" \
  RESTATE_INGRESS__BIND_ADDRESS=127.0.0.1:$INGRESS \
  RESTATE_ADMIN__BIND_ADDRESS=127.0.0.1:$ADMIN \
  RESTATE_BIND_ADDRESS=127.0.0.1:$FABRIC \
  RESTATE_ADVERTISED_ADDRESS=http://127.0.0.1:$FABRIC \
  "$RESTATE_SERVER_BIN" --no-logo --base-dir "$WORK/restate" --log-filter error >"$WORK/restate.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$ADMIN/health" restate-server

echo "== starting bridge serve (:$BRIDGE_PORT)"
setsid "$BRIDGE" serve --config examples/bridge.yaml --listen "127.0.0.1:$BRIDGE_PORT" \
  --identity-keys-file "$WORK/restate-identity.pem.pub" --log-format console >"$WORK/bridge.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$BRIDGE_PORT/health" "bridge serve"

echo "== registering the deployment"
RESTATE_ADMIN_URL=http://127.0.0.1:$ADMIN "$RESTATE_CLI_BIN" deployments register "http://127.0.0.1:$BRIDGE_PORT" --yes >/dev/null

echo "== invoking Greeter/greet (Python)"
curl -fsS "http://127.0.0.1:$INGRESS/Greeter/greet" -H 'content-type: application/json' -d '{"name":"Restate"}'
echo
echo "== invoking Shell/respond (Bash)"
curl -fsS "http://127.0.0.1:$INGRESS/Shell/respond" -H 'content-type: application/json' -d '{"msg":"hi $(touch pwned)"}'
echo
INGRESS_URL=http://127.0.0.1:$INGRESS
json_field() { python3 -c 'import json, sys; v = json.load(sys.stdin).get(sys.argv[1]); print("" if v is None else v)' "$1"; }

echo "== Provision (Bash, durability: steps): its DNS step fails once; Restate retries, the VM step does not run again"
HOST=demo-$$
curl -fsS "$INGRESS_URL/Provision/provision" -H 'content-type: application/json' -d "\"$HOST\""
echo
echo "   what ran, in order (/tmp/fnbridge-provision.$HOST.log):"
sed 's/^/     /' "/tmp/fnbridge-provision.$HOST.log"
rm -f "/tmp/fnbridge-provision.$HOST.log"
echo "== Counter (Bash virtual object): three adds to the key demo, then the shared get"
for n in 1 2 3; do
  printf '   add %s -> %s\n' "$n" "$(curl -fsS "$INGRESS_URL/Counter/demo/add" -H 'content-type: application/json' -d "$n")"
done
printf '   get -> %s\n' "$(curl -fsS "$INGRESS_URL/Counter/demo/get" -H 'content-type: application/json' -d 'null')"

echo "== Signup (Python workflow): start, approve through its awakeable, attach to the result"
curl -fsS "$INGRESS_URL/Signup/ada/run/send" -H 'content-type: application/json' -d '{"email":"ada@example.com"}'
echo
approval=""
for _ in $(seq 1 100); do
  approval=$(curl -fsS "$INGRESS_URL/Signup/ada/status" -H 'content-type: application/json' -d 'null' | json_field approval)
  [ -n "$approval" ] && break
  sleep 0.1
done
[ -n "$approval" ] || { echo "demo: the workflow never asked for approval" >&2; exit 1; }
echo "   approving $approval"
curl -fsS -X POST "$INGRESS_URL/restate/awakeables/$approval/resolve" -H 'content-type: application/json' -d '{"by":"the demo"}'
curl -fsS "$INGRESS_URL/restate/workflow/Signup/ada/attach"
echo
echo "== bridge log (last lines)"
tail -n 5 "$WORK/bridge.log"
echo "== demo done"
