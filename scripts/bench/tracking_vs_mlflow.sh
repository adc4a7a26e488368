#!/usr/bin/env bash
# The same MLflow-client workload against `mlflow server` (SQLite backend, from PyPI)
# and Qanat (SQLite), in one run; prints a table with the ratios. Then searches a
# Qanat experiment of BIG_RUNS runs the same way.
#
#   scripts/bench/tracking_vs_mlflow.sh                  # 10k and 200 runs searched, 100k on Qanat
#   SEARCH_RUNS=2000 BIG_RUNS=0 scripts/bench/tracking_vs_mlflow.sh   # quick
set -euo pipefail

SEARCH_RUNS=${SEARCH_RUNS:-10000}
SMALL_RUNS=${SMALL_RUNS:-200}
BIG_RUNS=${BIG_RUNS:-100000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/bench/lib.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench-tracking.XXXXXX")
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
# The compat venv has the pinned mlflow (client and server).
VENV=${QANAT_COMPAT_VENV:-$HOME/.cache/qanat-compat-venv}
REQ=$ROOT/tests/compat/requirements.txt
PY=$VENV/bin/python
BENCH=$ROOT/scripts/bench/tracking_vs_mlflow.py

cleanup() {
  for p in ${QANAT_PID:-} ${MLFLOW_PID:-}; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

if ! cmp -s "$REQ" "$VENV/.requirements" 2>/dev/null; then
  echo "installing mlflow into $VENV..." >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$VENV/.requirements"
fi
echo "building qanat (release)..." >&2
(cd "$ROOT" && cargo build --release --locked -p qanat --quiet)
Q=$CARGO_TARGET_DIR/release/qanat

# Qanat: fresh data directory, SQLite metadata, one editor token.
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

# MLflow: its own SQLite file, populated in process before the server opens it.
MPORT=$(free_port)
export SEARCH_EXPERIMENT=search-$SEARCH_RUNS SMALL_EXPERIMENT=small-$SMALL_RUNS
echo "populating $SEARCH_RUNS and $SMALL_RUNS runs in each server..." >&2
t0=$(date +%s)
"$PY" "$BENCH" populate-mlflow "sqlite:///$WORK/mlflow.db" "$SEARCH_EXPERIMENT" "$SEARCH_RUNS"
"$PY" "$BENCH" populate-mlflow "sqlite:///$WORK/mlflow.db" "$SMALL_EXPERIMENT" "$SMALL_RUNS"
echo "  mlflow store: $(( $(date +%s) - t0 )) s (in process)" >&2
t0=$(date +%s)
"$PY" "$BENCH" populate-api "$QANAT_SERVER_URL" "$SEARCH_EXPERIMENT" "$SEARCH_RUNS"
"$PY" "$BENCH" populate-api "$QANAT_SERVER_URL" "$SMALL_EXPERIMENT" "$SMALL_RUNS"
echo "  qanat: $(( $(date +%s) - t0 )) s (REST API, 8 in flight)" >&2
"$VENV/bin/mlflow" server --backend-store-uri "sqlite:///$WORK/mlflow.db" \
  --default-artifact-root "$WORK/mlruns" --host 127.0.0.1 --port "$MPORT" \
  >"$WORK/mlflow.log" 2>&1 &
MLFLOW_PID=$!
wait_http "http://127.0.0.1:$MPORT/health"
# Its workers answer /health before all of them have started; let them settle so their
# start-up does not steal CPU from whichever server is measured first.
sleep "${SETTLE_SECS:-30}"

if [ "$BIG_RUNS" -gt 0 ]; then
  echo "populating $BIG_RUNS runs in qanat..." >&2
  t0=$(date +%s)
  "$PY" "$BENCH" populate-api "$QANAT_SERVER_URL" "big-$BIG_RUNS" "$BIG_RUNS"
  echo "  qanat: $(( $(date +%s) - t0 )) s" >&2
  # MLflow's store was filled before its server started; let Qanat's background WAL
  # checkpoint finish the bulk load too, so both are measured settled.
  sleep 5
  export BIG_URI=$QANAT_SERVER_URL BIG_EXPERIMENT=big-$BIG_RUNS BIG_RUNS
fi

echo "measuring..." >&2
"$PY" "$BENCH" run "qanat=$QANAT_SERVER_URL" "mlflow=http://127.0.0.1:$MPORT"
