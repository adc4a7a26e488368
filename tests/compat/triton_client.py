"""Triton's own Python client (`tritonclient[http,grpc]` from PyPI) against Qanat's Open
Inference Protocol routes (issue 18): server liveness, readiness and metadata, a
model's metadata and readiness, and inference with JSON tensors on a version a `train`
job registered (cancer-pyfunc, from train_onnx.py) and on the int8 version an
`optimize` job derived from it; errors reach the client as its exception with the
server's message. Tensors go as JSON and as binary data (Triton's binary tensor
extension, the client's default), which must give the same answers. The gRPC client
(`inference.GRPCInferenceService`, on the same port) must answer as REST does, and
refusals reach it as gRPC status codes; its stream (`ModelStreamInfer`) answers every
request in order with failures inline, and its model-repository calls work as over
REST. A model of another project answers both clients (issue 46): over HTTP at the
base path `/oip/<project>`, over gRPC with a `qanat-project` metadata entry.

run.sh runs the suite twice: against `qanat server` (QANAT_URL), then against a
`qanat serve` data plane on the same installation (QANAT_OIP_URL: the inference calls
go there; tokens and training still go to the server's API)."""

import csv
import json
import os
import queue
import time
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from runner import main, test

API_URL = os.environ["QANAT_URL"].removeprefix("http://")
URL = os.environ.get("QANAT_OIP_URL", os.environ["QANAT_URL"]).removeprefix("http://")
TOKEN = os.environ["MLFLOW_TRACKING_TOKEN"]


def headers():
    """A fresh header dict per call: tritonclient writes its own headers
    (Inference-Header-Content-Length) into the dict it is given, which would then go
    with the next request too."""
    return {"Authorization": f"Bearer {TOKEN}"}
MODEL = "cancer-pyfunc"


def grpc_headers():
    """gRPC metadata keys are lowercase."""
    return {"authorization": f"Bearer {TOKEN}"}


def client():
    return httpclient.InferenceServerClient(url=URL)


def table(n):
    path = os.path.join(os.environ["QANAT_EXAMPLE_DATA"], "breast_cancer.csv")
    with open(path) as f:
        rows = list(csv.DictReader(f))[:n]
    labels = [r.pop("diagnosis") for r in rows]
    return rows, labels


def tensors(module, meta, rows, **kwargs):
    """One [N, 1] input of `module`'s (httpclient or grpcclient) per input of the model's
    metadata, from the table's `rows`."""
    inputs = []
    for spec in meta["inputs"]:
        x = np.array([[float(r[spec["name"]])] for r in rows], dtype=np.float64)
        t = module.InferInput(spec["name"], list(x.shape), spec["datatype"])
        t.set_data_from_numpy(x, **kwargs)
        inputs.append(t)
    return inputs


def infer(c, version, n, outputs, binary=False):
    meta = c.get_model_metadata(MODEL, model_version=version, headers=headers())
    rows, labels = table(n)
    inputs = tensors(httpclient, meta, rows, binary_data=binary)
    wanted = [httpclient.InferRequestedOutput(o, binary_data=binary) for o in outputs]
    result = c.infer(MODEL, inputs, model_version=version, outputs=wanted, request_id="compat-1",
                     headers=headers())
    return result, labels


@test
def the_server_is_live_ready_and_describes_itself():
    c = client()
    assert c.is_server_live() and c.is_server_ready()
    meta = c.get_server_metadata()
    assert meta["name"] == "qanat", meta


@test
def a_trained_version_describes_itself_and_answers_triton_s_client():
    c = client()
    assert c.is_model_ready(MODEL, "1", headers=headers())
    meta = c.get_model_metadata(MODEL, headers=headers())
    assert "1" in meta["versions"] and meta["platform"] == "qanat_native", meta
    assert len(meta["inputs"]) == 30 and meta["inputs"][0]["shape"] == [-1, 1], meta["inputs"][0]
    result, labels = infer(c, "1", 60, ["probability", "label"])
    probs, got = result.as_numpy("probability"), result.as_numpy("label")
    assert probs.shape == (60, 1) and got.shape == (60,), (probs.shape, got.shape)
    got = [g.decode() if isinstance(g, bytes) else g for g in got]
    assert result.get_response()["id"] == "compat-1"
    assert all((p > 0.5) == (g == "malignant") for p, g in zip(probs[:, 0], got))
    right = sum(g == want for g, want in zip(got, labels))
    print(f"     tritonclient: 60 rows on version 1, {right} labels right")
    assert right >= 54, right


