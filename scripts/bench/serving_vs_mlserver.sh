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
CORES=$(nproc)
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
TOKEN=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$QANAT_CREDENTIALS" 2>/dev/null || true)
MLFLOW_TRACKING_URI=http://127.0.0.1:$PORT/mlflow/default MLFLOW_TRACKING_TOKEN=$TOKEN \
  "$VENV/bin/python" -c 'import mlflow,sys; mlflow.artifacts.download_artifacts(artifact_uri="models:/cancer/1", dst_path=sys.argv[1])' "$WORK/model"
"$VENV/bin/python" "$ROOT/scripts/bench/serving_bodies.py" "$ROOT/examples/data/breast_cancer.csv" "$WORK" "$ROWS"

# --- the servers ---------------------------------------------------------------------
SPORT=$(free_port)
QANAT_SERVER_BIND=127.0.0.1:$SPORT "$Q" serve >"$WORK/serve.out" 2>"$WORK/serve.err" &
PIDS+=($!)
MPORT=$(free_port) MGPORT=$(free_port) MMPORT=$(free_port)
mkdir -p "$WORK/mlserver"
cat >"$WORK/mlserver/settings.json" <<JSON
{"http_port": $MPORT, "grpc_port": $MGPORT, "metrics_port": $MMPORT, "parallel_workers": 0, "debug": false}
JSON
cat >"$WORK/mlserver/model-settings.json" <<JSON
{"name": "cancer", "implementation": "mlserver_mlflow.MLflowRuntime", "parameters": {"uri": "$WORK/model"}}
JSON
(cd "$WORK/mlserver" && exec "$VENV/bin/mlserver" start . >"$WORK/mlserver.log" 2>&1) &
PIDS+=($!)
FPORT=$(free_port)
PATH="$VENV/bin:$PATH" "$VENV/bin/mlflow" models serve -m "$WORK/model" -h 127.0.0.1 -p "$FPORT" --env-manager local -w "$CORES" \
  >"$WORK/mlflow.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$SPORT/v2/health/ready"
wait_http "http://127.0.0.1:$MPORT/v2/health/ready"
wait_http "http://127.0.0.1:$FPORT/health"

QURL=http://127.0.0.1:$SPORT/v2/models/cancer-web/infer
MURL=http://127.0.0.1:$MPORT/v2/models/cancer/infer
FURL=http://127.0.0.1:$FPORT/invocations
one() { head -1 "$2" | curl -sf -H 'Content-Type: application/json' -H "Authorization: Bearer $TOKEN" -d @- "$1"; echo; }
echo "one request each (the same row):" >&2
one "$QURL" "$WORK/qanat.jsonl" >&2
one "$MURL" "$WORK/mlserver.jsonl" >&2
one "$FURL" "$WORK/mlflow.jsonl" >&2

# --- the sweep -----------------------------------------------------------------------
LUA=$ROOT/scripts/bench/online_wrk.lua
run() { # name url bodies conc
  wrk -t1 -c "$4" -d "${WARMUP}s" -s "$LUA" -H "Authorization: Bearer $TOKEN" "$2" -- "$3" >/dev/null
  wrk -t1 -c "$4" -d "${DURATION}s" -s "$LUA" -H "Authorization: Bearer $TOKEN" "$2" -- "$3" |
    grep '^{' | python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); j.update(server=sys.argv[1], conc=int(sys.argv[2])); print(json.dumps(j))' "$1" "$4"
}
for c in $SWEEP; do
  run qanat "$QURL" "$WORK/qanat.jsonl" "$c"
  run mlserver "$MURL" "$WORK/mlserver.jsonl" "$c"
  run mlflow "$FURL" "$WORK/mlflow.jsonl" "$c"
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
