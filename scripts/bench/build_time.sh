#!/usr/bin/env bash
# A cold release build of the binary, as `cargo install --path crates/qanat` does it:
# an empty target directory (the registry's sources already fetched, so the network is
# not timed), `cargo build --release -p qanat --timings`. Reports the wall time, the
# binary's size, how busy the cores were, and the units that took longest.
#
#   scripts/bench/build_time.sh                # the checkout this script is in
#   KEEP=1 scripts/bench/build_time.sh         # keep the target directory afterwards
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TARGET=$(mktemp -d "${TMPDIR:-/tmp}/qanat-cold-build.XXXXXX")
cleanup() { [ -n "${KEEP:-}" ] || rm -rf "$TARGET"; }
trap cleanup EXIT

cd "$ROOT"
cargo fetch --locked --quiet
start=$(date +%s)
CARGO_TARGET_DIR=$TARGET cargo build --release --locked -p qanat --timings --quiet
end=$(date +%s)
report=$(ls -t "$TARGET"/cargo-timings/cargo-timing-*.html | head -1)
cp "$report" "${TMPDIR:-/tmp}/qanat-build-timings.html"
echo "commit $(git rev-parse --short HEAD), $(nproc) cores"
echo "cold release build: $((end - start)) s"
echo "binary: $(stat -c %s "$TARGET/release/qanat") bytes"
python3 - "$report" <<'PY'
import json, re, sys
from collections import Counter

html = open(sys.argv[1]).read()
units = json.loads(re.search(r"const UNIT_DATA = (\[.*?\]);\n", html, re.S).group(1))
cpu = json.loads(re.search(r"const CPU_USAGE = (\[.*?\]);", html, re.S).group(1))
busy = sum(c[1] for c in cpu) / max(len(cpu), 1)
print(f"cores busy: {busy:.0f}% on average; {len(units)} units, {sum(u['duration'] for u in units):.0f} s of unit time")
family = Counter()
for u in units:
    head = u["name"].split("-")[0]
    family[head if head in ("datafusion", "tract", "arrow", "qanat", "burn", "sqlx") else "other"] += u["duration"]
print("unit time by family:", ", ".join(f"{k} {v:.0f} s" for k, v in family.most_common()))
print("longest units:")
for u in sorted(units, key=lambda u: -u["duration"])[:12]:
    print(f"  {u['duration']:6.1f} s  {u['name']} {u['target'].strip()}")
end = max(u["start"] + u["duration"] for u in units)
tail = [u for u in units if u["start"] + u["duration"] > end - 300 and u["duration"] > 30]
print("the last five minutes:", ", ".join(f"{u['name']} {u['target'].strip()} ({u['duration']:.0f} s)" for u in tail))
PY
