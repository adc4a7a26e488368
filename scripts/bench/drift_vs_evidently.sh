#!/usr/bin/env bash
# Drift over a wide table, one run on this machine: Qanat's `qanat monitor compare`
# against Evidently's DataDriftPreset (from PyPI) on the same two Parquet files —
# 100 float columns × 1M rows each by default (drift_evidently.py describes the data).
# Evidently is timed on DataFrames already in memory (reading is left out); Qanat is
# timed end to end, reading and profiling both files included, and again as a monitor
# runs it: the reference's profile saved beforehand (`qanat monitor profile`), the
# current file read, profiled and compared.
# Prints both times, their ratio, the largest gap between the two tools' per-column
# scores, and whether they flag the same columns.
#
#   scripts/bench/drift_vs_evidently.sh
#   ROWS=100000 COLS=20 scripts/bench/drift_vs_evidently.sh
# Knobs: ROWS (1000000), COLS (100), QANAT_BIN (a release binary instead of building
# one), KEEP=1.
set -euo pipefail
ROWS=${ROWS:-1000000}
COLS=${COLS:-100}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench-drift.XXXXXX")
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
REQ=$ROOT/scripts/bench/drift-requirements.txt
source "$ROOT/scripts/bench/lib.sh"
VENV=${QANAT_DRIFT_BENCH_VENV:-$(venv_path drift-bench "$REQ")}
cleanup() { if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi; }
trap cleanup EXIT

ensure_venv "$VENV" "$REQ"
qanat_bin "$ROOT"

echo "writing $COLS columns x $ROWS rows, twice..." >&2
"$VENV/bin/python" "$ROOT/scripts/bench/drift_evidently.py" make "$WORK" "$ROWS" "$COLS"

echo "qanat monitor compare..." >&2
start=$(date +%s.%N)
"$Q" monitor compare "$WORK/reference.parquet" "$WORK/current.parquet" -o json >"$WORK/qanat.json"
end=$(date +%s.%N)
# What a monitor does: the reference's profile exists already (a trained model stores
# it when it is registered), and only the current data is read, profiled and compared.
"$Q" monitor profile "$WORK/reference.parquet" --to "$WORK/reference.json" >/dev/null
echo "qanat monitor compare, reference profile ready..." >&2
check_start=$(date +%s.%N)
"$Q" monitor compare "$WORK/reference.json" "$WORK/current.parquet" -o json >"$WORK/qanat-check.json"
check_end=$(date +%s.%N)
echo "evidently DataDriftPreset..." >&2
"$VENV/bin/python" "$ROOT/scripts/bench/drift_evidently.py" run "$WORK" >"$WORK/evidently.json"

python3 - "$WORK" "$start" "$end" "$check_start" "$check_end" <<'PY'
import json, sys
work, start, end, cstart, cend = sys.argv[1], *map(float, sys.argv[2:6])
q = json.load(open(f"{work}/qanat.json"))
qc = json.load(open(f"{work}/qanat-check.json"))
e = json.load(open(f"{work}/evidently.json"))
qs = end - start
qd = sorted(c["column"] for c in q["by_column"] if c["drifted"])
methods = sorted({c["method"] for c in q["by_column"]})
print(f"qanat     {qs:8.2f} s  (both files read and profiled)  {len(qd)} of {q['columns']} columns drift  methods {methods}")
cs = cend - cstart
qcd = sorted(c["column"] for c in qc["by_column"] if c["drifted"])
print(f"qanat     {cs:8.2f} s  (reference profile ready; current file read and profiled)  {len(qcd)} columns drift")
print(f"evidently {e['seconds']:8.2f} s  (DataFrames in memory)          {len(e['drifted'])} columns drift")
print(f"ratio: qanat is {e['seconds'] / qs:.1f}x faster end to end, {e['seconds'] / cs:.1f}x with the reference profile ready")
if qcd != qd:
    print(f"the two qanat runs flag different columns: {qd} vs {qcd}")
gaps = [abs(c["statistic"] - e["scores"][c["column"]]) for c in q["by_column"]
        if c["statistic"] is not None and c["column"] in e["scores"]]
if gaps:
    print(f"largest gap between the two tools' per-column scores: {max(gaps):.2e}")
same = set(qd) == set(e["drifted"])
print("same drifted columns" if same else f"different columns: only qanat {sorted(set(qd) - set(e['drifted']))}, only evidently {sorted(set(e['drifted']) - set(qd))}")
PY
