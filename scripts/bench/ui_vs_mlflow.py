"""The web UI's two heaviest pages against MLflow 3.17's UI on the same data.

    python ui_vs_mlflow.py populate-mlflow <sqlite uri> <runs> <points>
    python ui_vs_mlflow.py populate-api <server uri> <runs> <points>
    python ui_vs_mlflow.py run <qanat uri> <mlflow uri>

Data, the same on both: an experiment `ui-runs` of <runs> runs (a param and a metric
each, as tracking_vs_mlflow.py makes them) and an experiment `ui-curve` with one run
whose metric `loss` has <points> steps.

What is timed (sequential requests over loopback, N_PAGE times each, median), for four
views: the runs newest first; filtered by `metrics.acc > 0.5`, second page; sorted by
`metrics.acc DESC` with no filter; and the run page of the long curve:
  Qanat    the page itself: GET /ui/p/default/experiments/<id> (the runs table, 50
           runs with their param and metric columns) and GET /ui/p/default/runs/<id>
           (the run page, its chart drawn as SVG from about 500 steps of the history).
           The HTML is complete when it arrives.
  MLflow   the requests its UI makes for the same views (its React app then renders in
           the browser, which is not counted): POST /ajax-api/2.0/mlflow/runs/search
           (100 runs, as the experiment view asks), and for the run view GET
           /ajax-api/2.0/mlflow/runs/get plus GET
           /ajax-api/2.0/mlflow/metrics/get-history-bulk-interval (max_results 320,
           what its chart asks for).
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracking_vs_mlflow as tv  # noqa: E402

N_PAGE = int(os.environ.get("N_PAGE", "20"))
# A view whose first call takes longer than SLOW_CALL_S is timed once, not N_PAGE
# times; a call past CALL_TIMEOUT_S is given up (reported as "> CALL_TIMEOUT_S s").
SLOW_CALL_S = float(os.environ.get("SLOW_CALL_S", "30"))
CALL_TIMEOUT_S = float(os.environ.get("CALL_TIMEOUT_S", "600"))


def headers():
    h = {"Content-Type": "application/json"}
    if os.environ.get("QANAT_TOKEN"):
        h["Authorization"] = f"Bearer {os.environ['QANAT_TOKEN']}"
    return h


def clone_rows(db_path, table, key_col, template_id, rows):
    """Inserts copies of the rows of `table` whose `key_col` is `template_id`, one set
    per item of `rows` (a dict of column overrides for each copy; `by_key`, values of
    the rows by their `key`), in one transaction."""
    import sqlite3

    con = sqlite3.connect(db_path)
    cur = con.execute(f"SELECT * FROM {table} WHERE {key_col} = ?", (template_id,))
    cols = [d[0] for d in cur.description]
    templates = [dict(zip(cols, r)) for r in cur.fetchall()]
    sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"
    batch = []
    for over in rows:
        for t in templates:
            row = {**t, **{k: v for k, v in over.items() if k in t}}
            if t.get("key") in over.get("by_key", {}):
                row["value"] = over["by_key"][t["key"]]
            batch.append([row[c] for c in cols])
        if len(batch) >= 50_000:
            con.executemany(sql, batch)
            batch = []
    con.executemany(sql, batch)
    con.commit()
    con.close()


def populate_mlflow(db_uri, runs, points):
    """The same data in MLflow's store. One run of each kind is written by MLflow's own
    store (create_run, log_batch), which makes its rows exactly; the rest are copies of
    those rows with their own ids, names, times and values, inserted in bulk (MLflow's
    store writes ~3,000 runs a minute, so 100k runs would take over half an hour)."""
    import random
    import uuid

    from mlflow.entities import Metric, Param, RunTag
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    db_path = db_uri.removeprefix("sqlite:///")
    store = SqlAlchemyStore(db_uri, "/tmp/unused-artifacts")
    exp = store.create_experiment("ui-runs")
    rng = random.Random(7)
    now = int(time.time() * 1000)
    first = store.create_run(exp, "bench", now, [RunTag("i", "0")], "run-0")
    store.log_batch(first.info.run_id, metrics=[Metric("acc", rng.random(), now, 0)],
                    params=[Param("model", rng.choice(["tree", "linear", "boost"]))], tags=[])
    tid = first.info.run_id
    copies = []
    for i in range(1, runs):
        rid = uuid.uuid4().hex
        copies.append((i, rid, rng.random(), rng.choice(["tree", "linear", "boost"])))
    clone_rows(db_path, "runs", "run_uuid", tid, (
        {"run_uuid": rid, "name": f"run-{i}", "start_time": now + i,
         "artifact_uri": first.info.artifact_uri.replace(tid, rid)} for i, rid, _, _ in copies))
    clone_rows(db_path, "tags", "run_uuid", tid, (
        {"run_uuid": rid, "by_key": {"i": str(i), "mlflow.runName": f"run-{i}"}} for i, rid, _, _ in copies))
    clone_rows(db_path, "params", "run_uuid", tid, ({"run_uuid": rid, "value": m} for _, rid, _, m in copies))
    clone_rows(db_path, "metrics", "run_uuid", tid, ({"run_uuid": rid, "value": a} for _, rid, a, _ in copies))
    clone_rows(db_path, "latest_metrics", "run_uuid", tid, ({"run_uuid": rid, "value": a} for _, rid, a, _ in copies))

    exp = store.create_experiment("ui-curve")
    run = store.create_run(exp, "bench", now, [], "curve")
    store.log_batch(run.info.run_id, metrics=[Metric("loss", 1.0, now, 0)], params=[], tags=[])
    clone_rows(db_path, "metrics", "run_uuid", run.info.run_id, (
        {"value": 1.0 / (s + 1), "timestamp": now + s, "step": s} for s in range(1, points)))
    # The latest point is the last step's.
    import sqlite3

    con = sqlite3.connect(db_path)
    con.execute("UPDATE latest_metrics SET value = ?, timestamp = ?, step = ? WHERE run_uuid = ?",
                (1.0 / points, now + points - 1, points - 1, run.info.run_id))
    con.commit()
    con.close()


def populate_api(uri, runs, points):
    import requests

    tv.populate_api(uri, "ui-runs", runs)
    api = f"{uri}/api/2.0/mlflow"
    s = requests.Session()
    exp = s.post(f"{api}/experiments/create", json={"name": "ui-curve"}, headers=headers()).json()["experiment_id"]
    now = int(time.time() * 1000)
    run = s.post(f"{api}/runs/create", json={"experiment_id": exp, "start_time": now, "run_name": "curve"}, headers=headers())
    run_id = run.json()["run"]["info"]["run_id"]
    for start in range(0, points, 1000):
        body = {"run_id": run_id, "metrics": [
            {"key": "loss", "value": 1.0 / (st + 1), "timestamp": now + st, "step": st}
            for st in range(start, min(points, start + 1000))]}
        s.post(f"{api}/runs/log-batch", json=body, headers=headers()).raise_for_status()


def median_ms(call):
    """The median of N_PAGE calls after a warm one, in ms; a float, or a string for a
    view too slow to repeat ("12345 (one call)") or one that timed out."""
    import requests

    t0 = time.perf_counter()
    try:
        call()  # warm
    except requests.Timeout:
        return f"> {CALL_TIMEOUT_S:.0f} s (timed out)"
    first = (time.perf_counter() - t0) * 1000
    if first > SLOW_CALL_S * 1000:
        return f"{first:.0f} (one call)"
    times = []
    for _ in range(N_PAGE):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def ids(uri, h):
    import requests

    s = requests.Session()
    get = lambda name: s.get(f"{uri}/api/2.0/mlflow/experiments/get-by-name", params={"experiment_name": name}, headers=h).json()["experiment"]["experiment_id"]
    runs_exp, curve_exp = get("ui-runs"), get("ui-curve")
    found = s.post(f"{uri}/api/2.0/mlflow/runs/search", json={"experiment_ids": [curve_exp], "max_results": 1}, headers=h).json()
    return runs_exp, found["runs"][0]["info"]["run_id"]


def run(qanat, mlflow):
    import requests

    qh = headers()
    mh = {"Content-Type": "application/json"}
    q_exp, q_run = ids(qanat, qh)
    m_exp, m_run = ids(mlflow, mh)
    s = requests.Session()

    def ok(r):
        r.raise_for_status()
        return r

    def search(uri, h, exp, n, **body):
        return ok(s.post(f"{uri}/api/2.0/mlflow/runs/search", headers=h,
                         json={"experiment_ids": [exp], "max_results": n, **body})).json()

    def q_page(**params):
        def call():
            body = ok(s.get(f"{qanat}/ui/p/default/experiments/{q_exp}", params=params, headers=qh,
                            timeout=CALL_TIMEOUT_S)).text
            assert body.count("<tr") > 50, "the runs table has its rows"
        return call

    def m_search(**body):
        def call():
            r = ok(s.post(f"{mlflow}/ajax-api/2.0/mlflow/runs/search", headers=mh, json={
                "experiment_ids": [m_exp], "filter": "", "run_view_type": "ACTIVE_ONLY",
                "max_results": 100, **body}, timeout=CALL_TIMEOUT_S))
            assert len(r.json()["runs"]) == 100
        return call

    bounded = "metrics.acc > 0.5"
    q_token = search(qanat, qh, q_exp, 50, filter=bounded)["next_page_token"]
    m_token = search(mlflow, mh, m_exp, 100, filter=bounded)["next_page_token"]

    def q_run_page():
        body = ok(s.get(f"{qanat}/ui/p/default/runs/{q_run}", headers=qh)).text
        assert "<polyline" in body, "the run page draws its chart"

    def m_run_page():
        ok(s.get(f"{mlflow}/ajax-api/2.0/mlflow/runs/get", params={"run_id": m_run}, headers=mh))
        r = ok(s.get(f"{mlflow}/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval",
                     params={"run_ids": m_run, "metric_key": "loss", "max_results": 320}, headers=mh))
        assert r.json()["metrics"], "points"

    n = os.environ.get("UI_RUNS", "?")
    rows = [
        (f"runs page, {n} runs, newest first", median_ms(q_page()),
         median_ms(m_search(order_by=["attributes.start_time DESC"]))),
        (f"the same, filtered `{bounded}`, second page", median_ms(q_page(filter=bounded, page=q_token)),
         median_ms(m_search(filter=bounded, order_by=["attributes.start_time DESC"], page_token=m_token))),
        ("the same, sorted by `metrics.acc DESC`, no filter", median_ms(q_page(order="metrics.acc DESC")),
         median_ms(m_search(order_by=["metrics.acc DESC"]))),
        (f"run page, {os.environ.get('UI_POINTS', '?')} metric points", median_ms(q_run_page), median_ms(m_run_page)),
    ]
    print("| view (median ms) | qanat (whole page) | mlflow (its UI's API calls) | ratio |")
    print("|---|---|---|---|")
    for label, q, m in rows:
        shown = lambda v: v if isinstance(v, str) else f"{v:.1f}"
        ratio = f"{m / q:.1f}x" if not isinstance(m, str) and not isinstance(q, str) else "—"
        print(f"| {label} | {shown(q)} | {shown(m)} | {ratio} |")


def main():
    cmd = sys.argv[1]
    if cmd == "populate-mlflow":
        populate_mlflow(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "populate-api":
        populate_api(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        run(sys.argv[2], sys.argv[3])


if __name__ == "__main__":
    main()
