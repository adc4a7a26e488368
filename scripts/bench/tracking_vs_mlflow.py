"""The same MLflow-client workload against two tracking servers; prints one table.

    python tracking_vs_mlflow.py populate-mlflow <sqlite uri> <experiment> <runs>
    python tracking_vs_mlflow.py populate-api <server uri> <experiment> <runs>
    python tracking_vs_mlflow.py run <name>=<uri> [<name>=<uri> ...]

Environment: QANAT_TOKEN (sent as MLFLOW_TRACKING_TOKEN; a plain MLflow server ignores
it), SEARCH_EXPERIMENT and SMALL_EXPERIMENT (the experiments holding the pre-populated
runs: many, and a few hundred),
N_CREATE, N_BATCH, N_SEARCH, BIG_URI / BIG_EXPERIMENT (a server and experiment with many
more runs, searched the same way).

Workloads (each sequential, one client, as a training script would call them):
  create_run         MlflowClient.create_run, N_CREATE times
  log_batch          MlflowClient.log_batch with 1000 metrics, N_BATCH times
  log_batch (wire)   the same 1000-metric request, pre-encoded, over one HTTP session:
                     the server's cost without the Python client's encoding
  client cost        MlflowClient.log_batch with the HTTP call replaced by an instant
                     200 (after the rest): the client's own share, which bounds any
                     through-the-client ratio
  search_runs        MlflowClient.search_runs over each populated experiment with
                     filter "metrics.acc > 0.5", order_by metrics.acc DESC, 100 results;
                     N_SEARCH times, median latency
  search (wire)      the same search request, pre-encoded, over one HTTP session
  search client cost MlflowClient.search_runs answered instantly with the first
                     server's own response body (after the rest): the client's share
"""

import json
import os
import random
import statistics
import sys
import time
import uuid

N_CREATE = int(os.environ.get("N_CREATE", "200"))
N_BATCH = int(os.environ.get("N_BATCH", "30"))
N_SEARCH = int(os.environ.get("N_SEARCH", "20"))


