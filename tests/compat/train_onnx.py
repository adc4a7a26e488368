"""The native trainer's ONNX export, run by onnxruntime from PyPI: a `train` job
stores model/model.onnx with its preprocessing in the graph, plus an input example (raw
validation rows) and what the trained model outputs for them; onnxruntime, fed the raw
columns, must give those outputs within 1e-5 (issue 15). Covered: a binary MLP, a
multi-class MLP over numeric columns with missing values and a text column, and a
regression model. The directory also carries an MLmodel file: the `mlflow` client loads
it with its `onnx` and `python_function` flavors, from the run and from the registry,
and so it does an int8 version made by an `optimize` job (issue 17). `--make-data DIR`
writes the mixed table (run.sh pushes it)."""

import json
import os
import sys
import tempfile

import mlflow
import mlflow.onnx
import mlflow.pyfunc
import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
from mlflow import MlflowClient

from runner import main, run_job, test


def make_mixed(directory):
    """300 rows: two numeric columns with gaps, a text column with gaps, a 3-class
    label that depends on all three (seeded, so the file is the same every time)."""
    rng = np.random.default_rng(7)
    lines = ["x1,x2,colour,label"]
    for _ in range(300):
        x1, x2 = rng.normal(), rng.normal(2, 3)
        colour = rng.choice(["red", "green", "blue", ""])
        score = x1 + 0.3 * x2 + {"red": 1.0, "green": -1.0, "blue": 0.0, "": 0.5}[colour]
        label = "low" if score < 0 else "mid" if score < 1.5 else "high"
        cell = lambda v: "" if rng.random() < 0.1 else f"{v:.5f}"
        lines.append(f"{cell(x1)},{cell(x2)},{colour},{label}")
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "mixed.csv"), "w") as f:
        f.write("\n".join(lines) + "\n")


def train(spec):
    return run_job(spec)["run_id"]