@test
def binary_tensors_give_what_json_gives():
    c = client()
    as_json, _ = infer(c, "1", 25, ["output", "label"])
    as_binary, _ = infer(c, "1", 25, ["output", "label"], binary=True)
    a, b = as_json.as_numpy("output"), as_binary.as_numpy("output")
    assert a.shape == b.shape == (25, 1), (a.shape, b.shape)
    assert float(np.max(np.abs(a - b))) < 1e-6, (a, b)
    la = [x.decode() if isinstance(x, bytes) else x for x in as_json.as_numpy("label")]
    lb = [x.decode() if isinstance(x, bytes) else x for x in as_binary.as_numpy("label")]
    assert la == lb, (la, lb)
    params = as_binary.get_output("output").get("parameters", {})
    assert params.get("binary_data_size") == 25 * 4, params


@test
def the_int8_version_answers_as_the_f32_one_within_its_bound():
    c = client()
    f32, _ = infer(c, "1", 60, ["output"])
    int8, _ = infer(c, "2", 60, ["output"])
    a, b = f32.as_numpy("output"), int8.as_numpy("output")
    worst = float(np.max(np.abs(a - b)))
    print(f"     tritonclient: int8 version 2 against f32, largest difference {worst:.3f} of {float(np.max(np.abs(a))):.3f}")
    assert worst <= 0.03 * float(np.max(np.abs(a))), worst


def refusal(call, what):
    """The InferenceServerException that `call()` raises; `what` names what was wrongly
    answered when it raises none."""
    try:
        call()
    except InferenceServerException as e:
        return e
    raise AssertionError(f"{what} was answered")


def unknown_models_are_refused(c, h):
    """Neither version 0 of MODEL nor an unknown model is ready, and describing the
    unknown one is refused naming it; the refusal."""
    assert not c.is_model_ready(MODEL, "0", headers=h)
    assert not c.is_model_ready("no-such-model", headers=h)
    e = refusal(lambda: c.get_model_metadata("no-such-model", headers=h), "an unknown model")
    assert "no-such-model" in str(e), e
    return e


@test
def mistakes_reach_the_client_with_the_server_s_message():
    c = client()
    unknown_models_are_refused(c, headers())
    x = httpclient.InferInput("radius_mean", [1, 1], "FP64")
    x.set_data_from_numpy(np.array([[1.0]]), binary_data=False)
    e = refusal(lambda: c.infer(MODEL, [x], model_version="1", headers=headers()), "an incomplete request")
    assert "is missing" in str(e), e


@test
def the_repository_extension_lists_loads_and_unloads():
    c = client()
    assert "model_repository" in c.get_server_metadata()["extensions"]
    index = {m["name"]: m for m in c.get_model_repository_index(headers=headers())}
    assert MODEL in index, index
    c.unload_model(MODEL, headers=headers())
    index = {m["name"]: m for m in c.get_model_repository_index(headers=headers())}
    assert index[MODEL]["state"] == "UNAVAILABLE", index[MODEL]
    c.load_model(MODEL, headers=headers())
    index = {m["name"]: m for m in c.get_model_repository_index(headers=headers())}
    assert index[MODEL]["state"] == "READY", index[MODEL]
    assert c.is_model_ready(MODEL, headers=headers())


def grpc_client():
    return grpcclient.InferenceServerClient(url=URL)


def grpc_inputs(c, version, rows):
    """One FP64 [N, 1] input per input of `version`'s metadata, from `rows`."""
    meta = c.get_model_metadata(MODEL, model_version=version, headers=grpc_headers(), as_json=True)
    return tensors(grpcclient, meta, rows)


def grpc_infer(c, version, n, outputs, headers_=None):
    rows, labels = table(n)
    inputs = grpc_inputs(c, version, rows)
    wanted = [grpcclient.InferRequestedOutput(o) for o in outputs]
    result = c.infer(MODEL, inputs, model_version=version, outputs=wanted, request_id="grpc-1",
                     headers=headers_ if headers_ is not None else grpc_headers())
    return result, labels


