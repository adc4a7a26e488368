#!/usr/bin/env bash
# Side-by-side ingest of the same directory:
#   qanat:  `qanat data push` to a local Qanat server (SQLite + local directory, encrypted)
#   dvc:    `dvc add` + `dvc push` to a local DVC remote (DVC from PyPI)
#   raw:    `cat files > /dev/null` (the speed of reading the files)
# Prints the times and the ratios from this one run. Page cache is warm for all three.
#
#   scripts/bench/datasets_vs_dvc.sh            # 2 GiB, 16 files
#   SIZE_MIB=512 scripts/bench/datasets_vs_dvc.sh
set -euo pipefail

SIZE_MIB=${SIZE_MIB:-2048}
FILES=${FILES:-16}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench.XXXXXX")
PORT=${PORT:-18099}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
VENV=${QANAT_BENCH_VENV:-$HOME/.cache/qanat-bench-venv}

cleanup() {
  [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

now() { date +%s.%N; }
calc() { python3 -c "print($1)"; }
elapsed() { calc "$(now) - $1"; }

echo "building qanat (release)..." >&2
(cd "$ROOT" && cargo build --release -p qanat --quiet)
Q=$CARGO_TARGET_DIR/release/qanat

if [ ! -x "$VENV/bin/dvc" ]; then
  echo "installing dvc into $VENV..." >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check dvc
fi
DVC=$VENV/bin/dvc

# The data lives inside the DVC repository (dvc add needs it there); Qanat pushes the
# very same directory.
REPO=$WORK/repo
mkdir -p "$REPO/data"
per=$((SIZE_MIB / FILES))
echo "generating $FILES files of $per MiB..." >&2
for i in $(seq 1 "$FILES"); do
  head -c "${per}M" /dev/urandom > "$REPO/data/part-$i.bin"
done
sync
cat "$REPO"/data/* > /dev/null   # warm the page cache

t=$(now); cat "$REPO"/data/* > /dev/null; raw=$(elapsed "$t")

source "$ROOT/scripts/bench/qanat_server.sh"
qanat_server
"$Q" data -p bench create data >/dev/null
t=$(now); "$Q" data -p bench push data "$REPO/data" >/dev/null 2>&1; qanat=$(elapsed "$t")

cd "$REPO"
git init -q . && git config user.email bench@example.com && git config user.name bench
"$DVC" init -q
"$DVC" remote add -q -d local "$WORK/dvc-remote"
t=$(now); "$DVC" add -q data && "$DVC" push -q; dvc=$(elapsed "$t")

printf '\ningest of %d MiB in %d files (%s)\n' "$SIZE_MIB" "$FILES" "$(date -u +%F)"
printf '  %-34s %8.2f s  %7.1f MiB/s\n' "cat > /dev/null" "$raw" "$(calc "$SIZE_MIB / $raw")"
printf '  %-34s %8.2f s  %7.1f MiB/s\n' "qanat data push" "$qanat" "$(calc "$SIZE_MIB / $qanat")"
printf '  %-34s %8.2f s  %7.1f MiB/s\n' "dvc add + dvc push" "$dvc" "$(calc "$SIZE_MIB / $dvc")"
printf '  qanat vs dvc: %.2fx faster\n' "$(calc "$dvc / $qanat")"
printf '  qanat vs raw read: %.2fx the time of cat\n' "$(calc "$qanat / $raw")"
