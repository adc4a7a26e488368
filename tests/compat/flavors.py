"""MLflow's model flavors served by Qanat (issue 46): models made with the real
XGBoost and LightGBM, logged with the `mlflow` client into a project other than
`default`, deployed, and called through Triton's client over REST (base path
/oip/<project>) and gRPC (a `qanat-project` metadata entry). Answers must equal the
library's own `predict` (and `predict_proba`) on the same rows to 1e-6. A version no
runtime here serves is refused at deploy with the reason.

Environment: QANAT_URL, MLFLOW_TRACKING_TOKEN (an editor of QANAT_OTHER_PROJECT)."""

import json
import os
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
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris

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
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def deploy(name, model, version):
    status, body = api("POST", f"/api/v1/projects/{PROJECT}/deployments", {
        "name": name, "spec": {"model": model, "targets": [{"version": version, "weight": 100}]}})
    assert status == 201, (status, body)
    status, body = api("GET", f"/api/v1/projects/{PROJECT}/deployments/{name}")
    assert status == 200, body
    return body


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
def a_version_no_runtime_serves_is_refused_at_deploy_with_the_reason():
    X, y = load_iris(return_X_y=True)
    clf = lgb.LGBMClassifier(n_estimators=5, verbose=-1).fit(X, y)
    info = mlflow.lightgbm.log_model(clf, name="model", registered_model_name="lgb-wrapped")
    status, body = api("POST", f"/api/v1/projects/{PROJECT}/deployments", {
        "name": "lgb-wrapped", "spec": {"model": "lgb-wrapped",
                                        "targets": [{"version": registered(info), "weight": 100}]}})
    assert status == 400, (status, body)
    assert "booster_" in body["message"], body
    print(f"     a pickled/skops LGBMClassifier: {status}, naming the way to log it")


if __name__ == "__main__":
    main()
