#!/usr/bin/env bash
# Point-in-time join end to end: `qanat features training-set` against DuckDB doing the
# same work, on the same Parquet (default 1M entity rows; 3 views of 5M + 3M + 2M rows,
# 20 float64 features, 100k drivers; each view with a `created` column and one row in
# ten tied with another on driver and event time). Both read the sources, keep the
# newest created of a tie, join as of each entity row's time with a ttl, and write
# Parquet. Qanat reads its encrypted dataset versions (pushed first, not timed) and
# writes a new dataset version with lineage; DuckDB reads the plain files and writes
# one. The two results are compared (null counts and sums per feature). One run.
# usage: scripts/bench/pit_end_to_end.sh [ENTITY_ROWS] [VIEW_ROWS] [THREADS]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
ENTITIES=${1:-1000000}
VIEWS=${2:-5000000,3000000,2000000}
THREADS=${3:-2}
TTL_DAYS=${TTL_DAYS:-30}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
REQ=scripts/bench/pit-requirements.txt
source scripts/bench/lib.sh
VENV=${QANAT_PIT_VENV:-$(venv_path pit "$REQ")}
ensure_venv "$VENV" "$REQ"
DATA=${TMPDIR:-/tmp}/qanat-pit-e2e-$ENTITIES-${VIEWS//,/-}
[ -f "$DATA/entities.parquet" ] || PIT_CREATED=1 "$VENV/bin/python" scripts/bench/pit_data.py "$DATA" "$ENTITIES" "$VIEWS" 8,6,6
# QANAT_BIN=<a binary> skips the release build (a debug one checks the results only).
if [ -z "${QANAT_BIN:-}" ]; then
  cargo build --release --locked -p qanat --quiet
fi
Q=${QANAT_BIN:-$CARGO_TARGET_DIR/release/qanat}
SERVER_PID=
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench-pit.XXXXXX")
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; true; }
trap cleanup EXIT
secs() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }

PORT=$(free_port)
# shellcheck source=qanat_server.sh
. scripts/bench/qanat_server.sh
qanat_server
mkdir -p "$WORK/repo"
{
  printf 'kind: entity\nname: driver\njoin_keys: [{name: driver_id, type: int64}]\n'
  for f in "$DATA"/view_*.parquet; do
    v=$(basename "$f" .parquet)
    mkdir -p "$WORK/src/$v" && { ln "$f" "$WORK/src/$v/part-0.parquet" 2>/dev/null || cp "$f" "$WORK/src/$v/part-0.parquet"; }
    "$Q" data -p bench create "$v" >/dev/null
    "$Q" data -p bench push "$v" "$WORK/src/$v" -m bench >/dev/null
    printf -- '---\nkind: source\nname: %s\ntype: dataset\ndataset: %s\ntimestamp_field: event_timestamp\ncreated_timestamp_field: created\n' "${v}_src" "$v"
    printf -- '---\nkind: feature_view\nname: %s\nentities: [driver]\nsource: %s\nttl: %sd\nschema:\n' "$v" "${v}_src" "$TTL_DAYS"
    cols=$("$VENV/bin/python" -c 'import sys, pyarrow.parquet as pq; print(" ".join(c for c in pq.read_schema(sys.argv[1]).names if c.startswith("f")))' "$f")
    for c in $cols; do
      printf '  - {name: %s, type: float64}\n' "$c"
    done
  done
} >"$WORK/repo/repo.yaml"
# The feature list from the views' files (view:feature, comma-separated).
FEATURES=$("$VENV/bin/python" - "$DATA" <<'PY'
import glob, os, sys
import pyarrow.parquet as pq
out = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "view_*.parquet"))):
    v = os.path.basename(f)[:-len(".parquet")]
    out += [f"{v}:{c}" for c in pq.read_schema(f).names if c.startswith("f")]
print(",".join(out))
PY
)
"$Q" features -p bench apply "$WORK/repo" >/dev/null
mkdir -p "$WORK/ent" && { ln "$DATA/entities.parquet" "$WORK/ent/part-0.parquet" 2>/dev/null || cp "$DATA/entities.parquet" "$WORK/ent/part-0.parquet"; }
"$Q" data -p bench create entities >/dev/null
"$Q" data -p bench push entities "$WORK/ent" -m bench >/dev/null

t0=$(date +%s.%N)
"$Q" features -p bench -o json training-set --entities dataset:entities@1 \
  --features "$FEATURES" --to pit-out >"$WORK/q.json"
qsecs=$(secs "$t0")
qmem=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$SERVER_PID/status")
"$Q" data -p bench pull pit-out@1 "$WORK/q-out" >/dev/null
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=

duck=$(/usr/bin/time -f '%M' -o "$WORK/duck.mem" "$VENV/bin/python" scripts/bench/pit_duckdb_e2e.py "$DATA" "$THREADS" $((TTL_DAYS * 86400)) "$WORK/duck.parquet")
dmem=$(( $(cat "$WORK/duck.mem") / 1024 ))
same=$("$VENV/bin/python" scripts/bench/pit_compare.py "$WORK/q-out" "$WORK/duck.parquet")
echo "qanat training-set: $qsecs s (server peak RSS $qmem MiB, start-up and pushes included): $(cat "$WORK/q.json" | tr -d '\n' | cut -c1-300)"
echo "duckdb: $duck (peak RSS $dmem MiB)"
echo "same values: $same"
python3 - "$qsecs" "$duck" <<'PY'
import json, sys
q, d = float(sys.argv[1]), json.loads(sys.argv[2])["seconds"]
print(f"duckdb / qanat seconds: {d / q:.2f}x (above 1: qanat is faster)")
PY
