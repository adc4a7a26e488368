#!/usr/bin/env bash
# Online feature reads over HTTP: Qanat's /get-online-features (redb online store)
# against Feast's Python feature server (`feast serve`, sqlite online store) on the same
# Parquet (DRIVERS drivers, one row each, FEATURES float64 features in one view),
# materialized into both, with the same load tool (oha) and the same request bodies
# (random existing drivers). One run; prints each side's numbers and the ratios.
#
#   1 entity x 50 features:   closed loop at CONC connections (max throughput, p50/p99)
#                             on both; then open loop at RATE req/s on Qanat (p99,
#                             latency-corrected for coordinated omission; up to
#                             RATE_CONC requests in flight) and at LOW_RATE, and on Feast
#                             at the lower of RATE and half its closed-loop maximum
#                             then a closed loop at PEAK_CONC connections on both (the
#                             peak: throughput when latency does not bound it)
#   100 entities x 50 features: the same closed loop on both, then each at half its own
#                             closed-loop maximum (fixed rate)
#   wrk cross-check:          the closed-loop cases again with wrk and online_wrk.lua (the
#                             same bodies), to show the load generator is not the limit
#
# Before anything is timed, each server reads every driver once (the same requests).
# The machine's cores are shared by the load generator and the servers: the output
# gives each one's CPU over every run, and the rest of the machine's (other). Feast runs with a gunicorn worker per core; a
# run whose connections landed on one worker only is repeated (see measured_fair).
#
#   scripts/bench/online_vs_feast.sh
#   TMPDIR=/dev/shm scripts/bench/online_vs_feast.sh          # where the disk is short
#   DURATION=5 RATE_DURATION=5 DRIVERS=20000 WRK_CHECK=0 scripts/bench/online_vs_feast.sh
#
# Knobs: DRIVERS (100000), FEATURES (50), CONC (4: 2 per core), PEAK_CONC (16: 8 per core),
# RATE_CONC (CONC),
# DURATION (20 s, closed loop), RATE (2000), LOW_RATE (1000: Qanat's 1x50 at a second,
# lower rate), RATE_DURATION (30 s), WARMUP (3 s of the same load before
# every run), OHA_THREADS (1: the load generator's threads, wrk's too), FEAST_WORKERS
# (nproc), FEAST_MAX_REQUESTS (0: no worker recycling; Feast's own default is 1000),
# FEAST_TRIES (4), WRK_CHECK (1), SETTLE_SECS (5), KEEP=1 keeps the work folder,
# QANAT_BIN (a qanat binary to use instead of building one).
set -euo pipefail

DRIVERS=${DRIVERS:-100000}
FEATURES=${FEATURES:-50}
CONC=${CONC:-4}
RATE_CONC=${RATE_CONC:-$CONC}
DURATION=${DURATION:-20}
RATE=${RATE:-2000}
LOW_RATE=${LOW_RATE:-1000}
RATE_DURATION=${RATE_DURATION:-30}
WARMUP=${WARMUP:-3}
OHA_THREADS=${OHA_THREADS:-1}
CORES=$(nproc)
PEAK_CONC=${PEAK_CONC:-$((CORES * 8))}
FEAST_WORKERS=${FEAST_WORKERS:-$CORES}
FEAST_MAX_REQUESTS=${FEAST_MAX_REQUESTS:-0}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench-online.XXXXXX")
RES=$WORK/results
mkdir -p "$RES"
# Feast's sqlite online store keeps a row per feature per entity (~1 GB for 100k x 50);
# with Qanat's home and the data, about 15 kB a driver. TMPDIR=/dev/shm where the disk
# is short (everything is read from the page cache during the runs anyway).
need_kb=$((DRIVERS * FEATURES * 15 / 50))
free_kb=$(df -Pk "$WORK" | awk 'NR==2{print $4}')
if [ "$free_kb" -lt "$need_kb" ]; then
  echo "only $((free_kb / 1024)) MiB free under $WORK, about $((need_kb / 1024)) MiB needed: set TMPDIR (e.g. /dev/shm) or DRIVERS" >&2
  rm -rf "$WORK"
  exit 1
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
TOOLS=$HOME/.cache/qanat-bench-tools
OHA_VERSION=1.16.0
OHA=$TOOLS/oha-$OHA_VERSION/bin/oha
HELPER=$ROOT/scripts/bench/online_vs_feast.py
# Feast's venv, as tests/compat/run.sh makes it (keyed by its requirements).
FEAST_REQ=$ROOT/tests/compat/feast-requirements.txt
source "$ROOT/scripts/bench/lib.sh"
FEAST_VENV=${QANAT_FEAST_VENV:-$(venv_path feast "$FEAST_REQ")}
PY=$FEAST_VENV/bin/python

