#!/usr/bin/env bash
# Serving an XGBoost model over HTTP, one run on this machine: the same classifier
# (300 trees, depth 6, fitted on the breast cancer table) logged with mlflow, served by
#   qanat     `qanat serve` (the data plane), natively (Qanat trees), a deployment with
#             the default batching and the inference log on
#   mlserver  MLServer 1.7.1 with mlserver-xgboost on the model file
#   mlflow    `mlflow models serve` on the MLflow model, one worker per core
# with wrk (one thread, HTTP/1.1 keep-alive, closed loop) over a concurrency sweep,
# one-row requests. Prints requests/s and p50/p99 per server and concurrency, and the
# ratio of the best throughputs. The load generator shares the cores with the servers.
#
#   scripts/bench/trees_vs_mlserver.sh
#   DURATION=5 SWEEP="1 16" scripts/bench/trees_vs_mlserver.sh
# Knobs: DURATION (8 s a point), WARMUP (2 s), SWEEP ("1 4 16 64"), QANAT_BIN, KEEP=1.
set -euo pipefail
DURATION=${DURATION:-8}
WARMUP=${WARMUP:-2}
SWEEP=${SWEEP:-1 4 16 64}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench-trees.XXXXXX")
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
REQ=$ROOT/scripts/bench/trees-serving-requirements.txt
source "$ROOT/scripts/bench/lib.sh"
VENV=${QANAT_TREES_SERVING_VENV:-$(venv_path trees-serving "$REQ")}
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ensure_venv "$VENV" "$REQ"
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
qanat_bin "$ROOT"

PORT=$(free_port)
source "$ROOT/scripts/bench/qanat_server.sh"
qanat_server
PIDS+=("$SERVER_PID")
export QANAT_PROJECT=default
TOKEN=$(qanat_token)
MLFLOW_TRACKING_URI=http://127.0.0.1:$PORT/mlflow/default MLFLOW_TRACKING_TOKEN=$TOKEN \
  "$VENV/bin/python" "$ROOT/scripts/bench/trees_serving.py" "$WORK" 2>/dev/null >&2
"$Q" deploy create xgb-web --model xgb --primary 1 >/dev/null
"$Q" deploy status xgb-web >&2

SPORT=$(free_port)
QANAT_SERVER_BIND=127.0.0.1:$SPORT "$Q" serve >"$WORK/serve.out" 2>"$WORK/serve.err" &
PIDS+=($!)
start_mlserver xgb mlserver_xgboost.XGBoostModel "$WORK/model.json"
start_mlflow_serve "$WORK/model"
wait_http "http://127.0.0.1:$SPORT/v2/health/ready"
wait_http "http://127.0.0.1:$MPORT/v2/health/ready"
wait_http "http://127.0.0.1:$FPORT/health"

QURL=http://127.0.0.1:$SPORT/v2/models/xgb-web/infer
MURL=http://127.0.0.1:$MPORT/v2/models/xgb/infer
FURL=http://127.0.0.1:$FPORT/invocations
first_answers "$QURL" "$MURL" "$FURL"

for c in $SWEEP; do
  wrk_point qanat "$QURL" "$WORK/qanat.jsonl" "$c"
  wrk_point mlserver "$MURL" "$WORK/mlserver.jsonl" "$c"
  wrk_point mlflow "$FURL" "$WORK/mlflow.jsonl" "$c"
done | tee "$WORK/results.jsonl"
python3 - "$WORK/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n| server | concurrency | requests/s | p50 ms | p99 ms | errors |")
print("|---|---|---|---|---|---|")
best = {}
for r in rows:
    rps = r["requests"] / r["seconds"]
    errors = r["non2xx"] + r["connect"] + r["read"] + r["write"] + r["timeout"]
    print(f"| {r['server']} | {r['conc']} | {rps:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {errors} |")
    if rps > best.get(r["server"], (0, None))[0]:
        best[r["server"]] = (rps, r)
q, qr = best["qanat"]
for other in ("mlserver", "mlflow"):
    if other in best:
        o, r = best[other]
        print(f"best: qanat {q:,.0f} req/s (p99 {qr['p99_ms']:.2f} ms) vs {other} {o:,.0f} req/s (p99 {r['p99_ms']:.2f} ms): {q / o:.1f}x")
PY
