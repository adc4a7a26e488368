#!/usr/bin/env bash
# Training throughput (samples/s) of Qanat's native MLP against PyTorch on CPU: the same
# architecture (100 -> 256 -> 256 -> 1, ReLU), batch, optimizer (Adam) and thread count,
# synthetic float32 inputs in memory, minibatch steps only, first epoch not timed.
# usage: scripts/bench/train_vs_pytorch.sh [ROWS] [EPOCHS]   (one run; prints a ratio)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROWS=${1:-65536}
EPOCHS=${2:-3}
HIDDEN=256,256
BATCH=256
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
source scripts/bench/torch_venv.sh   # TORCH_VENV: torch, onnx, onnxruntime
cargo build --release --locked -p qanat-train --example throughput --quiet
# burn's ndarray backend runs these steps on one thread: PyTorch gets one too.
ours=$(OMP_NUM_THREADS=1 "$CARGO_TARGET_DIR/release/examples/throughput" "$ROWS" 100 "$HIDDEN" "$BATCH" "$EPOCHS")
theirs=$(OMP_NUM_THREADS=1 "$TORCH_VENV/bin/python" scripts/bench/train_pytorch.py "$ROWS" 100 "$HIDDEN" "$BATCH" "$EPOCHS" 1)
echo "$ours"
echo "$theirs"
python3 - "$ours" "$theirs" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"qanat / pytorch samples/s: {a['samples_per_s'] / b['samples_per_s']:.2f}x")
PY