SERVER_PID= FEAST_PID=
tree_pids() { echo "$1"; local c; for c in $(pgrep -P "$1" 2>/dev/null); do tree_pids "$c"; done; }
cleanup() {
  local p
  if [ -n "$FEAST_PID" ]; then
    # gunicorn's master stops its workers on TERM; any left over are ended by id.
    local kids; kids=$(tree_pids "$FEAST_PID" | tail -n +2 || true)
    kill "$FEAST_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$FEAST_PID" 2>/dev/null || break; sleep 0.2; done
    for p in $FEAST_PID $kids; do kill -9 "$p" 2>/dev/null || true; done
  fi
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- tools -------------------------------------------------------------------------
ensure_venv "$FEAST_VENV" "$FEAST_REQ"
if [ ! -x "$OHA" ]; then
  # One tool for both kinds of load: closed loop (-c) and fixed rate (-q, with
  # --latency-correction); bodies drawn from a file of one JSON body a line (-Z).
  # TLS through the system's OpenSSL (libssl-dev; oha does not build without a TLS
  # feature, and its default rustls/aws-lc wants cmake); nothing here uses TLS.
  echo "building oha $OHA_VERSION into $TOOLS (once, a few minutes)..." >&2
  command -v pkg-config >/dev/null && pkg-config --exists openssl ||
    { apt-get update -qq && apt-get install -y -qq pkg-config libssl-dev >/dev/null; }
  env -u CARGO_TARGET_DIR cargo install oha --version "$OHA_VERSION" --locked --quiet \
    --no-default-features --features native-tls --root "$TOOLS/oha-$OHA_VERSION"
fi
qanat_bin "$ROOT"

TCK=$(getconf CLK_TCK)
# CPU seconds busy on the whole machine (all cores), to show what else ran.
all_cpu() { awk -v h="$TCK" '/^cpu /{printf "%.2f", ($2+$3+$4+$7+$8+$9)/h}' /proc/stat; }
# CPU seconds (user + system, with reaped children) of a process and its descendants.
tree_cpu() {
  local ticks=0 p t
  for p in $(tree_pids "$1"); do
    t=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12+$13+$14+$15}') || continue
    ticks=$((ticks + ${t:-0}))
  done
  awk -v t="$ticks" -v h="$TCK" 'BEGIN{printf "%.2f", t/h}'
}

