"""Helper of online_vs_feast.sh (runs in the Feast venv: pyarrow, requests).

  data DIR DRIVERS FEATURES   the driver table (Parquet), Feast's repo, Qanat's YAML repo
                              and the request bodies (one JSON body a line) under DIR
  check QANAT_URL TOKEN FEAST_URL BODY_FILE
                              one request of BODY_FILE's first line to each server: 200,
                              the entity key then every feature, all PRESENT, and the
                              same values on both sides; exits non-zero otherwise
  warm URL TOKEN|- BODY_FILE  every body of BODY_FILE once, 4 at a time (fails on a non-200)
  report DIR                  the table of DIR/*.json (oha's JSON output) and the ratios
"""

import json
import os
import random
import shutil
import sys
from datetime import datetime, timedelta, timezone

# Every event time lies in [START, END): both sides materialize that window.
START = datetime(2025, 3, 1, tzinfo=timezone.utc)
END = datetime(2025, 3, 8, tzinfo=timezone.utc)
# Qanat serves values older than the ttl as OUTSIDE_MAX_AGE; Feast's server does not
# check it. Ten years keeps every value of 2025 fresh on both sides.
TTL_DAYS = 3650
FIRST_ID = 1_000_001
VIEW = "driver_stats"
BODIES_ONE = 20_000  # one-entity bodies (random drivers)
BODIES_MANY = 2_000  # hundred-entity bodies (100 distinct random drivers each)
MANY = 100


def feature_names(n):
    return [f"f{i:02d}" for i in range(n)]


# Feast's repo configuration, shared with the other Feast peer.
FEAST_STORE_YAML = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "compat", "feast_store.yaml")

FEAST_DEFINITIONS = """\
from datetime import timedelta

from feast import Entity, FeatureView, Field, FileSource
from feast.types import Float64, Int64

driver = Entity(name="driver", join_keys=["driver_id"])

src = FileSource(
    name="driver_stats_src",
    path={path!r},
    timestamp_field="event_timestamp",
)

driver_stats = FeatureView(
    name="{view}",
    entities=[driver],
    ttl=timedelta(days={ttl}),
    schema=[Field(name="driver_id", dtype=Int64)]
    + [Field(name=n, dtype=Float64) for n in {names!r}],
    online=True,
    source=src,
)
"""

def qanat_repo(names):
    """Qanat's feature repo for the same view: its documents as JSON (a YAML reader
    takes JSON), one a line."""
    docs = [
        {"kind": "entity", "name": "driver", "join_keys": [{"name": "driver_id", "type": "int64"}]},
        {
            "kind": "source",
            "name": "driver_stats_src",
            "type": "file",
            "path": QANAT_FILE,
            "timestamp_field": "event_timestamp",
        },
        {
            "kind": "feature_view",
            "name": VIEW,
            "entities": ["driver"],
            "source": "driver_stats_src",
            "ttl": f"{TTL_DAYS}d",
            "schema": [{"name": n, "type": "float64"} for n in names],
        },
    ]
    return "\n---\n".join(json.dumps(d) for d in docs) + "\n"

# The project file Qanat's `file` source reads.
QANAT_FILE = "bench/online/drivers.parquet"


