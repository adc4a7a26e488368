#!/usr/bin/env bash
# Online inference over HTTP, one run on this machine: the same model — an MLP
# 30 -> 64 -> 1 that `qanat train` fits on examples/data/breast_cancer.csv — served by
#   qanat       `qanat serve` (the data plane), its native format, a deployment with
#               the default batching, the inference log on
#   mlserver    MLServer with its MLflow runtime on the model's MLflow ONNX flavor (the
#               model.onnx + MLmodel every Qanat version carries), one worker per core
#   mlflow      `mlflow models serve` on the same directory, one worker per core
# with the same load tool (wrk, one thread, HTTP/1.1 keep-alive, closed loop) over a
# concurrency sweep, one-row requests (the same rows, each in its protocol's body).
# Prints requests/s and p50/p99 per server and concurrency, and the ratio of the best
# throughputs. The load generator shares the cores with the servers.
#
#   scripts/bench/serving_vs_mlserver.sh
#   DURATION=5 SWEEP="1 8 32" scripts/bench/serving_vs_mlserver.sh
# Knobs: DURATION (10 s a point), WARMUP (2 s), SWEEP ("1 4 16 64"), ROWS (1 a
# request), QANAT_BIN (a release binary to use instead of building one), KEEP=1.
set -euo pipefail
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
SWEEP=${SWEEP:-1 4 16 64}
ROWS=${ROWS:-1}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench-serving.XXXXXX")
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
REQ=$ROOT/scripts/bench/serving-requirements.txt
source "$ROOT/scripts/bench/lib.sh"
VENV=${QANAT_SERVING_BENCH_VENV:-$(venv_path serving-bench "$REQ")}
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- tools -------------------------------------------------------------------------
ensure_venv "$VENV" "$REQ"
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
qanat_bin "$ROOT"

# --- the model -----------------------------------------------------------------------
serve_cancer
"$Q" deploy create cancer-web --model cancer --primary 1 >/dev/null
TOKEN=$(qanat_token)
MLFLOW_TRACKING_URI=http://127.0.0.1:$PORT/mlflow/default MLFLOW_TRACKING_TOKEN=$TOKEN \
  "$VENV/bin/python" -c 'import mlflow,sys; mlflow.artifacts.download_artifacts(artifact_uri="models:/cancer/1", dst_path=sys.argv[1])' "$WORK/model"
"$VENV/bin/python" "$ROOT/scripts/bench/serving_bodies.py" "$ROOT/examples/data/breast_cancer.csv" "$WORK" "$ROWS"

# --- the servers ---------------------------------------------------------------------
SPORT=$(free_port)
QANAT_SERVER_BIND=127.0.0.1:$SPORT "$Q" serve >"$WORK/serve.out" 2>"$WORK/serve.err" &
PIDS+=($!)
start_mlserver cancer mlserver_mlflow.MLflowRuntime "$WORK/model"
start_mlflow_serve "$WORK/model"
wait_http "http://127.0.0.1:$SPORT/v2/health/ready"
wait_http "http://127.0.0.1:$MPORT/v2/health/ready"
wait_http "http://127.0.0.1:$FPORT/health"

QURL=http://127.0.0.1:$SPORT/v2/models/cancer-web/infer
MURL=http://127.0.0.1:$MPORT/v2/models/cancer/infer
FURL=http://127.0.0.1:$FPORT/invocations
first_answers "$QURL" "$MURL" "$FURL"

# --- the sweep -----------------------------------------------------------------------
for c in $SWEEP; do
  wrk_point qanat "$QURL" "$WORK/qanat.jsonl" "$c"
  wrk_point mlserver "$MURL" "$WORK/mlserver.jsonl" "$c"
  wrk_point mlflow "$FURL" "$WORK/mlflow.jsonl" "$c"
done | tee "$WORK/results.jsonl"
python3 - "$WORK/results.jsonl" "$ROWS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
per = int(sys.argv[2])
print(f"\n| server | concurrency | requests/s | inferences/s | p50 ms | p99 ms | non-2xx |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    rps = r["requests"] / r["seconds"]
    print(f"| {r['server']} | {r['conc']} | {rps:,.0f} | {rps * per:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['non2xx'] + r['connect'] + r['read'] + r['write'] + r['timeout']} |")
best = {}
for r in rows:
    rps = r["requests"] / r["seconds"]
    if rps > best.get(r["server"], (0, None))[0]:
        best[r["server"]] = (rps, r)
q = best["qanat"][0]
for other in ("mlserver", "mlflow"):
    if other in best:
        o, r = best[other]
        print(f"\nbest throughput: qanat {q:,.0f} req/s (p99 {best['qanat'][1]['p99_ms']:.2f} ms) vs {other} {o:,.0f} req/s (p99 {r['p99_ms']:.2f} ms): {q / o:.1f}x")
PY
