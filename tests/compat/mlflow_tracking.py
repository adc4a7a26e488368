"""Drives a live Qanat server through the real MLflow client (tracking).

Environment: MLFLOW_TRACKING_URI / MLFLOW_TRACKING_TOKEN for an editor of the default
project, QANAT_URL (server root), QANAT_VIEWER_TOKEN (a viewer of that project),
QANAT_OTHER_PROJECT (a second project the editor may write to), QANAT_ADMIN_TOKEN (a
global admin).
"""

import math
import os
import time

import mlflow
import requests
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from runner import as_token, main, test


def error_code(exc):
    return getattr(exc, "error_code", None)


def expect_error(code, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except MlflowException as e:
        assert error_code(e) == code, f"expected {code}, got {error_code(e)}: {e}"
        return e
    raise AssertionError(f"expected {code}, the call succeeded")


@test
def default_experiment_exists():
    exp = MlflowClient().get_experiment("0")
    assert exp.name == "Default", exp
    assert exp.lifecycle_stage == "active"


@test
def a_run_logs_params_metrics_tags_and_reads_back():
    exp_id = mlflow.set_experiment("compat-basic").experiment_id
    assert MlflowClient().get_experiment_by_name("compat-basic").experiment_id == exp_id
    with mlflow.start_run(run_name="first") as run:
        mlflow.log_param("alpha", 0.5)
        mlflow.log_params({"layers": 3, "optimizer": "adam"})
        for step in range(5):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
        mlflow.log_metric("weird", float("nan"))
        mlflow.log_metric("big", float("inf"))
        mlflow.log_metrics({"acc": 0.9, "f1": 0.8})
        mlflow.set_tag("team", "fraud")
        run_id = run.info.run_id
    got = MlflowClient().get_run(run_id)
    assert got.info.status == "FINISHED", got.info
    assert got.info.run_name == "first"
    assert got.info.end_time is not None
    assert got.data.params == {"alpha": "0.5", "layers": "3", "optimizer": "adam"}, got.data.params
    assert got.data.metrics["loss"] == 0.2, got.data.metrics
    assert math.isnan(got.data.metrics["weird"])
    assert got.data.metrics["big"] == float("inf")
    assert got.data.metrics["acc"] == 0.9
    assert got.data.tags["team"] == "fraud"
    assert got.data.tags["mlflow.runName"] == "first"
    history = MlflowClient().get_metric_history(run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(s, 1.0 / (s + 1)) for s in range(5)], history


@test
def log_batch_is_atomic_and_limited():
    client = MlflowClient()
    exp_id = client.create_experiment("compat-batch")
    run = client.create_run(exp_id)
    ts = int(time.time() * 1000)
    client.log_batch(
        run.info.run_id,
        metrics=[Metric("m", float(i), ts, i) for i in range(1000)],
        params=[Param(f"p{i}", str(i)) for i in range(100)],
        tags=[RunTag("t", "v")],
    )
    assert len(client.get_metric_history(run.info.run_id, "m")) == 1000
    # The client splits big batches itself; a raw request over the limit is a 400
    # (not a 5xx the client would retry for minutes), and stores nothing.
    resp = requests.post(
        os.environ["QANAT_URL"] + "/api/2.0/mlflow/runs/log-batch",
        headers={"Authorization": "Bearer " + os.environ["MLFLOW_TRACKING_TOKEN"]},
        json={
            "run_id": run.info.run_id,
            "metrics": [{"key": "x", "value": 1.0, "timestamp": ts, "step": i} for i in range(1001)],
        },
        timeout=30,
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["error_code"] == "INVALID_PARAMETER_VALUE", resp.text
    assert client.get_metric_history(run.info.run_id, "x") == []
    # Params are immutable.
    client.log_param(run.info.run_id, "lr", "0.1")
    client.log_param(run.info.run_id, "lr", "0.1")
    expect_error("INVALID_PARAMETER_VALUE", client.log_param, run.info.run_id, "lr", "0.2")
    params = client.get_run(run.info.run_id).data.params
    assert params["lr"] == "0.1" and params["p99"] == "99" and len(params) == 101, params


@test
def delete_and_restore_runs_and_experiments():
    client = MlflowClient()
    exp_id = client.create_experiment("compat-lifecycle", tags={"owner": "ml"})
    assert client.get_experiment(exp_id).tags["owner"] == "ml"
    run = client.create_run(exp_id)
    client.delete_run(run.info.run_id)
    assert client.get_run(run.info.run_id).info.lifecycle_stage == "deleted"
    assert client.search_runs([exp_id]) == []
    assert len(client.search_runs([exp_id], run_view_type=3)) == 1
    client.restore_run(run.info.run_id)
    assert [r.info.run_id for r in client.search_runs([exp_id])] == [run.info.run_id]
    # Deleting an experiment (which gc later purges) takes a project admin.
    expect_error("PERMISSION_DENIED", client.delete_experiment, exp_id)
    with as_token("QANAT_ADMIN_TOKEN"):
        client.delete_experiment(exp_id)
    assert client.get_experiment(exp_id).lifecycle_stage == "deleted"
    names = [e.name for e in client.search_experiments()]
    assert "compat-lifecycle" not in names, names
    with as_token("QANAT_ADMIN_TOKEN"):
        client.restore_experiment(exp_id)
    assert client.get_experiment(exp_id).lifecycle_stage == "active"
    client.rename_experiment(exp_id, "compat-renamed")
    assert client.get_experiment_by_name("compat-renamed").experiment_id == exp_id
    expect_error("RESOURCE_ALREADY_EXISTS", client.create_experiment, "compat-renamed")
    expect_error("RESOURCE_DOES_NOT_EXIST", client.get_experiment, "987654")


@test
def search_pages_through_runs():
    client = MlflowClient()
    exp_id = client.create_experiment("compat-pages")
    ids = {client.create_run(exp_id, start_time=1000 + i).info.run_id for i in range(7)}
    page = client.search_runs([exp_id], max_results=3)
    seen = [r.info.run_id for r in page]
    while page.token:
        page = client.search_runs([exp_id], max_results=3, page_token=page.token)
        seen += [r.info.run_id for r in page]
    assert len(seen) == 7 and set(seen) == ids, seen


@test
def search_runs_filters_and_orders_like_mlflow():
    exp_id = mlflow.set_experiment("compat-search").experiment_id
    for i, (model, rmse) in enumerate([("tree", 0.9), ("linear", 0.4), ("tree", 0.2), ("forest", 0.6)]):
        with mlflow.start_run(run_name=f"cand-{i}"):
            mlflow.log_param("model", model)
            mlflow.log_metric("rmse", rmse)
            if model == "tree":
                mlflow.set_tag("family", "trees")
    with mlflow.start_run(run_name="no-metric"):
        mlflow.log_param("model", "none")
    df = mlflow.search_runs(
        experiment_ids=[exp_id],
        filter_string="params.model = 'tree' and metrics.rmse < 0.5",
    )
    assert list(df["tags.mlflow.runName"]) == ["cand-2"], df
    runs = MlflowClient().search_runs([exp_id], order_by=["metrics.rmse ASC"])
    assert [r.info.run_name for r in runs] == ["cand-2", "cand-1", "cand-3", "cand-0", "no-metric"], [
        r.info.run_name for r in runs
    ]
    runs = MlflowClient().search_runs([exp_id], "tags.family = 'trees'", order_by=["metrics.rmse DESC"])
    assert [r.info.run_name for r in runs] == ["cand-0", "cand-2"]
    runs = MlflowClient().search_runs([exp_id], "attributes.run_name LIKE 'cand-%' and attributes.status = 'FINISHED'")
    assert len(runs) == 4
    runs = MlflowClient().search_runs([exp_id], "tags.family IS NULL and params.model != 'none'")
    assert sorted(r.info.run_name for r in runs) == ["cand-1", "cand-3"]
    expect_error("INVALID_PARAMETER_VALUE", MlflowClient().search_runs, [exp_id], "metrics.rmse < 'low'")


@test
def artifacts_round_trip_through_encrypted_storage():
    import tempfile

    mlflow.set_experiment("compat-artifacts")
    work = tempfile.mkdtemp()
    with open(os.path.join(work, "notes.txt"), "w") as f:
        f.write("hello artifacts\n")
    os.makedirs(os.path.join(work, "plots", "deep"))
    with open(os.path.join(work, "plots", "a.bin"), "wb") as f:
        f.write(os.urandom(3 * 1024 * 1024 + 17))
    with open(os.path.join(work, "plots", "deep", "b.txt"), "w") as f:
        f.write("b")
    with mlflow.start_run() as run:
        mlflow.log_artifact(os.path.join(work, "notes.txt"))
        mlflow.log_artifacts(os.path.join(work, "plots"), artifact_path="plots")
        mlflow.log_dict({"k": [1, 2]}, "config/params.json")
    # Listed by artifact URI (MlflowClient.list_artifacts(run_id) also searches logged
    # models, which are not served yet).
    uri = run.info.artifact_uri
    top = {(a.path, a.is_dir) for a in mlflow.artifacts.list_artifacts(artifact_uri=uri)}
    # (the client names entries relative to the URI's parent)
    assert top == {("artifacts/notes.txt", False), ("artifacts/plots", True), ("artifacts/config", True)}, top
    sizes = {a.path: a.file_size for a in mlflow.artifacts.list_artifacts(artifact_uri=uri + "/plots")}
    assert sizes["plots/a.bin"] == 3 * 1024 * 1024 + 17, sizes
    listed = requests.get(
        os.environ["QANAT_URL"] + "/api/2.0/mlflow/artifacts/list",
        params={"run_id": run.info.run_id, "path": "plots"},
        headers={"Authorization": "Bearer " + os.environ["MLFLOW_TRACKING_TOKEN"]},
        timeout=10,
    ).json()
    assert listed["root_uri"] == uri, listed
    assert {f["path"] for f in listed["files"]} == {"plots/a.bin", "plots/deep"}, listed
    out = tempfile.mkdtemp()
    # By artifact URI: `runs:/` URIs also consult logged models, which are not served yet.
    local = mlflow.artifacts.download_artifacts(artifact_uri=run.info.artifact_uri + "/plots", dst_path=out)
    with open(os.path.join(local, "a.bin"), "rb") as f, open(os.path.join(work, "plots", "a.bin"), "rb") as g:
        assert f.read() == g.read()
    with open(os.path.join(local, "deep", "b.txt")) as f:
        assert f.read() == "b"
    assert mlflow.artifacts.load_dict(run.info.artifact_uri + "/config/params.json") == {"k": [1, 2]}


@test
def artifact_paths_cannot_escape():
    base = os.environ["QANAT_URL"] + "/api/2.0/mlflow-artifacts/artifacts/"
    headers = {"Authorization": "Bearer " + os.environ["MLFLOW_TRACKING_TOKEN"]}
    for path in ["0/../../etc/passwd", "0/%2e%2e/%2e%2e/x", "0/a/%2E%2E/%2E%2E/%2E%2E/x", "0//x", "0/a\\..\\b"]:
        resp = requests.put(base + path, data=b"x", headers=headers, timeout=10)
        assert resp.status_code in (400, 404), (path, resp.status_code, resp.text)
        assert "error_code" in resp.json(), resp.text
    resp = requests.put(base + "424242/x", data=b"x", headers=headers, timeout=10)
    assert resp.status_code == 404, "a path must start with an experiment of the project"


@test
def unauthenticated_and_forbidden_calls_get_mlflow_errors():
    root = os.environ["QANAT_URL"]
    token = os.environ["MLFLOW_TRACKING_TOKEN"]
    try:
        del os.environ["MLFLOW_TRACKING_TOKEN"]
        expect_error("UNAUTHENTICATED", MlflowClient(root).get_experiment, "0")
        os.environ["MLFLOW_TRACKING_TOKEN"] = os.environ["QANAT_VIEWER_TOKEN"]
        viewer = MlflowClient(root)
        assert viewer.get_experiment("0").name == "Default"
        expect_error("PERMISSION_DENIED", viewer.create_experiment, "viewer-cannot")
    finally:
        os.environ["MLFLOW_TRACKING_TOKEN"] = token


@test
def a_project_uri_keeps_experiments_apart():
    other = MlflowClient(os.environ["QANAT_URL"] + "/mlflow/" + os.environ["QANAT_OTHER_PROJECT"])
    exp_id = other.create_experiment("only-in-other")
    assert other.get_experiment(exp_id).name == "only-in-other"
    # The client turns RESOURCE_DOES_NOT_EXIST into None here.
    assert MlflowClient().get_experiment_by_name("only-in-other") is None
    names = [e.name for e in MlflowClient().search_experiments(view_type=3)]
    assert "only-in-other" not in names, names



@test
def experiment_like_is_case_sensitive_and_ilike_is_not():
    client = MlflowClient()
    client.create_experiment("CompatCaseExp")
    names = lambda f: [e.name for e in client.search_experiments(filter_string=f)]
    assert "CompatCaseExp" not in names("name LIKE 'compatcase%'")
    assert "CompatCaseExp" in names("name LIKE 'CompatCase%'")
    assert "CompatCaseExp" in names("name ILIKE 'compatcase%'")


@test
def a_runs_whole_artifact_tree_downloads_with_dot():
    import tempfile

    client = MlflowClient()
    run = client.create_run("0")
    with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as dst:
        os.makedirs(os.path.join(src, "sub"))
        with open(os.path.join(src, "sub", "a.txt"), "w") as f:
            f.write("alpha")
        client.log_artifacts(run.info.run_id, src)
        got = client.download_artifacts(run.info.run_id, ".", dst)
        with open(os.path.join(got, "sub", "a.txt")) as f:
            assert f.read() == "alpha"



@test
def the_ui_routes_answer_under_ajax_api():
    url = os.environ["QANAT_URL"]
    headers = {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    for base in (url, f"{url}/mlflow/default"):
        r = requests.get(
            f"{base}/ajax-api/2.0/mlflow/experiments/get-by-name",
            params={"experiment_name": "Default"},
            headers=headers,
            timeout=10,
        )
        assert r.status_code == 200 and r.json()["experiment"]["experiment_id"] == "0", r.text



@test
def bad_fields_are_refused_in_mlflows_words():
    url = os.environ["QANAT_URL"]
    headers = {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    for endpoint, body, words in [
        ("runs/delete", {"run_id": 31}, "Invalid value 31 for parameter 'run_id' supplied"),
        ("registered-models/create", {"name": 123}, "Invalid value 123 for parameter 'name' supplied"),
        ("runs/log-batch", {"run_id": "x", "metrics": "foo"}, 'Invalid value "foo" for parameter \'metrics\' supplied'),
        ("runs/delete", {}, "Missing value for required parameter 'run_id'"),
    ]:
        r = requests.post(f"{url}/api/2.0/mlflow/{endpoint}", json=body, headers=headers, timeout=10)
        assert r.status_code == 400 and words in r.json()["message"], (endpoint, r.text)


def ui(method, path, **kwargs):
    """A raw call to an MLflow UI route of the default project, as the editor."""
    headers = {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    return requests.request(method, f"{os.environ['QANAT_URL']}{path}", headers=headers, timeout=10, **kwargs)


@test
def metric_histories_of_many_runs_serve_the_charts():
    c = MlflowClient()
    exp = c.create_experiment("compat-bulk-history")
    r1, r2 = c.create_run(exp).info.run_id, c.create_run(exp).info.run_id
    for step in range(10):
        c.log_metric(r1, "loss", 1.0 / (step + 1), timestamp=1000 + step, step=step)
    for step in range(20):
        c.log_metric(r2, "loss", 2.0, timestamp=1000 + step, step=step)
    bulk = ui("GET", "/ajax-api/2.0/mlflow/metrics/get-history-bulk", params={"run_id": [r1, r2], "metric_key": "loss"})
    assert bulk.status_code == 200, bulk.text
    got = bulk.json()["metrics"]
    assert len(got) == 30 and {m["run_id"] for m in got} == {r1, r2}
    assert [m["step"] for m in got if m["run_id"] == r1] == list(range(10))
    # Sampled: at most max_results steps spread over the range, plus each run's ends.
    sampled = ui("GET", "/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval",
                 params={"run_ids": [r1, r2], "metric_key": "loss", "max_results": 5})
    assert sampled.status_code == 200, sampled.text
    steps = {}
    for m in sampled.json()["metrics"]:
        steps.setdefault(m["run_id"], []).append(m["step"])
    assert steps[r1] == [0, 4, 8, 9], steps
    assert steps[r2] == [0, 4, 8, 9, 12, 16, 19], steps
    for params, words in [
        ({"metric_key": "loss"}, "must specify at least one run_id"),
        ({"run_id": [f"r{i}" for i in range(101)], "metric_key": "loss"}, "cannot specify more than 100"),
        ({"run_id": [r1]}, "must specify a metric_key"),
    ]:
        r = ui("GET", "/ajax-api/2.0/mlflow/metrics/get-history-bulk", params=params)
        assert r.status_code == 400 and words in r.json()["message"], r.text
    r = ui("GET", "/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval",
           params={"run_ids": [r1], "metric_key": "loss", "start_step": 3})
    assert r.status_code == 400 and "both must be specified" in r.json()["message"], r.text


@test
def dataset_summaries_list_what_an_experiments_runs_read():
    from mlflow.entities import Dataset, DatasetInput, InputTag

    c = MlflowClient()
    exp = c.create_experiment("compat-search-datasets")
    run = c.create_run(exp).info.run_id
    ds = Dataset(name="train-set", digest="d1", source_type="local", source="s")
    c.log_inputs(run, [DatasetInput(dataset=ds, tags=[InputTag(key="mlflow.data.context", value="training")])])
    r = ui("POST", "/ajax-api/2.0/mlflow/experiments/search-datasets", json={"experiment_ids": [exp]})
    assert r.status_code == 200, r.text
    assert r.json()["dataset_summaries"] == [
        {"experiment_id": exp, "name": "train-set", "digest": "d1", "context": "training"}
    ]
    r = ui("POST", "/ajax-api/2.0/mlflow/experiments/search-datasets", json={})
    assert r.status_code == 400 and "at least one experiment_id" in r.json()["message"], r.text


@test
def the_ui_uploads_and_downloads_run_artifacts_and_refuses_climbing_paths():
    c = MlflowClient()
    run = c.create_run(c.create_experiment("compat-upload")).info.run_id
    up = ui("POST", "/ajax-api/2.0/mlflow/upload-artifact", params={"run_uuid": run, "path": "notes/a.txt"}, data="hello world")
    assert up.status_code == 200, up.text
    got = ui("GET", "/get-artifact", params={"run_uuid": run, "path": "notes/a.txt"})
    assert got.status_code == 200 and got.text == "hello world", got.text
    assert [f.path for f in c.list_artifacts(run, "notes")] == ["notes/a.txt"]
    for method, path, params in [
        ("POST", "/ajax-api/2.0/mlflow/upload-artifact", {"run_uuid": run, "path": "../x.txt"}),
        ("GET", "/get-artifact", {"run_id": run, "path": "../path"}),
        ("GET", "/get-artifact", {"run_id": run, "path": "..%2fpath"}),
        ("GET", "/api/2.0/mlflow/artifacts/list", {"run_id": run, "path": "../path"}),
    ]:
        r = ui(method, path, params=params, data="x")
        assert r.status_code == 400 and r.json()["message"] == "Invalid path", (path, params, r.text)
    r = ui("POST", "/ajax-api/2.0/mlflow/upload-artifact", params={"run_uuid": run, "path": "b.txt"})
    assert r.status_code == 400 and "Request must specify data." in r.json()["message"], r.text


@test
def experiment_search_filters_on_tags_and_orders():
    c = MlflowClient()
    c.create_experiment("compat-xs-a", tags={"xs": "value"})
    c.create_experiment("compat-xs-b", tags={"xs": "vaLue"})
    c.create_experiment("compat-xs-c")
    names = lambda f, **kw: [e.name for e in c.search_experiments(filter_string=f, **kw)]
    assert names("tag.xs = 'value'") == ["compat-xs-a"]
    assert names("tags.xs != 'value'") == ["compat-xs-b"]
    assert names("tag.xs ILIKE '%alu%'") == ["compat-xs-b", "compat-xs-a"]
    assert names("name LIKE 'compat-xs-%'", order_by=["name ASC"]) == ["compat-xs-a", "compat-xs-b", "compat-xs-c"]
    assert names("name LIKE 'compat-xs-%'", order_by=["name DESC"]) == ["compat-xs-c", "compat-xs-b", "compat-xs-a"]


@test
def refusals_use_mlflows_words_for_runs_and_limits():
    c = MlflowClient()
    exp = c.create_experiment("compat-words")
    run = c.create_run(exp).info.run_id
    c.set_tag(run, "t", "v")
    c.delete_run(run)
    e = expect_error("INVALID_PARAMETER_VALUE", c.delete_tag, run, "t")
    assert f"The run {run} must be in the 'active' state" in e.message, e.message
    e = expect_error("INVALID_PARAMETER_VALUE", c.search_runs, [exp], max_results=123456789)
    assert "Invalid value 123456789 for parameter 'max_results' supplied" in e.message, e.message
    headers = {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    live = c.create_run(exp).info.run_id
    r = requests.post(
        f"{os.environ['QANAT_URL']}/api/2.0/mlflow/runs/log-batch",
        json={"run_id": live, "metrics": [{"key": "m", "value": 1}]},
        headers=headers,
        timeout=10,
    )
    assert r.status_code == 400, r.text
    assert "Missing value for required parameter 'metrics[0].timestamp'." in r.json()["message"], r.text
    # A logged model keeps a source run id it is given, as MLflow does.
    m = c.create_logged_model(exp, source_run_id="123")
    assert c.get_logged_model(m.model_id).source_run_id == "123"


if __name__ == "__main__":
    main()
