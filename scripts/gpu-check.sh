#!/usr/bin/env bash
# The GPU checks, in one run, on a machine with an NVIDIA GPU (issue 50). Prints one
# table (and writes it to $OUT/gpu-check.md when OUT is set):
#   1. NVML discovery: `qanat gpus` finds the GPUs nvidia-smi lists;
#   2. a train job with `gpus: 1` and `device: cuda`: its run records the GPU's
#      utilization and memory (system/gpu_0_*), and the job's run says it trained there;
#   3. the idle-GPU flag: a job that holds a GPU and sleeps is flagged (idle_gpus);
#   4. the CUDA trainer against PyTorch AMP (samples/s in fp32, bf16, fp16, with the
#      GPU's utilization sampled while each runs), when a PyTorch venv is given;
#   5. GPU serving: the trained model's ONNX graph, deployed alone, says where it runs
#      and answers a 64-row request (onnxruntime's CUDA provider when ORT_GPU_LIB
#      names an onnxruntime-gpu libonnxruntime.so).
#
# Usage: scripts/gpu-check.sh [QANAT_BINARY] [GPU_CHECK_BINARY]
#   QANAT_BINARY      a `--features cuda` build of qanat (default: builds it)
#   GPU_CHECK_BINARY  the trainer's example (default: builds it; needs the toolkit-free
#                     cuda feature only)
#   TORCH_PYTHON=...  a python with torch (CUDA) for step 4; skipped without it
#   ORT_GPU_LIB=...   libonnxruntime.so of onnxruntime-gpu for step 5 (CPU without it)
# Exits 2 on a machine without an NVIDIA GPU.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi finds none); nothing to check" >&2
  exit 2
fi

Q=${1:-}
CHECK=${2:-}
if [ -z "$Q" ]; then
  cargo build --release --locked -p qanat --features cuda
  Q=$ROOT/target/release/qanat
fi
if [ -z "$CHECK" ]; then
  cargo build --release --locked -p qanat-train --features cuda --example gpu_check
  CHECK=$ROOT/target/release/examples/gpu_check
fi

