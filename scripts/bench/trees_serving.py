"""The models and request bodies of trees_vs_mlserver.sh, fitted on the breast cancer
table and logged with the mlflow client into Qanat (MLFLOW_TRACKING_URI):
  xgb  an XGBoost classifier (300 trees, depth 6), `mlflow.xgboost`, registered `xgb`
  rf   a scikit-learn random forest (100 trees, depth 10), `mlflow.sklearn` (pickled
       with cloudpickle, MLflow's default), registered `rf`
For each, OUT/<model>/ gets its MLflow directory (`model`, for `mlflow models serve`),
the file MLServer's runtime loads (`model.json`, `model.joblib`), and 200 one-row
request bodies per protocol:
  qanat.jsonl     Open Inference Protocol, one [1, 30] FP32 tensor (input-0), asking
                  for predict_proba
  python.jsonl    the same tensor, all outputs (the Python runtime answers `predict`,
                  as the model's pyfunc does)
  mlserver.jsonl  the same tensor, asking MLServer's runtime for predict_proba
  mlflow.jsonl    `mlflow models serve`'s {"inputs": [[...]]}
usage: trees_serving.py OUT"""
import json
import os
import random
import sys

import joblib
import mlflow
import numpy as np
import xgboost as xgb
from mlflow.models import infer_signature
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier

out = sys.argv[1]
X, y = load_breast_cancer(return_X_y=True)
X = X.astype(np.float32)
mlflow.set_experiment("trees-bench")

xgb_clf = xgb.XGBClassifier(n_estimators=300, max_depth=6, learning_rate=0.1).fit(X, y)
rf = RandomForestClassifier(n_estimators=100, max_depth=10, random_state=0).fit(X, y)
for name, model in [("xgb", xgb_clf), ("rf", rf)]:
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    sig = infer_signature(X, model.predict(X))
    if name == "xgb":
        mlflow.xgboost.log_model(model, name="model", registered_model_name=name, signature=sig)
        mlflow.xgboost.save_model(model, f"{d}/model", signature=sig)
        model.save_model(f"{d}/model.json")
    else:
        mlflow.sklearn.log_model(model, name="model", registered_model_name=name, signature=sig,
                                 serialization_format="cloudpickle")
        mlflow.sklearn.save_model(model, f"{d}/model", signature=sig,
                                  serialization_format="cloudpickle")
        joblib.dump(model, f"{d}/model.joblib")
    random.seed(7)
    files = {k: open(f"{d}/{k}.jsonl", "w") for k in ("qanat", "python", "mlserver", "mlflow")}
    for _ in range(200):
        row = [float(v) for v in X[random.randrange(len(X))]]
        tensor = {"name": "input-0", "datatype": "FP32", "shape": [1, 30], "data": row}
        proba = [{"name": "predict_proba"}]
        files["qanat"].write(json.dumps({"inputs": [tensor], "outputs": proba}) + "\n")
        files["python"].write(json.dumps({"inputs": [tensor]}) + "\n")
        files["mlserver"].write(json.dumps({"inputs": [tensor], "outputs": proba}) + "\n")
        files["mlflow"].write(json.dumps({"inputs": [row]}) + "\n")
    for f in files.values():
        f.close()
    print(f"{name}: the library's predict_proba of row 0:", model.predict_proba(X[:1])[0].tolist())
