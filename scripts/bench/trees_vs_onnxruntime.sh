#!/usr/bin/env bash
# Native tree prediction against onnxruntime's TreeEnsemble on the same trees, one run
# on this machine: an XGBoost and a LightGBM binary classifier (300 trees each, 20
# features), read from their own files by Qanat, and converted to ONNX by onnxmltools
# for onnxruntime; one thread each, in-process calls at batch 1 and 256. Checks that
# Qanat's predictions equal the library's (1e-6) and prints the ratio per case.
# usage: scripts/bench/trees_vs_onnxruntime.sh [SECONDS per case]
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_CASE=${1:-3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
source scripts/venv.sh
REQ=scripts/bench/trees-requirements.txt
VENV=${QANAT_TREES_BENCH_VENV:-$(venv_path trees-bench "$REQ")}
ensure_venv "$VENV" "$REQ"
cargo build --release --locked -p qanat-runtime --example trees_bench --quiet
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-trees-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
"$VENV/bin/python" scripts/bench/trees_ort.py make "$WORK" 2>/dev/null
for m in xgb.ubj lgb.txt; do
  "$CARGO_TARGET_DIR/release/examples/trees_bench" "$WORK" "$m" "$SECONDS_PER_CASE"
  mv "$WORK/ours.f32" "$WORK/ours-${m%%.*}.f32"
done | tee "$WORK/ours.txt"
OMP_NUM_THREADS=1 "$VENV/bin/python" scripts/bench/trees_ort.py run "$WORK" "$SECONDS_PER_CASE" | tee "$WORK/theirs.txt"
python3 - "$WORK/ours.txt" "$WORK/theirs.txt" <<'PY'
import json, sys
def cases(path):
    return {(j["model"].split(".")[0], j["batch"]): j for j in (json.loads(l) for l in open(path) if l.startswith("{"))}
ours, theirs = cases(sys.argv[1]), cases(sys.argv[2])
print("| model | batch | qanat rows/s | onnxruntime rows/s | qanat / onnxruntime | qanat p50 µs | onnxruntime p50 µs |")
print("|---|---|---|---|---|---|---|")
for key in sorted(ours):
    a, b = ours[key], theirs[key]
    print(f"| {key[0]} | {key[1]} | {a['rows_per_s']:,} | {b['rows_per_s']:,} | {a['rows_per_s'] / b['rows_per_s']:.2f}x | {a['p50_us']} | {b['p50_us']} |")
for m in ("xgb", "lgb"):
    j = theirs[(m, 1)]
    print(f"{m}: largest difference from the library's predictions: qanat {j['qanat_max_err']:.2e}, onnxruntime {j['onnxruntime_max_err']:.2e}")
PY
