"""MLflow's model flavors served by Qanat (issue 46): models made with the real
XGBoost and LightGBM, logged with the `mlflow` client into a project other than
`default`, deployed, and called through Triton's client over REST (base path
/oip/<project>) and gRPC (a `qanat-project` metadata entry). Answers must equal the
library's own `predict` (and `predict_proba`) on the same rows to 1e-6. scikit-learn
pickles of the common estimators are read as data (never run) and served natively too.
Other models (a scikit-learn estimator not read natively, a custom `pyfunc`, a pickled
LightGBM wrapper) are served by the Python runtime, in an environment built from their
requirements, in the sandbox; a worker that exits or hangs is replaced. A version no runtime here serves is
refused at deploy with the reason.

Environment: QANAT_URL, MLFLOW_TRACKING_TOKEN (an editor of QANAT_OTHER_PROJECT)."""

import json
import os
import time
import urllib.error
import urllib.request

import lightgbm as lgb
import mlflow
import numpy as np
import pandas as pd
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import xgboost as xgb
from mlflow.models import infer_signature
from sklearn.compose import make_column_transformer
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris
from sklearn.ensemble import GradientBoostingRegressor, HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from runner import main, test

BASE = os.environ["QANAT_URL"]
URL = BASE.removeprefix("http://")
TOKEN = os.environ["MLFLOW_TRACKING_TOKEN"]
PROJECT = os.environ.get("QANAT_OTHER_PROJECT", "other")
mlflow.set_tracking_uri(f"{BASE}/mlflow/{PROJECT}")
mlflow.set_experiment("flavors")


def headers():
    return {"Authorization": f"Bearer {TOKEN}"}


