"""onnxruntime's side of the native runtime benchmark: the MLP that
crates/qanat-runtime/examples/native_bench.rs wrote to DIR/weights.safetensors
(layers.{i}.weight [out, in], layers.{i}.bias, ReLU between layers) as an ONNX graph of
MatMul + Add + Relu, run by onnxruntime on one thread (intra- and inter-op), in f32 and
after onnxruntime's own dynamic int8 quantization (quantize_dynamic: MatMulInteger),
with in-process session.run calls on the same normal inputs at batch 1 and 64.
Prints one JSON line per case.
usage: native_ort.py DIR SECONDS"""

import json
import struct
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

folder, seconds = sys.argv[1], float(sys.argv[2])
raw = open(f"{folder}/weights.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8 : 8 + n])
data = raw[8 + n :]


def tensor(name):
    h = header[name]
    a, b = h["data_offsets"]
    return np.frombuffer(data[a:b], dtype=np.float32).reshape(h["shape"])


layers = sorted({int(k.split(".")[1]) for k in header if k.startswith("layers.")})
nodes, inits, x = [], [], "x"
inputs = tensor("layers.0.weight").shape[1]
for i in layers:
    w, b = tensor(f"layers.{i}.weight"), tensor(f"layers.{i}.bias")
    inits += [numpy_helper.from_array(np.ascontiguousarray(w.T), f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
    nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]), helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"])]
    x = f"a{i}"
    if i != layers[-1]:
        nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
        x = f"r{i}"
outputs = tensor(f"layers.{layers[-1]}.bias").shape[0]
graph = helper.make_graph(
    nodes, "mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", inputs])],
    [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", outputs])],
    inits,
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
onnx.save(model, f"{folder}/mlp.onnx")
quantize_dynamic(f"{folder}/mlp.onnx", f"{folder}/mlp-int8.onnx", weight_type=QuantType.QInt8)

opts = ort.SessionOptions()
opts.intra_op_num_threads = 1
opts.inter_op_num_threads = 1
opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
rng = np.random.default_rng(99)
for batch in (1, 64):
    xb = rng.standard_normal((batch, inputs), dtype=np.float32)
    for precision, path in (("f32", "mlp.onnx"), ("int8", "mlp-int8.onnx")):
        s = ort.InferenceSession(f"{folder}/{path}", opts, providers=["CPUExecutionProvider"])
        for _ in range(20):
            s.run(None, {"x": xb})
        times, start = [], time.perf_counter()
        while time.perf_counter() - start < seconds:
            t = time.perf_counter()
            s.run(None, {"x": xb})
            times.append(time.perf_counter() - t)
        times.sort()
        print(json.dumps({"impl": f"onnxruntime {ort.__version__}", "precision": precision, "batch": batch,
                          "rows_per_s": round(len(times) * batch / sum(times)),
                          "p50_us": round(times[len(times) // 2] * 1e6, 1)}))