# --- data --------------------------------------------------------------------------
echo "generating $DRIVERS drivers x $FEATURES float64 features..." >&2
DATA=$WORK/data
INFO=$("$PY" "$HELPER" data "$DATA" "$DRIVERS" "$FEATURES")
field() { "$PY" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$INFO" "$1"; }
START=$(field start) END=$(field end) QFILE=$(field qanat_file)

# --- Qanat: release binary, fresh home, project `bench`, a viewer's token ----------
PORT=$(free_port)
# shellcheck source=qanat_server.sh
. "$ROOT/scripts/bench/qanat_server.sh"
qanat_server
wait_http "$QANAT_SERVER_URL/health"
"$Q" users create bench-reader >/dev/null
"$Q" projects grant bench bench-reader viewer >/dev/null
TOKEN=$("$Q" tokens create --user bench-reader --output json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["token"])')
QANAT_URL=$QANAT_SERVER_URL/feast/bench/get-online-features
echo "loading qanat (objects put, features apply, materialize)..." >&2
t0=$(date +%s.%N)
"$Q" objects put bench "$QFILE" "$DATA/drivers.parquet" >/dev/null
"$Q" features -p bench apply "$DATA/qanat_repo" >/dev/null
"$Q" features -p bench materialize --start "$START" --end "$END" >"$WORK/qanat-materialize.out"
QANAT_LOAD=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')

# --- Feast: apply, materialize (sqlite online store), serve with a worker per core --
echo "loading feast (apply, materialize)..." >&2
FEAST=$FEAST_VENV/bin/feast
# TZ=UTC: Feast's sqlite store reads naive times in the local zone.
export FEAST_USAGE=False TZ=UTC
t0=$(date +%s.%N)
(cd "$DATA/feast_repo" && "$FEAST" apply >"$WORK/feast-apply.log" 2>&1 &&
  "$FEAST" materialize "$START" "$END" >"$WORK/feast-materialize.log" 2>&1) ||
  { tail -20 "$WORK"/feast-*.log >&2; exit 1; }
FEAST_LOAD=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
FPORT=$(free_port)
(cd "$DATA/feast_repo" && exec "$FEAST" serve --host 127.0.0.1 --port "$FPORT" --no-access-log \
  --workers "$FEAST_WORKERS" --max-requests "$FEAST_MAX_REQUESTS" >"$WORK/feast-serve.log" 2>&1) &
FEAST_PID=$!
wait_http "http://127.0.0.1:$FPORT/health" || { tail -30 "$WORK/feast-serve.log" >&2; exit 1; }
FEAST_URL=http://127.0.0.1:$FPORT/get-online-features
# Its workers answer /health before all have settled; let them.
sleep "${SETTLE_SECS:-5}"

# --- check: 200, every feature, PRESENT, the same values on both ----------------------
echo "checking one request of each kind on both servers..."
"$PY" "$HELPER" check "$QANAT_URL" "$TOKEN" "$FEAST_URL" "$DATA/bodies_1.txt"
"$PY" "$HELPER" check "$QANAT_URL" "$TOKEN" "$FEAST_URL" "$DATA/bodies_100.txt"

# --- warm-up: every driver read once from each server (caches filled alike) -------------
"$PY" "$HELPER" warm "$QANAT_URL" "$TOKEN" "$DATA/bodies_warm.txt"
"$PY" "$HELPER" warm "$FEAST_URL" - "$DATA/bodies_warm.txt"

# --- load --------------------------------------------------------------------------
AUTH="Authorization: Bearer $TOKEN"
TIMEFORMAT='%U %S'
# measured NAME SERVER_PID CONC RATE OUT command...: runs the command (stdout to OUT),
# and writes NAME.meta: the wall time, and the CPU seconds of the server (its whole
# process tree, and each of its direct children: Feast's workers) and of the load
# generator over the run.
child_cpu() { local p; for p in $(pgrep -P "$1" 2>/dev/null); do echo "$p $(tree_cpu "$p")"; done; }
measured() {
  local name=$1 pid=$2 conc=$3 rate=$4 out=$5
  shift 5
  local c0 w0 c1 w1 k0 k1 a0 a1
  c0=$(tree_cpu "$pid") k0=$(child_cpu "$pid") a0=$(all_cpu) w0=$(date +%s.%N)
  { time "$@" >"$out" 2>"$RES/$name.err"; } 2>"$RES/$name.time" ||
    { echo "$1 failed for $name:" >&2; cat "$RES/$name.err" >&2; exit 1; }
  c1=$(tree_cpu "$pid") k1=$(child_cpu "$pid") a1=$(all_cpu) w1=$(date +%s.%N)
  printf 'conc=%s\nrate=%s\nwall=%s\nall_cpu=%s\nserver_cpu=%s\ngen_cpu=%s\nworkers=%s\n' "$conc" "${rate#0}" \
    "$(awk -v a="$w0" -v b="$w1" 'BEGIN{print b-a}')" "$(awk -v a="$a0" -v b="$a1" 'BEGIN{print b-a}')" \
    "$(awk -v a="$c0" -v b="$c1" 'BEGIN{print b-a}')" "$(awk '{print $1+$2}' "$RES/$name.time")" \
    "$(join -o 1.2,2.2 <(sort <<<"$k0") <(sort <<<"$k1") 2>/dev/null | awk '{printf "%s%.2f", (NR>1 ? "," : ""), $2-$1}')" \
    >"$RES/$name.meta"
}
# Feast's gunicorn workers accept connections from one socket, and a keep-alive
# connection stays with the worker that accepted it: with a few connections, all of
# them may land on one worker, which leaves the other core idle (we saw 430 against
# 1081 req/s between two identical runs). A Feast run whose workers' CPU differ by
# more than 2x is run again (up to FEAST_TRIES times, the last one kept), so Feast is
# measured with both workers busy; the split and the tries are printed.
FEAST_TRIES=${FEAST_TRIES:-4}
even() { awk -F= '$1=="workers"{n=split($2,w,","); if (n<2) exit 0; lo=w[1]; hi=w[1]
  for (i=2;i<=n;i++){if(w[i]<lo)lo=w[i]; if(w[i]>hi)hi=w[i]}; exit !(hi<=0 || lo/hi>=0.5)}' "$RES/$1.meta"; }
measured_fair() {
  local name=$1 pid=$2 try=1
  while :; do
    measured "$@"
    [ "$pid" = "$FEAST_PID" ] || break
    even "$name" && break
    if [ "$try" -ge "$FEAST_TRIES" ]; then
      echo "    workers still uneven after $try tries; the last run is kept" >&2
      break
    fi
    echo "    uneven: Feast's workers used $(grep ^workers= "$RES/$name.meta" | cut -d= -f2) CPU s; again" >&2
    try=$((try + 1))
  done
  echo "tries=$try" >>"$RES/$name.meta"
}
# run NAME SERVER_PID CONC RATE SECONDS URL BODIES [oha args...]; RATE 0: closed loop.
run() {
  local name=$1 pid=$2 conc=$3 rate=$4 secs=$5 url=$6 bodies=$7
  shift 7
  local args=(--no-tui --output-format json -c "$conc" -w -t 10s --worker-threads "$OHA_THREADS")
  [ -n "$bodies" ] && args+=(-m POST -T application/json -Z "$bodies")
  [ "$rate" != 0 ] && args+=(-q "$rate" --latency-correction)
  if [ "$rate" != 0 ]; then echo "  $name: ${secs}s at $rate req/s, concurrency $conc" >&2
  else echo "  $name: ${secs}s closed loop, concurrency $conc" >&2; fi
  "$OHA" "${args[@]}" -z "${WARMUP}s" "$@" "$url" >/dev/null 2>&1 || true
  measured_fair "$name" "$pid" "$conc" "$rate" "$RES/$name.json" "$OHA" "${args[@]}" -z "${secs}s" "$@" "$url"
}
# Half a closed-loop run's 200s per second, as a whole rate (at most a cap).
half_of() { "$PY" -c 'import json,sys
j=json.load(open(sys.argv[1])); ok=j["statusCodeDistribution"].get("200",0)
print(max(1, min(int(sys.argv[2]), int(ok/j["summary"]["total"]/2))))' "$RES/$1.json" "$2"; }

echo "load: oha $("$OHA" --version | awk '{print $2}'), $CORES cores shared by the load generator and the server" >&2
run calib_qanat_health "$SERVER_PID" "$CONC" 0 10 "$QANAT_SERVER_URL/health" ""
run one_qanat_closed "$SERVER_PID" "$CONC" 0 "$DURATION" "$QANAT_URL" "$DATA/bodies_1.txt" -H "$AUTH"
run one_feast_closed "$FEAST_PID" "$CONC" 0 "$DURATION" "$FEAST_URL" "$DATA/bodies_1.txt"
run one_qanat_rate "$SERVER_PID" "$RATE_CONC" "$RATE" "$RATE_DURATION" "$QANAT_URL" "$DATA/bodies_1.txt" -H "$AUTH"
run one_qanat_rate_low "$SERVER_PID" "$RATE_CONC" "$LOW_RATE" "$RATE_DURATION" "$QANAT_URL" "$DATA/bodies_1.txt" -H "$AUTH"
run one_qanat_peak "$SERVER_PID" "$PEAK_CONC" 0 "$DURATION" "$QANAT_URL" "$DATA/bodies_1.txt" -H "$AUTH"
run one_feast_peak "$FEAST_PID" "$PEAK_CONC" 0 "$DURATION" "$FEAST_URL" "$DATA/bodies_1.txt"
run one_feast_rate "$FEAST_PID" "$RATE_CONC" "$(half_of one_feast_closed "$RATE")" "$RATE_DURATION" "$FEAST_URL" "$DATA/bodies_1.txt"
run many_qanat_closed "$SERVER_PID" "$CONC" 0 "$DURATION" "$QANAT_URL" "$DATA/bodies_100.txt" -H "$AUTH"
run many_feast_closed "$FEAST_PID" "$CONC" 0 "$DURATION" "$FEAST_URL" "$DATA/bodies_100.txt"
run many_qanat_rate "$SERVER_PID" "$RATE_CONC" "$(half_of many_qanat_closed 1000000)" "$RATE_DURATION" "$QANAT_URL" "$DATA/bodies_100.txt" -H "$AUTH"
run many_feast_rate "$FEAST_PID" "$RATE_CONC" "$(half_of many_feast_closed 1000000)" "$RATE_DURATION" "$FEAST_URL" "$DATA/bodies_100.txt"

# A second opinion on the closed-loop numbers from wrk (C, leaner than oha), with a Lua
# script cycling through the same bodies: if both tools agree, the load generator is
# not what limits the measured server. WRK_CHECK=0 skips it.
if [ "${WRK_CHECK:-1}" = 1 ]; then
  command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
  LUA=$ROOT/scripts/bench/online_wrk.lua
  wrk_run() { # NAME SERVER_PID URL BODIES [wrk args...]
    local name=$1 pid=$2 url=$3 bodies=$4
    shift 4
    echo "  $name (wrk): ${DURATION}s closed loop, concurrency $CONC" >&2
    wrk -t "$OHA_THREADS" -c "$CONC" -d "${WARMUP}s" -s "$LUA" "$@" "$url" -- "$bodies" >/dev/null 2>&1 || true
    measured_fair "$name" "$pid" "$CONC" 0 "$RES/$name.wrk" \
      wrk -t "$OHA_THREADS" -c "$CONC" -d "${DURATION}s" --latency -s "$LUA" "$@" "$url" -- "$bodies"
  }
  wrk_run wrk_one_qanat "$SERVER_PID" "$QANAT_URL" "$DATA/bodies_1.txt" -H "$AUTH"
  wrk_run wrk_one_feast "$FEAST_PID" "$FEAST_URL" "$DATA/bodies_1.txt"
  wrk_run wrk_many_qanat "$SERVER_PID" "$QANAT_URL" "$DATA/bodies_100.txt" -H "$AUTH"
  wrk_run wrk_many_feast "$FEAST_PID" "$FEAST_URL" "$DATA/bodies_100.txt"
fi

# --- report ------------------------------------------------------------------------
echo
echo "online feature reads over HTTP: Qanat vs Feast $("$PY" -c "import feast; print(feast.__version__)"), one run"
echo "machine: $CORES cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')); the load generator runs on the same cores as the server"
echo "load tool: oha $("$OHA" --version | awk '{print $2}') (--worker-threads $OHA_THREADS), HTTP/1.1 keep-alive, $DURATION s closed loop at concurrency $CONC (peak: $PEAK_CONC) / $RATE_DURATION s fixed rate with up to $RATE_CONC in flight, ${WARMUP} s warm-up before each"
echo "data: $DRIVERS drivers, one row each, $FEATURES float64 features in one view; request bodies pick random drivers ($(wc -l <"$DATA/bodies_1.txt") one-entity and $(wc -l <"$DATA/bodies_100.txt") hundred-entity bodies)"
echo "qanat: release build, tokio runtime on $CORES threads, online store redb, a project viewer's bearer token, $QANAT_URL; load (put + apply + materialize) ${QANAT_LOAD} s"
echo "feast: feast serve --workers $FEAST_WORKERS --max-requests $FEAST_MAX_REQUESTS (gunicorn + uvicorn workers), sqlite online store; load (apply + materialize) ${FEAST_LOAD} s"
echo "feast's documented figure for reference: p99 ~4.6 ms at ~718 req/s per pod (their benchmark, other hardware)"
[ "${WRK_CHECK:-1}" = 1 ] && echo "cross-check: $(wrk -v 2>&1 | head -n1 | awk '{print $1, $2}') (-t $OHA_THREADS -c $CONC, scripts/bench/online_wrk.lua) on the closed-loop cases"
echo "before the runs each server read every driver once ($(wc -l <"$DATA/bodies_warm.txt") requests of up to 100 drivers)"
echo "fixed-rate runs use --latency-correction (latency counted from when each request was due); p99.9 from oha's histogram"
"$PY" "$HELPER" report "$RES"
