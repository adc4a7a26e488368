"""onnxruntime's side of the tree benchmark (scripts/bench/trees_vs_onnxruntime.sh).

`make DIR`: trains the benchmark's models on a synthetic table (20 features, 100k rows)
-- XGBoost (300 trees, depth 6) and LightGBM (300 trees, 63 leaves), binary -- saves
them in their own formats (xgb.ubj, lgb.txt), converts each to ONNX with onnxmltools
(ai.onnx.ml TreeEnsembleClassifier), and writes 10k rows to predict (rows.f32) and the
libraries' own predictions on them.
`run DIR SECONDS`: times each ONNX model in onnxruntime on one thread (intra- and
inter-op), in-process session.run at batch 1 and 256, one JSON line per case; and
checks that Qanat's predictions (ours-*.f32) equal the library's."""

import json
import sys
import time

import numpy as np

cmd, folder = sys.argv[1], sys.argv[2]
F = 20


def make():
    import lightgbm as lgb
    import onnxmltools
    import xgboost as xgb
    from onnxmltools.convert.common.data_types import FloatTensorType

    rng = np.random.default_rng(11)
    X = rng.normal(size=(100_000, F)).astype(np.float32)
    y = ((X[:, 0] + X[:, 1] * X[:, 2] - np.abs(X[:, 3]) + 0.3 * rng.normal(size=len(X))) > 0).astype(int)
    R = rng.normal(size=(10_000, F)).astype(np.float32)
    R.tofile(f"{folder}/rows.f32")
    x = xgb.XGBClassifier(n_estimators=300, max_depth=6, learning_rate=0.1, n_jobs=2).fit(X, y)
    x.save_model(f"{folder}/xgb.ubj")
    x.predict_proba(R)[:, 1].astype(np.float32).tofile(f"{folder}/lib-xgb.f32")
    onx = onnxmltools.convert_xgboost(x, initial_types=[("x", FloatTensorType([None, F]))], target_opset=15)
    open(f"{folder}/xgb.onnx", "wb").write(onx.SerializeToString())
    booster = lgb.train({"objective": "binary", "num_leaves": 63, "verbose": -1}, lgb.Dataset(X, y), 300)
    booster.save_model(f"{folder}/lgb.txt")
    booster.predict(R).astype(np.float32).tofile(f"{folder}/lib-lgb.f32")
    onx = onnxmltools.convert_lightgbm(booster, initial_types=[("x", FloatTensorType([None, F]))],
                                       target_opset=15, zipmap=False)
    open(f"{folder}/lgb.onnx", "wb").write(onx.SerializeToString())


def run(seconds):
    import onnxruntime as ort

    R = np.fromfile(f"{folder}/rows.f32", dtype=np.float32).reshape(-1, F)
    for name in ("xgb", "lgb"):
        lib = np.fromfile(f"{folder}/lib-{name}.f32", dtype=np.float32)
        ours = np.fromfile(f"{folder}/ours-{name}.f32", dtype=np.float32)
        err = float(np.max(np.abs(ours - lib)))
        assert err <= 1e-6, (name, err)
        o = ort.SessionOptions()
        o.intra_op_num_threads = 1
        o.inter_op_num_threads = 1
        s = ort.InferenceSession(f"{folder}/{name}.onnx", o, providers=["CPUExecutionProvider"])
        inp = s.get_inputs()[0].name
        outs = [o.name for o in s.get_outputs()]
        probs = s.run(outs, {inp: R})[1]
        ort_err = float(np.max(np.abs(np.asarray(probs)[:, 1] - lib)))
        for batch in (1, 256):
            times, done, at = [], 0, 0
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                if at + batch > len(R):
                    at = 0
                t = time.perf_counter()
                s.run(outs, {inp: R[at:at + batch]})
                times.append(time.perf_counter() - t)
                done += batch
                at += batch
            elapsed = time.perf_counter() - start
            times.sort()
            print(json.dumps({"model": name, "batch": batch, "rows_per_s": round(done / elapsed),
                              "p50_us": round(times[len(times) // 2] * 1e6, 1),
                              "qanat_max_err": err, "onnxruntime_max_err": ort_err}))


if cmd == "make":
    make()
else:
    run(float(sys.argv[3]))
