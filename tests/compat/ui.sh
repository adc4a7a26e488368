#!/usr/bin/env bash
# The web UI in a real browser: the quickstart fills a server, then Selenium drives
# Debian's Chromium through every page (tests/compat/ui_browser.py).
#
#   tests/compat/ui.sh                     # the suite
#   UI_SCREENSHOTS=docs/ui tests/compat/ui.sh   # and the screenshots docs/ui.md shows
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
source "$ROOT/scripts/venv.sh"

ensure_chromium
UI_REQ=$ROOT/tests/compat/ui-requirements.txt
UI_VENV=${QANAT_UI_VENV:-$(venv_path ui "$UI_REQ")}
ensure_venv "$UI_VENV" "$UI_REQ"
# The MLflow client that prints the "View run" link: the compat suites' venv.
VENV=${QANAT_COMPAT_VENV:-$HOME/.cache/qanat-compat-venv}
ensure_venv "$VENV" "$ROOT/tests/compat/requirements.txt"

# axe-core (npm, pinned), the accessibility checker every visited page is run through:
# installed once into a cache outside the repository, in a temporary directory first so
# that a half-done install is never used.
AXE_VERSION=4.11.0
AXE_DIR=$HOME/.cache/qanat-axe-core-$AXE_VERSION
if [ ! -f "$AXE_DIR/.installed" ]; then
  rm -rf "$AXE_DIR"
  mkdir -p "$(dirname "$AXE_DIR")"
  AXE_TMP=$(mktemp -d "$AXE_DIR.tmp.XXXXXX")
  (cd "$AXE_TMP" && npm install --no-audit --no-fund --no-save --prefix . "axe-core@$AXE_VERSION") >&2
  touch "$AXE_TMP/.installed"
  mv -T "$AXE_TMP" "$AXE_DIR" 2>/dev/null || rm -rf "$AXE_TMP"
fi
export QANAT_AXE=$AXE_DIR/node_modules/axe-core/axe.min.js
test -f "$QANAT_AXE"

(cd "$ROOT" && cargo build --locked -p qanat --quiet)
Q=$CARGO_TARGET_DIR/debug/qanat

WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-ui.XXXXXX")
cleanup() {
  [ -n "${QS_PID:-}" ] && kill "$QS_PID" 2>/dev/null && wait "$QS_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT
export QANAT_CREDENTIALS=$WORK/credentials.json
(cd "$WORK" && exec "$Q" quickstart --port "$PORT") >"$WORK/quickstart.out" 2>"$WORK/quickstart.err" &
QS_PID=$!
for _ in $(seq 900); do
  grep -q "keeps running" "$WORK/quickstart.out" 2>/dev/null && break
  kill -0 "$QS_PID" 2>/dev/null || break
  sleep 0.2
done
if ! grep -q "keeps running" "$WORK/quickstart.out"; then
  echo "the quickstart did not finish:" >&2
  tail -30 "$WORK/quickstart.out" "$WORK/quickstart.err" >&2
  exit 1
fi
json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
ADMIN=$(json '["token"]' <"$WORK/.qanat-quickstart/quickstart.json")
export QANAT_SERVER_URL=$URL QANAT_TOKEN=$ADMIN
"$Q" projects create other >/dev/null
"$Q" users create victor >/dev/null
"$Q" projects grant default victor viewer >/dev/null
VIEWER=$("$Q" tokens create --user victor --output json | json '["token"]')
mkdir -p "$WORK/secret" && printf 'a,b\n1,2\n' >"$WORK/secret/part-0.csv"
"$Q" data -p other create secret >/dev/null
"$Q" data -p other push secret "$WORK/secret" -m "not for victor" >/dev/null

# A run logged by the real MLflow client, and the link it prints.
LINK=$(MLFLOW_TRACKING_URI=$URL MLFLOW_TRACKING_TOKEN=$ADMIN "$VENV/bin/python" - <<'PY' 2>&1 | sed -n 's/.*View run .* at: \(http[^ ]*\).*/\1/p' | head -n1
import mlflow
mlflow.set_experiment("ui-link")
with mlflow.start_run(run_name="from-mlflow"):
    mlflow.log_param("alpha", 0.5)
    for step in range(5):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
PY
)
echo "the MLflow client printed: ${LINK:-nothing}" >&2

# A job that prints a line every half second for a minute: its page follows the log.
TICKER=$(curl -sf -X POST "$URL/api/v1/projects/default/jobs" -H "Authorization: Bearer $ADMIN" \
  -H 'Content-Type: application/json' \
  -d '{"name": "ticker", "command": "i=0; while [ $i -lt 120 ]; do echo tick $i; i=$((i+1)); sleep 0.5; done"}' | json '["job_id"]')

if [ -n "${UI_SCREENSHOTS:-}" ]; then
  mkdir -p "$UI_SCREENSHOTS"
  UI_SCREENSHOTS=$(cd "$UI_SCREENSHOTS" && pwd)
fi
QANAT_URL=$URL QANAT_ADMIN_TOKEN=$ADMIN QANAT_VIEWER_TOKEN=$VIEWER QANAT_OTHER_PROJECT=other \
  MLFLOW_RUN_LINK=$LINK QANAT_TICKER_JOB=$TICKER UI_SCREENSHOTS=${UI_SCREENSHOTS:-} SE_OFFLINE=true \
  "$UI_VENV/bin/python" "$ROOT/tests/compat/ui_browser.py"