def check_onnx(spec, outputs):
    run_id = train(spec)
    with tempfile.TemporaryDirectory() as d:
        local = MlflowClient().download_artifacts(run_id, "model", d)
        model = onnx.load(os.path.join(local, "model.onnx"))
        onnx.checker.check_model(model, full_check=True)
        example = json.load(open(os.path.join(local, "input_example.json")))
        expected = np.array(json.load(open(os.path.join(local, "output_example.json")))["output"], dtype=np.float32)
        session = ort.InferenceSession(os.path.join(local, "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {}
    types = {i.name: i.type for i in session.get_inputs()}
    for k, name in enumerate(example["columns"]):
        col = [row[k] for row in example["data"]]
        if types[name] == "tensor(string)":
            feeds[name] = np.array(["" if v is None else v for v in col], dtype=object).reshape(-1, 1)
        else:
            feeds[name] = np.array([np.nan if v is None else v for v in col], dtype=np.float64).reshape(-1, 1)
    got = session.run(None, feeds)
    names = [o.name for o in session.get_outputs()]
    assert names == ["output"] + outputs, names
    out = got[0]
    assert out.shape == expected.shape, (out.shape, expected.shape)
    worst = float(np.max(np.abs(out - expected)))
    print(f"     {spec['name']}: {len(expected)} rows, largest difference {worst:.2e}")
    assert worst <= 1e-5, worst
    return dict(zip(names, got)), example


@test
def a_binary_mlp_as_onnx_gives_the_trainers_outputs():
    got, _ = check_onnx({"name": "cancer-onnx", "kind": "train", "inputs": ["dataset:cancer@1"],
                         "target": "diagnosis", "model": "mlp", "hidden": [32, 16], "epochs": 20, "seed": 2},
                        ["probability"])
    p = got["probability"]
    assert np.allclose(p, 1 / (1 + np.exp(-got["output"])), atol=1e-6)


@test
def a_multiclass_mlp_with_gaps_and_text_as_onnx_gives_the_trainers_outputs():
    got, example = check_onnx({"name": "mixed-onnx", "kind": "train", "inputs": ["dataset:mixed@1"],
                               "target": "label", "model": "mlp", "hidden": [16], "epochs": 30, "seed": 3},
                              ["probabilities"])
    rows = example["data"]
    assert any(v is None for row in rows for v in row), "the example has no missing value"
    assert np.allclose(got["probabilities"].sum(axis=1), 1, atol=1e-5)


@test
def a_regression_model_as_onnx_gives_the_trainers_outputs():
    check_onnx({"name": "diabetes-onnx", "kind": "train", "inputs": ["dataset:diabetes@1"],
                "target": "progression", "model": "mlp", "hidden": [8], "epochs": 20, "seed": 4},
               ["prediction"])


def example_frame(local):
    """The stored input example as the DataFrame a pyfunc user passes."""
    example = json.load(open(os.path.join(local, "input_example.json")))
    return pd.DataFrame(example["data"], columns=example["columns"]).astype("float64")


@test
def mlflow_loads_a_trained_and_an_int8_version_with_its_onnx_and_pyfunc_flavors():
    run_id = train({"name": "cancer-mlmodel", "kind": "train", "inputs": ["dataset:cancer@1"],
                    "target": "diagnosis", "model": "mlp", "hidden": [64, 32], "epochs": 20,
                    "seed": 5, "register": "cancer-pyfunc"})
    info = mlflow.models.get_model_info(f"runs:/{run_id}/model")
    assert set(info.flavors) == {"onnx", "python_function"}, info.flavors
    assert info.metadata["qanat.runtime"] == "native" and info.metadata["qanat.precision"] == "f32"
    assert [i.name for i in info.signature.inputs.inputs][:2] == ["radius_mean", "texture_mean"], info.signature
    proto = mlflow.onnx.load_model(f"runs:/{run_id}/model")
    onnx.checker.check_model(proto, full_check=True)

    with tempfile.TemporaryDirectory() as d:
        local = MlflowClient().download_artifacts(run_id, "model", d)
        frame = example_frame(local)
        expected = np.array(json.load(open(os.path.join(local, "output_example.json")))["output"], dtype=np.float32)
    f32 = mlflow.pyfunc.load_model("models:/cancer-pyfunc/1").predict(frame)
    worst = float(np.max(np.abs(f32["output"] - expected)))
    print(f"     pyfunc f32: {len(frame)} rows, largest difference to the trainer {worst:.2e}")
    assert worst <= 1e-5, worst

    job = run_job({"name": "cancer-int8", "kind": "optimize", "model": "cancer-pyfunc@1",
                   "quantize": "int8", "inputs": ["dataset:cancer@1"], "timing_seconds": 0.2})
    v2 = MlflowClient().get_model_version("cancer-pyfunc", "2")
    assert v2.tags["qanat.derived_from"] == "model:cancer-pyfunc@1", v2.tags
    info = mlflow.models.get_model_info("models:/cancer-pyfunc/2")
    assert info.metadata["qanat.precision"] == "int8", info.metadata
    proto = mlflow.onnx.load_model("models:/cancer-pyfunc/2")
    ops = {n.op_type for n in proto.graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops, ops
    int8 = mlflow.pyfunc.load_model("models:/cancer-pyfunc/2").predict(frame)
    # The stated bound (INT8_TOLERANCE): 3% of the largest f32 output over the batch.
    scale = float(np.max(np.abs(f32["output"])))
    worst = float(np.max(np.abs(int8["output"] - f32["output"])))
    print(f"     pyfunc int8 ({job['job_id']}): largest difference to f32 {worst:.3f} of {scale:.3f}")
    assert worst <= 0.03 * scale, (worst, scale)
    agree = np.mean((int8["probability"] > 0.5) == (f32["probability"] > 0.5))
    assert agree >= 0.95, agree


def torch_cancer_onnx(path):
    """A PyTorch MLP trained here on the breast cancer table (normalization in its
    forward pass, two logits then softmax), exported with torch.onnx.export: the kind of
    model a team brings from elsewhere. Returns the feature frame and labels."""
    import torch

    frame = pd.read_csv(os.path.join(os.environ["QANAT_EXAMPLE_DATA"], "breast_cancer.csv"))
    y = (frame.pop("diagnosis") == "malignant").astype("int64").to_numpy()
    x = frame.astype("float32")
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self, mean, std):
            super().__init__()
            self.register_buffer("mean", torch.tensor(mean))
            self.register_buffer("std", torch.tensor(std))
            self.body = torch.nn.Sequential(torch.nn.Linear(30, 64), torch.nn.ReLU(),
                                            torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                            torch.nn.Linear(32, 2))

        def forward(self, t):
            return torch.softmax(self.body((t - self.mean) / self.std), dim=1)

    net = Net(x.mean().to_numpy(), x.std().to_numpy() + 1e-6)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    xt, yt = torch.tensor(x.to_numpy()), torch.tensor(y)
    for _ in range(200):
        opt.zero_grad()
        loss = torch.nn.functional.nll_loss(torch.log(net(xt) + 1e-9), yt)
        loss.backward()
        opt.step()
    net.eval()
    torch.onnx.export(net, xt[:2], path, input_names=["input"], output_names=["probabilities"],
                      dynamic_axes={"input": {0: "N"}, "probabilities": {0: "N"}}, opset_version=17,
                      dynamo=False)
    return x, y


@test
def an_onnx_model_from_pytorch_logged_with_mlflow_is_quantized_and_distilled():
    from mlflow.models import infer_signature

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "net.onnx")
        frame, y = torch_cancer_onnx(path)
        proto = onnx.load(path)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    probs = session.run(None, {"input": frame.to_numpy()})[0]
    with mlflow.start_run():
        mlflow.onnx.log_model(proto, name="model", registered_model_name="torch-cancer",
                              signature=infer_signature(frame, probs), input_example=frame.head(3))
    # Quantized: the MatMul/Gemm products rewritten, measured on tract, registered as v2.
    job = run_job({"name": "torch-int8", "kind": "optimize", "model": "torch-cancer@1",
                   "quantize": "int8", "target": "diagnosis", "inputs": ["dataset:cancer@1"],
                   "timing_seconds": 0.2})
    client = MlflowClient()
    v2 = client.get_model_version("torch-cancer", "2")
    assert v2.tags["qanat.derived_from"] == "model:torch-cancer@1", v2.tags
    assert v2.tags["qanat.runtime"] == "tract" and v2.tags["qanat.precision"] == "int8", v2.tags
    run = client.get_run(job["run_id"])
    assert run.data.metrics["original_accuracy"] >= 0.95, run.data.metrics
    proto2 = mlflow.onnx.load_model("models:/torch-cancer/2")
    ops = {n.op_type for n in proto2.graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops, ops
    # 4,032 weights: int8 stores a quarter of their bytes; the rest of the file is the
    # graph, the biases and the scales.
    m = run.data.metrics
    assert m["optimized_size_bytes"] < 0.6 * m["original_size_bytes"], m
    info = mlflow.models.get_model_info("models:/torch-cancer/2")
    assert info.metadata["qanat.precision"] == "int8" and info.signature is not None, info
    out = mlflow.pyfunc.load_model("models:/torch-cancer/2").predict(frame)["probabilities"]
    int8 = np.asarray(list(out), dtype=np.float32).reshape(len(frame), 2)
    worst = float(np.max(np.abs(int8 - probs)))
    agree = float(np.mean(int8.argmax(1) == probs.argmax(1)))
    print(f"     pytorch → int8 ({job['job_id']}): largest probability difference {worst:.4f}, "
          f"same class on {agree:.4f}; accuracy {run.data.metrics['original_accuracy']:.4f} → "
          f"{run.data.metrics['optimized_accuracy']:.4f}")
    assert worst <= 0.03 and agree >= 0.98, (worst, agree)

    # Distilled: a native student of one hidden layer, which mlflow loads by columns.
    # (The teacher was fitted on every row, holdout included, so it scores 1.0 there;
    # the budget allows the student a few points.)
    job = run_job({"name": "torch-student", "kind": "optimize", "model": "torch-cancer@1",
                   "distill": [8], "target": "diagnosis", "inputs": ["dataset:cancer@1"],
                   "max_accuracy_drop": 5, "timing_seconds": 0.2})
    run = client.get_run(job["run_id"])
    assert run.data.metrics["fidelity"] >= 0.9, run.data.metrics
    assert run.data.params["hidden"] == "[8]" and run.data.params["finetune_epochs"] == "30", run.data.params
    v3 = client.get_model_version("torch-cancer", "3")
    assert v3.tags["qanat.derived_from"] == "model:torch-cancer@1", v3.tags
    assert v3.tags["qanat.runtime"] == "native", v3.tags
    out = mlflow.pyfunc.load_model("models:/torch-cancer/3").predict(frame.astype("float64"))
    student = np.asarray(list(out["probability"]), dtype=np.float32).reshape(len(frame))
    agree = float(np.mean((student > 0.5) == (probs[:, 1] > 0.5)))
    print(f"     pytorch → student [8]: fidelity {run.data.metrics['fidelity']:.4f}, "
          f"agreement on every row {agree:.4f}")
    assert agree >= 0.9, agree

    # Static int8: each product's input scale calibrated on the job's training rows.
    job = run_job({"name": "torch-static", "kind": "optimize", "model": "torch-cancer@1",
                   "quantize": "int8-static", "target": "diagnosis",
                   "inputs": ["dataset:cancer@1"], "timing_seconds": 0.2})
    ops = [n.op_type for n in mlflow.onnx.load_model("models:/torch-cancer/4").graph.node]
    assert ops.count("QuantizeLinear") == 3 and "DynamicQuantizeLinear" not in ops, ops
    out = mlflow.pyfunc.load_model("models:/torch-cancer/4").predict(frame)["probabilities"]
    static = np.asarray(list(out), dtype=np.float32).reshape(len(frame), 2)
    agree = float(np.mean(static.argmax(1) == probs.argmax(1)))
    print(f"     pytorch → int8-static ({job['job_id']}): same class on {agree:.4f}, largest "
          f"probability difference {float(np.max(np.abs(static - probs))):.4f}")
    assert agree >= 0.98, agree


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--make-data":
        make_mixed(sys.argv[2])
    else:
        main()
