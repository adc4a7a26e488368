# Sourced by the benchmark scripts: the peers' venvs and the qanat binary they time.

# venv_path NAME REQUIREMENTS and ensure_venv VENV REQUIREMENTS (scripts/venv.sh).
source "$(dirname "${BASH_SOURCE[0]}")/../venv.sh"

# qanat_bin ROOT: sets Q to $QANAT_BIN when it is set, else to a release build of the
# checkout at ROOT (built here, into $CARGO_TARGET_DIR).
qanat_bin() {
  if [ -n "${QANAT_BIN:-}" ]; then
    Q=$QANAT_BIN
    return 0
  fi
  echo "building qanat (release)..." >&2
  (cd "$1" && cargo build --release --locked -p qanat --quiet)
  Q=$CARGO_TARGET_DIR/release/qanat
}

# free_port: a TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_http URL [TRIES]: waits until URL answers (TRIES times 0.2 s; default 900).
wait_http() {
  for _ in $(seq "${2:-900}"); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "no answer from $1" >&2
  return 1
}

# train_cancer: pushes examples/data/breast_cancer.csv as dataset `cancer` and trains
# and registers model `cancer` version 1 (an MLP) on it, with "$Q" as the logged-in CLI.
train_cancer() {
  mkdir -p "$WORK/data"
  cp "$ROOT/examples/data/breast_cancer.csv" "$WORK/data/"
  "$Q" data create cancer >/dev/null
  "$Q" data push cancer "$WORK/data" >/dev/null
  cat >"$WORK/train.yaml" <<YAML
inputs: [dataset:cancer@1]
target: diagnosis
model: mlp
hidden: [64]
epochs: 30
seed: 1
register: cancer
YAML
  "$Q" train -c "$WORK/train.yaml" --wait >/dev/null
}

# serve_cancer: starts a Qanat server from "$Q" on a free $PORT (its pid added to the
# caller's PIDS) with project `default` as the CLI's, and trains model `cancer` there.
serve_cancer() {
  PORT=$(free_port)
  source "$ROOT/scripts/bench/qanat_server.sh"
  qanat_server
  PIDS+=("$SERVER_PID")
  export QANAT_PROJECT=default
  train_cancer
}
