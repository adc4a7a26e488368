"""Logs a small PyTorch network with `mlflow.pytorch` into QANAT_OTHER_PROJECT, for
flavors.py (whose venv has no torch) to deploy and call through Triton's client; run
from the PyTorch venv. Writes the rows, torch's own answers on them and the registered
version to the .npz file named.

Environment: QANAT_URL, MLFLOW_TRACKING_TOKEN (an editor of QANAT_OTHER_PROJECT)."""

import os
import sys

import mlflow
import numpy as np
import torch
from mlflow.models import infer_signature

project = os.environ.get("QANAT_OTHER_PROJECT", "other")
mlflow.set_tracking_uri(f"{os.environ['QANAT_URL']}/mlflow/{project}")
mlflow.set_experiment("flavors")
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3),
                          torch.nn.Softmax(dim=1)).eval()
X = np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32)
with torch.no_grad():
    y = net(torch.from_numpy(X)).numpy()
# MLflow 3's default format is `pt2` (torch.export), traced on the input example.
info = mlflow.pytorch.log_model(net, name="model", registered_model_name="torch-mlp",
                                signature=infer_signature(X, y), input_example=X[:4])
np.savez(sys.argv[1], X=X, y=y, version=np.array(str(info.registered_model_version)),
         torch=np.array(torch.__version__))
