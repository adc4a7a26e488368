"""The web UI's runs page at deep offsets (issue 47: "pagination that stays fast at
100k runs"): fills an experiment `deep` with N runs (one metric each, through the MLflow
REST API), logs in to the UI with the token, and prints the median of 7 requests of
the page at offsets 0, N/2 and N-50 for three views (newest first; filtered
`metrics.acc > 0.5`; sorted by `metrics.acc DESC`). Against a fresh server:

    python3 scripts/bench/ui_deep_pages.py HOST PORT ADMIN_TOKEN N
"""
import base64, http.client, json, re, sys, time, urllib.parse
host, port, token, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
c = http.client.HTTPConnection(host, port)
def call(method, path, body=None, headers=None):
    h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse(); data = r.read()
    return r.status, data, r
s, d, _ = call("POST", "/api/2.0/mlflow/experiments/create", {"name": "deep"})
exp = json.loads(d)["experiment_id"]
t0 = time.time()
for i in range(n):
    s, d, _ = call("POST", "/api/2.0/mlflow/runs/create", {"experiment_id": exp, "start_time": 1700000000000 + i})
    rid = json.loads(d)["run"]["info"]["run_id"]
    call("POST", "/api/2.0/mlflow/runs/log-batch", {"run_id": rid, "metrics": [{"key": "acc", "value": (i * 7919 % 1000) / 1000, "timestamp": 1, "step": 0}]})
print(f"filled {n} runs in {time.time()-t0:.0f} s", file=sys.stderr)
# UI login
b = http.client.HTTPConnection(host, port)
b.request("GET", "/ui/login"); r = b.getresponse(); html = r.read().decode()
cookie = [v for k, v in r.getheaders() if k.lower() == "set-cookie" and v.startswith("qanat_login=")][0].split(";")[0]
csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
b.request("POST", "/ui/login", body=urllib.parse.urlencode({"token": token, "csrf": csrf, "next": "/ui/"}),
          headers={"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"})
r = b.getresponse(); r.read()
session = [v for k, v in r.getheaders() if k.lower() == "set-cookie" and v.startswith("qanat_session=")][0].split(";")[0]
def page(q):
    ts = []
    for _ in range(7):
        t = time.perf_counter()
        b.request("GET", f"/ui/p/default/experiments/{exp}?{q}", headers={"Cookie": session})
        r = b.getresponse(); body = r.read()
        ts.append(time.perf_counter() - t)
        assert r.status == 200, (r.status, body[:300])
    ts.sort(); return ts[3] * 1000, body
for offset in [0, n // 2, n - 50]:
    tok = urllib.parse.quote(base64.b64encode(json.dumps({"offset": offset}).encode()).decode())
    for label, q in [("newest first", ""), ("filter acc > 0.5", "filter=" + urllib.parse.quote("metrics.acc > 0.5")),
                     ("sorted by acc", "order=" + urllib.parse.quote("metrics.acc DESC"))]:
        ms, body = page(q + ("&" if q else "") + f"page={tok}")
        rows = body.count(b"<tr") - 1
        print(f"offset {offset:>6}  {label:<18} {ms:7.1f} ms  ({rows} rows)")