@test
def the_grpc_client_gets_metadata_and_the_same_answers_as_rest():
    c = grpc_client()
    assert c.is_server_live() and c.is_server_ready()
    assert c.get_server_metadata(as_json=True)["name"] == "qanat"
    assert c.is_model_ready(MODEL, "1", headers=grpc_headers())
    meta = c.get_model_metadata(MODEL, headers=grpc_headers(), as_json=True)
    assert "1" in meta["versions"] and len(meta["inputs"]) == 30, meta
    assert meta["inputs"][0]["shape"] == ["-1", "1"] or meta["inputs"][0]["shape"] == [-1, 1], meta["inputs"][0]
    by_grpc, labels = grpc_infer(c, "1", 60, ["output", "probability", "label"])
    by_rest, _ = infer(client(), "1", 60, ["output", "probability", "label"])
    a, b = by_grpc.as_numpy("output"), by_rest.as_numpy("output")
    assert a.shape == b.shape == (60, 1), (a.shape, b.shape)
    assert float(np.max(np.abs(a - b))) < 1e-6, (a, b)
    got = [g.decode() if isinstance(g, bytes) else g for g in by_grpc.as_numpy("label")]
    right = sum(g == want for g, want in zip(got, labels))
    assert by_grpc.get_response(as_json=True)["id"] == "grpc-1"
    print(f"     tritonclient (gRPC): 60 rows on version 1, {right} labels right, equal to REST")
    assert right >= 54, right


@test
def grpc_refusals_are_status_codes_with_the_server_s_message():
    c = grpc_client()
    e = unknown_models_are_refused(c, grpc_headers())
    assert "NOT_FOUND" in str(e.status()), (e.status(), e)
    x = grpcclient.InferInput("radius_mean", [1, 1], "FP64")
    x.set_data_from_numpy(np.array([[1.0]]))
    e = refusal(lambda: c.infer(MODEL, [x], model_version="1", headers=grpc_headers()), "an incomplete request")
    assert "INVALID_ARGUMENT" in str(e.status()) and "is missing" in str(e), (e.status(), e)
    e = refusal(lambda: grpc_infer(c, "1", 1, ["label"], headers_={}), "a call without a token")
    assert "UNAUTHENTICATED" in str(e.status()), (e.status(), e)


@test
def the_grpc_stream_answers_every_request_in_order_with_failures_inline():
    c = grpc_client()
    rows, _ = table(20)
    want = grpc_infer(c, "1", 1, ["output"])[0].as_numpy("output")[0, 0]
    answers = queue.Queue()
    c.start_stream(callback=lambda result, error: answers.put((result, error)),
                   headers=grpc_headers())
    bad = grpcclient.InferInput("radius_mean", [1, 1], "FP64")
    bad.set_data_from_numpy(np.array([[1.0]]))
    sent = []
    for i, row in enumerate(rows):
        if i == 7:
            c.async_stream_infer(MODEL, [bad], model_version="1", request_id="bad-7")
            sent.append("bad-7")
        c.async_stream_infer(MODEL, grpc_inputs(c, "1", [row]), model_version="1",
                             outputs=[grpcclient.InferRequestedOutput("output")],
                             request_id=f"row-{i}")
        sent.append(f"row-{i}")
    c.stop_stream()
    got = [answers.get(timeout=30) for _ in sent]
    assert answers.empty(), "more answers than requests"
    errors = [e for _, e in got if e is not None]
    assert len(errors) == 1 and "is missing" in str(errors[0]), errors
    ids = [r.get_response(as_json=True)["id"] for r, e in got if e is None]
    assert ids == [s for s in sent if s != "bad-7"], ids
    first = next(r for r, e in got if e is None).as_numpy("output")[0, 0]
    assert abs(float(first) - float(want)) < 1e-6, (first, want)
    print(f"     tritonclient (gRPC stream): {len(sent)} requests, {len(ids)} answers in order, "
          "1 failure answered inline")


@test
def the_grpc_repository_extension_lists_loads_and_unloads():
    c = grpc_client()
    index = {m["name"]: m for m in
             c.get_model_repository_index(headers=grpc_headers(), as_json=True)["models"]}
    assert MODEL in index, index
    c.unload_model(MODEL, headers=grpc_headers())
    index = {m["name"]: m for m in
             c.get_model_repository_index(headers=grpc_headers(), as_json=True)["models"]}
    assert index[MODEL]["state"] == "UNAVAILABLE", index[MODEL]
    c.load_model(MODEL, headers=grpc_headers())
    assert c.is_model_ready(MODEL, headers=grpc_headers())
    try:
        c.load_model(MODEL, headers=grpc_headers(), config="{}")
    except InferenceServerException as e:
        assert "INVALID_ARGUMENT" in str(e.status()) and "registry" in str(e), (e.status(), e)
    else:
        raise AssertionError("a load with a configuration was accepted")


