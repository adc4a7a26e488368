#!/usr/bin/env bash
# Qanat's data plane, one run on this machine, the model of serving_vs_mlserver.sh (an
# MLP 30 -> 64 -> 1 that `qanat train` fits on examples/data/breast_cancer.csv):
#   http        OIP REST, the 30 features in the request                (wrk)
#   http+feat   OIP REST, the entity key only: the deployment reads the 30 features
#               from the online store in-process (feature enrichment)   (wrk)
#   grpc        OIP gRPC ModelInfer, the 30 features as raw_input_contents (h2load)
# over a concurrency sweep, one-row requests, authorization and the inference log on.
# All against `qanat server` (its embedded online store is the default, one process's
# file). wrk: one thread, HTTP/1.1 keep-alive; h2load: one client per concurrency
# level, one stream each (-m 1), h2c; both closed loop. p50/p99 for h2load come from
# its per-request log. The load generators share the cores with the server.
#
#   scripts/bench/serving_features_grpc.sh
#   DURATION=5 SWEEP="1 16" scripts/bench/serving_features_grpc.sh
# Knobs: DURATION (8 s a point), WARMUP (2 s), SWEEP ("1 4 16 64"), QANAT_BIN (a
# release binary instead of building one), KEEP=1.
set -euo pipefail
DURATION=${DURATION:-8}
WARMUP=${WARMUP:-2}
SWEEP=${SWEEP:-1 4 16 64}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qanat-bench-feat-grpc.XXXXXX")
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/qanat-target}
source "$ROOT/scripts/bench/lib.sh"
track_pids

command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
command -v h2load >/dev/null || { apt-get update -qq && apt-get install -y -qq nghttp2-client >/dev/null; }
qanat_bin "$ROOT"

# --- the model, the features, the deployments ------------------------------------------
mkdir -p "$WORK/repo"
serve_cancer
TOKEN=$(qanat_token)
BASE=http://127.0.0.1:$PORT
python3 "$ROOT/scripts/bench/serving_grpc_bodies.py" "$ROOT/examples/data/breast_cancer.csv" "$WORK" cancer-web
mv "$WORK/repo.yaml" "$WORK/repo/cells.yaml"
"$Q" features apply "$WORK/repo" >/dev/null
curl -sf -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d @"$WORK/push.json" "$BASE/push" >/dev/null
"$Q" deploy create cancer-web --model cancer --primary 1 >/dev/null
"$Q" deploy create cancer-feat --model cancer --primary 1 --features cancer_features >/dev/null

URL=$BASE/v2/models/cancer-web/infer
FURL=$BASE/v2/models/cancer-feat/infer
GURL=$BASE/inference.GRPCInferenceService/ModelInfer
one() { head -1 "$2" | curl -sf -H 'Content-Type: application/json' -H "Authorization: Bearer $TOKEN" -d @- "$1"; echo; }
echo "one request each (the same entity, row 1 of the sample):" >&2
one "$URL" "$WORK/rows.jsonl" >&2
one "$FURL" "$WORK/keys.jsonl" >&2
curl -s --http2-prior-knowledge -o /dev/null -D - -H 'content-type: application/grpc' -H 'te: trailers' \
  -H "authorization: Bearer $TOKEN" --data-binary @"$WORK/grpc.bin" "$GURL" | grep -i '^grpc-status\|^HTTP' >&2 || true

# --- the sweep -------------------------------------------------------------------------
LUA=$ROOT/scripts/bench/online_wrk.lua
http() { # name url bodies conc
  wrk -t1 -c "$4" -d "${WARMUP}s" -s "$LUA" -H "Authorization: Bearer $TOKEN" "$2" -- "$3" >/dev/null
  wrk -t1 -c "$4" -d "${DURATION}s" -s "$LUA" -H "Authorization: Bearer $TOKEN" "$2" -- "$3" |
    grep '^{' | python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); j.update(server=sys.argv[1], conc=int(sys.argv[2])); print(json.dumps(j))' "$1" "$4"
}
grpc() { # conc
  local args=(-c "$1" -m 1 -t 1 --data="$WORK/grpc.bin" -H 'content-type: application/grpc' -H 'te: trailers'
    -H "authorization: Bearer $TOKEN")
  h2load "${args[@]}" -D "$WARMUP" "$GURL" >/dev/null
  h2load "${args[@]}" -D "$DURATION" --log-file="$WORK/h2load.log" "$GURL" >"$WORK/h2load.out"
  python3 - "$WORK/h2load.log" "$WORK/h2load.out" "$1" "$DURATION" <<'PY'
import json, re, sys
log, out, conc, duration = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
lat = sorted(int(l.split()[2]) / 1e3 for l in open(log) if l.strip())  # µs -> ms
codes = [int(l.split()[1]) for l in open(log) if l.strip()]
text = open(out).read()
m = re.search(r"finished in ([\d.]+)(m?s)", text)
secs = float(m.group(1)) / (1000 if m.group(2) == "ms" else 1) if m else duration
pct = lambda p: lat[min(len(lat) - 1, int(p / 100 * len(lat)))] if lat else 0.0
print(json.dumps({"server": "grpc", "conc": conc, "requests": len(lat), "seconds": secs,
                  "non2xx": sum(c != 200 for c in codes), "connect": 0, "read": 0, "write": 0,
                  "timeout": 0, "p50_ms": pct(50), "p99_ms": pct(99)}))
PY
}
for c in $SWEEP; do
  http http "$URL" "$WORK/rows.jsonl" "$c"
  http http+feat "$FURL" "$WORK/keys.jsonl" "$c"
  grpc "$c"
done | tee "$WORK/results.jsonl"
python3 - "$WORK/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n| path | concurrency | requests/s | p50 ms | p99 ms | errors |")
print("|---|---|---|---|---|---|")
for r in rows:
    rps = r["requests"] / r["seconds"]
    err = r["non2xx"] + r["connect"] + r["read"] + r["write"] + r["timeout"]
    print(f"| {r['server']} | {r['conc']} | {rps:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {err} |")
best = {}
for r in rows:
    rps = r["requests"] / r["seconds"]
    if rps > best.get(r["server"], (0, None))[0]:
        best[r["server"]] = (rps, r)
for k, (rps, r) in best.items():
    print(f"best {k}: {rps:,.0f} req/s at concurrency {r['conc']} (p99 {r['p99_ms']:.2f} ms)")
if "http" in best and "http+feat" in best:
    print(f"enrichment keeps {best['http+feat'][0] / best['http'][0]:.0%} of the plain throughput")
PY
