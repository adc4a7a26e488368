"""Drives a live Qanat server through the real MLflow client: logged models, the model
registry (versions, aliases, stages), loading by alias, and dataset lineage.

Environment: MLFLOW_TRACKING_URI / MLFLOW_TRACKING_TOKEN for an editor of the default
project, QANAT_URL (server root), QANAT_MAINTAINER_TOKEN (a maintainer of that project,
who may move aliases and stages), QANAT_DATASET (a Qanat dataset of the default
project with a version 1).
"""

import json
import os

import mlflow
import numpy as np
import pandas as pd
import requests
from mlflow import MlflowClient
from mlflow.data.http_dataset_source import HTTPDatasetSource
from mlflow.entities import Dataset, DatasetInput, InputTag
from mlflow.exceptions import MlflowException
from runner import client_as, main, test
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

MODEL = "iris-clf"


def expect_error(code, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except MlflowException as e:
        assert e.error_code == code, f"expected {code}, got {e.error_code}: {e}"
        return e
    raise AssertionError(f"expected {code}, the call succeeded")


def maintainer():
    """A client with the maintainer's token."""
    return client_as("QANAT_MAINTAINER_TOKEN")


X, Y = load_iris(return_X_y=True)
STATE = {}


def train(c):
    return LogisticRegression(C=c, max_iter=500).fit(X, Y)


@test
def log_model_registers_a_version():
    mlflow.set_experiment("compat-registry")
    model = train(1.0)
    with mlflow.start_run(run_name="train-1") as run:
        mlflow.log_param("C", 1.0)
        mlflow.log_metric("acc", float(model.score(X, Y)))
        info = mlflow.sklearn.log_model(model, name="model", registered_model_name=MODEL)
    assert str(info.registered_model_version) == "1", info.registered_model_version
    assert info.model_id.startswith("m-"), info.model_id
    STATE.update(run_id=run.info.run_id, model_id=info.model_id, model=model)

    client = MlflowClient()
    lm = client.get_logged_model(info.model_id)
    assert lm.status.to_proto() == 2 or str(lm.status).endswith("READY"), lm.status
    assert lm.source_run_id == run.info.run_id
    assert lm.params.get("C") == "1.0", lm.params
    assert [m.key for m in lm.metrics] == ["acc"], lm.metrics
    # The server notes the registration (version as a number) and the client then
    # appends its own entry (version as text): MLflow's server and client do the same.
    tags = json.loads(lm.tags["mlflow.modelVersions"])
    assert tags == [{"name": MODEL, "version": 1}, {"name": MODEL, "version": "1"}], tags

    r = client.get_run(run.info.run_id)
    assert [o.model_id for o in r.outputs.model_outputs] == [info.model_id], r.outputs
    # log_model re-logs the run's metrics for the model: the run's history is unchanged.
    assert len(client.get_metric_history(run.info.run_id, "acc")) == 1

    v = client.get_model_version(MODEL, "1")
    assert v.status == "READY" and v.run_id == run.info.run_id, v
    assert v.source == f"models:/{info.model_id}", v.source
    found = mlflow.search_logged_models(
        experiment_ids=[run.info.experiment_id], filter_string="name = 'model'", output_format="list"
    )
    assert [m.model_id for m in found] == [info.model_id], found


@test
def aliases_need_a_maintainer_and_load_by_alias():
    expect_error(
        "PERMISSION_DENIED", MlflowClient().set_registered_model_alias, MODEL, "champion", "1"
    )
    with maintainer() as m:
        m.set_registered_model_alias(MODEL, "champion", "1")
    v = MlflowClient().get_model_version_by_alias(MODEL, "champion")
    assert v.version == "1", v
    assert MlflowClient().get_registered_model(MODEL).aliases == {"champion": "1"}

    loaded = mlflow.pyfunc.load_model(f"models:/{MODEL}@champion")
    want = STATE["model"].predict(X[:10])
    assert np.array_equal(np.asarray(loaded.predict(X[:10])), want)
    # The same model by version number and through the run.
    by_version = mlflow.sklearn.load_model(f"models:/{MODEL}/1")
    assert np.array_equal(by_version.predict(X[:10]), want)
    by_run = mlflow.pyfunc.load_model(f"runs:/{STATE['run_id']}/model")
    assert np.array_equal(np.asarray(by_run.predict(X[:10])), want)


@test
def stages_transition_and_archive():
    model = train(0.1)
    with mlflow.start_run(run_name="train-2"):
        info = mlflow.sklearn.log_model(model, name="model", registered_model_name=MODEL)
    assert str(info.registered_model_version) == "2", info.registered_model_version
    client = MlflowClient()
    expect_error(
        "PERMISSION_DENIED", client.transition_model_version_stage, MODEL, "1", "Production"
    )
    with maintainer() as m:
        m.transition_model_version_stage(MODEL, "1", "Production")
        v2 = m.transition_model_version_stage(
            MODEL, "2", "production", archive_existing_versions=True
        )
    assert v2.current_stage == "Production"
    assert client.get_model_version(MODEL, "1").current_stage == "Archived"
    latest = client.get_latest_versions(MODEL, stages=["Production"])
    assert [v.version for v in latest] == ["2"], latest
    with maintainer() as m:
        expect_error("INVALID_PARAMETER_VALUE", m.transition_model_version_stage, MODEL, "2", "Live")


@test
def search_tags_update_and_errors():
    client = MlflowClient()
    versions = client.search_model_versions(f"name = '{MODEL}'", order_by=["version_number ASC"])
    assert [v.version for v in versions] == ["1", "2"], versions
    assert [m.name for m in client.search_registered_models(filter_string="name LIKE 'iris%'")] == [
        MODEL
    ]
    client.set_registered_model_tag(MODEL, "team", "vision")
    client.set_model_version_tag(MODEL, "2", "validated", "yes")
    client.update_model_version(MODEL, "2", description="smaller C")
    v = client.get_model_version(MODEL, "2")
    assert v.tags == {"validated": "yes"} and v.description == "smaller C", v
    assert client.get_registered_model(MODEL).tags == {"team": "vision"}
    tagged = client.search_model_versions("tags.validated = 'yes'")
    assert [(x.name, x.version) for x in tagged] == [(MODEL, "2")], tagged
    uri = client.get_model_version_download_uri(MODEL, "2")
    assert uri.startswith("mlflow-artifacts:/") and "/models/m-" in uri, uri
    expect_error("RESOURCE_DOES_NOT_EXIST", client.get_model_version, MODEL, "99")
    expect_error("RESOURCE_DOES_NOT_EXIST", client.get_registered_model, "no-such-model")
    # A source outside Qanat's storage is refused (4xx, not a retried 5xx).
    client.create_registered_model("elsewhere")
    expect_error(
        "INVALID_PARAMETER_VALUE", client.create_model_version, "elsewhere", "s3://bucket/model"
    )


@test
def rename_and_delete_keep_aliases_consistent():
    client = MlflowClient()
    # Renaming carries the aliases along, so it is a maintainer's move.
    expect_error("PERMISSION_DENIED", client.rename_registered_model, MODEL, "taken-over")
    with maintainer() as m:
        m.rename_registered_model(MODEL, "iris-renamed")
        assert m.get_model_version_by_alias("iris-renamed", "champion").version == "1"
        m.rename_registered_model("iris-renamed", MODEL)
        m.set_registered_model_alias(MODEL, "challenger", "2")
        m.delete_model_version(MODEL, "2")
        expect_error("RESOURCE_DOES_NOT_EXIST", m.get_model_version_by_alias, MODEL, "challenger")
        m.delete_registered_model_alias(MODEL, "champion")
        expect_error("RESOURCE_DOES_NOT_EXIST", m.get_model_version_by_alias, MODEL, "champion")
        m.set_registered_model_alias(MODEL, "champion", "1")
    # Version numbers are never reused.
    model = train(0.5)
    with mlflow.start_run(run_name="train-3"):
        info = mlflow.sklearn.log_model(model, name="model", registered_model_name=MODEL)
    assert str(info.registered_model_version) == "3", info.registered_model_version


@test
def pandas_datasets_with_a_qanat_source_link_runs_to_qanat():
    ds_name = os.environ["QANAT_DATASET"]
    mlflow.set_experiment("compat-pandas")
    frame = pd.DataFrame({"amount": [1.0, 2.5], "label": ["ok", "fraud"]})
    source = HTTPDatasetSource(f"qanat://default/{ds_name}@1")
    data = mlflow.data.from_pandas(frame, source=source, name=ds_name)
    with mlflow.start_run() as run:
        mlflow.log_input(data, context="training")
    url = f"{os.environ['QANAT_URL']}/api/v1/projects/default/lineage"
    headers = {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    resp = requests.get(url, params={"ref": f"run:{run.info.run_id}"}, headers=headers, timeout=10)
    assert resp.status_code == 200, resp.text
    edges = {(e["child"], e["parent"], e["relation"]) for e in resp.json()["edges"]}
    assert (f"run:{run.info.run_id}", f"dataset:{ds_name}@1", "trained_on") in edges, edges


@test
def dataset_inputs_link_runs_models_and_qanat_datasets():
    client = MlflowClient()
    ds_name = os.environ["QANAT_DATASET"]
    exp = mlflow.set_experiment("compat-lineage").experiment_id
    run = client.create_run(exp)
    source = json.dumps({"uri": f"qanat://default/{ds_name}@1"})
    dataset = Dataset(name=ds_name, digest="abc123", source_type="qanat", source=source)
    client.log_inputs(
        run.info.run_id,
        datasets=[DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "training")])],
    )
    r = client.get_run(run.info.run_id)
    inputs = r.inputs.dataset_inputs
    assert [d.dataset.name for d in inputs] == [ds_name], inputs
    assert inputs[0].tags[0].value == "training"
    # An unknown Qanat dataset version is a clear 4xx.
    missing = Dataset(name="x", digest="d", source_type="qanat", source='{"uri": "qanat://default/nope@1"}')
    expect_error("RESOURCE_DOES_NOT_EXIST", client.log_inputs, run.info.run_id, [DatasetInput(missing)])

    with mlflow.start_run(run_id=run.info.run_id):
        info = mlflow.sklearn.log_model(train(1.0), name="lineage-model", registered_model_name="lineage-clf")
    url = f"{os.environ['QANAT_URL']}/api/v1/projects/default/lineage"
    headers = {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    resp = requests.get(url, params={"ref": "model:lineage-clf@1"}, headers=headers, timeout=10)
    assert resp.status_code == 200, resp.text
    edges = {(e["child"], e["parent"], e["relation"]) for e in resp.json()["edges"]}
    run_node = f"run:{run.info.run_id}"
    assert ("model:lineage-clf@1", f"logged_model:{info.model_id}", "registers") in edges, edges
    assert ("model:lineage-clf@1", run_node, "output_of") in edges, edges
    assert (run_node, f"dataset:{ds_name}@1", "trained_on") in edges, edges



@test
def versions_keep_the_run_id_they_are_given_and_errors_use_mlflows_words():
    # MLflow's own tests register versions of runs that do not exist; MLflow stores
    # the id as given (Qanat links lineage only when the run is its own).
    client = MlflowClient()
    client.create_registered_model("compat-any-run")
    mv = client.create_model_version("compat-any-run", "runs:/run_id/model", "run_id_1")
    assert mv.run_id == "run_id_1", mv
    e = expect_error("RESOURCE_DOES_NOT_EXIST", client.get_run, "run_id_1")
    assert "Run with id=run_id_1 not found" in e.message, e.message
    e = expect_error("RESOURCE_DOES_NOT_EXIST", client.get_registered_model, "compat-nope")
    assert "Registered Model with name=compat-nope not found" in e.message, e.message
    e = expect_error("RESOURCE_DOES_NOT_EXIST", client.get_model_version, "compat-any-run", "9")
    assert "Model Version (name=compat-any-run, version=9) not found" in e.message, e.message
    e = expect_error("RESOURCE_ALREADY_EXISTS", client.create_registered_model, "compat-any-run")
    assert "Registered Model (name=compat-any-run) already exists" in e.message, e.message
    run = client.create_run("0")
    e = expect_error("RESOURCE_DOES_NOT_EXIST", client.delete_tag, run.info.run_id, "fakeTag")
    assert "No tag with name: fakeTag" in e.message, e.message
    # The version the API reports is the MLflow release it matches.
    version = requests.get(f"{os.environ['QANAT_URL']}/version", timeout=10).text
    assert version == "3.12.0", version



@test
def model_version_search_lists_the_most_recently_updated_first():
    import time

    client = MlflowClient()
    for name in ("compat-order-a", "compat-order-b"):
        client.create_registered_model(name)
    made = []
    for name in ("compat-order-a", "compat-order-b", "compat-order-a"):
        time.sleep(0.005)
        made.append(client.create_model_version(name, "runs:/run_id/model", "run_id"))
    mine = lambda: [
        (v.name, v.version)
        for v in client.search_model_versions("name LIKE 'compat-order-%'")
    ]
    assert mine() == [("compat-order-a", "2"), ("compat-order-b", "1"), ("compat-order-a", "1")], mine()
    time.sleep(0.005)
    client.update_model_version("compat-order-a", "1", description="touched")
    assert mine()[0] == ("compat-order-a", "1"), mine()



@test
def a_version_copies_into_another_model_and_bad_versions_use_mlflows_words():
    client = MlflowClient()
    client.create_registered_model("compat-copy-src")
    client.create_model_version("compat-copy-src", "runs:/run_id/model", "run_id")
    copied = client.copy_model_version("models:/compat-copy-src/1", "compat-copy-dst")
    assert (copied.name, copied.version) == ("compat-copy-dst", "1"), copied
    e = expect_error("INVALID_PARAMETER_VALUE", client.get_model_version, "compat-copy-src", "x")
    assert "Parameter 'version' must be an integer, got 'x'." in e.message, e.message


@test
def logged_models_keep_their_metrics_and_registrations():
    from mlflow.entities import Metric

    client = MlflowClient()
    exp = client.create_experiment("compat-logged-model-links")
    run = client.create_run(exp)
    model = client.create_logged_model(exp)
    client.log_metric(run.info.run_id, "auc", 0.5, timestamp=123456789, step=1,
                      dataset_name="val", dataset_digest="d", model_id=model.model_id)
    got = client.get_logged_model(model.model_id)
    assert got.metrics == [Metric(key="auc", value=0.5, timestamp=123456789, step=1,
                                  model_id=model.model_id, dataset_name="val",
                                  dataset_digest="d", run_id=run.info.run_id)], got.metrics
    client.create_registered_model("compat-linked")
    for _ in range(2):
        client.create_model_version("compat-linked", model.artifact_location, model_id=model.model_id)
    tags = client.get_logged_model(model.model_id).tags
    assert tags["mlflow.modelVersions"] == (
        '[{"name": "compat-linked", "version": 1}, {"name": "compat-linked", "version": 2}]'
    ), tags


@test
def sources_that_climb_are_refused_even_when_encoded():
    client = MlflowClient()
    client.create_registered_model("compat-climb")
    run = client.create_run("0")
    for source in (
        "mlflow-artifacts://host:9000/models/..%2f..%2fartifacts",
        "mlflow-artifacts:/models/%252e%252e/x",
        "mlflow-artifacts://host:9000/models/artifact%00",
        f"runs:/{run.info.run_id}/..%2f..%2fother",
    ):
        e = expect_error("INVALID_PARAMETER_VALUE", client.create_model_version, "compat-climb", source, run.info.run_id)
        assert "Invalid model version source" in e.message, (source, e.message)
    ok = client.create_model_version("compat-climb", "mlflow-artifacts:/0/models/artifact/..../", run.info.run_id)
    assert ok.version == "1"


@test
def the_ui_lists_and_reads_a_logged_models_files():
    url = os.environ["QANAT_URL"]
    headers = {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    base = f"{url}/ajax-api/2.0/mlflow/logged-models/{STATE['model_id']}/artifacts"
    listed = requests.get(f"{base}/directories", headers=headers, timeout=10)
    assert listed.status_code == 200, listed.text
    paths = [f["path"] for f in listed.json()["files"]]
    assert "MLmodel" in paths, paths
    got = requests.get(f"{base}/files", params={"artifact_file_path": "MLmodel"}, headers=headers, timeout=10)
    assert got.status_code == 200 and STATE["model_id"] in got.text, got.text
    bad = requests.get(f"{base}/files", params={"artifact_file_path": "../../x"}, headers=headers, timeout=10)
    assert bad.status_code == 400 and bad.json()["message"] == "Invalid path", bad.text


@test
def stage_moves_and_deletions_touch_the_registered_model():
    import time

    client = MlflowClient()
    client.create_registered_model("compat-touch")
    run = client.create_run("0")
    for _ in range(2):
        client.create_model_version("compat-touch", f"runs:/{run.info.run_id}/m", run.info.run_id, tags={"k": "v"})
    # The latest versions a search shows are whole versions, tags included.
    latest = [rm.latest_versions for rm in client.search_registered_models() if rm.name == "compat-touch"]
    assert latest == [[client.get_model_version("compat-touch", "2")]], latest
    with maintainer() as m:
        time.sleep(0.01)
        before = int(time.time() * 1000)
        m.transition_model_version_stage("compat-touch", "1", "Staging")
        assert client.get_registered_model("compat-touch").last_updated_timestamp >= before
        time.sleep(0.01)
        before = int(time.time() * 1000)
        m.delete_model_version("compat-touch", "2")
        assert client.get_registered_model("compat-touch").last_updated_timestamp >= before


if __name__ == "__main__":
    main()
