"""The model and request bodies of trees_vs_mlserver.sh: an XGBoost classifier (300
trees, depth 6) fitted on the breast cancer table, logged with the mlflow client into
Qanat (MLFLOW_TRACKING_URI, registered as `xgb`), its MLflow directory and model file
written to OUT for the peers, and 200 one-row request bodies per protocol:
  qanat.jsonl     Open Inference Protocol, one [1, 30] FP32 tensor (input-0)
  mlserver.jsonl  the same tensor, for MLServer's XGBoost runtime
  mlflow.jsonl    `mlflow models serve`'s {"inputs": [[...]]}
usage: trees_serving.py OUT"""
import json
import random
import sys

import mlflow
import numpy as np
import xgboost as xgb
from mlflow.models import infer_signature
from sklearn.datasets import load_breast_cancer

out = sys.argv[1]
X, y = load_breast_cancer(return_X_y=True)
X = X.astype(np.float32)
clf = xgb.XGBClassifier(n_estimators=300, max_depth=6, learning_rate=0.1).fit(X, y)
sig = infer_signature(X, clf.predict(X))
mlflow.set_experiment("trees-bench")
mlflow.xgboost.log_model(clf, name="model", registered_model_name="xgb", signature=sig)
mlflow.xgboost.save_model(clf, f"{out}/model", signature=sig)
clf.save_model(f"{out}/model.json")
random.seed(7)
with open(f"{out}/qanat.jsonl", "w") as q, open(f"{out}/mlserver.jsonl", "w") as m, \
        open(f"{out}/mlflow.jsonl", "w") as f:
    for _ in range(200):
        row = [float(v) for v in X[random.randrange(len(X))]]
        tensor = {"name": "input-0", "datatype": "FP32", "shape": [1, 30], "data": row}
        q.write(json.dumps({"inputs": [tensor], "outputs": [{"name": "predict_proba"}]}) + "\n")
        m.write(json.dumps({"inputs": [tensor]}) + "\n")
        f.write(json.dumps({"inputs": [row]}) + "\n")
print("library:", clf.predict_proba(X[:1])[0].tolist())
