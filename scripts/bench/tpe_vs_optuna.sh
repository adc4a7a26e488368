#!/usr/bin/env bash
# TPE against Optuna's TPESampler on the 10-D Rosenbrock function: median best value
# over 5 seeds after 200 trials, and the time per suggestion per window of 100 trials
# over 1,000 trials. Optuna comes from PyPI into a cached venv.
# usage: scripts/bench/tpe_vs_optuna.sh [TRIALS] [SEEDS] [LONG]
set -euo pipefail
cd "$(dirname "$0")/../.."
TRIALS=${1:-200}
SEEDS=${2:-5}
LONG=${3:-1000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
VENV=${QANAT_OPTUNA_VENV:-$HOME/.cache/qanat-optuna-venv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import optuna' 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check 'optuna==4.5.0'
fi
cargo build --release --locked -p qanat-train --example tpe_bench --quiet
"$CARGO_TARGET_DIR/release/examples/tpe_bench" "$TRIALS" "$SEEDS" "$LONG"
"$VENV/bin/python" scripts/bench/tpe_optuna.py "$TRIALS" "$SEEDS" "$LONG"