def inference_token(per_second):
    """A token scoped to inference, limited to `per_second` requests a second."""
    body = {"name": f"stream-{time.time_ns()}", "scope": "inference", "rate_limit": per_second}
    req = urllib.request.Request(
        f"http://{API_URL}/api/v1/tokens", method="POST", data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)["token"]


@test
def each_request_on_a_stream_counts_against_the_token_s_rate_limit():
    c = grpc_client()
    rows, _ = table(1)
    inputs = grpc_inputs(c, "1", rows)
    limited = {"authorization": f"Bearer {inference_token(3)}"}
    answers = queue.Queue()
    c.start_stream(callback=lambda result, error: answers.put((result, error)), headers=limited)
    for i in range(12):
        c.async_stream_infer(MODEL, inputs, model_version="1", request_id=f"r-{i}")
    c.stop_stream()
    got = [answers.get(timeout=30) for _ in range(12)]
    refused = [e for _, e in got if e is not None]
    assert 0 < len(refused) <= 9, [str(e) for e in refused]
    assert all("RESOURCE_EXHAUSTED" in str(e) for e in refused), [str(e) for e in refused]
    # The scope holds on gRPC too: an inference token cannot unload a model.
    try:
        c.unload_model(MODEL, headers=limited)
    except InferenceServerException as e:
        assert "PERMISSION_DENIED" in str(e.status()), (e.status(), e)
    else:
        raise AssertionError("a token scoped to inference unloaded a model")
    print(f"     tritonclient (gRPC stream, 3/s token): 12 requests, {len(refused)} refused inline")


OTHER = "cancer-other"


def api(method, path, body=None):
    """Qanat's REST API with the suite's token (this venv has no `requests`)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://{API_URL}{path}", data=data, method=method,
                                 headers={**headers(), "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def train_in(project, spec):
    """Runs a train job in `project` to its end; it must succeed."""
    job = api("POST", f"/api/v1/projects/{project}/jobs", {"kind": "train", **spec})
    for _ in range(600):
        j = api("GET", f"/api/v1/projects/{project}/jobs/{job['job_id']}")
        if j["state"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.5)
    assert j["state"] == "succeeded", j


@test
def a_model_of_another_project_answers_under_its_prefix_and_by_grpc_metadata():
    """Trained and registered in project `other` (run.sh pushed the table there), the
    model is reached at the base path /oip/other by the HTTP client and with
    `qanat-project: other` by the gRPC client, with equal answers; the default
    project's paths do not see it."""
    c = httpclient.InferenceServerClient(url=URL + "/oip/other")
    if URL == API_URL:  # the first run, against the server; the second finds it there
        train_in("other", {"name": OTHER, "inputs": ["dataset:cancer@1"], "target": "diagnosis",
                           "model": "mlp", "hidden": [16], "epochs": 10, "seed": 3, "register": OTHER})
    assert c.is_server_live() and c.is_model_ready(OTHER, "1", headers=headers())
    meta = c.get_model_metadata(OTHER, headers=headers())
    assert meta["versions"] == ["1"] and len(meta["inputs"]) == 30, meta
    rows, _ = table(40)
    inputs = tensors(httpclient, meta, rows, binary_data=True)
    by_http = c.infer(OTHER, inputs, outputs=[httpclient.InferRequestedOutput("output")],
                      headers=headers()).as_numpy("output")
    assert not client().is_model_ready(OTHER, headers=headers())

    g = grpc_client()
    scoped = {**grpc_headers(), "qanat-project": "other"}
    assert g.is_model_ready(OTHER, "1", headers=scoped)
    assert not g.is_model_ready(OTHER, headers=grpc_headers())
    by_grpc = g.infer(OTHER, tensors(grpcclient, meta, rows), outputs=[grpcclient.InferRequestedOutput("output")],
                      headers=scoped).as_numpy("output")
    assert by_http.shape == by_grpc.shape == (40, 1), (by_http.shape, by_grpc.shape)
    assert float(np.max(np.abs(by_http - by_grpc))) < 1e-6
    print("     tritonclient: project `other` at /oip/other (HTTP) and by metadata (gRPC), 40 rows equal")


if __name__ == "__main__":
    main()