def populate_mlflow(db_uri, experiment_name, runs):
    """Fills an MLflow SQLite store in process (before its server starts): the same
    runs, params and metric the Qanat side gets through its API."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = SqlAlchemyStore(db_uri, "/tmp/unused-artifacts")
    exp = store.create_experiment(experiment_name)
    rng = random.Random(7)
    now = int(time.time() * 1000)
    for i in range(runs):
        run = store.create_run(exp, "bench", now + i, [RunTag("i", str(i))], f"run-{i}")
        store.log_batch(
            run.info.run_id,
            metrics=[Metric("acc", rng.random(), now, 0)],
            params=[Param("model", rng.choice(["tree", "linear", "boost"]))],
            tags=[],
        )


def populate_api(uri, experiment_name, runs):
    """Fills a server through its REST API, 8 requests in flight: the same runs, params
    and metric as populate_mlflow."""
    import concurrent.futures as cf

    import requests

    headers = {"Content-Type": "application/json"}
    if os.environ.get("QANAT_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['QANAT_TOKEN']}"
    api = f"{uri}/api/2.0/mlflow"
    r = requests.post(f"{api}/experiments/create", json={"name": experiment_name}, headers=headers)
    r.raise_for_status()
    exp = r.json()["experiment_id"]
    rng = random.Random(7)
    plan = [(i, rng.random(), rng.choice(["tree", "linear", "boost"])) for i in range(runs)]
    now = int(time.time() * 1000)
    local = __import__("threading").local()

    def one(item):
        i, acc, model = item
        s = getattr(local, "s", None) or requests.Session()
        local.s = s
        body = {"experiment_id": exp, "start_time": now + i, "run_name": f"run-{i}",
                "tags": [{"key": "i", "value": str(i)}]}
        r = s.post(f"{api}/runs/create", json=body, headers=headers)
        r.raise_for_status()
        run_id = r.json()["run"]["info"]["run_id"]
        body = {"run_id": run_id, "metrics": [{"key": "acc", "value": acc, "timestamp": now, "step": 0}],
                "params": [{"key": "model", "value": model}]}
        s.post(f"{api}/runs/log-batch", json=body, headers=headers).raise_for_status()

    with cf.ThreadPoolExecutor(8) as pool:
        for _ in pool.map(one, plan, chunksize=64):
            pass


def batch_metrics(i):
    from mlflow.entities import Metric

    ts = int(time.time() * 1000)
    return [Metric(f"m{j % 50}", random.random(), ts, i * 20 + j // 50) for j in range(1000)]


def measure(name, uri):
    import requests
    from mlflow import MlflowClient

    os.environ["MLFLOW_TRACKING_TOKEN"] = os.environ.get("QANAT_TOKEN", "")
    client = MlflowClient(uri)
    out = {}
    exp = client.create_experiment(f"bench-{uuid.uuid4().hex[:8]}")

    t0 = time.perf_counter()
    for _ in range(N_CREATE):
        client.create_run(exp)
    out["create_run"] = N_CREATE / (time.perf_counter() - t0)

    run_id = client.create_run(exp).info.run_id
    batches = [batch_metrics(i) for i in range(N_BATCH)]
    t0 = time.perf_counter()
    for b in batches:
        client.log_batch(run_id, metrics=b)
    out["log_batch"] = N_BATCH * 1000 / (time.perf_counter() - t0)

    session = requests.Session()
    headers = {"Content-Type": "application/json"}
    if os.environ.get("QANAT_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['QANAT_TOKEN']}"
    run2 = client.create_run(exp).info.run_id
    bodies = [
        json.dumps(
            {
                "run_id": run2,
                "metrics": [
                    {"key": m.key, "value": m.value, "timestamp": m.timestamp, "step": m.step}
                    for m in b
                ],
            }
        )
        for b in batches
    ]
    t0 = time.perf_counter()
    for body in bodies:
        r = session.post(f"{uri}/api/2.0/mlflow/runs/log-batch", data=body, headers=headers)
        r.raise_for_status()
    out["log_batch_wire"] = N_BATCH * 1000 / (time.perf_counter() - t0)

    out["search_ms"] = search(client, os.environ["SEARCH_EXPERIMENT"])
    small = os.environ.get("SMALL_EXPERIMENT")
    if small:
        out["search_small_ms"] = search(client, small)
        out["search_small_wire_ms"] = search_wire(session, headers, uri, client, small)
    return out


SEARCH_BODY = {
    "filter": "metrics.acc > 0.5",
    "order_by": ["metrics.acc DESC"],
    "max_results": 100,
    "run_view_type": "ACTIVE_ONLY",
}


def search_wire(session, headers, uri, client, experiment_name):
    """The client's search request, pre-encoded, over one session: the server and the
    wire without the client's decoding."""
    exp = client.get_experiment_by_name(experiment_name).experiment_id
    body = json.dumps({"experiment_ids": [exp], **SEARCH_BODY})
    times = []
    for _ in range(N_SEARCH):
        t0 = time.perf_counter()
        r = session.post(f"{uri}/api/2.0/mlflow/runs/search", data=body, headers=headers)
        r.raise_for_status()
        times.append((time.perf_counter() - t0) * 1000)
        assert len(r.json()["runs"]) == 100
    return statistics.median(times)


