#!/usr/bin/env bash
# Compatibility suites: real third-party clients against a live Qanat server.
# Creates (or reuses) a venv with the pinned clients, builds qanat, starts a server on
# a fresh data directory and an ephemeral port, and runs each suite.
#
#   tests/compat/run.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
VENV=${QANAT_COMPAT_VENV:-$HOME/.cache/qanat-compat-venv}
REQ=$ROOT/tests/compat/requirements.txt
# venv_path and ensure_venv.
source "$ROOT/scripts/venv.sh"
ensure_venv "$VENV" "$REQ"

(cd "$ROOT" && cargo build --locked -p qanat --quiet)
Q=$CARGO_TARGET_DIR/debug/qanat

WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-compat.XXXXXX")
cleanup() {
  [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  # QANAT_COMPAT_LOG=<file> keeps the server's log for debugging.
  [ -n "${QANAT_COMPAT_LOG:-}" ] && cp "$WORK/server.err" "$QANAT_COMPAT_LOG"
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export QANAT_HOME=$WORK/home QANAT_CREDENTIALS=$WORK/credentials.json QANAT_LOG_LEVEL=${QANAT_LOG_LEVEL:-warn}
export QANAT_SERVER_BIND=127.0.0.1:$PORT QANAT_SERVER_URL=http://127.0.0.1:$PORT
# The webhook suite's receiver listens on plain HTTP on 127.0.0.1.
export QANAT_EVENTS_WEBHOOK_SCHEMES=https,http QANAT_EVENTS_ALLOW_PRIVATE_NETWORKS=true
# With a Slurm cluster here (.ci/run starts one), jobs may also run on it.
if [ -n "${QANAT_TEST_SLURM:-}" ]; then
  export QANAT_JOBS_SLURM_ENABLED=true QANAT_JOBS_SLURM_POLL_MS=200
fi
# Local jobs run sandboxed: the server's user's home (which holds these venvs) is
# hidden from them, so the interpreters the suites' jobs run are bound back read-only.
TORCH_REQ=$ROOT/examples/pytorch/requirements.txt
TORCH_VENV=${QANAT_TORCH_VENV:-$(venv_path torch "$TORCH_REQ")}
BASE_PYTHON=$("$VENV/bin/python" -c 'import sys; print(sys.base_prefix)')
export QANAT_JOBS_SANDBOX_PATHS=$VENV:$TORCH_VENV:$BASE_PYTHON
# The Python serving runtime's model environments are kept between runs (keyed by
# their requirements' hash); a hung worker is given up after 15 s in the suite.
export QANAT_SERVING_PYTHON_ENVS_DIR=$HOME/.cache/qanat-model-envs
export QANAT_SERVING_PYTHON_PREDICT_TIMEOUT_SECS=15
# A worker over 2 GiB is stopped (the flavors suite's model that allocates 3 GiB).
export QANAT_SERVING_PYTHON_MEMORY=2GiB
"$Q" init >/dev/null 2>&1
"$Q" server >"$WORK/server.out" 2>"$WORK/server.err" &
SERVER_PID=$!
for _ in $(seq 200); do grep -q listening "$WORK/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$WORK/server.out" || { cat "$WORK/server.err" >&2; exit 1; }

json() { "$VENV/bin/python" -c "import json,sys; print(json.load(sys.stdin)$1)"; }
"$Q" projects create other >/dev/null
"$Q" users create alice >/dev/null
"$Q" users create victor >/dev/null
"$Q" projects grant default alice editor >/dev/null
"$Q" projects grant other alice editor >/dev/null
"$Q" projects grant default victor viewer >/dev/null
"$Q" users create mona >/dev/null
"$Q" projects grant default mona maintainer >/dev/null
ALICE=$("$Q" tokens create --user alice --output json | json '["token"]')
VICTOR=$("$Q" tokens create --user victor --output json | json '["token"]')
MONA=$("$Q" tokens create --user mona --output json | json '["token"]')
ADMIN=$("$Q" tokens create --name compat 2>/dev/null)
# A Qanat dataset version for the lineage test.
mkdir -p "$WORK/iris" && printf 'a,b\n1,2\n' >"$WORK/iris/part-0.csv"
"$Q" data -p default create iris-train >/dev/null
"$Q" data -p default push iris-train "$WORK/iris" -m "compat" >/dev/null

status=0
echo "compat: mlflow tracking" >&2
MLFLOW_TRACKING_URI=$QANAT_SERVER_URL MLFLOW_TRACKING_TOKEN=$ALICE \
  QANAT_URL=$QANAT_SERVER_URL QANAT_VIEWER_TOKEN=$VICTOR QANAT_OTHER_PROJECT=other \
  QANAT_ADMIN_TOKEN=$ADMIN \
  MLFLOW_HTTP_REQUEST_MAX_RETRIES=0 \
  "$VENV/bin/python" "$ROOT/tests/compat/mlflow_tracking.py" || status=1
echo "compat: mlflow registry" >&2
MLFLOW_TRACKING_URI=$QANAT_SERVER_URL MLFLOW_TRACKING_TOKEN=$ALICE \
  QANAT_URL=$QANAT_SERVER_URL QANAT_MAINTAINER_TOKEN=$MONA QANAT_DATASET=iris-train \
  MLFLOW_HTTP_REQUEST_MAX_RETRIES=0 \
  "$VENV/bin/python" "$ROOT/tests/compat/mlflow_registry.py" || status=1
echo "compat: mlflow registry webhooks" >&2
MLFLOW_TRACKING_URI=$QANAT_SERVER_URL MLFLOW_TRACKING_TOKEN=$ALICE \
  QANAT_URL=$QANAT_SERVER_URL QANAT_MAINTAINER_TOKEN=$MONA \
  MLFLOW_HTTP_REQUEST_MAX_RETRIES=0 \
  "$VENV/bin/python" "$ROOT/tests/compat/mlflow_webhooks.py" || status=1

echo "compat: jobs (plain mlflow code inside a command job)" >&2
MLFLOW_TRACKING_URI=$QANAT_SERVER_URL MLFLOW_TRACKING_TOKEN=$ALICE \
  QANAT_URL=$QANAT_SERVER_URL QANAT_VIEWER_TOKEN=$VICTOR QANAT_DATASET=iris-train \
  COMPAT_PYTHON=$VENV/bin/python MLFLOW_HTTP_REQUEST_MAX_RETRIES=0 \
  "$VENV/bin/python" "$ROOT/tests/compat/jobs_mlflow.py" || status=1

echo "compat: drift statistics against SciPy (qanat monitor compare)" >&2
QANAT_BIN=$Q "$VENV/bin/python" "$ROOT/tests/compat/drift_stats.py" || status=1

# The PyTorch example (examples/pytorch) as command jobs: one process, then two ranks
# with DistributedDataParallel over gloo. torch from PyPI is large: its venv is cached
# under $HOME/.cache, keyed by the example's requirements.
echo "compat: the native trainer against scikit-learn on the same rows" >&2
for t in breast_cancer:cancer diabetes:diabetes; do
  mkdir -p "$WORK/${t#*:}" && cp "$ROOT/examples/data/${t%%:*}.csv" "$WORK/${t#*:}/"
  "$Q" data -p default create "${t#*:}" >/dev/null
  "$Q" data -p default push "${t#*:}" "$WORK/${t#*:}" -m "compat" >/dev/null
done
MLFLOW_TRACKING_URI=$QANAT_SERVER_URL MLFLOW_TRACKING_TOKEN=$ALICE \
  QANAT_URL=$QANAT_SERVER_URL QANAT_EXAMPLE_DATA=$ROOT/examples/data \
  MLFLOW_HTTP_REQUEST_MAX_RETRIES=0 \
  "$VENV/bin/python" "$ROOT/tests/compat/train_sklearn.py" || status=1

ensure_venv "$TORCH_VENV" "$TORCH_REQ"
echo "compat: the native trainer's ONNX export in onnxruntime (from the PyTorch venv)" >&2
"$TORCH_VENV/bin/python" "$ROOT/tests/compat/train_onnx.py" --make-data "$WORK/mixed"
"$Q" data -p default create mixed >/dev/null
"$Q" data -p default push mixed "$WORK/mixed" -m "compat" >/dev/null
MLFLOW_TRACKING_URI=$QANAT_SERVER_URL MLFLOW_TRACKING_TOKEN=$ALICE \
  QANAT_URL=$QANAT_SERVER_URL QANAT_EXAMPLE_DATA=$ROOT/examples/data MLFLOW_HTTP_REQUEST_MAX_RETRIES=0 \
  "$TORCH_VENV/bin/python" "$ROOT/tests/compat/train_onnx.py" || status=1
# Triton's own HTTP and gRPC clients against the Open Inference Protocol, on the versions
# train_onnx.py registered (cancer-pyfunc 1 and its int8 version 2), and on a model the
# suite trains in project `other` (the table pushed there). Its own venv, keyed by its
# requirements.
"$Q" data -p other create cancer >/dev/null
"$Q" data -p other push cancer "$WORK/cancer" -m "compat" >/dev/null
TRITON_REQ=$ROOT/tests/compat/triton-requirements.txt
TRITON_VENV=${QANAT_TRITON_VENV:-$(venv_path triton "$TRITON_REQ")}
ensure_venv "$TRITON_VENV" "$TRITON_REQ"
echo "compat: tritonclient (HTTP with JSON and binary tensors, and gRPC) against the Open Inference Protocol" >&2
MLFLOW_TRACKING_TOKEN=$ALICE QANAT_URL=$QANAT_SERVER_URL QANAT_EXAMPLE_DATA=$ROOT/examples/data \
  "$TRITON_VENV/bin/python" "$ROOT/tests/compat/triton_client.py" || status=1
# The same suite against `qanat serve`, the data plane alone, on the same installation
# (the docs' production topology): inference goes to it, tokens and training to the
# server.
SERVE_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
QANAT_SERVER_BIND=127.0.0.1:$SERVE_PORT "$Q" serve >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
for _ in $(seq 200); do grep -q listening "$WORK/serve.out" 2>/dev/null && break; sleep 0.1; done
if grep -q listening "$WORK/serve.out"; then
  echo "compat: tritonclient (HTTP and gRPC) against \`qanat serve\`, the data plane alone" >&2
  MLFLOW_TRACKING_TOKEN=$ALICE QANAT_URL=$QANAT_SERVER_URL QANAT_OIP_URL=http://127.0.0.1:$SERVE_PORT \
    QANAT_EXAMPLE_DATA=$ROOT/examples/data \
    "$TRITON_VENV/bin/python" "$ROOT/tests/compat/triton_client.py" || { status=1; tail -20 "$WORK/serve.err" >&2; }
else
  echo "FAIL qanat serve did not start:" >&2; cat "$WORK/serve.err" >&2; status=1
fi
kill "$SERVE_PID" 2>/dev/null; wait "$SERVE_PID" 2>/dev/null || true
# MLflow's tree flavors (XGBoost, LightGBM) logged into project `other` with the mlflow
# client, deployed and called through Triton's client; the libraries have their own venv,
# keyed by its requirements.
FLAVORS_REQ=$ROOT/tests/compat/flavors-requirements.txt
FLAVORS_VENV=${QANAT_FLAVORS_VENV:-$(venv_path flavors "$FLAVORS_REQ")}
ensure_venv "$FLAVORS_VENV" "$FLAVORS_REQ"
echo "compat: MLflow flavors (XGBoost, LightGBM, scikit-learn natively; the rest — a custom pyfunc, a PyTorch network — on the Python runtime), called by tritonclient" >&2
MLFLOW_TRACKING_TOKEN=$ALICE QANAT_URL=$QANAT_SERVER_URL QANAT_OTHER_PROJECT=other \
  MLFLOW_HTTP_REQUEST_MAX_RETRIES=0 TORCH_PYTHON=$TORCH_VENV/bin/python \
  "$FLAVORS_VENV/bin/python" "$ROOT/tests/compat/flavors.py" || status=1
echo "compat: the PyTorch example as jobs (1 rank, 2 ranks over gloo${QANAT_TEST_SLURM:+, and on Slurm})" >&2
MLFLOW_TRACKING_URI=$QANAT_SERVER_URL MLFLOW_TRACKING_TOKEN=$ALICE \
  QANAT_URL=$QANAT_SERVER_URL TORCH_PYTHON=$TORCH_VENV/bin/python \
  QANAT_EXAMPLE=$ROOT/examples/pytorch/train.py MLFLOW_HTTP_REQUEST_MAX_RETRIES=0 \
  QANAT_COMPAT_SLURM=${QANAT_TEST_SLURM:-} \
  "$VENV/bin/python" "$ROOT/tests/compat/jobs_pytorch.py" || status=1

# Online features against a real Feast feature server (feast apply / materialize /
# serve on the same Parquet): the same values from both /get-online-features and after
# /push. Feast pins pandas<3, so it has its own venv, cached under $HOME/.cache and keyed
# by its requirements.
FEAST_REQ=$ROOT/tests/compat/feast-requirements.txt
FEAST_VENV=${QANAT_FEAST_VENV:-$(venv_path feast "$FEAST_REQ")}
ensure_venv "$FEAST_VENV" "$FEAST_REQ"
echo "compat: online features against a real Feast feature server" >&2
QANAT_URL=$QANAT_SERVER_URL QANAT_ADMIN_TOKEN=$ADMIN QANAT_BIN=$Q \
  "$FEAST_VENV/bin/python" "$ROOT/tests/compat/feast_online.py" || status=1

# The Qanat CLI over the same registry: promote and roll back (maintainers, audited),
# list runs, walk lineage from a model version to the dataset it was trained on.
echo "compat: qanat runs / models / lineage CLI" >&2
cli_check() { # description, expected text, command...
  local what=$1 want=$2; shift 2
  local out
  if out=$("$@" 2>&1) && grep -qF -- "$want" <<<"$out"; then
    echo "ok   $what"
  else
    echo "FAIL $what: wanted '$want', got: $out"
    status=1
  fi
}
cli_refused() { # description, expected error text, command... (must exit non-zero)
  local what=$1 want=$2; shift 2
  local out
  if ! out=$("$@" 2>&1) && grep -qF -- "$want" <<<"$out"; then
    echo "ok   $what"
  else
    echo "FAIL $what: wanted a refusal with '$want', got: $out"
    status=1
  fi
}
cli_check "promote moves the alias" "iris-clf@production: → version 3" \
  env QANAT_TOKEN="$MONA" "$Q" models -p default promote iris-clf 3
cli_check "promote again" "iris-clf@production: version 3 → 1" \
  env QANAT_TOKEN="$MONA" "$Q" models -p default promote iris-clf 1
cli_check "rollback goes back" "iris-clf@production: version 1 → 3" \
  env QANAT_TOKEN="$MONA" "$Q" models -p default rollback iris-clf
cli_refused "an editor cannot promote" "PERMISSION_DENIED" \
  env QANAT_TOKEN="$ALICE" "$Q" models -p default promote iris-clf 1
cli_check "models show lists the history" "rollback" \
  env QANAT_TOKEN="$ALICE" "$Q" models -p default show iris-clf
cli_check "runs ls finds the training runs" "train-3" \
  env QANAT_TOKEN="$ALICE" "$Q" runs -p default ls -e compat-registry
cli_check "lineage walks model → run → dataset" "trained_on: dataset:iris-train@1" \
  env QANAT_TOKEN="$ALICE" "$Q" lineage -p default model:lineage-clf@1
cli_check "promotions are audited" "model.rollback" "$Q" audit tail --action model.rollback -n 50
cli_check "webhooks ls lists the project's webhooks" "late-receiver" \
  env QANAT_TOKEN="$MONA" "$Q" webhooks -p default ls
cli_check "deliveries are listed with their attempts" "delivered" \
  env QANAT_TOKEN="$MONA" "$Q" webhooks -p default deliveries --all
cli_check "webhook changes are audited" "mlflow.webhook.delete" "$Q" audit tail --action mlflow.webhook.delete -n 50
if [ "$status" -ne 0 ]; then
  echo "--- server log ---" >&2
  grep -v "status=2" "$WORK/server.err" | tail -40 >&2
fi
exit $status
