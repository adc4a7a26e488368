#!/usr/bin/env bash
# Materialization into the online store: `qanat features materialize` (redb) against
# `feast materialize` (sqlite online store) on the same Parquet view (ROWS rows over
# KEYS drivers, 20 float64 features), each on a fresh store: wall time, and peak memory
# (Qanat: the server's VmHWM, which includes its start-up; Feast: the command's maximum
# RSS). Run at two sizes to see whether memory grows with rows. One run.
# usage: scripts/bench/materialize_vs_feast.sh [ROWS...]   (default: 2500000 10000000)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
KEYS=${KEYS:-100000}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(2500000 10000000)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
PIT_REQ=scripts/bench/pit-requirements.txt
source scripts/bench/lib.sh
PY_VENV=${QANAT_PIT_VENV:-$(venv_path pit "$PIT_REQ")}
FEAST_REQ=tests/compat/feast-requirements.txt
FEAST_VENV=${QANAT_FEAST_VENV:-$(venv_path feast "$FEAST_REQ")}
ensure_venv "$PY_VENV" "$PIT_REQ"
ensure_venv "$FEAST_VENV" "$FEAST_REQ"
cargo build --release --locked -p qanat --quiet
Q=$CARGO_TARGET_DIR/release/qanat
FEAST=$FEAST_VENV/bin/feast
SERVER_PID=
WORK=
# (Ends with `true`: the trap's status is the script's, and a finished run has no WORK.)
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null; [ -n "$WORK" ] && rm -rf "$WORK"; true; }
trap cleanup EXIT
secs() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
START=2026-01-01T00:00:00Z END=2027-01-01T00:00:00Z
for ROWS in "${SIZES[@]}"; do
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench-mat.XXXXXX")
  "$PY_VENV/bin/python" scripts/bench/pit_data.py "$WORK/data" 1 "$ROWS" 20 "$KEYS"
  VIEW=$WORK/data/view_0.parquet
  schema=$(for i in $(seq 0 19); do printf '  - {name: f0_%s, type: float64}\n' "$i"; done)
  mkdir -p "$WORK/qrepo"
  cat >"$WORK/qrepo/repo.yaml" <<EOF
kind: entity
name: driver
join_keys: [{name: driver_id, type: int64}]
---
kind: source
name: stats
type: file
path: bench/view.parquet
timestamp_field: event_timestamp
---
kind: feature_view
name: stats
entities: [driver]
source: stats
schema:
$schema
EOF
  PORT=$(free_port)
  # shellcheck source=qanat_server.sh
  . scripts/bench/qanat_server.sh
  qanat_server
  "$Q" objects put bench bench/view.parquet "$VIEW" >/dev/null
  "$Q" features -p bench apply "$WORK/qrepo" >/dev/null
  t0=$(date +%s.%N)
  "$Q" features -p bench -o json materialize --start "$START" --end "$END" >"$WORK/q.json"
  qsecs=$(secs "$t0")
  qmem=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$SERVER_PID/status")
  kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=

  mkdir -p "$WORK/frepo"
  cat >"$WORK/frepo/feature_store.yaml" <<EOF
project: bench
registry: $WORK/frepo/registry.db
provider: local
online_store: {type: sqlite, path: $WORK/frepo/online.db}
offline_store: {type: file}
entity_key_serialization_version: 3
EOF
  cat >"$WORK/frepo/repo.py" <<EOF
from datetime import timedelta
from feast import Entity, FeatureView, Field, FileSource
from feast.types import Float64
from feast.value_type import ValueType
driver = Entity(name="driver", join_keys=["driver_id"], value_type=ValueType.INT64)
stats = FeatureView(name="stats", entities=[driver], ttl=timedelta(days=3650),
    schema=[Field(name=f"f0_{i}", dtype=Float64) for i in range(20)],
    source=FileSource(path="$VIEW", timestamp_field="event_timestamp"))
EOF
  (cd "$WORK/frepo" && FEAST_USAGE=False "$FEAST" apply >/dev/null 2>&1)
  t0=$(date +%s.%N)
  (cd "$WORK/frepo" && FEAST_USAGE=False TZ=UTC /usr/bin/time -f '%M' -o "$WORK/f.mem" \
    "$FEAST" materialize "$START" "$END" >"$WORK/f.log" 2>&1) || { tail -5 "$WORK/f.log"; exit 1; }
  fsecs=$(secs "$t0")
  fmem=$(awk '{printf "%.0f", $1/1024}' "$WORK/f.mem")
  written=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["written"])' "$WORK/q.json")
  echo "{\"rows\": $ROWS, \"keys\": $KEYS, \"qanat\": {\"seconds\": $qsecs, \"peak_mib\": $qmem, \"written\": $written}, \"feast\": {\"seconds\": $fsecs, \"peak_mib\": $fmem}, \"feast_over_qanat_time\": $(awk -v a="$fsecs" -v b="$qsecs" 'BEGIN{printf "%.1f", a/b}')}"
  rm -rf "$WORK"; WORK=
done
