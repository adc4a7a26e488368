#!/usr/bin/env bash
# Single sign-on with a real OpenID provider: oidc-provider (npm, certified) on Node,
# configured by tests/compat/oidc, in front of a Qanat server whose [security.oidc]
# trusts it; tests/compat/sso_api.py drives the provider's flows and the API (and the
# mlflow client) with its tokens. A second provider (another issuer) signs tokens
# Qanat must refuse; the first is restarted with new keys when the test asks.
#
#   tests/compat/sso.sh
#
# Run by .ci/run. Needs Node.js >= 20.18 (the machine's; Debian's nodejs 18 is too old).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
source "$ROOT/scripts/venv.sh"
VENV=${QANAT_COMPAT_VENV:-$HOME/.cache/qanat-compat-venv}
ensure_venv "$VENV" "$ROOT/tests/compat/requirements.txt"
(cd "$ROOT" && cargo build --locked -p qanat --quiet)
Q=$CARGO_TARGET_DIR/debug/qanat
OIDC=$ROOT/tests/compat/oidc

WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-sso.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}" ${OP_PID:-} ${WATCH_PID:-} ${STARTED_PID:-}; do kill "$p" 2>/dev/null || true; done
  [ -f "$WORK/op/pid" ] && kill "$(cat "$WORK/op/pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "${QANAT_COMPAT_LOG:-}" ] && cp "$WORK/server.err" "$QANAT_COMPAT_LOG"
  rm -rf "$WORK"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
OP_PORT=$(port) OP2_PORT=$(port) PORT=$(port)
# The provider sends browsers back to this server's callback (and to the one its
# self-check uses).
export OIDC_REDIRECT_URIS="http://127.0.0.1:8080/ui/login/sso/callback,http://127.0.0.1:$PORT/ui/login/sso/callback"

users() {
  mkdir -p "$1"
  cat >"$1/users.json" <<'JSON'
{
  "alice": {"password": "pw-alice", "email": "alice@example.com", "name": "Alice", "groups": ["ml-admins"]},
  "bob": {"password": "pw-bob", "email": "bob@example.com", "name": "Bob", "groups": ["fraud-editors"]},
  "carol": {"password": "pw-carol", "email": "carol@example.com", "name": "Carol", "groups": ["fraud-editors"]}
}
JSON
}
# start_op PORT DIR: starts a provider, waits until it is ready; sets STARTED_PID.
start_op() {
  "$OIDC/start.sh" "$1" "$2" >"$2/out" 2>>"$2/err" &
  STARTED_PID=$!
  for _ in $(seq 600); do grep -q "ready" "$2/out" 2>/dev/null && return 0; sleep 0.1; done
  echo "the OpenID provider on port $1 did not start:" >&2
  tail -20 "$2/err" >&2
  exit 1
}
users "$WORK/op"
users "$WORK/op2"
start_op "$OP_PORT" "$WORK/op"
OP_PID=$STARTED_PID
start_op "$OP2_PORT" "$WORK/op2"
PIDS+=("$STARTED_PID")

# Key rotation on request: the provider stopped, its keys replaced, started again.
(
  while :; do
    if [ -f "$WORK/op/rotate.request" ]; then
      rm -f "$WORK/op/rotate.request"
      kill "$(cat "$WORK/op/pid")" 2>/dev/null || true
      sleep 0.5
      node "$OIDC/rotate-keys.mjs" "$WORK/op" >&2
      "$OIDC/start.sh" "$OP_PORT" "$WORK/op" >"$WORK/op/out" 2>>"$WORK/op/err" &
      echo $! >"$WORK/op/pid"
      for _ in $(seq 600); do grep -q "ready" "$WORK/op/out" 2>/dev/null && break; sleep 0.1; done
      touch "$WORK/op/rotate.done"
    fi
    sleep 0.1
  done
) &
WATCH_PID=$!
echo "$OP_PID" >"$WORK/op/pid"

cat >"$WORK/qanat.toml" <<TOML
[security.oidc]
issuer = "http://127.0.0.1:$OP_PORT"
client_id = "qanat"
client_secret = "qanat-secret"
cli_client_id = "qanat-cli"
scopes = "openid profile email groups offline_access"
audience = "qanat"
leeway_secs = 0
session_check_secs = 2
admin_groups = ["ml-admins"]
roles = [
  { group = "fraud-editors", project = "fraud", role = "editor" },
  { group = "fraud-viewers", project = "fraud", role = "viewer" },
]
TOML
export QANAT_CONFIG=$WORK/qanat.toml QANAT_HOME=$WORK/home QANAT_CREDENTIALS=$WORK/credentials.json
export QANAT_LOG_LEVEL=${QANAT_LOG_LEVEL:-warn}
export QANAT_SERVER_BIND=127.0.0.1:$PORT QANAT_SERVER_URL=http://127.0.0.1:$PORT
"$Q" init >/dev/null 2>&1
"$Q" server >"$WORK/server.out" 2>"$WORK/server.err" &
PIDS+=("$!")
for _ in $(seq 200); do grep -q listening "$WORK/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$WORK/server.out" || { cat "$WORK/server.err" >&2; exit 1; }
ADMIN=$("$Q" tokens create --name sso 2>/dev/null)

MLFLOW_PYTHON=$VENV/bin/python QANAT_BIN=$Q "$VENV/bin/python" "$ROOT/tests/compat/sso_api.py" \
  "$QANAT_SERVER_URL" "$ADMIN" "http://127.0.0.1:$OP_PORT" "$WORK/op" "http://127.0.0.1:$OP2_PORT"

# The web UI's login through the provider, in Debian's Chromium.
ensure_chromium
UI_REQ=$ROOT/tests/compat/ui-requirements.txt
UI_VENV=${QANAT_UI_VENV:-$(venv_path ui "$UI_REQ")}
ensure_venv "$UI_VENV" "$UI_REQ"
"$UI_VENV/bin/python" "$ROOT/tests/compat/sso_browser.py" "$QANAT_SERVER_URL" "$ADMIN" "$WORK/op"
# The rotation restarted the first provider under the watcher.
kill "$(cat "$WORK/op/pid")" 2>/dev/null || true