WORK=$(mktemp -d)
PORT=${PORT:-18099}
cleanup() {
  [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null || true
  [ -n "${SAMPLER:-}" ] && kill "$SAMPLER" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

ROWS=()
row() { ROWS+=("| $1 | $2 | $3 |"); }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# The server: metrics every 2 s, a GPU idle for 15 s is flagged.
export QANAT_JOBS_METRICS_INTERVAL_SECS=2 QANAT_JOBS_IDLE_GPU_SECS=15
if [ -n "${ORT_GPU_LIB:-}" ]; then
  export QANAT_RUNTIME_ONNXRUNTIME_LIB=$ORT_GPU_LIB
fi
# shellcheck source=bench/qanat_server.sh
source "$ROOT/scripts/bench/qanat_server.sh"
qanat_server
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)

# 1. Discovery.
SMI_COUNT=$(nvidia-smi -L | grep -c '^GPU ')
FOUND=$("$Q" -o json gpus | json "sum(len(e['gpus']) for e in d['executors'])")
NAMES=$("$Q" -o json gpus | json "', '.join(sorted({g['name'] for e in d['executors'] for g in e['gpus']}))")
if [ "$FOUND" -ge "$SMI_COUNT" ] && [ "$FOUND" -gt 0 ]; then
  row "NVML discovery" "ok" "$FOUND GPU(s) ($NAMES); nvidia-smi lists $SMI_COUNT"
else
  row "NVML discovery" "FAILED" "qanat gpus found $FOUND, nvidia-smi lists $SMI_COUNT"
fi

# 2. A train job on the GPU, its run's system metrics.
"$Q" data -p bench create cancer >/dev/null
mkdir -p "$WORK/cancer" && cp examples/data/breast_cancer.csv "$WORK/cancer/"
"$Q" data -p bench push cancer "$WORK/cancer" -m gpu-check >/dev/null
cat >"$WORK/train.yaml" <<'EOF'
target: diagnosis
model: mlp
hidden: [1024, 1024]
epochs: 200
batch_size: 64
patience: 1000
device: cuda
precision: bf16
register: gpu-train
EOF
JOB=$("$Q" train -p bench -q -c "$WORK/train.yaml" --data dataset:cancer@1 --gpus 1 --name gpu-train)
STATE=$("$Q" jobs -p bench -o json show "$JOB" | json "d['state']")
while [ "$STATE" = queued ] || [ "$STATE" = running ]; do
  sleep 2
  STATE=$("$Q" jobs -p bench -o json show "$JOB" | json "d['state']")
done
RUN=$("$Q" jobs -p bench -o json show "$JOB" | json "d.get('run_id') or ''")
if [ "$STATE" = succeeded ] && [ -n "$RUN" ]; then
  METRICS=$("$Q" runs -p bench -o json show "$RUN")
  UTIL=$(echo "$METRICS" | json "max([m['value'] for m in d['run']['data'].get('metrics', []) if m['key'] == 'system/gpu_0_utilization_percentage'] or [-1])")
  MEM=$(echo "$METRICS" | json "max([m['value'] for m in d['run']['data'].get('metrics', []) if m['key'] == 'system/gpu_0_memory_usage_megabytes'] or [-1])")
  BACKEND=$(echo "$METRICS" | json "next((t['value'] for t in d['run']['data'].get('tags', []) if t['key'] == 'qanat.backend'), '?')")
  if [ "${UTIL%.*}" -ge 0 ] && [ "${MEM%.*}" -gt 0 ]; then
    row "gpus: 1 job, run metrics" "ok" "backend $BACKEND; GPU utilization up to $UTIL %, memory up to $MEM MB"
  else
    row "gpus: 1 job, run metrics" "FAILED" "no GPU metrics in run $RUN (utilization $UTIL, memory $MEM)"
  fi
else
  row "gpus: 1 job, run metrics" "FAILED" "job $JOB ended $STATE: $("$Q" jobs -p bench -o json show "$JOB" | json "d.get('reason')")"
fi

# 3. The idle flag.
IDLE_JOB=$("$Q" jobs -p bench submit -q --gpus 1 --name idle -- sleep 60)
FLAG=0
for _ in $(seq 40); do
  sleep 2
  FLAG=$("$Q" jobs -p bench -o json show "$IDLE_JOB" | json "d.get('idle_gpus') or 0")
  [ "$FLAG" -gt 0 ] && break
done
"$Q" jobs -p bench cancel "$IDLE_JOB" >/dev/null || true
if [ "$FLAG" -gt 0 ]; then
  row "idle-GPU flag" "ok" "a job sleeping on its GPU flagged idle ($FLAG GPU) after QANAT_JOBS_IDLE_GPU_SECS=15"
else
  row "idle-GPU flag" "FAILED" "a job sleeping on its GPU for 80 s was never flagged"
fi

# 4. The trainer against PyTorch AMP, utilization sampled by nvidia-smi.
sample() {
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 500 >"$WORK/util-$1" &
  SAMPLER=$!
}
peak() { kill "$SAMPLER" 2>/dev/null || true; SAMPLER=; sort -n "$WORK/util-$1" | tail -1; }
sample native
"$CHECK" examples/data/breast_cancer.csv 262144 4 >"$WORK/native.jsonl"
NATIVE_UTIL=$(peak native)
for p in fp32 bf16 fp16; do
  N=$(grep "\"precision\": *\"$p\"" "$WORK/native.jsonl" | grep samples_per_sec | json "round(d['samples_per_sec'])" || echo "?")
  if [ -n "${TORCH_PYTHON:-}" ]; then
    sample "torch-$p"
    T=$("$TORCH_PYTHON" scripts/bench/train_pytorch.py 262144 100 1024,1024 1024 4 16 cuda "$p" | tail -1 | json "round(d['samples_per_sec'])")
    TU=$(peak "torch-$p")
    row "trainer $p vs PyTorch AMP" "measured" "Qanat $N samples/s (GPU util peak ${NATIVE_UTIL}% over the run), PyTorch $T samples/s (peak ${TU}%)"
  else
    row "trainer $p" "measured" "Qanat $N samples/s (GPU util peak ${NATIVE_UTIL}%); PyTorch not run (set TORCH_PYTHON)"
  fi
done

# 5. GPU serving: the trained version's ONNX graph, registered alone (as
#    `mlflow.onnx.log_model` stores one, so no native weights take precedence), deployed
#    with serving.onnx_device = auto: onnxruntime's CUDA provider when ORT_GPU_LIB (an
#    onnxruntime-gpu libonnxruntime.so, its CUDA provider library beside it) was given.
# Every failure returns with WHY set (the script's errexit does not apply inside a
# function called before ||), so steps 1-4's rows are printed whatever happens here.
serve_onnx() {
  local token api arts src only where code call
  WHY="reading the CLI's token"
  token=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["servers"][c["current"]]["token"])' "$QANAT_CREDENTIALS") || return 1
  api=$QANAT_SERVER_URL
  local auth=(-H "Authorization: Bearer $token" -H "qanat-project: bench")
  WHY="finding version 1 of gpu-train's artifacts"
  src=$(curl -sf "${auth[@]}" "$api/mlflow/bench/api/2.0/mlflow/model-versions/get-download-uri?name=gpu-train&version=1" |
    json "d['artifact_uri'].removeprefix('mlflow-artifacts:').strip('/')") || return 1
  arts=$api/mlflow/bench/api/2.0/mlflow-artifacts/artifacts
  WHY="copying its model.onnx"
  curl -sf "${auth[@]}" "$arts/$src/model.onnx" -o "$WORK/model.onnx" || return 1
  only=${src%%/*}/gpu-onnx/model
  curl -sf "${auth[@]}" -X PUT --data-binary @"$WORK/model.onnx" "$arts/$only/model.onnx" >/dev/null || return 1
  WHY="registering the graph as gpu-onnx"
  for call in "registered-models/create {\"name\": \"gpu-onnx\"}" \
              "model-versions/create {\"name\": \"gpu-onnx\", \"source\": \"mlflow-artifacts:/$only\"}"; do
    curl -sf "${auth[@]}" -H 'Content-Type: application/json' -X POST \
      "$api/mlflow/bench/api/2.0/mlflow/${call%% *}" -d "${call#* }" >/dev/null || return 1
  done
  WHY="deploying it: $("$Q" deploy -p bench create gpu-onnx --model gpu-onnx --primary 1 2>&1 | tail -1)"
  where=$("$Q" deploy -p bench status gpu-onnx 2>&1 | grep -o 'onnx on [a-z]* ([^)]*)' | head -1) || return 1
  # One batch of 64 rows through the Open Inference Protocol, each input as its
  # metadata says, answered where it runs.
  WHY="reading its metadata"
  curl -sf "${auth[@]}" "$api/oip/bench/v2/models/gpu-onnx" -o "$WORK/meta.json" || return 1
  python3 - "$WORK/meta.json" >"$WORK/request.json" <<'PY' || return 1
import json, math, sys
meta = json.load(open(sys.argv[1]))
inputs = []
for i in meta["inputs"]:
    dims = [d if d > 0 else 1 for d in i["shape"][1:]]
    inputs.append({"name": i["name"], "shape": [64, *dims], "datatype": "FP32",
                   "data": [0.5] * (64 * math.prod(dims))})
print(json.dumps({"inputs": inputs}))
PY
  code=$(curl -s -o "$WORK/infer.json" -w '%{http_code}' "${auth[@]}" -H 'Content-Type: application/json' \
    -X POST "$api/oip/bench/v2/models/gpu-onnx/infer" --data-binary @"$WORK/request.json") || code=000
  case "$where,$code" in
    "onnx on onnxruntime (cuda:"*,200) row "GPU serving (ONNX)" "ok" "the deployment serves $where; a 64-row request answered 200" ;;
    "onnx on onnxruntime (cuda:"*) row "GPU serving (ONNX)" "FAILED" "placed $where, but a 64-row request answered $code: $(head -c 300 "$WORK/infer.json")" ;;
    *) row "GPU serving (ONNX)" "cpu" "served $where, answered $code (set ORT_GPU_LIB to an onnxruntime-gpu libonnxruntime.so)" ;;
  esac
}
if [ "$STATE" = succeeded ]; then
  WHY=
  serve_onnx || row "GPU serving (ONNX)" "FAILED" "$WHY"
fi

{
  echo "GPU check: $CARD, driver $DRIVER, $(date -u +%Y-%m-%d)"
  echo
  echo "| check | result | detail |"
  echo "|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
} | tee "${OUT:-$WORK}/gpu-check.md"
