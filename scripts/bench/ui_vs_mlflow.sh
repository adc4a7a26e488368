#!/usr/bin/env bash
# The web UI's runs page over an experiment of UI_RUNS runs and its run page with
# UI_POINTS metric points, against the calls MLflow 3.17's UI makes for the same views
# (`mlflow server`, SQLite, from PyPI), on the same data, in one run; prints a table.
#
#   scripts/bench/ui_vs_mlflow.sh                       # 100k runs, 100k points
#   UI_RUNS=5000 UI_POINTS=10000 scripts/bench/ui_vs_mlflow.sh   # quick
set -euo pipefail

export UI_RUNS=${UI_RUNS:-100000} UI_POINTS=${UI_POINTS:-100000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/bench/lib.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench-ui.XXXXXX")
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
# The compat venv has the pinned mlflow (client and server).
VENV=${QANAT_COMPAT_VENV:-$HOME/.cache/qanat-compat-venv}
ensure_venv "$VENV" "$ROOT/tests/compat/requirements.txt"
PY=$VENV/bin/python
BENCH=$ROOT/scripts/bench/ui_vs_mlflow.py

cleanup() {
  for p in ${QANAT_PID:-} ${MLFLOW_PID:-}; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
qanat_bin "$ROOT"

QPORT=$(free_port)
export QANAT_HOME=$WORK/qanat QANAT_CREDENTIALS=$WORK/credentials.json QANAT_LOG_LEVEL=warn
export QANAT_SERVER_BIND=127.0.0.1:$QPORT QANAT_SERVER_URL=http://127.0.0.1:$QPORT
"$Q" init >/dev/null 2>&1
"$Q" server >"$WORK/qanat.out" 2>"$WORK/qanat.err" &
QANAT_PID=$!
wait_http "$QANAT_SERVER_URL/health"
"$Q" users create bench >/dev/null
"$Q" projects grant default bench editor >/dev/null
export QANAT_TOKEN=$("$Q" tokens create --user bench --output json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["token"])')

echo "populating $UI_RUNS runs and $UI_POINTS points in both (at once; nothing is timed yet)..." >&2
t0=$(date +%s)
"$PY" "$BENCH" populate-mlflow "sqlite:///$WORK/mlflow.db" "$UI_RUNS" "$UI_POINTS" &
POP_PID=$!
"$PY" "$BENCH" populate-api "$QANAT_SERVER_URL" "$UI_RUNS" "$UI_POINTS"
echo "  qanat: $(( $(date +%s) - t0 )) s (REST API, 8 in flight)" >&2
wait "$POP_PID"
echo "  mlflow store: $(( $(date +%s) - t0 )) s (one run by its store, the rest copies of its rows)" >&2
MPORT=$(free_port)
"$VENV/bin/mlflow" server --backend-store-uri "sqlite:///$WORK/mlflow.db" \
  --default-artifact-root "$WORK/mlruns" --host 127.0.0.1 --port "$MPORT" \
  >"$WORK/mlflow.log" 2>&1 &
MLFLOW_PID=$!
wait_http "http://127.0.0.1:$MPORT/health"
sleep "${SETTLE_SECS:-30}"

echo "measuring..." >&2
"$PY" "$BENCH" run "$QANAT_SERVER_URL" "http://127.0.0.1:$MPORT"