def data(out, drivers, nfeat):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = feature_names(nfeat)
    rng = np.random.default_rng(42)
    ids = np.arange(FIRST_ID, FIRST_ID + drivers, dtype=np.int64)
    span_us = int((END - START).total_seconds() * 1e6) - 1
    # Whole seconds: Feast's sqlite store keeps event times to the second.
    offs = rng.integers(0, span_us // 1_000_000, drivers) * 1_000_000
    ts = np.datetime64(START.replace(tzinfo=None), "us") + offs.astype("timedelta64[us]")
    cols = {
        "driver_id": pa.array(ids),
        "event_timestamp": pa.array(ts, pa.timestamp("us", tz="UTC")),
    }
    for n in names:
        cols[n] = pa.array(rng.random(drivers))
    os.makedirs(out, exist_ok=True)
    parquet = os.path.join(out, "drivers.parquet")
    pq.write_table(pa.table(cols), parquet)

    feast = os.path.join(out, "feast_repo")
    os.makedirs(os.path.join(feast, "data"), exist_ok=True)
    shutil.copy(FEAST_STORE_YAML, os.path.join(feast, "feature_store.yaml"))
    with open(os.path.join(feast, "definitions.py"), "w") as fh:
        fh.write(FEAST_DEFINITIONS.format(path=parquet, view=VIEW, ttl=TTL_DAYS, names=names))

    qrepo = os.path.join(out, "qanat_repo")
    os.makedirs(qrepo, exist_ok=True)
    with open(os.path.join(qrepo, "drivers.yaml"), "w") as fh:
        fh.write(qanat_repo(names))

    refs = [f"{VIEW}:{n}" for n in names]
    r = random.Random(7)
    with open(os.path.join(out, "bodies_1.txt"), "w") as fh:
        for _ in range(BODIES_ONE):
            d = FIRST_ID + r.randrange(drivers)
            fh.write(json.dumps({"features": refs, "entities": {"driver_id": [d]}}, separators=(",", ":")) + "\n")
    with open(os.path.join(out, f"bodies_{MANY}.txt"), "w") as fh:
        for _ in range(BODIES_MANY):
            ds = [FIRST_ID + i for i in r.sample(range(drivers), MANY)]
            fh.write(json.dumps({"features": refs, "entities": {"driver_id": ds}}, separators=(",", ":")) + "\n")
    # Every driver once, a hundred a body: read by both servers before anything is timed.
    with open(os.path.join(out, "bodies_warm.txt"), "w") as fh:
        for i in range(0, drivers, MANY):
            ds = [FIRST_ID + j for j in range(i, min(i + MANY, drivers))]
            fh.write(json.dumps({"features": refs, "entities": {"driver_id": ds}}, separators=(",", ":")) + "\n")
    print(
        json.dumps(
            {
                "parquet": parquet,
                "qanat_file": QANAT_FILE,
                "start": START.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "end": END.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    )


def check(qanat_url, token, feast_url, body_file):
    import requests

    with open(body_file) as fh:
        body = json.loads(fh.readline())
    nfeat = len(body["features"])
    want = {"driver_id"} | {f.split(":")[1] for f in body["features"]}
    rows = len(body["entities"]["driver_id"])
    got = {}
    bad = []
    for side, url, headers in (
        ("qanat", qanat_url, {"Authorization": f"Bearer {token}"}),
        ("feast", feast_url, {}),
    ):
        r = requests.post(url, data=json.dumps(body), headers={**headers, "Content-Type": "application/json"}, timeout=60)
        if r.status_code != 200:
            bad.append(f"{side}: {url} answered {r.status_code}: {r.text[:500]}")
            continue
        j = r.json()
        names = j["metadata"]["feature_names"]
        if set(names) != want or len(names) != nfeat + 1:
            bad.append(f"{side}: feature_names {names}, wanted driver_id and {nfeat} features")
            continue
        cols = dict(zip(names, j["results"]))
        statuses = {}
        for n in want - {"driver_id"}:
            for s in cols[n]["statuses"]:
                statuses[s] = statuses.get(s, 0) + 1
            if len(cols[n]["values"]) != rows:
                bad.append(f"{side}: {n} has {len(cols[n]['values'])} values for {rows} entities")
        if set(statuses) != {"PRESENT"}:
            bad.append(f"{side}: statuses {statuses}, wanted all PRESENT")
        got[side] = cols
        print(f"  {side}: 200, {len(names) - 1} feature columns x {rows} entities, statuses {statuses}, {len(r.content)} bytes")
    inexact = []
    if not bad:
        import pyarrow.parquet as pq

        # The source's own values, to tell which side differs from the Parquet.
        parquet = os.path.join(os.path.dirname(body_file), "drivers.parquet")
        t = pq.read_table(parquet).to_pydict()
        pos = {d: i for i, d in enumerate(t["driver_id"])}
        ids = body["entities"]["driver_id"]
        for n in sorted(want - {"driver_id"}):
            for i, (a, b) in enumerate(zip(got["qanat"][n]["values"], got["feast"][n]["values"])):
                src = t[n][pos[ids[i]]]
                if a == b == src:
                    continue
                ulps = {side: ulp_distance(v, src) for side, v in (("qanat", a), ("feast", b))}
                if max(ulps.values()) > 4:
                    bad.append(f"{n}[{i}]: qanat {a!r}, feast {b!r}, source {src!r}")
                else:
                    inexact.append((n, i, a, b, src, ulps))
    if bad:
        print("check failed:\n  " + "\n  ".join(bad[:10]), file=sys.stderr)
        sys.exit(1)
    total = rows * nfeat
    if inexact:
        sides = sorted({side for *_, u in inexact for side, d in u.items() if d})
        n, i, a, b, src, u = inexact[0]
        print(
            f"  NOTE: {len(inexact)} of {total} values differ from the Parquet source in the last bits "
            f"({', '.join(sides)}; at most {max(max(x[-1].values()) for x in inexact)} ulp), "
            f"e.g. {n}[{i}]: qanat {a!r}, feast {b!r}, source {src!r}"
        )
    else:
        print(f"  the same {total} values on both sides, bit for bit the source's")


def ulp_distance(a, b):
    """How many doubles apart a and b are (0: identical)."""
    import struct

    def key(x):
        i = struct.unpack("<q", struct.pack("<d", float(x)))[0]
        return i if i >= 0 else -(i & 0x7FFFFFFFFFFFFFFF)

    return abs(key(a) - key(b))


def warm(url, token, body_file, threads=4):
    """Sends every body of the file once (THREADS at a time); fails on a non-200."""
    import concurrent.futures
    import time

    import requests

    headers = {"Content-Type": "application/json"}
    if token != "-":
        headers["Authorization"] = f"Bearer {token}"
    with open(body_file) as fh:
        bodies = [line.strip() for line in fh if line.strip()]
    local = __import__("threading").local()

    def one(b):
        if not hasattr(local, "s"):
            local.s = requests.Session()
        r = local.s.post(url, data=b, headers=headers, timeout=120)
        return r.status_code

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        codes = list(pool.map(one, bodies))
    bad = {c: codes.count(c) for c in set(codes) if c != 200}
    print(f"  warm-up: {len(bodies)} requests (every driver once) in {time.time() - t0:.1f} s" + (f", NON-200: {bad}" if bad else ""))
    if bad:
        sys.exit(1)


# ---------------------------------------------------------------------------------
# Report


def read_meta(d, name):
    meta = {}
    p = os.path.join(d, name + ".meta")
    if os.path.exists(p):
        with open(p) as fh:
            for line in fh:
                k, _, v = line.strip().partition("=")
                meta[k] = v
    return meta


def load_wrk(d, name):
    """A wrk run: the JSON line online_wrk.lua's done() printed."""
    p = os.path.join(d, name + ".wrk")
    if not os.path.exists(p):
        return None
    with open(p) as fh:
        lines = [line for line in fh if line.startswith("{")]
    if not lines:
        return None
    j = json.loads(lines[-1])
    errors = {k: j[k] for k in ("connect", "read", "write", "timeout") if j[k]}
    ok = j["requests"] - j["non2xx"]
    return {
        "name": name,
        "ok": ok,
        "non200": j["non2xx"],
        "codes": {"non-2xx": j["non2xx"]} if j["non2xx"] else {},
        "errors": errors,
        "seconds": j["seconds"],
        "rps": ok / j["seconds"] if j["seconds"] else 0.0,
        "p50": j["p50_ms"],
        "p99": j["p99_ms"],
        "p999": None,
        "max": j["max_ms"],
        "meta": read_meta(d, name),
    }


def load(d, name):
    if name.startswith("wrk_"):
        return load_wrk(d, name)
    p = os.path.join(d, name + ".json")
    if not os.path.exists(p):
        return None
    with open(p) as fh:
        j = json.load(fh)
    meta = read_meta(d, name)
    codes = {int(k): v for k, v in j.get("statusCodeDistribution", {}).items()}
    errors = j.get("errorDistribution", {})
    total = j["summary"]["total"]
    ok = codes.get(200, 0)
    pct = j["latencyPercentiles"]
    return {
        "name": name,
        "ok": ok,
        "non200": sum(v for k, v in codes.items() if k != 200),
        "codes": codes,
        "errors": errors,
        "seconds": total,
        "rps": ok / total if total else 0.0,
        "p50": (pct.get("p50") or 0) * 1e3,
        "p99": (pct.get("p99") or 0) * 1e3,
        "p999": (pct.get("p99.9") or 0) * 1e3,
        "max": (j["summary"].get("slowest") or 0) * 1e3,
        "meta": meta,
    }


def cpu(r):
    m = r["meta"]
    s = float(m.get("wall", 0) or 0)
    if s <= 0:
        return ""
    srv = float(m.get("server_cpu", 0)) / s * 100
    gen = float(m.get("gen_cpu", 0)) / s * 100
    other = max(0.0, float(m.get("all_cpu", 0)) / s * 100 - srv - gen)
    out = f"server {srv:4.0f}%  load gen {gen:3.0f}%  other {other:3.0f}%"
    workers = [float(w) for w in m.get("workers", "").split(",") if w]
    if len(workers) > 1:
        out += "  (workers " + "/".join(f"{w / s * 100:.0f}%" for w in workers) + ")"
    if int(m.get("tries", 1) or 1) > 1:
        out += f" [run {m['tries']}: earlier ones had uneven workers]"
    return out


def report(d):
    rows = [
        ("calib_qanat_health", "oha ceiling: Qanat GET /health (no body, no auth)"),
        ("one_qanat_closed", "1x50  qanat  closed loop"),
        ("one_feast_closed", "1x50  feast  closed loop"),
        ("one_qanat_peak", "1x50  qanat  closed loop (peak)"),
        ("one_feast_peak", "1x50  feast  closed loop (peak)"),
        ("one_qanat_rate", "1x50  qanat  fixed rate"),
        ("one_qanat_rate_low", "1x50  qanat  fixed rate (lower)"),
        ("one_feast_rate", "1x50  feast  fixed rate"),
        ("many_qanat_closed", "100x50 qanat closed loop"),
        ("many_feast_closed", "100x50 feast closed loop"),
        ("many_qanat_rate", "100x50 qanat fixed rate"),
        ("many_feast_rate", "100x50 feast fixed rate"),
        ("wrk_one_qanat", "wrk cross-check: 1x50  qanat  closed loop"),
        ("wrk_one_feast", "wrk cross-check: 1x50  feast  closed loop"),
        ("wrk_many_qanat", "wrk cross-check: 100x50 qanat closed loop"),
        ("wrk_many_feast", "wrk cross-check: 100x50 feast closed loop"),
    ]
    res = {}
    print()
    print(f"{'run':<52} {'conc':>4} {'rate':>6} {'req/s (200)':>11} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'max ms':>8} {'non-200':>7} {'errors':>6}  cpu during the run (100% = one core; other: the rest of the machine)")
    for key, label in rows:
        r = load(d, key)
        if r is None:
            continue
        res[key] = r
        m = r["meta"]
        nerr = sum(r["errors"].values())
        print(
            f"{label:<52} {m.get('conc', ''):>4} {m.get('rate', '-') or '-':>6} {r['rps']:>11.0f} {r['p50']:>8.2f} {r['p99']:>8.2f} "
            f"{'-' if r['p999'] is None else format(r['p999'], '.2f'):>9} {r['max']:>8.1f} {r['non200']:>7} {nerr:>6}  {cpu(r)}"
        )
    problems = []
    for k, r in res.items():
        if r["non200"]:
            problems.append(f"{k}: status codes {r['codes']}")
        if r["errors"]:
            problems.append(f"{k}: errors {r['errors']}")
    print()
    if problems:
        print("NON-200 RESPONSES / ERRORS:")
        for p in problems:
            print("  " + p)
    else:
        print("non-200 responses: 0, connection/other errors: 0 (in every run)")

    def ratio(a, b, f, inv=False):
        if a in res and b in res and res[a][f] and res[b][f]:
            x = res[b][f] / res[a][f] if inv else res[a][f] / res[b][f]
            return f"{x:.1f}x"
        return "n/a"

    print()
    print("ratios (qanat vs feast; above 1 = qanat better):")
    print(f"  1x50   throughput qanat/feast: {ratio('one_qanat_closed', 'one_feast_closed', 'rps')} (at {res.get('one_qanat_closed', {}).get('meta', {}).get('conc', '?')} connections), "
          f"{ratio('one_qanat_peak', 'one_feast_peak', 'rps')} (at {res.get('one_qanat_peak', {}).get('meta', {}).get('conc', '?')})")
    print(f"  1x50   p50 feast/qanat: {ratio('one_qanat_closed', 'one_feast_closed', 'p50', inv=True)}   p99 feast/qanat: {ratio('one_qanat_closed', 'one_feast_closed', 'p99', inv=True)}")
    print(f"  100x50 throughput qanat/feast: {ratio('many_qanat_closed', 'many_feast_closed', 'rps')}")
    print(f"  100x50 p50 feast/qanat: {ratio('many_qanat_closed', 'many_feast_closed', 'p50', inv=True)}   p99 feast/qanat: {ratio('many_qanat_closed', 'many_feast_closed', 'p99', inv=True)}")
    if "wrk_one_qanat" in res:
        print(f"  wrk: 1x50 throughput qanat/feast: {ratio('wrk_one_qanat', 'wrk_one_feast', 'rps')}   100x50: {ratio('wrk_many_qanat', 'wrk_many_feast', 'rps')}")
    print()
    print("goals:")
    r = res.get("one_qanat_rate_low")
    if r:
        print(f"  (1x50 at {r['meta'].get('rate')} req/s: qanat p99 {r['p99']:.3f} ms)")
    r = res.get("one_qanat_rate")
    if r:
        ok = r["p99"] < 1.0 and r["non200"] == 0 and not r["errors"]
        print(
            f"  1x50 at {r['meta'].get('rate')} req/s (open loop, latency-corrected): qanat p99 {r['p99']:.3f} ms, "
            f"achieved {r['rps']:.0f} req/s  [goal p99 < 1 ms: {'met' if ok else 'NOT met'}]"
        )
    # Throughput: each server's best closed loop (its peak), and the same at the lower
    # concurrency, where latency bounds it.
    best = lambda *ks: max((res[k] for k in ks if k in res), key=lambda r: r["rps"], default=None)
    a, b = best("one_qanat_closed", "one_qanat_peak"), best("one_feast_closed", "one_feast_peak")
    if a and b:
        x = a["rps"] / b["rps"] if b["rps"] else float("inf")
        print(f"  1x50 throughput, each at its best: qanat {a['rps']:.0f} (concurrency {a['meta'].get('conc')}) vs feast {b['rps']:.0f} req/s (concurrency {b['meta'].get('conc')}) = {x:.1f}x  [goal >= 10x: {'met' if x >= 10 else 'NOT met'}]")
    a, b = res.get("one_qanat_closed"), res.get("one_feast_closed")
    if a and b:
        x = a["rps"] / b["rps"] if b["rps"] else float("inf")
        print(f"  1x50 throughput at concurrency {a['meta'].get('conc')}: qanat {a['rps']:.0f} vs feast {b['rps']:.0f} req/s = {x:.1f}x")
    for k, label in (("many_qanat_rate", "fixed rate"), ("many_qanat_closed", "closed loop")):
        r = res.get(k)
        if r:
            extra = f" at {r['meta'].get('rate')} req/s" if r["meta"].get("rate") else f" at concurrency {r['meta'].get('conc')}"
            print(f"  100x50 qanat p99 ({label}{extra}): {r['p99']:.2f} ms  [goal < 10 ms: {'met' if r['p99'] < 10 else 'NOT met'}]")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "data":
        data(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "check":
        check(*sys.argv[2:6])
    elif cmd == "warm":
        warm(*sys.argv[2:5])
    elif cmd == "report":
        report(sys.argv[2])
    else:
        sys.exit(__doc__)
