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

# start_mlserver NAME IMPLEMENTATION URI: starts MLServer from $VENV on free ports
# ($MPORT for HTTP), in-process inference (parallel_workers 0: 1.7.1's worker processes
# die at start on Python 3.11), serving model NAME with IMPLEMENTATION from URI; its pid
# is added to the caller's PIDS.
start_mlserver() {
  MPORT=$(free_port)
  local grpc metrics
  grpc=$(free_port) metrics=$(free_port)
  mkdir -p "$WORK/mlserver-$1"
  cat >"$WORK/mlserver-$1/settings.json" <<JSON
{"http_port": $MPORT, "grpc_port": $grpc, "metrics_port": $metrics, "parallel_workers": 0, "debug": false}
JSON
  cat >"$WORK/mlserver-$1/model-settings.json" <<JSON
{"name": "$1", "implementation": "$2", "parameters": {"uri": "$3"}}
JSON
  (cd "$WORK/mlserver-$1" && exec "$VENV/bin/mlserver" start . >"$WORK/mlserver-$1.log" 2>&1) &
  PIDS+=($!)
}

# start_mlflow_serve MODEL_DIR: `mlflow models serve` from $VENV on a free $FPORT, one
# worker per core; its pid is added to the caller's PIDS.
start_mlflow_serve() {
  FPORT=$(free_port)
  PATH="$VENV/bin:$PATH" "$VENV/bin/mlflow" models serve -m "$1" -h 127.0.0.1 -p "$FPORT" \
    --env-manager local -w "$(nproc)" >"$WORK/mlflow-$FPORT.log" 2>&1 &
  PIDS+=($!)
}

# wrk_point NAME URL BODIES CONCURRENCY: wrk (one thread, keep-alive, closed loop) POSTing
# BODIES (a JSON body a line) with $TOKEN: $WARMUP s unmeasured, then $DURATION s; prints
# one JSON line (online_wrk.lua's) with the server's NAME and the concurrency.
wrk_point() {
  local lua
  lua="$(dirname "${BASH_SOURCE[0]}")/online_wrk.lua"
  wrk -t1 -c "$4" -d "${WARMUP}s" -s "$lua" -H "Authorization: Bearer $TOKEN" "$2" -- "$3" >/dev/null
  wrk -t1 -c "$4" -d "${DURATION}s" -s "$lua" -H "Authorization: Bearer $TOKEN" "$2" -- "$3" |
    grep '^{' | python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); j.update(server=sys.argv[1], conc=int(sys.argv[2])); print(json.dumps(j))' "$1" "$4"
}

# first_answers QANAT_URL MLSERVER_URL MLFLOW_URL: each server's answer to the first
# body of its file ($WORK/qanat.jsonl, mlserver.jsonl, mlflow.jsonl), on stderr.
first_answers() {
  echo "one request each (the same row):" >&2
  local url file
  for pair in "$1 qanat" "$2 mlserver" "$3 mlflow"; do
    url=${pair% *} file=$WORK/${pair#* }.jsonl
    head -1 "$file" | curl -sf -H 'Content-Type: application/json' -H "Authorization: Bearer $TOKEN" -d @- "$url" >&2
    echo >&2
  done
}

# qanat_token: the token the CLI logged in with ($QANAT_CREDENTIALS, the current
# server's entry).
qanat_token() {
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["servers"][c["current"]]["token"])' "$QANAT_CREDENTIALS"
}

# now, calc EXPR, elapsed START: wall-clock timing in seconds (python3 does the sums).
now() { date +%s.%N; }
calc() { python3 -c "print($1)"; }
elapsed() { calc "$(now) - $1"; }

# track_pids: starts an empty PIDS list and, on exit, kills each pid in it and removes
# $WORK (kept, and said so, with KEEP=1); INT and TERM exit through the same cleanup.
track_pids() {
  PIDS=()
  trap kill_pids EXIT
  trap 'exit 130' INT TERM
}
kill_pids() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
