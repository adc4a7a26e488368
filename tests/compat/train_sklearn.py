"""Qanat's native trainer against scikit-learn on the same rows: a `train` job on the
shipped tables logs which rows it fitted on and held out (split.json); scikit-learn fits
the same model family on the same training rows, and both are scored on the same
validation rows. Goal (issue 15): within 1 accuracy point for classification, within 2%
RMSE for regression. Scikit-learn models are the standard pipelines (StandardScaler +
the estimator, defaults); Qanat picks its epoch by the validation loss."""

import json
import os
import tempfile

import numpy as np
import pandas as pd
from mlflow import MlflowClient
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.metrics import accuracy_score, mean_squared_error
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from runner import main, run_job, test

DATA = os.environ["QANAT_EXAMPLE_DATA"]


def train(spec):
    j = run_job(spec)
    run = MlflowClient().get_run(j["run_id"])
    with tempfile.TemporaryDirectory() as d:
        path = MlflowClient().download_artifacts(j["run_id"], "split.json", d)
        split = json.load(open(path))
    return run.data.metrics, split


def same_rows(spec, file, estimator):
    """Runs the train job `spec` on `file` and fits `estimator` on the rows it trained
    on: (the job's metrics, the validation targets, scikit-learn's predictions of them)."""
    m, split = train(spec)
    df = pd.read_csv(os.path.join(DATA, file))
    target = spec["target"]
    X, y = df.drop(columns=[target]).to_numpy(), df[target].to_numpy()
    tr, va = split["train"], split["validation"]
    return m, y[va], estimator.fit(X[tr], y[tr]).predict(X[va])


def compare(what, ours, theirs):
    print(f"     {what}: qanat {ours:.4f}, scikit-learn {theirs:.4f}")


def as_accurate(spec, estimator):
    m, want, got = same_rows(spec, "breast_cancer.csv", make_pipeline(StandardScaler(), estimator))
    theirs = accuracy_score(want, got)
    compare("validation accuracy", m["best_val_accuracy"], theirs)
    assert m["best_val_accuracy"] >= theirs - 0.01, (m["best_val_accuracy"], theirs)


@test
def logistic_regression_is_as_accurate_as_scikit_learns():
    as_accurate({"name": "cancer-logistic", "kind": "train", "inputs": ["dataset:cancer@1"],
                 "target": "diagnosis", "model": "logistic", "epochs": 100, "seed": 1},
                LogisticRegression(max_iter=5000))


@test
def an_mlp_is_as_accurate_as_scikit_learns():
    as_accurate({"name": "cancer-mlp", "kind": "train", "inputs": ["dataset:cancer@1"],
                 "target": "diagnosis", "model": "mlp", "hidden": [100], "epochs": 200, "seed": 1},
                MLPClassifier(hidden_layer_sizes=(100,), max_iter=2000, random_state=1))


@test
def linear_regression_is_within_two_percent_of_scikit_learns_rmse():
    m, want, got = same_rows({"name": "diabetes-linear", "kind": "train", "inputs": ["dataset:diabetes@1"],
                              "target": "progression", "model": "linear", "epochs": 300, "learning_rate": 0.05,
                              "seed": 1}, "diabetes.csv", LinearRegression())
    theirs = float(np.sqrt(mean_squared_error(want, got)))
    compare("validation RMSE", m["best_val_rmse"], theirs)
    assert m["best_val_rmse"] <= theirs * 1.02, (m["best_val_rmse"], theirs)


if __name__ == "__main__":
    main()
