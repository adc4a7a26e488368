#!/usr/bin/env bash
# Serving MLflow tree models over HTTP, one run on this machine: the same models
# (trees_serving.py: an XGBoost classifier, 300 trees depth 6, and a scikit-learn
# random forest, 100 trees depth 10, fitted on the breast cancer table), logged with
# mlflow into Qanat and served by
#   qanat         `qanat serve` (the data plane), natively (Qanat's trees; the forest's
#                 pickle read as data), a deployment with the default batching and the
#                 inference log on
#   qanat-python  a second `qanat serve` on the same installation with
#                 serving.python.only: the same deployment on Qanat's Python runtime
#                 (sandboxed workers loading the model with mlflow, fed by the batcher)
#   mlserver      MLServer 1.7.1 with mlserver-xgboost / mlserver-sklearn on the file
#   mlflow        `mlflow models serve` on the MLflow model, one worker per core
# with wrk (one thread, HTTP/1.1 keep-alive, closed loop) over a concurrency sweep,
# one-row requests. Prints requests/s and p50/p99 per model, server and concurrency,
# and the ratios of the best throughputs. The load generator shares the cores with the
# servers. The Python runtime's environments are kept in ~/.cache/qanat-model-envs.
#
#   scripts/bench/trees_vs_mlserver.sh
#   DURATION=5 SWEEP="1 16" scripts/bench/trees_vs_mlserver.sh
# Knobs: DURATION (8 s a point), WARMUP (2 s), SWEEP ("1 4 16 64"), MODELS ("xgb rf"),
# QANAT_BIN, KEEP=1.
set -euo pipefail
DURATION=${DURATION:-8}
WARMUP=${WARMUP:-2}
SWEEP=${SWEEP:-1 4 16 64}
MODELS=${MODELS:-xgb rf}
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
export QANAT_SERVING_PYTHON_ENVS_DIR=${QANAT_SERVING_PYTHON_ENVS_DIR:-$HOME/.cache/qanat-model-envs}
qanat_server
PIDS+=("$SERVER_PID")
export QANAT_PROJECT=default
TOKEN=$(qanat_token)
MLFLOW_TRACKING_URI=http://127.0.0.1:$PORT/mlflow/default MLFLOW_TRACKING_TOKEN=$TOKEN \
  "$VENV/bin/python" "$ROOT/scripts/bench/trees_serving.py" "$WORK" 2>/dev/null >&2
for m in $MODELS; do
  "$Q" deploy create "$m-web" --model "$m" --primary 1 >/dev/null
  "$Q" deploy status "$m-web" >&2
done

SPORT=$(free_port)
QANAT_SERVER_BIND=127.0.0.1:$SPORT "$Q" serve >"$WORK/serve.out" 2>"$WORK/serve.err" &
PIDS+=($!)
PPORT=$(free_port)
QANAT_SERVER_BIND=127.0.0.1:$PPORT QANAT_SERVING_PYTHON_ONLY=true \
  "$Q" serve >"$WORK/serve-python.out" 2>"$WORK/serve-python.err" &
PIDS+=($!)
declare -A MPORTS FPORTS
for m in $MODELS; do
  case $m in
    xgb) start_mlserver xgb mlserver_xgboost.XGBoostModel "$WORK/xgb/model.json" ;;
    rf) start_mlserver rf mlserver_sklearn.SKLearnModel "$WORK/rf/model.joblib" ;;
  esac
  MPORTS[$m]=$MPORT
  start_mlflow_serve "$WORK/$m/model"
  FPORTS[$m]=$FPORT
done
# model_ready URL TRIES: waits until a deployment answers ready (0.2 s a try).
model_ready() {
  for _ in $(seq "$2"); do
    curl -sf -H "Authorization: Bearer $TOKEN" "$1" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "not ready: $1" >&2
  return 1
}
for m in $MODELS; do
  model_ready "http://127.0.0.1:$SPORT/v2/models/$m-web/ready" 900
  # The Python runtime's first load builds the model's environment (minutes, once).
  model_ready "http://127.0.0.1:$PPORT/v2/models/$m-web/ready" 6000
  wait_http "http://127.0.0.1:${MPORTS[$m]}/v2/health/ready"
  wait_http "http://127.0.0.1:${FPORTS[$m]}/health"
done

for m in $MODELS; do
  QURL=http://127.0.0.1:$SPORT/v2/models/$m-web/infer
  PURL=http://127.0.0.1:$PPORT/v2/models/$m-web/infer
  MURL=http://127.0.0.1:${MPORTS[$m]}/v2/models/$m/infer
  FURL=http://127.0.0.1:${FPORTS[$m]}/invocations
  echo "$m: one request each (the same row):" >&2
  for pair in "$QURL qanat" "$PURL python" "$MURL mlserver" "$FURL mlflow"; do
    head -1 "$WORK/$m/${pair#* }.jsonl" | curl -sf -H 'Content-Type: application/json' \
      -H "Authorization: Bearer $TOKEN" -d @- "${pair% *}" >&2 || echo "(no answer)" >&2
    echo >&2
  done
  for c in $SWEEP; do
    wrk_point "$m qanat" "$QURL" "$WORK/$m/qanat.jsonl" "$c"
    wrk_point "$m qanat-python" "$PURL" "$WORK/$m/python.jsonl" "$c"
    wrk_point "$m mlserver" "$MURL" "$WORK/$m/mlserver.jsonl" "$c"
    wrk_point "$m mlflow" "$FURL" "$WORK/$m/mlflow.jsonl" "$c"
  done
done | tee "$WORK/results.jsonl"
python3 - "$WORK/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n| model | server | concurrency | requests/s | p50 ms | p99 ms | errors |")
print("|---|---|---|---|---|---|---|")
best = {}
for r in rows:
    rps = r["requests"] / r["seconds"]
    errors = r["non2xx"] + r["connect"] + r["read"] + r["write"] + r["timeout"]
    model, server = r["server"].split(" ", 1)
    print(f"| {model} | {server} | {r['conc']} | {rps:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {errors} |")
    key = (model, server)
    if rps > best.get(key, (0, None))[0]:
        best[key] = (rps, r)
for model in dict.fromkeys(m for m, _ in best):
    for ours in ("qanat", "qanat-python"):
        if (model, ours) not in best:
            continue
        q, qr = best[(model, ours)]
        for other in ("mlserver", "mlflow"):
            if (model, other) in best:
                o, r = best[(model, other)]
                print(f"{model} best: {ours} {q:,.0f} req/s (p99 {qr['p99_ms']:.2f} ms) vs {other} "
                      f"{o:,.0f} req/s (p99 {r['p99_ms']:.2f} ms): {q / o:.1f}x")
PY
