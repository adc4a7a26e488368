#!/usr/bin/env bash
# REST inference against the same server's own ceiling, in one run: `qanat serve` (the
# data plane) answers one-row OIP requests for a deployment of the MLP that `qanat train`
# fits on examples/data/breast_cancer.csv (default batching, the inference log on, a
# bearer token on every request), and the same server's `GET /v2/health/live`, with the
# same load tool and settings (wrk, one thread, HTTP/1.1 keep-alive, closed loop). The
# ratio of the two throughputs holds on any machine: it is what a request costs beyond
# the HTTP stack's own.
#
#   scripts/bench/infer_vs_health.sh
#   SWEEP="4 16" DURATION=5 scripts/bench/infer_vs_health.sh
# Knobs: DURATION (10 s a point), WARMUP (2 s), SWEEP ("4 16 64"), QANAT_BIN (a release
# binary to use instead of building one), PERF=1 (records `perf record -g` of the server
# during the inference point at the last concurrency, into $WORK/perf.data), KEEP=1.
set -euo pipefail
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
SWEEP=${SWEEP:-4 16 64}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench-infer.XXXXXX")
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
source "$ROOT/scripts/bench/lib.sh"
track_pids

command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
qanat_bin "$ROOT"

serve_cancer
"$Q" deploy create cancer-web --model cancer --primary 1 >/dev/null
TOKEN=$(qanat_token)
python3 "$ROOT/scripts/bench/serving_bodies.py" "$ROOT/examples/data/breast_cancer.csv" "$WORK" 1

SPORT=$(free_port)
QANAT_SERVER_BIND=127.0.0.1:$SPORT "$Q" serve >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
wait_http "http://127.0.0.1:$SPORT/v2/health/ready"
INFER=http://127.0.0.1:$SPORT/v2/models/cancer-web/infer
HEALTH=http://127.0.0.1:$SPORT/v2/health/live
head -1 "$WORK/qanat.jsonl" | curl -sf -H 'Content-Type: application/json' \
  -H "Authorization: Bearer $TOKEN" -d @- "$INFER" >&2
echo >&2

# health_point CONCURRENCY: GET $HEALTH with wrk's own loop (no script), one JSON line.
health_point() {
  wrk -t1 -c "$1" -d "${WARMUP}s" -H "Authorization: Bearer $TOKEN" "$HEALTH" >/dev/null
  wrk -t1 -c "$1" -d "${DURATION}s" --latency -H "Authorization: Bearer $TOKEN" "$HEALTH" |
    python3 -c '
import json, re, sys
t = sys.stdin.read()
rps = float(re.search(r"Requests/sec:\s*([\d.]+)", t).group(1))
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
def ms(p):
    m = re.search(r"^\s*" + p + r"%\s+([\d.]+)(us|ms|s)", t, re.M)
    v = float(m.group(1))
    return v / 1000 if m.group(2) == "us" else v * 1000 if m.group(2) == "s" else v
print(json.dumps({"server": "health", "conc": int(sys.argv[1]), "rps": rps,
                  "p50_ms": ms("50"), "p99_ms": ms("99"), "bad": int(bad.group(1)) if bad else 0}))
' "$1"
}

last=${SWEEP##* }
for c in $SWEEP; do
  if [ "${PERF:-0}" = 1 ] && [ "$c" = "$last" ]; then
    perf record -g -o "$WORK/perf.data" -p "$SERVE_PID" -- sleep $((WARMUP + DURATION)) \
      >/dev/null 2>&1 &
    PERF_PID=$!
  fi
  wrk_point infer "$INFER" "$WORK/qanat.jsonl" "$c" |
    python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); print(json.dumps({"server": "infer", "conc": j["conc"], "rps": j["requests"] / j["seconds"], "p50_ms": j["p50_ms"], "p99_ms": j["p99_ms"], "bad": j["non2xx"] + j["connect"] + j["read"] + j["write"] + j["timeout"]}))'
  if [ -n "${PERF_PID:-}" ]; then wait "$PERF_PID" || true; unset PERF_PID; fi
  health_point "$c"
done | tee "$WORK/results.jsonl"

python3 - "$WORK/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n| concurrency | one-row OIP infer (req/s, p50/p99 ms) | GET /v2/health/live (req/s, p50/p99 ms) | infer / health |")
print("|---|---|---|---|")
by = {}
for r in rows:
    by.setdefault(r["conc"], {})[r["server"]] = r
for c, p in sorted(by.items()):
    i, h = p["infer"], p["health"]
    print(f"| {c} | {i['rps']:,.0f} ({i['p50_ms']:.2f}/{i['p99_ms']:.2f}), {i['bad']} failed "
          f"| {h['rps']:,.0f} ({h['p50_ms']:.2f}/{h['p99_ms']:.2f}) | {i['rps'] / h['rps']:.0%} |")
bi = max(r["rps"] for r in rows if r["server"] == "infer")
bh = max(r["rps"] for r in rows if r["server"] == "health")
print(f"\nbest: infer {bi:,.0f} req/s, health {bh:,.0f} req/s: {bi / bh:.0%}")
PY
if [ "${PERF:-0}" = 1 ]; then
  perf report -i "$WORK/perf.data" --no-children --percent-limit 1.5 --stdio 2>/dev/null |
    grep -v '^$' | head -150 >"${PERF_OUT:-$WORK/perf.txt}"
  echo "perf report: ${PERF_OUT:-$WORK/perf.txt}" >&2
fi
