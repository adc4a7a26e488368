#!/usr/bin/env bash
# Point-in-time join: Qanat's engine against DuckDB's ASOF LEFT JOIN and Feast's local
# offline store (get_historical_features, file source) on the same tables (default 1M
# entity rows; 3 views of 5M + 3M + 2M rows, 20 float64 features; 100k keys). Qanat and
# DuckDB join from memory (tables loaded first, not timed); Feast is timed from the call
# to the finished DataFrame. One run; prints each and the ratios. FEAST=0 skips Feast.
# usage: scripts/bench/pit_vs_duckdb.sh [ENTITY_ROWS] [VIEW_ROWS] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/../.."
ENTITIES=${1:-1000000}
VIEWS=${2:-5000000,3000000,2000000}
THREADS=${3:-2}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
REQ=scripts/bench/pit-requirements.txt
source scripts/bench/lib.sh
VENV=${QANAT_PIT_VENV:-$(venv_path pit "$REQ")}
ensure_venv "$VENV" "$REQ"
DATA=${TMPDIR:-/tmp}/qanat-pit-bench-$ENTITIES-${VIEWS//,/-}
[ -f "$DATA/entities.parquet" ] || "$VENV/bin/python" scripts/bench/pit_data.py "$DATA" "$ENTITIES" "$VIEWS" 8,6,6
cargo build --release --locked -p qanat-features --example pit_bench --quiet
ours=$("$CARGO_TARGET_DIR/release/examples/pit_bench" "$DATA")
theirs=$("$VENV/bin/python" scripts/bench/pit_duckdb.py "$DATA" "$THREADS")
feast='{}'
if [ "${FEAST:-1}" != 0 ]; then
  FEAST_REQ=tests/compat/feast-requirements.txt
  FEAST_VENV=${QANAT_FEAST_VENV:-$(venv_path feast "$FEAST_REQ")}
  ensure_venv "$FEAST_VENV" "$FEAST_REQ"
  feast=$("$FEAST_VENV/bin/python" scripts/bench/pit_feast.py "$DATA" 2>/dev/null | tail -n1)
fi
echo "$ours"
echo "$theirs"
[ "$feast" != '{}' ] && echo "$feast"
python3 - "$ours" "$theirs" "$feast" <<'PY'
import json, sys
a, b, c = (json.loads(x) for x in sys.argv[1:4])
print(f"duckdb / qanat seconds: {b['seconds'] / a['seconds']:.2f}x (above 1: qanat is faster)")
if c:
    print(f"feast / qanat seconds: {c['seconds'] / a['seconds']:.1f}x; feast returned {c['entity_rows']} of {a['entity_rows']} entity rows")
PY
