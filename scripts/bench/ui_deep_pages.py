"""The web UI's runs page deep in an experiment of N runs (issue 47: "pagination that
stays fast at 100k runs").

Fills an experiment `deep` with N runs (one metric each, through the MLflow REST API),
logs in to the UI with the token, and for three views (newest first; filtered
`metrics.acc > 0.5`; sorted by `metrics.acc DESC`) walks the view's pages through the
REST `runs/search` (50 a page, as the UI shows them) to get the page token that starts
at row 0, half way and 50 before the end. Each such page of the UI is then timed (the
median of 7 requests after a first one, server and loopback) twice: with that page token (a keyset: after
the previous page's last row) and with an offset token to the same row (what earlier
versions handed out), and both must show the same runs. Against a fresh server:

    python3 scripts/bench/ui_deep_pages.py HOST PORT ADMIN_TOKEN N
"""
import base64
import concurrent.futures
import http.client
import json
import re
import sys
import time
import urllib.parse

host, port, token, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
PAGE = 50
c = http.client.HTTPConnection(host, port)


def call(method, path, body=None):
    global c
    h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse()
    except (ConnectionError, http.client.HTTPException):
        # The server closed the connection while it was idle (during the fill).
        c = http.client.HTTPConnection(host, port)
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse()
    data = r.read()
    assert r.status == 200, (path, r.status, data[:300])
    return json.loads(data)


exp = call("POST", "/api/2.0/mlflow/experiments/create", {"name": "deep"})["experiment_id"]


def fill(worker, workers=8):
    """Runs i = worker, worker + workers, ... over a connection of its own."""
    conn = http.client.HTTPConnection(host, port)

    def post(path, body):
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        assert r.status == 200, (path, r.status, data[:300])
        return json.loads(data)

    for i in range(worker, n, workers):
        rid = post("/api/2.0/mlflow/runs/create",
                   {"experiment_id": exp, "start_time": 1700000000000 + i})["run"]["info"]["run_id"]
        post("/api/2.0/mlflow/runs/log-batch",
             {"run_id": rid, "metrics": [{"key": "acc", "value": (i * 7919 % 1000) / 1000, "timestamp": 1, "step": 0}]})


t0 = time.time()
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    list(pool.map(fill, range(8)))
print(f"filled {n} runs in {time.time() - t0:.0f} s (8 in flight)", file=sys.stderr)

# The UI's session.
b = http.client.HTTPConnection(host, port)
b.request("GET", "/ui/login")
r = b.getresponse()
html = r.read().decode()
cookie = [v for k, v in r.getheaders() if k.lower() == "set-cookie" and v.startswith("qanat_login=")][0].split(";")[0]
csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
b.request("POST", "/ui/login", body=urllib.parse.urlencode({"token": token, "csrf": csrf, "next": "/ui/"}),
          headers={"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"})
r = b.getresponse()
r.read()
session = [v for k, v in r.getheaders() if k.lower() == "set-cookie" and v.startswith("qanat_session=")][0].split(";")[0]


def ui_page(q):
    """The median time of 7 requests of the runs page with query `q` (after one not
    counted), and the run ids shown."""
    global b
    ts = []
    for i in range(8):
        t = time.perf_counter()
        try:
            b.request("GET", f"/ui/p/default/experiments/{exp}?{q}", headers={"Cookie": session})
            r = b.getresponse()
        except (ConnectionError, http.client.HTTPException):
            # Closed while idle (during a walk); the first request is not counted.
            b = http.client.HTTPConnection(host, port)
            b.request("GET", f"/ui/p/default/experiments/{exp}?{q}", headers={"Cookie": session})
            r = b.getresponse()
        body = r.read()
        if i == 0:
            continue
        ts.append(time.perf_counter() - t)
        assert r.status == 200, (r.status, body[:300])
    ts.sort()
    ids = re.findall(rb'name="run" value="([0-9a-f]{32})"', body)
    return ts[3] * 1000, ids


views = [("newest first", None, []), ("filter acc > 0.5", "metrics.acc > 0.5", []),
         ("sorted by acc", None, ["metrics.acc DESC"])]
print(f"{'view':<18} {'row':>7}  {'page token':>10}  {'offset token':>12}  rows")
for label, filt, order in views:
    # Every page's token, from the REST search (what the UI's "Next page" links carry).
    tokens = [None]
    t0 = time.time()
    while True:
        body = {"experiment_ids": [exp], "max_results": PAGE, "order_by": order}
        if filt:
            body["filter"] = filt
        if tokens[-1]:
            body["page_token"] = tokens[-1]
        nxt = call("POST", "/api/2.0/mlflow/runs/search", body).get("next_page_token")
        if not nxt:
            break
        tokens.append(nxt)
    total_pages = len(tokens)
    print(f"  ({label}: {total_pages} pages walked through runs/search in {time.time() - t0:.1f} s)", file=sys.stderr)
    for page_no in sorted({0, total_pages // 2, total_pages - 1}):
        row = page_no * PAGE
        q = []
        if filt:
            q.append("filter=" + urllib.parse.quote(filt))
        if order:
            q.append("order=" + urllib.parse.quote(order[0]))
        keyset = q + (["page=" + urllib.parse.quote(tokens[page_no])] if tokens[page_no] else [])
        offset = q + ["page=" + urllib.parse.quote(base64.b64encode(json.dumps({"offset": row}).encode()).decode())]
        ms_k, ids_k = ui_page("&".join(keyset))
        ms_o, ids_o = ui_page("&".join(offset))
        assert ids_k == ids_o and ids_k, (label, row, len(ids_k), len(ids_o))
        print(f"{label:<18} {row:>7}  {ms_k:>7.1f} ms  {ms_o:>9.1f} ms  {len(ids_k)}")
