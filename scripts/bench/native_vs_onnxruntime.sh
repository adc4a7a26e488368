#!/usr/bin/env bash
# The native runtime against onnxruntime (from PyPI), in one run on this machine: the
# same MLP 256 -> 1024 -> 1024 -> 2 (He-initialized), one thread each, in-process calls
# at batch 1 and 64, in f32 and int8 (ours: dynamic int8 kernels; onnxruntime's:
# quantize_dynamic). Also prints int8 vs f32 on the native runtime and the holdout
# accuracy of int8 on a trained model (native_bench without DIR). Then tract against
# onnxruntime on the same ONNX files (native_ort.py's MatMul graph and onnxruntime's
# own int8 quantization of it), one thread each, in-process.
# usage: scripts/bench/native_vs_onnxruntime.sh [SECONDS per case]   (prints ratios)
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_CASE=${1:-2}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
source scripts/bench/torch_venv.sh   # TORCH_VENV: torch, onnx, onnxruntime
cargo build --release --locked -p qanat-runtime --example native_bench --example tract_bench --quiet
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-native-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/portable"
grep -m1 "model name" /proc/cpuinfo || true
"$CARGO_TARGET_DIR/release/examples/native_bench" "$SECONDS_PER_CASE" "$WORK" | tee "$WORK/ours.txt"
# The same model on the portable kernels only (pulp's AVX2/AVX-512 paths, no VNNI and no
# packed FMA panels): the before of docs/benchmarks.md's after.
QANAT_NATIVE_KERNELS=portable "$CARGO_TARGET_DIR/release/examples/native_bench" "$SECONDS_PER_CASE" "$WORK/portable" \
  | tee "$WORK/portable.txt"
OMP_NUM_THREADS=1 "$TORCH_VENV/bin/python" scripts/bench/native_ort.py "$WORK" "$SECONDS_PER_CASE" | tee "$WORK/theirs.txt"
"$CARGO_TARGET_DIR/release/examples/tract_bench" "$WORK" "$SECONDS_PER_CASE" | tee "$WORK/tract.txt"
compare() { # ours theirs label
python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def cases(path):
    return {(j["precision"], j["batch"]): j for j in
            (json.loads(l) for l in open(path) if l.startswith("{"))}
ours, theirs, label = cases(sys.argv[1]), cases(sys.argv[2]), sys.argv[3]
print(f"| precision | batch | {label} rows/s | onnxruntime rows/s | {label} / onnxruntime | {label} p50 µs | onnxruntime p50 µs |")
print("|---|---|---|---|---|---|---|")
for key in sorted(ours):
    a, b = ours[key], theirs[key]
    print(f"| {key[0]} | {key[1]} | {a['rows_per_s']} | {b['rows_per_s']} | {a['rows_per_s'] / b['rows_per_s']:.2f}x | {a['p50_us']} | {b['p50_us']} |")
PY
}
compare "$WORK/ours.txt" "$WORK/theirs.txt" "qanat native"
compare "$WORK/portable.txt" "$WORK/theirs.txt" "qanat portable"
compare "$WORK/tract.txt" "$WORK/theirs.txt" "tract"
"$CARGO_TARGET_DIR/release/examples/native_bench" "$SECONDS_PER_CASE" | tail -1
