#!/usr/bin/env bash
# Dedup on append: push a CSV of SIZE_MIB, append 1% more rows, push again, and report
# how many new bytes the second version stored (chunk bytes on disk, and the
# version's new_bytes). Release build, local server, one run.
#
#   scripts/bench/dedup_append.sh                 # 1024 MiB CSV
set -euo pipefail
SIZE_MIB=${SIZE_MIB:-1024}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-dedup.XXXXXX")
PORT=${PORT:-18096}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
cleanup() { [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

(cd "$ROOT" && cargo build --release -p qanat --quiet)
Q=$CARGO_TARGET_DIR/release/qanat

mkdir -p "$WORK/data"
python3 - "$WORK/data/tx.csv" "$SIZE_MIB" <<'PY'
import sys
path, mib = sys.argv[1], int(sys.argv[2])
target = mib << 20
with open(path, "w") as f:
    f.write("id,amount,merchant,label\n")
    i, size, rows = 0, 0, []
    while size < target:
        h = (i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        row = f"{i},{h % 500000 / 100:.2f},m{h % 997},{'fraud' if h % 7 == 0 else 'ok'}\n"
        rows.append(row); size += len(row); i += 1
        if len(rows) == 100000:
            f.write("".join(rows)); rows = []
    f.write("".join(rows))
print(i, file=open(path + ".rows", "w"))
PY
rows=$(cat "$WORK/data/tx.csv.rows"); rm "$WORK/data/tx.csv.rows"

source "$ROOT/scripts/bench/qanat_server.sh"
qanat_server
"$Q" data -p bench create tx >/dev/null
chunks() { du -sb "$QANAT_HOME/objects/projects"/*/chunks | cut -f1; }

"$Q" data -p bench push tx "$WORK/data" >/dev/null 2>&1
before=$(chunks)
python3 - "$WORK/data/tx.csv" "$rows" <<'PY'
import sys
path, start = sys.argv[1], int(sys.argv[2])
extra = start // 100
with open(path, "a") as f:
    for i in range(start, start + extra):
        h = (i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        f.write(f"{i},{h % 500000 / 100:.2f},m{h % 997},{'fraud' if h % 7 == 0 else 'ok'}\n")
PY
size=$(stat -c %s "$WORK/data/tx.csv")
new_bytes=$("$Q" data -p bench push tx "$WORK/data" --output json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["new_bytes"])')
after=$(chunks)
python3 - "$SIZE_MIB" "$size" "$before" "$after" "$new_bytes" <<'PY'
import sys
mib, size, before, after, new = map(int, sys.argv[1:])
print(f"{mib} MiB CSV + 1% rows (now {size} bytes):")
print(f"  chunk bytes on disk: {before} -> {after}: {after - before} new = {(after - before) / size * 100:.2f}% of the new version")
print(f"  version new_bytes (plaintext of chunks the parent lacked): {new} = {new / size * 100:.2f}%")
PY
