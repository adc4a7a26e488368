#!/usr/bin/env bash
# N trivial jobs (`true`, 1 core and 16 MiB each) submitted as fast as one client can,
# through Qanat's local executor and through a one-node Slurm cluster (`sbatch --wrap
# true`), on the same machine, one after the other; prints throughput and
# submit-to-start latency for both and the ratio.
#
#   scripts/bench/jobs_vs_slurm.sh             # N=1000
#   N=200 scripts/bench/jobs_vs_slurm.sh       # quick
#   SLURM_N=300 scripts/bench/jobs_vs_slurm.sh # fewer for Slurm (it drains ~1 job/s here)
# Then 100 one-core jobs paced one every 2 s through both (PACED=0 skips): the
# submit-to-start latency of a job asking for a whole core when one is free.
set -euo pipefail

N=${N:-1000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/bench/lib.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench-jobs.XXXXXX")
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
cleanup() {
  [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

bash "$ROOT/scripts/slurm-one-node.sh"
qanat_bin "$ROOT"   # QANAT_BIN, or a release build of this checkout
PORT=$(free_port)
# shellcheck source=scripts/bench/qanat_server.sh
. "$ROOT/scripts/bench/qanat_server.sh"
# Metrics sampling every 10 s would not fire for jobs this short; keep the default.
qanat_server
"$Q" projects create bench2 >/dev/null
"$Q" projects create bench3 >/dev/null
TOKEN=$("$Q" tokens create --name bench 2>/dev/null)
python3 "$ROOT/scripts/bench/jobs_vs_slurm.py" --n "$N" --url "http://127.0.0.1:$PORT" --token "$TOKEN" --project bench ${SLURM_N:+--slurm-n "$SLURM_N"} --paced "${PACED:-100}"