def api(method, path, body=None):
    """Qanat's REST API: (status, JSON body)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{BASE}{path}", data=data, method=method,
                                 headers={**headers(), "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def deploy(name, model, version):
    status, body = api("POST", f"/api/v1/projects/{PROJECT}/deployments", {
        "name": name, "spec": {"model": model, "targets": [{"version": version, "weight": 100}]}})
    assert status == 201, (status, body)
    # A Python model's first load builds its environment (minutes, once per set of
    # requirements): deploy accepts it past a budget and loads it in the background.
    deadline = time.time() + 900
    while True:
        try:
            status, body = api("GET", f"/api/v1/projects/{PROJECT}/deployments/{name}")
        except (TimeoutError, urllib.error.URLError):
            status, body = 0, None
        if status == 200 and body["targets"][0].get("runtime"):
            return body
        assert time.time() < deadline, (status, body)
        time.sleep(2)


def registered(model_info):
    return str(model_info.registered_model_version)


def call(name, X, outputs):
    """The deployment's answers over REST (binary tensors) and gRPC: each output, as
    numpy, from both (they must be equal)."""
    c = httpclient.InferenceServerClient(url=f"{URL}/oip/{PROJECT}")
    meta = c.get_model_metadata(name, headers=headers())
    g = grpcclient.InferenceServerClient(url=URL)
    scoped = {"authorization": f"Bearer {TOKEN}", "qanat-project": PROJECT}
    assert g.get_model_metadata(name, headers=scoped, as_json=True)["platform"] == meta["platform"]

    def inputs(module, **kw):
        out = []
        if len(meta["inputs"]) == 1:
            spec = meta["inputs"][0]
            x = np.ascontiguousarray(X, dtype=np.float64 if spec["datatype"] == "FP64" else np.float32)
            t = module.InferInput(spec["name"], list(x.shape), spec["datatype"])
            t.set_data_from_numpy(x, **kw)
            return [t]
        for i, spec in enumerate(meta["inputs"]):
            x = np.ascontiguousarray(X[:, i:i + 1], dtype=np.float64)
            t = module.InferInput(spec["name"], list(x.shape), spec["datatype"])
            t.set_data_from_numpy(x, **kw)
            out.append(t)
        return out

    rest = c.infer(name, inputs(httpclient, binary_data=True),
                   outputs=[httpclient.InferRequestedOutput(o, binary_data=True) for o in outputs],
                   headers=headers())
    rpc = g.infer(name, inputs(grpcclient), outputs=[grpcclient.InferRequestedOutput(o) for o in outputs],
                  headers=scoped)
    answers = {}
    for o in outputs:
        a, b = rest.as_numpy(o), rpc.as_numpy(o)
        assert a.shape == b.shape and np.array_equal(a, b), (o, a[:3], b[:3])
        answers[o] = a
    return meta, answers


def equal(got, want, what):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    err = np.abs(got - want) / np.maximum(1.0, np.abs(want))
    assert float(err.max()) <= 1e-6, (what, float(err.max()))


@test
def an_xgboost_classifier_answers_labels_and_probabilities_as_its_own_predict():
    data = load_breast_cancer(as_frame=True)
    X, y = data.data, data.target
    clf = xgb.XGBClassifier(n_estimators=80, max_depth=4, learning_rate=0.2).fit(X, y)
    info = mlflow.xgboost.log_model(clf, name="model", registered_model_name="xgb-cancer",
                                    signature=infer_signature(X, clf.predict(X)))
    status = deploy("xgb-cancer", "xgb-cancer", registered(info))
    assert "xgboost XGBClassifier, 80 trees" in status["targets"][0]["runtime"], status
    meta, got = call("xgb-cancer", X.to_numpy(), ["predict", "predict_proba"])
    assert meta["platform"] == "qanat_trees" and len(meta["inputs"]) == 30, meta
    assert [i["name"] for i in meta["inputs"]] == list(X.columns)
    assert np.array_equal(got["predict"], clf.predict(X)), "labels differ"
    equal(got["predict_proba"], clf.predict_proba(X), "predict_proba")
    print(f"     XGBClassifier ({len(X)} rows, 30 columns): labels equal, probabilities within 1e-6")


@test
def an_xgboost_booster_regression_answers_as_booster_predict():
    X, y = load_diabetes(return_X_y=True)
    booster = xgb.train({"objective": "reg:squarederror", "max_depth": 5, "eta": 0.1},
                        xgb.DMatrix(X, label=y), 120)
    info = mlflow.xgboost.log_model(booster, name="model", registered_model_name="xgb-diabetes",
                                    signature=infer_signature(X, booster.predict(xgb.DMatrix(X))))
    deploy("xgb-diabetes", "xgb-diabetes", registered(info))
    meta, got = call("xgb-diabetes", X, ["predict"])
    assert meta["inputs"][0]["shape"] == [-1, 10], meta
    equal(got["predict"], booster.predict(xgb.DMatrix(X)), "predict")
    print(f"     XGBoost booster, squared error ({len(X)} rows): within 1e-6")


@test
def a_lightgbm_multiclass_booster_answers_as_its_own_predict():
    X, y = load_iris(return_X_y=True)
    booster = lgb.train({"objective": "multiclass", "num_class": 3, "verbose": -1,
                         "min_data_in_leaf": 5}, lgb.Dataset(X, label=y), 40)
    info = mlflow.lightgbm.log_model(booster, name="model", registered_model_name="lgb-iris",
                                     signature=infer_signature(X, booster.predict(X)))
    status = deploy("lgb-iris", "lgb-iris", registered(info))
    assert "lightgbm" in status["targets"][0]["runtime"], status
    meta, got = call("lgb-iris", X, ["predict"])
    assert meta["outputs"][0]["shape"] == [-1, 3], meta
    equal(got["predict"], booster.predict(X), "predict")
    print(f"     LightGBM booster, multiclass ({len(X)} rows): within 1e-6")


@test
def a_lightgbm_booster_with_missing_values_answers_as_its_own_predict():
    data = load_breast_cancer(as_frame=True)
    X = data.data.copy()
    rng = np.random.default_rng(3)
    X = X.mask(rng.random(X.shape) < 0.1)
    booster = lgb.train({"objective": "binary", "verbose": -1}, lgb.Dataset(X, label=data.target), 60)
    info = mlflow.lightgbm.log_model(booster, name="model", registered_model_name="lgb-cancer",
                                     signature=infer_signature(X, booster.predict(X)))
    deploy("lgb-cancer", "lgb-cancer", registered(info))
    meta, got = call("lgb-cancer", X.to_numpy(), ["predict"])
    equal(got["predict"], booster.predict(X), "predict")
    print(f"     LightGBM booster, binary, 10% missing ({len(X)} rows): within 1e-6")


@test
def a_wrapped_lightgbm_classifier_falls_back_to_the_python_runtime():
    X, y = load_iris(return_X_y=True)
    clf = lgb.LGBMClassifier(n_estimators=5, verbose=-1).fit(X, y)
    info = mlflow.lightgbm.log_model(clf, name="model", registered_model_name="lgb-wrapped",
                                     signature=infer_signature(X, clf.predict(X)))
    status = deploy("lgb-wrapped", "lgb-wrapped", registered(info))
    assert status["targets"][0]["runtime"].startswith("python (mlflow.lightgbm"), status
    meta, got = call("lgb-wrapped", X, ["predict"])
    assert meta["platform"] == "qanat_python", meta
    assert np.array_equal(got["predict"], clf.predict(X)), "labels differ"
    print(f"     a skops LGBMClassifier: on the Python runtime ({status['targets'][0]['runtime']}), labels equal")


@test
def scikit_learn_pipelines_are_read_natively_never_run_and_answer_as_their_own_predict():
    data = load_breast_cancer(as_frame=True)
    X, y = data.data, data.target
    pipe = make_pipeline(StandardScaler(), RandomForestClassifier(n_estimators=50, random_state=0)).fit(X, y)
    # Pickled, as most models teams already have are (MLflow's default; skops refuses
    # tree models unless their types are listed as trusted). Qanat reads the pickle as
    # data: nothing in it runs.
    info = mlflow.sklearn.log_model(pipe, name="model", registered_model_name="sk-forest",
                                    serialization_format="cloudpickle",
                                    signature=infer_signature(X, pipe.predict(X)))
    status = deploy("sk-forest", "sk-forest", registered(info))
    runtime = status["targets"][0]["runtime"]
    assert runtime == "qanat sklearn (Pipeline(StandardScaler → RandomForestClassifier), 50 trees, cpu)", status
    meta, got = call("sk-forest", X.to_numpy(), ["predict", "predict_proba"])
    assert meta["platform"] == "qanat_sklearn", meta
    assert [i["name"] for i in meta["inputs"]] == list(X.columns)
    assert np.array_equal(got["predict"], pipe.predict(X)), "labels differ"
    equal(got["predict_proba"], pipe.predict_proba(X), "predict_proba")

    Xi, yi = load_iris(return_X_y=True)
    Xi = Xi.copy()
    Xi[::7, 2] = np.nan
    names = np.array(["setosa", "versicolor", "virginica"])[yi]
    logit = make_pipeline(SimpleImputer(), StandardScaler(), LogisticRegression(max_iter=500)).fit(Xi, names)
    info = mlflow.sklearn.log_model(logit, name="model", registered_model_name="sk-logit",
                                    serialization_format="cloudpickle",
                                    signature=infer_signature(Xi, logit.predict(Xi)))
    status = deploy("sk-logit", "sk-logit", registered(info))
    assert status["targets"][0]["runtime"].startswith("qanat sklearn (Pipeline(SimpleImputer"), status
    _, got = call("sk-logit", Xi, ["predict", "predict_proba"])
    assert [v.decode() for v in got["predict"]] == logit.predict(Xi).tolist(), "labels differ"
    equal(got["predict_proba"], logit.predict_proba(Xi), "predict_proba")

    Xd, yd = load_diabetes(return_X_y=True)
    gbr = GradientBoostingRegressor(n_estimators=60, max_depth=3, random_state=0).fit(Xd, yd)
    info = mlflow.sklearn.log_model(gbr, name="model", registered_model_name="sk-gbr",
                                    serialization_format="cloudpickle",
                                    signature=infer_signature(Xd, gbr.predict(Xd)))
    status = deploy("sk-gbr", "sk-gbr", registered(info))
    assert "GradientBoostingRegressor, 60 trees" in status["targets"][0]["runtime"], status
    _, got = call("sk-gbr", Xd, ["predict"])
    equal(got["predict"].reshape(-1), gbr.predict(Xd), "predict")
    print(f"     scaler + random forest, imputer + scaler + logistic (string labels, missing values), "
          f"gradient boosting: natively, within 1e-6")


@test
def a_scikit_learn_model_not_read_natively_is_served_by_the_python_runtime():
    X, y = load_breast_cancer(return_X_y=True)
    hgb = HistGradientBoostingClassifier(max_iter=20).fit(X, y)
    # Pickled: MLflow's skops refuses HistGradientBoosting's types unless trusted.
    info = mlflow.sklearn.log_model(hgb, name="model", registered_model_name="sk-hgb",
                                    serialization_format="cloudpickle",
                                    signature=infer_signature(X, hgb.predict(X)))
    status = deploy("sk-hgb", "sk-hgb", registered(info))
    runtime = status["targets"][0]["runtime"]
    assert runtime.startswith("python (mlflow.sklearn") and "sandboxed" in runtime, status
    _, got = call("sk-hgb", X, ["predict"])
    assert np.array_equal(got["predict"], hgb.predict(X)), "labels differ"
    print(f"     a HistGradientBoostingClassifier: {runtime}, labels equal")


@test
def an_onnx_model_with_its_weights_in_external_data_is_served():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    W = rng.normal(size=(16, 64)).astype(np.float32)
    b = rng.normal(size=64).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])],
        initializer=[numpy_helper.from_array(W, "W"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    # mlflow.onnx.log_model's default: tensors over 1 KiB in a file beside the graph.
    info = mlflow.onnx.log_model(model, name="model", registered_model_name="onnx-external",
                                 save_as_external_data=True)
    local = mlflow.artifacts.download_artifacts(info.model_uri)
    assert len(os.listdir(local)) > 4, os.listdir(local)  # the graph and its weights' file
    deploy("onnx-external", "onnx-external", registered(info))
    X = rng.normal(size=(32, 16)).astype(np.float32)
    meta, got = call("onnx-external", X, ["y"])
    assert meta["platform"] == "onnxruntime_onnx", meta
    want = X.astype(np.float64) @ W.astype(np.float64) + b
    err = np.abs(got["y"] - want) / np.maximum(1.0, np.abs(want))
    assert float(err.max()) <= 1e-5, float(err.max())
    print(f"     an ONNX graph whose weights mlflow saved as external data: served, within 1e-5 of x·W+b")


class Affine(mlflow.pyfunc.PythonModel):
    """x @ W + b; a row starting -999 ends the process, -777 hangs it, -555 allocates
    3 GiB (over the suite's 2 GiB limit per worker) — to test that a lost worker is
    replaced and its request answered."""

    def predict(self, context, model_input, params=None):
        import os
        import time
        x = np.asarray(model_input, dtype=np.float32)
        if x[0, 0] == -999:
            os._exit(3)
        if x[0, 0] == -777:
            time.sleep(3600)
        if x[0, 0] == -555:
            hog = np.ones(3 << 27)  # 3 GiB of float64, every page written
            time.sleep(60)
            return hog[:1]
        w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
        return x @ w + 1


def infer_json(name, rows):
    """One REST request with JSON tensors: (status, body)."""
    x = np.asarray(rows, dtype=np.float32)
    return api("POST", f"/oip/{PROJECT}/v2/models/{name}/infer", {
        "inputs": [{"name": "input-0", "shape": list(x.shape), "datatype": "FP32",
                    "data": x.flatten().tolist()}]})


@test
def a_custom_pyfunc_answers_and_a_worker_that_dies_or_hangs_is_replaced():
    X = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    model = Affine()
    info = mlflow.pyfunc.log_model(name="model", python_model=model, registered_model_name="affine",
                                   signature=infer_signature(X, model.predict(None, X)))
    deploy("affine", "affine", registered(info))
    meta, got = call("affine", X, ["predict"])
    assert meta["inputs"][0]["shape"] == [-1, 4] and meta["outputs"][0]["shape"] == [-1, 3], meta
    equal(got["predict"], model.predict(None, X), "predict")
    for poison, what in [(-999, "ended while predicting"), (-777, "did not answer within"),
                         (-555, "memory limit of 2048 MiB")]:
        rows = X[:2].copy()
        rows[0, 0] = poison
        status, body = infer_json("affine", rows)
        assert status == 503 and what in body["error"], (status, body)
        status, body = infer_json("affine", X[:3])
        assert status == 200, (status, body)
        equal(np.asarray(body["outputs"][0]["data"]).reshape(3, 3), model.predict(None, X[:3]), "after")
    print("     a custom PythonModel: within 1e-6; a worker that exits, hangs or goes over its "
          "memory limit is replaced, its request answered 503 saying so, the next one answered")


@test
def a_pytorch_network_answers_as_torch_does_on_the_python_runtime():
    # torch is not in this venv: the network is made and logged from the PyTorch venv.
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "torch.npz")
        subprocess.run([os.environ["TORCH_PYTHON"], os.path.join(os.path.dirname(__file__), "flavors_torch.py"),
                        out], check=True)
        made = np.load(out)
        X, want, version = made["X"], made["y"], str(made["version"])
        torch_version = str(made["torch"])
    status = deploy("torch-mlp", "torch-mlp", version)
    runtime = status["targets"][0]["runtime"]
    assert runtime.startswith("python (mlflow.pytorch") and "sandboxed" in runtime, status
    meta, got = call("torch-mlp", X, ["predict"])
    assert meta["platform"] == "qanat_python", meta
    assert meta["inputs"][0]["datatype"] == "FP32" and meta["outputs"][0]["shape"] == [-1, 3], meta
    equal(got["predict"], want, "predict")
    print(f"     a PyTorch network (torch {torch_version}, mlflow.pytorch): {runtime}, within 1e-6")


class Escape(mlflow.pyfunc.PythonModel):
    """A hostile model: each row answers whether it could read the server's master
    key, see its database or objects, reach the server over the network, and write
    the system's files."""

    def __init__(self, home, port):
        self.home, self.port = home, port

    def predict(self, context, model_input, params=None):
        import os
        import socket

        def could(f):
            try:
                f()
                return 1.0
            except Exception:  # noqa: BLE001 - any refusal is what is measured
                return 0.0

        def connect():
            socket.create_connection(("127.0.0.1", self.port), timeout=2).close()

        row = [could(lambda: open(os.path.join(self.home, "master.key"), "rb").read(1)),
               float(any(n in os.listdir(self.home) for n in ("master.key", "qanat.db", "objects"))
                     if os.path.isdir(self.home) else 0.0),
               could(connect),
               could(lambda: open("/etc/qanat-escape", "w").write("x"))]
        return np.asarray([row] * len(model_input), dtype=np.float64)


@test
def a_pyfunc_model_cannot_reach_the_server_s_key_files_or_network():
    home = os.environ["QANAT_HOME"]
    port = int(BASE.rsplit(":", 1)[1])
    assert os.path.exists(os.path.join(home, "master.key"))
    model = Escape(home, port)
    X = np.zeros((2, 1), dtype=np.float32)
    info = mlflow.pyfunc.log_model(name="model", python_model=model, registered_model_name="escape",
                                   signature=infer_signature(X, np.zeros((2, 4))))
    deploy("escape", "escape", registered(info))
    _, got = call("escape", X, ["predict"])
    assert got["predict"].tolist() == [[0.0, 0.0, 0.0, 0.0]] * 2, got["predict"]
    print("     a hostile pyfunc: no master key, no database or objects, no network, no system writes")


def homes():
    """A table with a text column: a city and a room count, whether the home sold."""
    rng = np.random.default_rng(5)
    cities = np.array(["Dubai", "Abu Dhabi", "Sharjah", "Al Ain"])
    X = pd.DataFrame({"city": cities[rng.integers(0, 4, 200)], "rooms": rng.integers(1, 6, 200).astype(float)})
    y = ((X["city"] == "Dubai") | (X["rooms"] > 3)).astype(int)
    return X, y


@test
def a_pipeline_taking_a_string_column_is_served_by_the_python_runtime():
    X, y = homes()
    pipe = make_pipeline(make_column_transformer((OneHotEncoder(handle_unknown="ignore"), ["city"]),
                                                 remainder="passthrough"),
                         LogisticRegression()).fit(X, y)
    info = mlflow.sklearn.log_model(pipe, name="model", registered_model_name="sk-strings",
                                    serialization_format="cloudpickle",
                                    signature=infer_signature(X, pipe.predict(X)))
    status = deploy("sk-strings", "sk-strings", registered(info))
    runtime = status["targets"][0]["runtime"]
    assert runtime.startswith("python (mlflow.sklearn"), status
    c = httpclient.InferenceServerClient(url=f"{URL}/oip/{PROJECT}")
    meta = c.get_model_metadata("sk-strings", headers=headers())
    assert [(i["name"], i["datatype"]) for i in meta["inputs"]] == [("city", "BYTES"), ("rooms", "FP64")], meta
    g = grpcclient.InferenceServerClient(url=URL)
    scoped = {"authorization": f"Bearer {TOKEN}", "qanat-project": PROJECT}
    got = []
    for module, kw, h in [(httpclient, {"binary_data": True}, headers()), (httpclient, {"binary_data": False}, headers()),
                          (grpcclient, {}, scoped)]:
        city = module.InferInput("city", [len(X), 1], "BYTES")
        city.set_data_from_numpy(X[["city"]].to_numpy(dtype=object), **kw)
        rooms = module.InferInput("rooms", [len(X), 1], "FP64")
        rooms.set_data_from_numpy(X[["rooms"]].to_numpy(dtype=np.float64), **kw)
        client = g if module is grpcclient else c
        got.append(client.infer("sk-strings", [city, rooms], headers=h).as_numpy("predict").reshape(-1))
    for g_ in got:
        assert np.array_equal(g_, pipe.predict(X)), "labels differ"
    # An unseen city is ignored by the encoder, as scikit-learn does.
    status, body = api("POST", f"/oip/{PROJECT}/v2/models/sk-strings/infer", {"inputs": [
        {"name": "city", "shape": [1, 1], "datatype": "BYTES", "data": ["Fujairah"]},
        {"name": "rooms", "shape": [1, 1], "datatype": "FP64", "data": [5.0]}]})
    assert status == 200, (status, body)
    want = pipe.predict(pd.DataFrame({"city": ["Fujairah"], "rooms": [5.0]}))
    assert body["outputs"][0]["data"] == want.tolist(), (body, want)
    print(f"     one-hot city + rooms + logistic regression: {runtime}; BYTES and FP64 inputs over REST "
          f"(binary and JSON) and gRPC, labels equal")


@test
def a_pipeline_answering_text_labels_through_python_answers_bytes():
    X, y = homes()
    labels = np.where(y == 1, "sold", "unsold")
    pipe = make_pipeline(make_column_transformer((OneHotEncoder(), ["city"]), remainder="passthrough"),
                         LogisticRegression()).fit(X, labels)
    info = mlflow.sklearn.log_model(pipe, name="model", registered_model_name="sk-text-labels",
                                    serialization_format="cloudpickle",
                                    signature=infer_signature(X, pipe.predict(X)))
    deploy("sk-text-labels", "sk-text-labels", registered(info))
    c = httpclient.InferenceServerClient(url=f"{URL}/oip/{PROJECT}")
    meta = c.get_model_metadata("sk-text-labels", headers=headers())
    assert meta["outputs"][0]["datatype"] == "BYTES", meta
    g = grpcclient.InferenceServerClient(url=URL)
    scoped = {"authorization": f"Bearer {TOKEN}", "qanat-project": PROJECT}
    for module, kw, h in [(httpclient, {"binary_data": True}, headers()), (grpcclient, {}, scoped)]:
        city = module.InferInput("city", [len(X), 1], "BYTES")
        city.set_data_from_numpy(X[["city"]].to_numpy(dtype=object), **kw)
        rooms = module.InferInput("rooms", [len(X), 1], "FP64")
        rooms.set_data_from_numpy(X[["rooms"]].to_numpy(dtype=np.float64), **kw)
        client = g if module is grpcclient else c
        got = client.infer("sk-text-labels", [city, rooms], headers=h).as_numpy("predict").reshape(-1)
        assert [v.decode() for v in got] == pipe.predict(X).tolist(), "labels differ"
    print("     a pipeline answering text labels on the Python runtime: BYTES out over REST and gRPC, "
          "labels equal")


class Length(mlflow.pyfunc.PythonModel):
    """The length of each photo's bytes."""

    def predict(self, context, model_input, params=None):
        return np.asarray([len(b) for b in model_input["photo"]], dtype=np.float64)


@test
def a_version_no_runtime_serves_is_refused_at_deploy_with_the_reason():
    X = pd.DataFrame({"photo": [b"\x89PNG", b"GIF89a"]})
    info = mlflow.pyfunc.log_model(name="model", python_model=Length(), registered_model_name="py-binary",
                                   signature=infer_signature(X, Length().predict(None, X)))
    status, body = api("POST", f"/api/v1/projects/{PROJECT}/deployments", {
        "name": "py-binary", "spec": {"model": "py-binary",
                                      "targets": [{"version": registered(info), "weight": 100}]}})
    assert status == 400, (status, body)
    assert "'photo'" in body["message"] and "binary" in body["message"], body
    print(f"     a pyfunc taking a binary column: {status}, naming the column and its type")


def infer_fp64(name, rows):
    """One REST request with an FP64 JSON tensor (as a float64 numpy signature says)."""
    x = np.asarray(rows, dtype=np.float64)
    return api("POST", f"/oip/{PROJECT}/v2/models/{name}/infer", {
        "inputs": [{"name": "input-0", "shape": list(x.shape), "datatype": "FP64",
                    "data": x.flatten().tolist()}]})


def wait_loaded(name, weights):
    """The deployment's status once its targets are `weights` ({version: weight, a
    shadow's weight 0}) and each is healthy and says what serves it."""
    deadline = time.time() + 900
    while True:
        try:
            status, body = api("GET", f"/api/v1/projects/{PROJECT}/deployments/{name}")
        except (TimeoutError, urllib.error.URLError):
            status, body = 0, None
        if status == 200:
            targets = body["targets"]
            if ({t.get("version"): t["weight"] for t in targets} == weights
                    and all(t.get("runtime") and t["healthy"] for t in targets)):
                return body
        assert time.time() < deadline, (status, body)
        time.sleep(2)


def log_records(name, enough):
    """The deployment's inference log once `enough(records)` holds (the log's writer
    flushes in the background)."""
    deadline = time.time() + 60
    while True:
        status, body = api("GET", f"/api/v1/projects/{PROJECT}/deployments/{name}/log?limit=1000")
        assert status == 200, (status, body)
        if enough(body["records"]):
            return body["records"]
        assert time.time() < deadline, [(r["role"], r["version"]) for r in body["records"]]
        time.sleep(0.5)


@test
def a_native_and_a_python_version_shadow_and_canary_each_other_and_both_are_logged():
    """The routing, shadow comparison and inference log are the same for every runtime:
    one deployment whose versions run natively and on the Python runtime."""
    X, y = load_iris(return_X_y=True)
    wrapped = lgb.LGBMClassifier(n_estimators=5, verbose=-1).fit(X, y)
    v_python = registered(mlflow.lightgbm.log_model(
        wrapped, name="model", registered_model_name="iris-mixed",
        signature=infer_signature(X, wrapped.predict(X))))
    booster = lgb.train({"objective": "multiclass", "num_class": 3, "verbose": -1},
                        lgb.Dataset(X, label=y), 20)
    v_native = registered(mlflow.lightgbm.log_model(
        booster, name="model", registered_model_name="iris-mixed",
        signature=infer_signature(X, booster.predict(X))))

    # The native version answers; the Python one gets a copy of every request.
    status, body = api("POST", f"/api/v1/projects/{PROJECT}/deployments", {
        "name": "iris-mixed", "spec": {"model": "iris-mixed", "targets": [
            {"version": v_native, "weight": 100}, {"version": v_python, "shadow": True}]}})
    assert status == 201, (status, body)
    loaded = wait_loaded("iris-mixed", {v_native: 100, v_python: 0})
    runtimes = {t["version"]: t["runtime"] for t in loaded["targets"]}
    assert runtimes[v_native].startswith("qanat trees") and runtimes[v_python].startswith("python"), runtimes
    for i in range(20):
        status, body = infer_fp64("iris-mixed", X[i:i + 1])
        assert status == 200 and body["model_version"] == v_native, (status, body)
        equal(np.asarray(body["outputs"][0]["data"]), booster.predict(X[i:i + 1])[0], "answer")

    def count(records, role, version):
        return sum(1 for r in records if r["role"] == role and r["version"] == version)
    log_records("iris-mixed", lambda rs: count(rs, "answer", v_native) >= 20
                and count(rs, "shadow", v_python) >= 20)

    # A canary: both answer, each answer logged under the version that gave it.
    status, body = api("PUT", f"/api/v1/projects/{PROJECT}/deployments/iris-mixed", {
        "model": "iris-mixed", "targets": [{"version": v_native, "weight": 50},
                                           {"version": v_python, "weight": 50}]})
    assert status == 200, (status, body)
    wait_loaded("iris-mixed", {v_native: 50, v_python: 50})
    answered = {v_native: 0, v_python: 0}
    for i in range(60):
        status, body = infer_fp64("iris-mixed", X[i:i + 1])
        assert status == 200, (status, body)
        answered[body["model_version"]] += 1
        want = booster.predict(X[i:i + 1])[0] if body["model_version"] == v_native else wrapped.predict(X[i:i + 1])
        equal(np.asarray(body["outputs"][0]["data"]), want, f"version {body['model_version']}")
    assert all(answered.values()), answered
    log_records("iris-mixed", lambda rs: count(rs, "answer", v_python) >= answered[v_python]
                and count(rs, "answer", v_native) >= 20 + answered[v_native])
    print(f"     a native LightGBM version with a Python-runtime shadow: 20 answers, 20 shadow copies "
          f"logged; as a 50/50 canary: {answered[v_native]} native and {answered[v_python]} Python "
          "answers, each equal to its own library and logged under its version")


if __name__ == "__main__":
    main()