def search_client_cost(uri, experiment_name):
    """MlflowClient.search_runs answered at once with `uri`'s own response to the same
    search: the client's decoding, which no server removes (median ms)."""
    import requests
    import mlflow.store.tracking.rest_store as rest_store
    import mlflow.utils.rest_utils as rest_utils
    from mlflow import MlflowClient

    os.environ["MLFLOW_TRACKING_TOKEN"] = os.environ.get("QANAT_TOKEN", "")
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment_name).experiment_id
    headers = {"Content-Type": "application/json"}
    if os.environ.get("QANAT_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['QANAT_TOKEN']}"
    answer = requests.post(
        f"{uri}/api/2.0/mlflow/runs/search",
        data=json.dumps({"experiment_ids": [exp], **SEARCH_BODY}),
        headers=headers,
    )
    answer.raise_for_status()

    def instant(*_args, **_kwargs):
        r = requests.models.Response()
        r.status_code = 200
        r._content = answer.content
        return r

    saved = rest_utils.http_request, rest_store.http_request
    rest_utils.http_request = rest_store.http_request = instant
    try:
        return search(client, experiment_name, exp)
    finally:
        rest_utils.http_request, rest_store.http_request = saved


def search(client, experiment_name, exp=None):
    if exp is None:
        exp = client.get_experiment_by_name(experiment_name).experiment_id
    times = []
    for _ in range(N_SEARCH):
        t0 = time.perf_counter()
        runs = client.search_runs(
            [exp], "metrics.acc > 0.5", order_by=["metrics.acc DESC"], max_results=100
        )
        times.append((time.perf_counter() - t0) * 1000)
        assert len(runs) == 100, len(runs)
    return statistics.median(times)


def client_cost():
    """The MLflow client's own time per 1000-metric log_batch, with its HTTP call
    replaced by an instant empty 200: the part of the client figure no server removes."""
    import requests
    import mlflow.store.tracking.rest_store as rest_store
    import mlflow.utils.rest_utils as rest_utils
    from mlflow import MlflowClient

    def instant(*_args, **_kwargs):
        r = requests.models.Response()
        r.status_code = 200
        r._content = b"{}"
        return r

    saved = rest_utils.http_request, rest_store.http_request
    rest_utils.http_request = rest_store.http_request = instant
    try:
        client = MlflowClient("http://127.0.0.1:9")
        batches = [batch_metrics(i) for i in range(N_BATCH)]
        t0 = time.perf_counter()
        for b in batches:
            client.log_batch("0" * 32, metrics=b)
        return (time.perf_counter() - t0) / N_BATCH * 1000
    finally:
        rest_utils.http_request, rest_store.http_request = saved


def main():
    if sys.argv[1] == "populate-mlflow":
        populate_mlflow(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    if sys.argv[1] == "populate-api":
        populate_api(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    results = {}
    for arg in sys.argv[2:]:
        name, uri = arg.split("=", 1)
        results[name] = measure(name, uri)
        print(f"{name}: {json.dumps(results[name])}", file=sys.stderr)
    names = list(results)
    rows = [
        ("create_run (runs/s)", "create_run", True),
        ("log_batch 1000 metrics, client (metrics/s)", "log_batch", True),
        ("log_batch 1000 metrics, wire (metrics/s)", "log_batch_wire", True),
        ("search_runs, populated experiment (median ms)", "search_ms", False),
        ("search_runs, small experiment (median ms)", "search_small_ms", False),
        ("search_runs, small experiment, wire (median ms)", "search_small_wire_ms", False),
    ]
    print("| workload | " + " | ".join(names) + " | ratio |")
    print("|---|" + "---|" * (len(names) + 1))
    for label, key, higher_better in rows:
        if any(key not in results[n] for n in names):
            continue
        vals = [results[n][key] for n in names]
        if len(vals) == 2 and vals[0] and vals[1]:
            ratio = vals[0] / vals[1] if higher_better else vals[1] / vals[0]
            ratio_s = f"{ratio:.1f}x"
        else:
            ratio_s = "-"
        print(f"| {label} | " + " | ".join(f"{v:,.1f}" for v in vals) + f" | {ratio_s} |")
    if "mlflow" in results and results["mlflow"]["log_batch"]:
        own = client_cost()
        mlflow_ms = 1000 * 1000 / results["mlflow"]["log_batch"]
        print(
            f"\nMlflowClient's own time per 1000-metric log_batch (no server): {own:.1f} ms "
            f"of mlflow's {mlflow_ms:.1f} ms; through the client no server can be more than "
            f"{mlflow_ms / own:.1f}x mlflow"
        )
    small = os.environ.get("SMALL_EXPERIMENT")
    if small and "mlflow" in results and len(names) == 2:
        own = search_client_cost(dict(a.split("=", 1) for a in sys.argv[2:])[names[0]], small)
        mlflow_ms = results["mlflow"]["search_small_ms"]
        print(
            f"\nMlflowClient's own time per search_runs of 100 runs ({names[0]}'s answer, "
            f"no server): {own:.1f} ms of mlflow's {mlflow_ms:.1f} ms; through the client no "
            f"server can be more than {mlflow_ms / own:.1f}x mlflow on this search"
        )
    big = os.environ.get("BIG_URI")
    if big:
        from mlflow import MlflowClient

        os.environ["MLFLOW_TRACKING_TOKEN"] = os.environ.get("QANAT_TOKEN", "")
        ms = search(MlflowClient(big), os.environ["BIG_EXPERIMENT"])
        print(f"\nsearch_runs over {os.environ.get('BIG_RUNS', '?')} runs ({names[0]}): median {ms:.1f} ms")


if __name__ == "__main__":
    main()
