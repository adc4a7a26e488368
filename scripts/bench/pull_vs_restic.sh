#!/usr/bin/env bash
# A dataset version's files restored to a fresh directory, side by side, one run:
#   floor:  `cp -r` of the same files from the page cache, then `sync`
#   qanat:  `qanat data pull` from a local server (SQLite + local directory, AES-256-GCM
#           at rest, every file's BLAKE3 checked, each file fsync'd before its rename)
#   restic: `restic restore latest` from a local repository (Debian's restic: encrypted,
#           deduplicated, like Qanat's store), then `sync`
# Page caches are warm for all three (each store was just written). Prints the times
# and the ratios, and the CLI's and the server's peak memory.
#
#   scripts/bench/pull_vs_restic.sh               # 2 GiB in 16 files
#   SIZE_MIB=512 scripts/bench/pull_vs_restic.sh  # quick
#   QANAT_BIN=path/to/qanat scripts/bench/pull_vs_restic.sh
set -euo pipefail

SIZE_MIB=${SIZE_MIB:-2048}
FILES=${FILES:-16}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/bench/lib.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench-pull.XXXXXX")
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
cleanup() {
  [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

if ! command -v restic >/dev/null; then
  echo "installing restic (Debian)..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq restic >/dev/null
fi
qanat_bin "$ROOT"
PORT=$(free_port)

SRC=$WORK/src
mkdir -p "$SRC"
per=$((SIZE_MIB / FILES))
echo "generating $FILES files of $per MiB..." >&2
for i in $(seq 1 "$FILES"); do
  head -c "${per}M" /dev/urandom > "$SRC/part-$i.bin"
done
sync

source "$ROOT/scripts/bench/qanat_server.sh"
qanat_server
"$Q" data -p bench create data >/dev/null
"$Q" data -p bench push data "$SRC" >/dev/null 2>&1

export RESTIC_REPOSITORY=$WORK/restic RESTIC_PASSWORD=bench-only
restic init -q >/dev/null
(cd "$SRC" && restic backup -q . >/dev/null)
sync

t=$(now); cp -r "$SRC" "$WORK/floor" && sync; floor=$(elapsed "$t")
rm -rf "$WORK/floor"; sync

t=$(now)
/usr/bin/time -f %M -o "$WORK/cli.rss" "$Q" data -p bench pull data "$WORK/qanat" >/dev/null 2>&1
qanat=$(elapsed "$t")
server_rss=$(awk '/VmHWM/ {print $2}' "/proc/$SERVER_PID/status")
cmp <(cd "$SRC" && sha256sum part-*) <(cd "$WORK/qanat" && sha256sum part-*) >/dev/null
rm -rf "$WORK/qanat"; sync

t=$(now); restic restore -q latest --target "$WORK/restic-out" >/dev/null && sync; restic=$(elapsed "$t")
cmp <(cd "$SRC" && sha256sum part-*) <(cd "$WORK/restic-out" && sha256sum part-*) >/dev/null

printf '\nrestore of %d MiB in %d files (%s; %s)\n' "$SIZE_MIB" "$FILES" "$(date -u +%F)" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
printf '  %-32s %7.2f s  %7.1f MiB/s\n' "cp -r + sync (floor)" "$floor" "$(calc "$SIZE_MIB / $floor")"
printf '  %-32s %7.2f s  %7.1f MiB/s\n' "qanat data pull" "$qanat" "$(calc "$SIZE_MIB / $qanat")"
printf '  %-32s %7.2f s  %7.1f MiB/s\n' "restic restore + sync" "$restic" "$(calc "$SIZE_MIB / $restic")"
printf '  qanat vs floor: %.2fx the time\n' "$(calc "$qanat / $floor")"
printf '  qanat vs restic: %.2fx faster\n' "$(calc "$restic / $qanat")"
printf '  peak memory: CLI %d MiB, server %d MiB\n' "$(( $(cat "$WORK/cli.rss") / 1024 ))" "$(( server_rss / 1024 ))"
