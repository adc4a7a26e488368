//! Serving through the binary: a version trained by a `train` job answers in the Open
//! Inference Protocol (KServe v2) over REST — probes, server and model metadata, JSON
//! inference by version and by the newest — and bad requests get a 4xx with OIP's
//! `{"error": "..."}`, never a 500.

mod common;

use common::Qanat;
use serde_json::{json, Value};

/// The first `n` rows of the breast cancer table: the 30 feature columns as OIP
/// inputs (FP64, `[n, 1]`), and the labels.
fn rows(n: usize) -> (Vec<Value>, Vec<String>) {
    let text = std::fs::read_to_string(format!(
        "{}/../../examples/data/breast_cancer.csv",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("table");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let body: Vec<Vec<&str>> = lines.take(n).map(|l| l.split(',').collect()).collect();
    let target = header
        .iter()
        .position(|h| *h == "diagnosis")
        .expect("target");
    let inputs = header
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != target)
        .map(|(i, name)| {
            let data: Vec<f64> = body.iter().map(|r| r[i].parse().expect("number")).collect();
            // Nested for one column, flat for the others: both are row-major.
            let data = if i == 0 {
                json!(data.iter().map(|v| vec![*v]).collect::<Vec<_>>())
            } else {
                json!(data)
            };
            json!({"name": name, "datatype": "FP64", "shape": [n, 1], "data": data})
        })
        .collect();
    let labels = body.iter().map(|r| r[target].to_string()).collect();
    (inputs, labels)
}

/// Pushes the breast cancer table to `project` and registers an MLP trained on it for
/// `epochs` as model `cancer` there.
fn trained_cancer(q: &Qanat, project: &str, epochs: u32) {
    q.push_example_in(project, "cancer", "breast_cancer.csv");
    q.train_in(
        project,
        json!({
            "name": "cancer-mlp", "inputs": ["dataset:cancer@1"], "target": "diagnosis",
            "model": "mlp", "hidden": [32], "epochs": epochs, "seed": 2, "register": "cancer",
        }),
    );
}

/// The probes and the server's metadata answer anyone, at `prefix` + `/v2…`.
fn public_probes(http: &common::Http, prefix: &str) {
    assert_eq!(
        http.send("", "GET", &format!("{prefix}/v2/health/live"), None),
        (200, json!({"live": true}))
    );
    assert_eq!(
        http.send("", "GET", &format!("{prefix}/v2/health/ready"), None),
        (200, json!({"ready": true}))
    );
    let (s, server) = http.send("", "GET", &format!("{prefix}/v2"), None);
    assert_eq!(
        (s, server["name"].as_str()),
        (200, Some("qanat")),
        "{server}"
    );
}

#[test]
fn a_trained_version_answers_in_the_open_inference_protocol() {
    let q = Qanat::start_with(vec![("QANAT_JOBS_CPUS".into(), "2".into())]);
    let (http, token) = (q.http(), &q.admin_token);
    trained_cancer(&q, "default", 20);
    // Probes and server metadata: public.
    public_probes(&http, "");

    // Model metadata needs a token; it lists the versions and the signature.
    assert_eq!(http.send("", "GET", "/v2/models/cancer", None).0, 401);
    let (s, meta) = http.send(token, "GET", "/v2/models/cancer", None);
    assert_eq!(s, 200, "{meta}");
    assert_eq!(meta["versions"], json!(["1"]));
    assert_eq!(meta["platform"], "qanat_native");
    let inputs = meta["inputs"].as_array().expect("inputs");
    assert_eq!(inputs.len(), 30);
    assert_eq!(
        inputs[0],
        json!({"name": "radius_mean", "datatype": "FP64", "shape": [-1, 1]})
    );
    let names: Vec<&str> = meta["outputs"]
        .as_array()
        .expect("outputs")
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert_eq!(names, ["output", "probability", "label"]);
    let (s, ready) = http.send(token, "GET", "/v2/models/cancer/versions/1/ready", None);
    assert_eq!((s, &ready["ready"]), (200, &json!(true)), "{ready}");

    // Inference: 40 rows, by version; the id is echoed.
    let (inputs, labels) = rows(40);
    let (s, out) = http.send(
        token,
        "POST",
        "/v2/models/cancer/versions/1/infer",
        Some(json!({"id": "req-7", "inputs": inputs})),
    );
    assert_eq!(s, 200, "{out}");
    assert_eq!(
        (out["model_name"].as_str(), out["model_version"].as_str()),
        (Some("cancer"), Some("1"))
    );
    assert_eq!(out["id"], "req-7");
    let output = |name: &str| -> Value {
        out["outputs"]
            .as_array()
            .expect("outputs")
            .iter()
            .find(|o| o["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {out}"))
    };
    assert_eq!(output("output")["shape"], json!([40, 1]));
    assert_eq!(output("label")["datatype"], "BYTES");
    let logits: Vec<f64> =
        serde_json::from_value(output("output")["data"].clone()).expect("floats");
    let probs: Vec<f64> =
        serde_json::from_value(output("probability")["data"].clone()).expect("floats");
    let got: Vec<String> = serde_json::from_value(output("label")["data"].clone()).expect("labels");
    for ((z, p), l) in logits.iter().zip(&probs).zip(&got) {
        assert!((p - 1.0 / (1.0 + (-z).exp())).abs() < 1e-5, "{p} vs σ({z})");
        assert_eq!(l, if *p > 0.5 { "malignant" } else { "benign" });
    }
    let right = got.iter().zip(&labels).filter(|(a, b)| a == b).count();
    assert!(right >= 36, "{right} of 40 right");

    // The newest version, and only the outputs asked for.
    let (s, only) = http.send(
        token,
        "POST",
        "/v2/models/cancer/infer",
        Some(json!({"inputs": rows(3).0, "outputs": [{"name": "label"}]})),
    );
    assert_eq!(s, 200, "{only}");
    assert_eq!(only["outputs"].as_array().map(Vec::len), Some(1), "{only}");
    assert_eq!(only["outputs"][0]["data"], json!(got[..3]));
    assert!(only.get("id").is_none(), "{only}");

    // Caller mistakes: a 4xx with {"error": ...} that says what to fix.
    let mut missing = rows(2).0;
    missing.pop();
    let mut wrong_shape = rows(2).0;
    wrong_shape[0]["shape"] = json!([1, 2]);
    let mut wrong_type = rows(2).0;
    wrong_type[1]["datatype"] = json!("BYTES");
    let mut short = rows(2).0;
    short[2]["data"] = json!([1.0]);
    let bad: Vec<(&str, Value, u16, &str)> = vec![
        (
            "/v2/models/cancer/versions/1/infer",
            json!({"inputs": missing}),
            400,
            "is missing",
        ),
        (
            "/v2/models/cancer/versions/1/infer",
            json!({"inputs": wrong_shape}),
            400,
            "[N] or [N, 1]",
        ),
        (
            "/v2/models/cancer/versions/1/infer",
            json!({"inputs": wrong_type}),
            400,
            "numeric",
        ),
        (
            "/v2/models/cancer/versions/1/infer",
            json!({"inputs": short}),
            400,
            "data values",
        ),
        (
            "/v2/models/cancer/versions/1/infer",
            json!({"inputs": rows(1).0, "outputs": [{"name": "nope"}]}),
            400,
            "not one of",
        ),
        (
            "/v2/models/cancer/versions/1/infer",
            json!({"inputs": 5}),
            400,
            "not an inference request",
        ),
        (
            "/v2/models/cancer/versions/0/infer",
            json!({"inputs": rows(1).0}),
            400,
            "number from 1",
        ),
        (
            "/v2/models/cancer/versions/9/infer",
            json!({"inputs": rows(1).0}),
            404,
            "",
        ),
        (
            "/v2/models/nope/infer",
            json!({"inputs": rows(1).0}),
            404,
            "nope",
        ),
    ];
    for (path, body, status, says) in bad {
        let (s, v) = http.send(token, "POST", path, Some(body));
        let message = v["error"].as_str().unwrap_or_else(|| panic!("{path}: {v}"));
        assert_eq!(s, status, "{path}: {v}");
        assert!(message.contains(says), "{path}: {message}");
    }
    // Every /v2 error has OIP's one shape, whichever layer answers it.
    for (who, method, path, status) in [
        ("", "POST", "/v2/models/cancer/infer", 401),
        (token, "GET", "/v2/no/such/route", 404),
        (token, "DELETE", "/v2/models/cancer", 405),
    ] {
        let (s, v) = http.send(who, method, path, Some(json!({"inputs": []})));
        assert_eq!(s, status, "{path}: {v}");
        assert!(
            v["error"].as_str().is_some_and(|m| !m.is_empty())
                && v.as_object().map(|o| o.len()) == Some(1),
            "{method} {path}: {v}"
        );
    }

    // Triton's binary tensor extension: the same rows as raw FP64, the label as raw
    // BYTES back, after the JSON part whose length a header gives.
    let (inputs, _) = rows(3);
    let mut head =
        json!({"inputs": [], "outputs": [{"name": "label", "parameters": {"binary_data": true}}]});
    let mut raw = Vec::new();
    for mut i in inputs {
        let data: Vec<f64> = i["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|v| v.as_f64().or_else(|| v[0].as_f64()).expect("number"))
            .collect();
        i["parameters"] = json!({"binary_data_size": data.len() * 8});
        i.as_object_mut().expect("input").remove("data");
        raw.extend(data.iter().flat_map(|v| v.to_le_bytes()));
        head["inputs"].as_array_mut().expect("inputs").push(i);
    }
    let head = head.to_string();
    let mut body = head.clone().into_bytes();
    body.extend_from_slice(&raw);
    let send = |body: Vec<u8>, json_length: usize| {
        http.raw(token, "POST", "/v2/models/cancer/versions/1/infer")
            .header("Inference-Header-Content-Length", json_length)
            .body(body)
            .send()
            .expect("request")
    };
    let resp = send(body.clone(), head.len());
    assert_eq!(resp.status(), 200);
    let n: usize = resp.headers()["inference-header-content-length"]
        .to_str()
        .expect("header")
        .parse()
        .expect("length");
    let bytes = resp.bytes().expect("body");
    let out: Value = serde_json::from_slice(&bytes[..n]).expect("json part");
    assert_eq!(
        out["outputs"][0]["parameters"]["binary_data_size"],
        bytes.len() - n
    );
    let mut labels = Vec::new();
    let mut rest = &bytes[n..];
    while let Some((len, after)) = rest.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len) as usize;
        labels.push(String::from_utf8(after[..len].to_vec()).expect("utf8"));
        rest = &after[len..];
    }
    assert_eq!(labels, got[..3]);
    // A truncated body is the caller's mistake.
    let resp = send(body[..body.len() - 5].to_vec(), head.len());
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().expect("json");
    assert!(
        v["error"].as_str().unwrap_or("").contains("truncated"),
        "{v}"
    );

    // An ONNX model made elsewhere — here the graph version 1 carries, stored alone as
    // `mlflow.onnx.log_model` stores one — is served tensor by tensor on tract.
    let v1 = q.mlflow_get(
        "default",
        "model-versions/get-download-uri?name=cancer&version=1",
    );
    let source = v1["artifact_uri"].as_str().expect("artifact_uri");
    let path = source
        .strip_prefix("mlflow-artifacts:")
        .unwrap_or_else(|| panic!("{v1}"))
        .trim_matches('/');
    let artifacts = "/api/2.0/mlflow-artifacts/artifacts";
    let graph = http
        .raw(token, "GET", &format!("{artifacts}/{path}/model.onnx"))
        .send()
        .expect("request")
        .bytes()
        .expect("model.onnx");
    // Beside the run, under its experiment, as a second logged model would be.
    let experiment = path.split('/').next().expect("experiment");
    let elsewhere = format!("{experiment}/elsewhere/model");
    let put = http
        .raw(token, "PUT", &format!("{artifacts}/{elsewhere}/model.onnx"))
        .body(graph.to_vec())
        .send()
        .expect("request");
    assert_eq!(put.status(), 200);
    for (path, body) in [
        ("registered-models/create", json!({"name": "cancer-onnx"})),
        (
            "model-versions/create",
            json!({"name": "cancer-onnx", "source": format!("mlflow-artifacts:/{elsewhere}")}),
        ),
    ] {
        let (s, v) = http.send(
            token,
            "POST",
            &format!("/api/2.0/mlflow/{path}"),
            Some(body),
        );
        assert_eq!(s, 200, "{v}");
    }
    let (s, meta) = http.send(token, "GET", "/v2/models/cancer-onnx", None);
    assert_eq!(s, 200, "{meta}");
    assert_eq!(meta["platform"], "onnxruntime_onnx");
    assert_eq!(meta["inputs"].as_array().map(Vec::len), Some(30), "{meta}");
    assert_eq!(meta["outputs"].as_array().map(Vec::len), Some(1), "{meta}");
    let result = meta["outputs"][0]["name"]
        .as_str()
        .expect("name")
        .to_string();
    let (inputs, _) = rows(40);
    let (s, onnx) = http.send(
        token,
        "POST",
        "/v2/models/cancer-onnx/infer",
        Some(json!({"inputs": inputs})),
    );
    assert_eq!(s, 200, "{onnx}");
    assert_eq!(onnx["outputs"][0]["name"], result.as_str());
    assert_eq!(onnx["outputs"][0]["shape"], json!([40, 1]));
    let from_onnx: Vec<f64> =
        serde_json::from_value(onnx["outputs"][0]["data"].clone()).expect("floats");
    assert_eq!(from_onnx.len(), logits.len());
    for (a, b) in from_onnx.iter().zip(&logits) {
        assert!((a - b).abs() < 1e-3, "onnx {a} vs native {b}");
    }
    let mut wide = rows(2).0;
    wide[0]["shape"] = json!([1, 2]);
    let (s, v) = http.send(
        token,
        "POST",
        "/v2/models/cancer-onnx/infer",
        Some(json!({"inputs": wide})),
    );
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"].as_str().is_some_and(|m| m.contains("[N, 1]")),
        "{v}"
    );
}

/// Every project serves: a model trained in `demo` and its deployment answer at
/// `/oip/demo/v2/…` (the base path Triton's HTTP client takes), and at `/v2/…` when a
/// `qanat-project` header names `demo` (as do the root MLflow routes); `/v2` alone is
/// still the default project's, and `deploy create` prints the URL that answers.
#[test]
fn every_project_serves_under_its_own_prefix() {
    let q = Qanat::start_with(vec![("QANAT_JOBS_CPUS".into(), "2".into())]);
    let (http, token) = (q.http(), &q.admin_token);
    let (ok, _, err) = q.cli(&["projects", "create", "demo"]);
    assert!(ok, "{err}");
    trained_cancer(&q, "demo", 5);
    public_probes(&http, "/oip/demo");

    // The registered model, by the prefix; not in the default project.
    let (s, meta) = http.send(token, "GET", "/oip/demo/v2/models/cancer", None);
    assert_eq!((s, &meta["versions"]), (200, &json!(["1"])), "{meta}");
    let (s, v) = http.send(token, "GET", "/v2/models/cancer", None);
    assert_eq!(s, 404, "{v}");
    assert!(v["error"].is_string(), "one error shape: {v}");
    let request = json!({"inputs": rows(2).0, "outputs": [{"name": "label"}]});
    let (s, out) = http.send(
        token,
        "POST",
        "/oip/demo/v2/models/cancer/versions/1/infer",
        Some(request.clone()),
    );
    assert_eq!(s, 200, "{out}");
    assert_eq!(
        out["outputs"][0]["data"].as_array().map(Vec::len),
        Some(2),
        "{out}"
    );

    // The header names the project where the path cannot (and gRPC's paths never do).
    let resp = http
        .raw(token, "GET", "/v2/models/cancer")
        .header("qanat-project", "demo")
        .send()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);

    // The root MLflow routes follow the same rule.
    let mlflow = "/api/2.0/mlflow/registered-models/get?name=cancer";
    assert_eq!(http.send(token, "GET", mlflow, None).0, 404);
    let resp = http
        .raw(token, "GET", mlflow)
        .header("qanat-project", "demo")
        .send()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);

    // A project that does not exist, or one the caller is not in, is refused.
    let (s, v) = http.send(token, "GET", "/oip/nowhere/v2/models/cancer", None);
    assert_eq!(s, 404, "{v}");
    assert!(
        v["error"].as_str().is_some_and(|m| m.contains("nowhere")),
        "{v}"
    );
    // A viewer of `default` is not one of `demo`, by the prefix or by the header: to
    // them it does not exist.
    let outsider = q.user_with_role("outsider", "default", "viewer");
    let (s, v) = http.send(&outsider, "GET", "/oip/demo/v2/models/cancer", None);
    assert_eq!(s, 404, "{v}");
    let resp = http
        .raw(&outsider, "POST", "/v2/models/cancer/infer")
        .header("qanat-project", "demo")
        .json(&request)
        .send()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 404);

    // `deploy create` in `demo` prints the URL that answers.
    let args: Vec<&str> = "create web --model cancer --primary 1".split(' ').collect();
    let out = deploy_in(&q, "demo", &args);
    let url = out
        .lines()
        .find_map(|l| l.strip_prefix("answers at "))
        .unwrap_or_else(|| panic!("no URL in {out}"));
    assert!(url.ends_with("/oip/demo/v2/models/web/infer"), "{url}");
    let resp = http
        .client
        .post(url)
        .bearer_auth(token)
        .json(&request)
        .send()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);
}

/// A version no runtime here loads (an MLflow scikit-learn model: MLmodel and a
/// pickle, but no signature, which the Python runtime needs) is refused at `deploy
/// create` with the reason, instead of a deployment whose every request fails; asked
/// directly, it answers the same reason. It is not marked unservable: it may be served
/// later. A version with no model files at all is not found, as before.
#[test]
fn a_version_no_runtime_serves_is_refused_at_deploy_with_its_flavors() {
    let q = Qanat::start_with(vec![]);
    let token = &q.admin_token;
    let mlmodel = b"artifact_path: model\nflavors:\n  python_function:\n    loader_module: mlflow.sklearn\n    model_path: model.pkl\n  sklearn:\n    pickled_model: model.pkl\n    serialization_format: cloudpickle\n".to_vec();
    q.register_files(
        token,
        "iris-sk",
        &[("MLmodel", mlmodel), ("model.pkl", b"\x80\x04N.".to_vec())],
    );
    q.register_files(token, "empty", &[("README.txt", b"no model here".to_vec())]);

    let (ok, out, err) = q.cli(&[
        "deploy",
        "-p",
        "default",
        "create",
        "web",
        "--model",
        "iris-sk",
        "--primary",
        "1",
    ]);
    assert!(!ok, "deployed: {out}");
    // A pickled scikit-learn model goes to the Python runtime, which needs the
    // signature to know the rows it takes: this one has none.
    assert!(
        err.contains("model:iris-sk@1 cannot be served") && err.contains("no input signature"),
        "{err}"
    );
    assert!(!out.contains("answers at"), "{out}");
    let (s, v) = q
        .http()
        .send(token, "GET", "/v2/models/iris-sk/versions/1", None);
    assert_eq!(s, 400, "{v}");
    assert!(
        v["error"].as_str().is_some_and(|m| m.contains("signature")),
        "{v}"
    );
    // A version without model files is not found (they may yet arrive), and says what
    // it lacks.
    let (s, v) = q
        .http()
        .send(token, "GET", "/v2/models/empty/versions/1", None);
    assert_eq!(s, 404, "{v}");
    assert!(
        v.to_string()
            .contains("has none of spec.json, weights.safetensors or model.onnx"),
        "{v}"
    );
    // Not marked: nothing in the registry says it can never be served.
    let (s, v) = q.http().send(
        token,
        "GET",
        "/api/2.0/mlflow/model-versions/get?name=iris-sk&version=1",
        None,
    );
    assert_eq!(s, 200, "{v}");
    assert!(!v.to_string().contains("qanat.unservable"), "{v}");
}

/// A fixture of qanat-runtime's tree suite: the model file's bytes, the rows without
/// missing values, and the library's own predictions on them.
fn tree_fixture(case: &str) -> (Vec<u8>, Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../qanat-runtime/tests/fixtures/trees");
    let doc: Value = serde_json::from_slice(
        &std::fs::read(dir.join(format!("{case}.json"))).expect("as expected"),
    )
    .expect("as expected");
    let model =
        std::fs::read(dir.join(doc["model"].as_str().expect("as expected"))).expect("as expected");
    let floats = |v: &Value| -> Vec<Option<f64>> {
        v.as_array()
            .expect("as expected")
            .iter()
            .map(Value::as_f64)
            .collect()
    };
    let (mut rows, mut want) = (Vec::new(), Vec::new());
    for (r, p) in doc["rows"]
        .as_array()
        .expect("as expected")
        .iter()
        .zip(doc["predict"].as_array().expect("as expected"))
    {
        let r = floats(r);
        if r.iter().all(Option::is_some) {
            rows.push(r.into_iter().flatten().collect());
            want.push(floats(p).into_iter().flatten().collect());
        }
    }
    (model, rows, want)
}

/// The answer of model `name` to `rows` as one `input-0` tensor of `datatype`; it
/// must succeed.
fn infer_rows(q: &Qanat, name: &str, datatype: &str, rows: &[Vec<f64>]) -> Value {
    let flat: Vec<f64> = rows.iter().flatten().copied().collect();
    let shape = [rows.len(), rows.first().map_or(0, Vec::len)];
    let (s, v) = q.http().send(
        &q.admin_token,
        "POST",
        &format!("/v2/models/{name}/infer"),
        Some(json!({"inputs": [{"name": "input-0", "shape": shape, "datatype": datatype, "data": flat}]})),
    );
    assert_eq!(s, 200, "{v}");
    v
}

/// Output `name` of a response, as numbers.
fn output(v: &Value, name: &str) -> Vec<f64> {
    let o = v["outputs"]
        .as_array()
        .and_then(|o| o.iter().find(|o| o["name"] == name))
        .unwrap_or_else(|| panic!("no output {name} in {v}"));
    o["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

#[test]
fn mlflow_tree_flavors_are_served_natively_with_their_own_outputs() {
    let q = Qanat::start_with(vec![]);
    let token = &q.admin_token;
    // An XGBoost classifier as mlflow.xgboost logs it (the scikit-learn wrapper, early
    // stopped: predict stops at its best iteration), and a LightGBM booster.
    let (xgb, rows, want) = tree_fixture("xgb_sklearn_early");
    let mlmodel = b"flavors:\n  python_function:\n    data: model.ubj\n    loader_module: mlflow.xgboost\n  xgboost:\n    data: model.ubj\n    model_class: xgboost.sklearn.XGBClassifier\n    model_format: ubj\n".to_vec();
    q.register_files(token, "xgb", &[("MLmodel", mlmodel), ("model.ubj", xgb)]);
    let out = deploy(&q, &["create", "xgb", "--model", "xgb", "--primary", "1"]);
    assert!(out.contains("answers at"), "{out}");
    let (ok, status, err) = q.cli(&["deploy", "-p", "default", "status", "xgb"]);
    assert!(ok, "{err}");
    assert!(
        status.contains("qanat trees (xgboost XGBClassifier"),
        "{status}"
    );

    let n = rows.len();
    let v = infer_rows(&q, "xgb", "FP32", &rows);
    let (labels, proba) = (output(&v, "predict"), output(&v, "predict_proba"));
    assert_eq!(proba.len(), 2 * n);
    for (i, w) in want.iter().enumerate() {
        assert!(
            (proba[2 * i + 1] - w[0]).abs() < 1e-6,
            "row {i}: {} vs {}",
            proba[2 * i + 1],
            w[0]
        );
        assert_eq!(labels[i], f64::from(u8::from(w[0] > 0.5)), "row {i}");
    }

    let (lgb, rows, want) = tree_fixture("lgb_multiclass");
    let mlmodel = b"flavors:\n  lightgbm:\n    data: model.lgb\n    model_class: lightgbm.basic.Booster\nsignature:\n  inputs: '[{\"type\": \"tensor\", \"tensor-spec\": {\"dtype\": \"float64\", \"shape\": [-1, 6]}}]'\n  outputs: '[{\"type\": \"tensor\", \"tensor-spec\": {\"dtype\": \"float64\", \"shape\": [-1, 3]}}]'\n".to_vec();
    q.register_files(token, "lgb", &[("MLmodel", mlmodel), ("model.lgb", lgb)]);
    let (s, meta) = q.http().send(token, "GET", "/v2/models/lgb", None);
    assert_eq!(s, 200, "{meta}");
    assert_eq!(meta["platform"], "qanat_trees");
    assert_eq!(meta["inputs"][0]["datatype"], "FP64", "{meta}");
    assert_eq!(meta["outputs"][0]["shape"], json!([-1, 3]), "{meta}");
    let v = infer_rows(&q, "lgb", "FP64", &rows);
    assert_eq!(v["outputs"][0]["datatype"], "FP64");
    let got = output(&v, "predict");
    let want: Vec<f64> = want.into_iter().flatten().collect();
    assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!((a - b).abs() < 1e-6, "value {i}: {a} vs {b}");
    }
    // A damaged model file is refused with the reason, at deploy.
    let mlmodel = b"flavors:\n  lightgbm:\n    data: model.lgb\n".to_vec();
    q.register_files(
        token,
        "broken",
        &[
            ("MLmodel", mlmodel),
            ("model.lgb", b"tree\nnum_class=1\n".to_vec()),
        ],
    );
    let (ok, _, err) = q.cli(&[
        "deploy",
        "-p",
        "default",
        "create",
        "b",
        "--model",
        "broken",
        "--primary",
        "1",
    ]);
    assert!(!ok && err.contains("not a LightGBM model file"), "{err}");
}

/// A fixture of qanat-runtime's scikit-learn suite: the pickle and its document.
fn sklearn_fixture(case: &str) -> (Vec<u8>, Value) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../qanat-runtime/tests/fixtures/sklearn");
    let doc: Value = serde_json::from_slice(
        &std::fs::read(dir.join(format!("{case}.json"))).expect("as expected"),
    )
    .expect("as expected");
    let model = std::fs::read(dir.join(format!("{case}.pkl"))).expect("as expected");
    (model, doc)
}

/// scikit-learn models as `mlflow.sklearn` pickles them are read as data, never run,
/// and served natively: labels and probabilities equal to scikit-learn's own. A
/// pickle of an estimator not read natively goes to the Python runtime; with none
/// (switched off here), it is refused at deploy, naming the estimator.
#[test]
fn mlflow_sklearn_pickles_are_served_natively_as_scikit_learn_predicts() {
    let q = Qanat::start_with(vec![(
        "QANAT_SERVING_PYTHON_ENABLED".into(),
        "false".into(),
    )]);
    let token = &q.admin_token;
    let mlmodel = b"flavors:\n  python_function:\n    loader_module: mlflow.sklearn\n    model_path: model.pkl\n  sklearn:\n    pickled_model: model.pkl\n    serialization_format: cloudpickle\n".to_vec();
    for (case, runtime) in [
        (
            "forest_classifier",
            "qanat sklearn (RandomForestClassifier, 7 trees, cpu)",
        ),
        (
            "logistic_multinomial",
            "qanat sklearn (Pipeline(SimpleImputer → StandardScaler → LogisticRegression), cpu)",
        ),
    ] {
        let (pkl, doc) = sklearn_fixture(case);
        let name = case.replace('_', "-");
        q.register_files(
            token,
            &name,
            &[("MLmodel", mlmodel.clone()), ("model.pkl", pkl)],
        );
        let out = deploy(&q, &["create", &name, "--model", &name, "--primary", "1"]);
        assert!(out.contains("answers at"), "{out}");
        let (ok, status, err) = q.cli(&["deploy", "-p", "default", "status", &name]);
        assert!(ok && status.contains(runtime), "{status}{err}");
        // Rows without missing values (JSON has no NaN).
        let (mut rows, mut proba, mut labels) = (Vec::new(), Vec::new(), Vec::new());
        for ((r, p), l) in doc["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .zip(doc["expected"].as_array().expect("expected"))
            .zip(doc["labels"].as_array().expect("labels"))
        {
            let r: Vec<Option<f64>> = r
                .as_array()
                .expect("a row")
                .iter()
                .map(Value::as_f64)
                .collect();
            if r.iter().all(Option::is_some) {
                rows.push(r.into_iter().flatten().collect::<Vec<f64>>());
                proba.extend(
                    p.as_array()
                        .expect("a row")
                        .iter()
                        .map(|v| v.as_f64().expect("a number")),
                );
                labels.push(l.clone());
            }
        }
        assert!(rows.len() >= 10, "{case}: {} rows", rows.len());
        let v = infer_rows(&q, &name, "FP64", &rows);
        let got = output(&v, "predict_proba");
        assert_eq!(got.len(), proba.len(), "{case}");
        for (i, (a, b)) in got.iter().zip(&proba).enumerate() {
            assert!((a - b).abs() < 1e-6, "{case} value {i}: {a} vs {b}");
        }
        let predict = v["outputs"]
            .as_array()
            .and_then(|o| o.iter().find(|o| o["name"] == "predict"))
            .expect("predict");
        assert_eq!(predict["data"], Value::Array(labels), "{case}");
    }
    let (s, meta) = q
        .http()
        .send(token, "GET", "/v2/models/forest-classifier", None);
    assert_eq!(s, 200, "{meta}");
    assert_eq!(meta["platform"], "qanat_sklearn", "{meta}");
    assert_eq!(meta["outputs"][0]["datatype"], "BYTES", "{meta}");

    let (pkl, _) = sklearn_fixture("refused_hist_gb");
    q.register_files(token, "hgb", &[("MLmodel", mlmodel), ("model.pkl", pkl)]);
    let (ok, out, err) = q.cli(&[
        "deploy",
        "-p",
        "default",
        "create",
        "hgb",
        "--model",
        "hgb",
        "--primary",
        "1",
    ]);
    assert!(!ok, "deployed: {out}");
    assert!(
        err.contains("HistGradientBoostingClassifier, which is not read natively")
            && err.contains("no Python runtime"),
        "{err}"
    );
}

/// One inference on deployment (or model) `name`, with a routing key when given:
/// (status, the version that answered or the error).
fn infer_one(http: &common::Http, token: &str, name: &str, key: Option<&str>) -> (u16, String) {
    let mut rb = http
        .raw(token, "POST", &format!("/v2/models/{name}/infer"))
        .json(&json!({"inputs": rows(1).0, "outputs": [{"name": "label"}]}));
    if let Some(k) = key {
        rb = rb.header("X-Routing-Key", k);
    }
    let resp = rb.send().expect("request");
    let status = resp.status().as_u16();
    let v: Value = resp.json().unwrap_or(Value::Null);
    let what = if status == 200 {
        v["model_version"].as_str().unwrap_or("?").to_string()
    } else {
        v["error"].as_str().unwrap_or("?").to_string()
    };
    (status, what)
}

/// Counts answers by version over `n` requests; every one must succeed.
fn split(
    http: &common::Http,
    token: &str,
    name: &str,
    n: usize,
) -> std::collections::BTreeMap<String, usize> {
    let mut by = std::collections::BTreeMap::new();
    for _ in 0..n {
        let (s, v) = infer_one(http, token, name, None);
        assert_eq!(s, 200, "{v}");
        *by.entry(v).or_default() += 1;
    }
    by
}

fn deploy(q: &Qanat, args: &[&str]) -> String {
    deploy_in(q, "default", args)
}

fn deploy_in(q: &Qanat, project: &str, args: &[&str]) -> String {
    let mut all = vec!["deploy", "-p", project];
    all.extend_from_slice(args);
    let (ok, out, err) = q.cli(&all);
    assert!(ok, "qanat {}: {err}", all.join(" "));
    out
}

fn status(q: &Qanat, name: &str) -> Value {
    serde_json::from_str(&deploy(q, &["status", name, "-o", "json"])).expect("status json")
}

#[test]
fn deployments_split_traffic_promote_and_roll_back_without_dropping_requests() {
    let q = Qanat::start_with(vec![("QANAT_JOBS_CPUS".into(), "2".into())]);
    q.push_example("cancer", "breast_cancer.csv");
    q.train(json!({
        "name": "cancer-mlp", "inputs": ["dataset:cancer@1"], "target": "diagnosis",
        "model": "mlp", "hidden": [16], "epochs": 5, "seed": 3, "register": "cancer",
    }));
    let http = q.http();
    let token = &q.admin_token;
    // Version 2: the same package; version 3: one whose files are missing.
    let v1 = q.mlflow_get("default", "model-versions/get?name=cancer&version=1");
    let source = v1["model_version"]["source"].as_str().expect("source");
    for src in [source, "mlflow-artifacts:/nowhere/model"] {
        let (s, v) = http.send(
            token,
            "POST",
            "/api/2.0/mlflow/model-versions/create",
            Some(json!({"name": "cancer", "source": src})),
        );
        assert_eq!(s, 200, "{v}");
    }

    // A canary of 30%: the split holds within 4 standard deviations (n = 300).
    let out = deploy(
        &q,
        &[
            "create",
            "web",
            "--model",
            "cancer",
            "--primary",
            "1",
            "--canary",
            "2",
            "--canary-weight",
            "30",
        ],
    );
    assert!(out.contains("/v2/models/web/infer"), "{out}");
    let by = split(&http, token, "web", 300);
    let canary = by.get("2").copied().unwrap_or(0);
    assert!((90 - 32..=90 + 32).contains(&canary), "{by:?}");
    assert_eq!(by.keys().collect::<Vec<_>>(), ["1", "2"], "{by:?}");
    let (s, meta) = http.send(token, "GET", "/v2/models/web", None);
    assert_eq!((s, &meta["versions"]), (200, &json!(["1", "2"])), "{meta}");

    // Triton's repository extension: the deployment is loaded here, the model it
    // serves not under its own name; unload and load act on this server.
    let index = |http: &common::Http| {
        let (s, v) = http.send(token, "POST", "/v2/repository/index", Some(json!({})));
        assert_eq!(s, 200, "{v}");
        v.as_array()
            .expect("index")
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or("").to_string(),
                    e["state"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    let ready = |n: &str| (n.to_string(), "READY".to_string());
    let unavailable = |n: &str| (n.to_string(), "UNAVAILABLE".to_string());
    assert_eq!(index(&http), [ready("web"), unavailable("cancer")]);
    let (s, v) = http.send(token, "POST", "/v2/repository/models/web/unload", None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(index(&http)[0], unavailable("web"));
    let (s, v) = http.send(token, "POST", "/v2/repository/models/web/load", None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(index(&http)[0], ready("web"));
    let (s, v) = http.send(token, "POST", "/v2/repository/models/nope/load", None);
    assert_eq!(s, 404, "{v}");

    // Sticky A/B: a key keeps its side; both sides get keys.
    deploy(&q, &["update", "web", "--sticky", "--canary-weight", "50"]);
    let mut sides = std::collections::BTreeSet::new();
    for k in 0..30 {
        let key = format!("user-{k}");
        let first = infer_one(&http, token, "web", Some(&key));
        for _ in 0..3 {
            assert_eq!(infer_one(&http, token, "web", Some(&key)), first, "{key}");
        }
        sides.insert(first.1);
    }
    assert_eq!(sides.len(), 2, "{sides:?}");

    // A shadow gets a copy of the traffic; its answers are compared, never returned.
    deploy(
        &q,
        &[
            "update",
            "web",
            "--no-canary",
            "--shadow",
            "2",
            "--weighted",
        ],
    );
    assert_eq!(
        split(&http, token, "web", 40).keys().collect::<Vec<_>>(),
        ["1"]
    );
    let mut compared = 0;
    for _ in 0..50 {
        let st = status(&q, "web");
        let shadow = st["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .find(|t| t["role"] == "shadow")
            .cloned()
            .expect("a shadow");
        compared = shadow["shadow"]["compared"].as_u64().unwrap_or(0);
        if compared == 40 {
            // The same package: every label agrees and outputs are equal.
            assert_eq!(
                shadow["shadow"]["agreed"], shadow["shadow"]["rows"],
                "{shadow}"
            );
            assert_eq!(shadow["shadow"]["mean_abs_diff"], 0.0, "{shadow}");
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(compared, 40);

    // The inference log: each answer and each shadow's copy, with who asked; an
    // input named PII is written as a keyed pseudonym.
    deploy(&q, &["update", "web", "--pii", "radius_mean"]);
    assert_eq!(infer_one(&http, token, "web", None).0, 200);
    let mut records = Vec::new();
    for _ in 0..100 {
        let log: Value = serde_json::from_str(&deploy(
            &q,
            &["log", "web", "--limit", "1000", "-o", "json"],
        ))
        .expect("log json");
        records = log["records"].as_array().cloned().unwrap_or_default();
        let shadows = records.iter().filter(|r| r["role"] == "shadow").count();
        if shadows >= 41 && records.len() >= 82 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let of = |role: &str| {
        records
            .iter()
            .filter(|r| r["role"] == role)
            .collect::<Vec<_>>()
    };
    let shadowed: std::collections::BTreeSet<&str> = of("shadow")
        .iter()
        .filter_map(|r| r["request_id"].as_str())
        .collect();
    let answered: Vec<&Value> = of("answer")
        .into_iter()
        .filter(|r| shadowed.contains(r["request_id"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        answered.len(),
        shadowed.len(),
        "each shadowed request was answered and logged"
    );
    assert!(answered
        .iter()
        .all(|r| r["version"] == "1" && r["actor"] == "admin"));
    assert!(of("shadow").iter().all(|r| r["version"] == "2"));
    assert!(shadowed.len() >= 41, "{}", shadowed.len());
    let newest = of("answer")[0];
    let inputs: Value =
        serde_json::from_str(newest["inputs"].as_str().expect("inputs")).expect("json");
    let hidden = inputs["radius_mean"][0].as_str().expect("pseudonym");
    assert!(hidden.starts_with("pii:"), "{inputs}");
    assert!(inputs["texture_mean"][0].is_number(), "{inputs}");
    let outputs: Value =
        serde_json::from_str(newest["outputs"].as_str().expect("outputs")).expect("json");
    assert!(outputs["label"][0].is_string(), "{outputs}");

    // A version failing its health check gets no traffic.
    deploy(
        &q,
        &[
            "update",
            "web",
            "--no-shadow",
            "--canary",
            "3",
            "--canary-weight",
            "50",
        ],
    );
    let st = status(&q, "web");
    let three = &st["targets"][1];
    assert_eq!(
        (three["version"].as_str(), three["healthy"].as_bool()),
        (Some("3"), Some(false)),
        "{st}"
    );
    assert_eq!(
        split(&http, token, "web", 30).keys().collect::<Vec<_>>(),
        ["1"]
    );

    // Promote a canary; roll back under continuous load: every request is answered.
    deploy(
        &q,
        &["update", "web", "--canary", "2", "--canary-weight", "20"],
    );
    deploy(&q, &["promote", "web"]);
    assert_eq!(
        split(&http, token, "web", 20).keys().collect::<Vec<_>>(),
        ["2"]
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (sent, answered, versions) = std::thread::scope(|s| {
        let load: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let http = q.http();
                    let (mut sent, mut ok) = (0, 0);
                    let mut seen = std::collections::BTreeSet::new();
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        sent += 1;
                        let (st, v) = infer_one(&http, token, "web", None);
                        assert_eq!(st, 200, "dropped during the rollback: {v}");
                        ok += 1;
                        seen.insert(v);
                    }
                    (sent, ok, seen)
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(300));
        deploy(&q, &["rollback", "web"]);
        std::thread::sleep(std::time::Duration::from_millis(500));
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        load.into_iter()
            .map(|h| h.join().expect("load thread"))
            .fold(
                (0, 0, std::collections::BTreeSet::new()),
                |(a, b, mut c), (x, y, z)| {
                    c.extend(z);
                    (a + x, b + y, c)
                },
            )
    });
    assert_eq!(sent, answered);
    assert!(sent > 20, "{sent}");
    assert!(
        versions.contains("1") && versions.contains("2"),
        "{versions:?}"
    );
    let history = deploy(&q, &["history", "web"]);
    for action in [
        "create",
        "update",
        "promote",
        "rollback",
        "rolled back to revision 6",
    ] {
        assert!(history.contains(action), "{action}: {history}");
    }

    // Bad deployments are refused with the reason.
    let refusals: [(&[&str], &str); 4] = [
        (
            &["create", "web", "--model", "cancer", "--primary", "1"],
            "already exists",
        ),
        (
            &["create", "w2", "--model", "cancer", "--primary", "9"],
            "not found",
        ),
        (
            &["create", "w3", "--model", "nope", "--primary", "1"],
            "nope",
        ),
        (&["rollback", "web", "--to", "99"], "earlier revision"),
    ];
    for (args, says) in refusals {
        let mut all = vec!["deploy", "-p", "default"];
        all.extend_from_slice(args);
        let (ok, _, err) = q.cli(&all);
        assert!(!ok && err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn the_batcher_forms_preferred_batches_and_a_full_queue_refuses() {
    let q = Qanat::start_with(vec![("QANAT_JOBS_CPUS".into(), "2".into())]);
    q.push_example("cancer", "breast_cancer.csv");
    q.train(json!({
        "name": "cancer-mlp", "inputs": ["dataset:cancer@1"], "target": "diagnosis",
        "model": "mlp", "hidden": [16], "epochs": 3, "seed": 4, "register": "cancer",
    }));
    let token = &q.admin_token;

    // Preferred size 4, a long delay: eight senders' requests go in batches of 4.
    deploy(
        &q,
        &[
            "create",
            "batched",
            "--model",
            "cancer",
            "--primary",
            "1",
            "--max-batch-size",
            "8",
            "--preferred-batch-size",
            "4",
            "--max-queue-delay-us",
            "300000",
            "--instances",
            "1",
        ],
    );
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                let http = q.http();
                for _ in 0..6 {
                    assert_eq!(infer_one(&http, token, "batched", None).0, 200);
                }
            });
        }
    });
    let st = status(&q, "batched");
    let sizes = &st["targets"][0]["batching"]["batch_sizes"];
    let fours = sizes["4"].as_u64().unwrap_or(0);
    let batches: u64 = sizes
        .as_object()
        .expect("sizes")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    // 48 requests, the health probe's batch of 1 aside: most ran in batches of 4.
    assert!(fours * 4 >= 32, "{sizes}");
    assert!(batches < 20, "{sizes}");

    // One worker, one place in the queue, large requests: a flood is refused with
    // 429 at once rather than queued without bound; nothing fails otherwise.
    deploy(
        &q,
        &[
            "create",
            "tiny",
            "--model",
            "cancer",
            "--primary",
            "1",
            "--max-batch-size",
            "1",
            "--max-queue-size",
            "1",
            "--instances",
            "1",
        ],
    );
    let body = json!({"inputs": rows(400).0, "outputs": [{"name": "label"}]});
    let (ok, refused) = std::thread::scope(|s| {
        let senders: Vec<_> = (0..12)
            .map(|_| {
                s.spawn(|| {
                    let http = q.http();
                    let (mut ok, mut refused) = (0, 0);
                    for _ in 0..8 {
                        let resp = http
                            .raw(token, "POST", "/v2/models/tiny/infer")
                            .json(&body)
                            .send()
                            .expect("request");
                        match resp.status().as_u16() {
                            200 => ok += 1,
                            429 => {
                                let v: Value = resp.json().expect("json");
                                assert!(
                                    v["error"].as_str().unwrap_or("").contains("queue is full"),
                                    "{v}"
                                );
                                refused += 1;
                            }
                            other => panic!("{other}: {}", resp.text().unwrap_or_default()),
                        }
                    }
                    (ok, refused)
                })
            })
            .collect();
        senders
            .into_iter()
            .map(|h| h.join().expect("sender"))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    assert_eq!(ok + refused, 96);
    assert!(refused > 0 && ok > 0, "ok {ok}, refused {refused}");
    let st = status(&q, "tiny");
    assert_eq!(st["targets"][0]["batching"]["rejected"], refused, "{st}");

    // The same counts in Prometheus' text, per deployment and version.
    let text = q
        .http()
        .raw(&q.admin_token, "GET", "/metrics")
        .send()
        .expect("metrics")
        .text()
        .expect("text");
    let value = |prefix: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in the metrics"))
    };
    let labels = r#"project="default",deployment="tiny",version="1",role="answer""#;
    assert_eq!(
        value(&format!(
            "qanat_serving_requests_total{{{labels},outcome=\"exhausted\"}}"
        )),
        refused as f64
    );
    assert_eq!(
        value(&format!(
            "qanat_serving_requests_total{{{labels},outcome=\"ok\"}}"
        )),
        ok as f64
    );
    assert!(
        value(&format!(
            "qanat_serving_request_duration_seconds_count{{{labels}}}"
        )) >= ok as f64
    );
    let batched = r#"project="default",model="cancer",version="1""#;
    assert!(value(&format!("qanat_serving_batch_rows_count{{{batched}}}")) >= batches as f64);
}

/// `qanat serve` beside `qanat server`: the data plane answers deployments and models
/// with the same tokens, follows a deployment changed through the server within the
/// refresh period, and has no control-plane routes.
#[test]
fn qanat_serve_is_a_data_plane_that_follows_deployment_changes() {
    use std::io::BufRead;
    let q = Qanat::start_with(vec![("QANAT_JOBS_CPUS".into(), "2".into())]);
    q.push_example("cancer", "breast_cancer.csv");
    q.train(json!({
        "name": "cancer-mlp", "inputs": ["dataset:cancer@1"], "target": "diagnosis",
        "model": "mlp", "hidden": [8], "epochs": 2, "seed": 5, "register": "cancer",
    }));
    let v1 = q.mlflow_get("default", "model-versions/get?name=cancer&version=1");
    let source = v1["model_version"]["source"].as_str().expect("source");
    let (s, v) = q.api(
        "POST",
        "/api/2.0/mlflow/model-versions/create",
        Some(json!({"name": "cancer", "source": source})),
    );
    assert_eq!(s, 200, "{v}");
    deploy(
        &q,
        &["create", "web", "--model", "cancer", "--primary", "1"],
    );

    let mut child = common::base_cmd(q.dir.path(), &[])
        .arg("serve")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("qanat serve");
    let stdout = child.stdout.take().expect("stdout");
    let url = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("qanat serve listening on ")
                .map(str::to_string)
        })
        .expect("qanat serve started");
    let plane = common::Http {
        client: reqwest::blocking::Client::new(),
        url,
    };
    let token = &q.admin_token;
    assert_eq!(plane.send("", "GET", "/v2/health/ready", None).0, 200);
    assert_eq!(
        split(&plane, token, "web", 5).keys().collect::<Vec<_>>(),
        ["1"]
    );
    assert_eq!(
        split(&plane, token, "cancer", 2).keys().collect::<Vec<_>>(),
        ["2"]
    );
    // No control plane here: deployments are changed through the server.
    let (s, _) = plane.send(token, "GET", "/api/v1/projects/default/deployments", None);
    assert_eq!(s, 404);
    deploy(&q, &["update", "web", "--primary", "2"]);
    let mut followed = false;
    for _ in 0..50 {
        if infer_one(&plane, token, "web", None) == (200, "2".to_string()) {
            followed = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        followed,
        "qanat serve did not follow the deployment's change"
    );
}

/// The feature repo of the enrichment test: the 30 cell measurements per patient,
/// pushed; `radius_mean` is PII.
fn cells_repo() -> String {
    let (inputs, _) = rows(1);
    let mut schema = String::new();
    for i in &inputs {
        let name = i["name"].as_str().expect("name");
        let pii = if name == "radius_mean" {
            ", pii: true"
        } else {
            ""
        };
        schema.push_str(&format!("  - {{name: {name}, type: float64{pii}}}\n"));
    }
    format!(
        "kind: entity\nname: patient\njoin_keys: [{{name: patient_id, type: int64}}]\n---\n\
         kind: source\nname: cells_push\ntype: push\ntimestamp_field: event_timestamp\n---\n\
         kind: feature_view\nname: cells\nentities: [patient]\nsource: cells_push\nttl: 0\nschema:\n{schema}---\n\
         kind: feature_service\nname: cancer_features\nfeatures: [cells]\n"
    )
}

#[test]
fn a_deployment_reads_its_inputs_from_the_online_store_by_entity_key() {
    let q = Qanat::start_with(vec![("QANAT_JOBS_CPUS".into(), "2".into())]);
    q.push_example("cancer", "breast_cancer.csv");
    q.train(json!({
        "name": "cancer-mlp", "inputs": ["dataset:cancer@1"], "target": "diagnosis",
        "model": "mlp", "hidden": [16], "epochs": 5, "seed": 4, "register": "cancer",
    }));
    let http = q.http();
    let token = &q.admin_token;
    let repo = q.dir.path().join("cells-repo");
    std::fs::create_dir_all(&repo).expect("repo dir");
    std::fs::write(repo.join("cells.yaml"), cells_repo()).expect("repo");
    let (ok, _, err) = q.cli(&[
        "features",
        "-p",
        "default",
        "apply",
        repo.to_str().expect("path"),
    ]);
    assert!(ok, "{err}");

    // Patients 1..=40 are the table's first 40 rows, pushed online.
    let (inputs, _) = rows(40);
    let mut df = serde_json::Map::new();
    df.insert("patient_id".into(), json!((1..=40).collect::<Vec<i64>>()));
    df.insert(
        "event_timestamp".into(),
        json!(vec!["2026-06-01T00:00:00Z"; 40]),
    );
    for i in &inputs {
        let mut flat = Vec::new();
        flatten(&i["data"], &mut flat);
        df.insert(i["name"].as_str().expect("name").into(), json!(flat));
    }
    let (s, pushed) = http.send(
        token,
        "POST",
        "/push",
        Some(json!({"push_source_name": "cells_push", "to": "online", "df": df})),
    );
    assert_eq!((s, &pushed["accepted"]), (200, &json!(40)), "{pushed}");

    deploy(
        &q,
        &[
            "create",
            "cells",
            "--model",
            "cancer",
            "--primary",
            "1",
            "--features",
            "cancer_features",
        ],
    );
    // Its metadata asks for what a caller sends: the entity key.
    let (s, meta) = http.send(token, "GET", "/v2/models/cells", None);
    assert_eq!(s, 200, "{meta}");
    assert_eq!(
        meta["inputs"],
        json!([{"name": "patient_id", "datatype": "INT64", "shape": [-1, 1]}]),
        "{meta}"
    );
    let keys = |ids: Vec<i64>| json!({"name": "patient_id", "datatype": "INT64", "shape": [ids.len()], "data": ids});
    // Keys only: the answers equal those for the features sent in full.
    let (s, by_key) = http.send(
        token,
        "POST",
        "/v2/models/cells/infer",
        Some(json!({"inputs": [keys((1..=40).collect())], "outputs": [{"name": "output"}]})),
    );
    assert_eq!(s, 200, "{by_key}");
    let (s, direct) = http.send(
        token,
        "POST",
        "/v2/models/cancer/versions/1/infer",
        Some(json!({"inputs": inputs, "outputs": [{"name": "output"}]})),
    );
    assert_eq!(s, 200, "{direct}");
    assert_eq!(by_key["outputs"][0]["shape"], json!([40, 1]));
    assert_eq!(by_key["outputs"][0]["data"], direct["outputs"][0]["data"]);

    // An input the request gives wins over the stored feature.
    let (one, _) = rows(1);
    let mut radius = one[0].clone();
    radius["data"] = json!([[40.0]]);
    let (s, given) = http.send(
        token,
        "POST",
        "/v2/models/cells/infer",
        Some(json!({"inputs": [keys(vec![1]), radius], "outputs": [{"name": "output"}]})),
    );
    assert_eq!(s, 200, "{given}");
    assert_ne!(
        given["outputs"][0]["data"][0],
        direct["outputs"][0]["data"][0]
    );

    // An unknown patient is refused by default, naming the entity and the feature;
    // no keys at all is refused too.
    let (s, refused) = http.send(
        token,
        "POST",
        "/v2/models/cells/infer",
        Some(json!({"inputs": [keys(vec![1, 999])]})),
    );
    assert_eq!(s, 400, "{refused}");
    let msg = refused["error"].as_str().expect("error");
    assert!(
        msg.contains("patient_id=999") && msg.contains("NOT_FOUND"),
        "{msg}"
    );
    let (s, none) = http.send(
        token,
        "POST",
        "/v2/models/cells/infer",
        Some(json!({"inputs": [radius_only()]})),
    );
    assert_eq!(s, 400, "{none}");
    assert!(
        none["error"]
            .as_str()
            .is_some_and(|m| m.contains("entity keys")),
        "{none}"
    );

    // Under `default`, a missing feature takes its default or is imputed.
    deploy(
        &q,
        &[
            "update",
            "cells",
            "--on-missing",
            "default",
            "--feature-default",
            "radius_mean=14.1",
        ],
    );
    let (s, filled) = http.send(
        token,
        "POST",
        "/v2/models/cells/infer",
        Some(json!({"inputs": [keys(vec![1, 999])], "outputs": [{"name": "label"}]})),
    );
    assert_eq!(s, 200, "{filled}");
    assert_eq!(filled["outputs"][0]["shape"], json!([2]));

    // The log keeps the keys beside the model's inputs; the PII feature is
    // pseudonymized.
    let mut records = Vec::new();
    for _ in 0..100 {
        let log: Value = serde_json::from_str(&deploy(
            &q,
            &["log", "cells", "--limit", "100", "-o", "json"],
        ))
        .expect("log json");
        records = log["records"].as_array().cloned().unwrap_or_default();
        if records.len() >= 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(records.len() >= 3, "{records:?}");
    let inputs: Value =
        serde_json::from_str(records[0]["inputs"].as_str().expect("inputs")).expect("json");
    assert_eq!(inputs["patient_id"], json!([1, 999]), "{inputs}");
    assert!(
        inputs["radius_mean"][0]
            .as_str()
            .is_some_and(|v| v.starts_with("pii:")),
        "{inputs}"
    );
    assert!(inputs["texture_mean"][0].is_number(), "{inputs}");
    assert!(inputs["texture_mean"][1].is_null(), "{inputs}");
}

fn radius_only() -> Value {
    json!({"name": "radius_mean", "datatype": "FP64", "shape": [1], "data": [14.0]})
}

fn flatten(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        other => out.push(other.clone()),
    }
}

#[test]
fn inference_tokens_call_only_inference_and_rate_limits_answer_429() {
    let q = Qanat::start();
    let out = q.cli_ok("tokens create --name scorer --scope inference --rate-limit 5");
    let scorer = out.trim().to_string();
    let http = q.http();

    // The inference endpoints let it through (no such model: 404, not 403)...
    let (s, body) = http.send(&scorer, "GET", "/v2/models/nothing", None);
    assert_eq!(s, 404, "{body}");
    // ...anything else is refused, token creation included (no way out of the scope).
    for (method, path) in [
        ("GET", "/api/v1/projects"),
        ("POST", "/api/v1/tokens"),
        ("GET", "/api/v1/projects/default/deployments"),
    ] {
        let body = (method == "POST").then(|| json!({"name": "wider"}));
        let (s, refused) = http.send(&scorer, method, path, body);
        assert_eq!(s, 403, "{method} {path}: {refused}");
        assert!(
            refused.to_string().contains("scoped to inference"),
            "{refused}"
        );
    }
    let listed = q.cli_ok("tokens ls -o json");
    let listed: Value = serde_json::from_str(&listed).expect("json");
    let row = listed
        .as_array()
        .expect("tokens")
        .iter()
        .find(|t| t["name"] == "scorer")
        .cloned()
        .expect("listed");
    assert_eq!(
        (&row["scope"], &row["rate_limit"]),
        (&json!("inference"), &json!(5))
    );

    // Five a second: a burst gets 429 with Retry-After once the bucket is empty.
    let mut limited = None;
    for _ in 0..200 {
        let resp = http
            .raw(&scorer, "GET", "/v2/models/nothing")
            .send()
            .expect("request");
        if resp.status().as_u16() == 429 {
            limited = Some(resp);
            break;
        }
        assert_eq!(resp.status().as_u16(), 404);
    }
    let limited = limited.expect("a 429 within 200 requests at 5 a second");
    let retry: u64 = limited.headers()["retry-after"]
        .to_str()
        .expect("text")
        .parse()
        .expect("seconds");
    assert!((1..=2).contains(&retry), "{retry}");
    // Other tokens are not limited by it.
    assert_eq!(q.api("GET", "/v2/models/nothing", None).0, 404);
    // The refusal is audited.
    let audit = q.cli_ok("audit tail --action serving.model.read -n 20");
    assert!(audit.contains("limited to 5 requests a second"), "{audit}");
}

/// `y = sigmoid(input-0)`, both `[N, 4]`: an ONNX graph made elsewhere.
fn sigmoid_graph() -> Vec<u8> {
    use qanat_runtime::onnx::build::{batched, model, node, pb};
    model(pb::GraphProto {
        node: vec![node("Sigmoid", &["input-0"], "y")],
        input: vec![batched("input-0", 4)],
        output: vec![batched("y", 4)],
        ..pb::GraphProto::default()
    })
}

#[test]
fn an_onnx_version_says_where_it_runs_and_a_gpu_it_cannot_use_is_the_servers_fault() {
    // The default (`auto`): on the CPU here, the GPU's absence named when one was
    // looked for, in `deploy status` and in /metrics.
    let q = Qanat::start_with(vec![]);
    let token = &q.admin_token;
    q.register_files(token, "sig", &[("model.onnx", sigmoid_graph())]);
    let out = deploy(&q, &["create", "sig", "--model", "sig", "--primary", "1"]);
    assert!(out.contains("answers at"), "{out}");
    let (ok, status, err) = q.cli(&["deploy", "-p", "default", "status", "sig"]);
    assert!(ok, "{err}");
    let on_gpu = status.contains("onnx on onnxruntime (cuda:0)");
    assert!(on_gpu || status.contains("onnx on tract (cpu"), "{status}");
    let v = infer_rows(&q, "sig", "FP32", &[vec![0.0, 1.0, -1.0, 2.0]]);
    let got = output(&v, "y");
    for (g, x) in got.iter().zip([0.0f64, 1.0, -1.0, 2.0]) {
        assert!((g - 1.0 / (1.0 + (-x).exp())).abs() < 1e-6, "{got:?}");
    }
    let metrics = q
        .http()
        .raw(token, "GET", "/metrics")
        .send()
        .expect("metrics")
        .text()
        .expect("text");
    let line = metrics
        .lines()
        .find(|l| l.starts_with("qanat_serving_version_loaded{") && l.contains("model=\"sig\""))
        .unwrap_or_else(|| panic!("no loaded gauge for sig:\n{metrics}"));
    assert!(line.ends_with(" 1"), "{line}");
    assert!(
        line.contains(if on_gpu {
            "device=\"cuda:0\""
        } else {
            "device=\"cpu\""
        }),
        "{line}"
    );
    drop(q);

    // Told to use a GPU it cannot use (no GPU, or onnxruntime without CUDA): requests
    // are answered 503 with the reason, and the version is not marked unservable (the
    // fault is the server's, and goes with its configuration).
    let q = Qanat::start_with(vec![("QANAT_SERVING_ONNX_DEVICE".into(), "cuda:7".into())]);
    let token = &q.admin_token;
    q.register_files(token, "sig", &[("model.onnx", sigmoid_graph())]);
    let (s, v) = q.http().send(
        token,
        "POST",
        "/v2/models/sig/infer",
        Some(json!({"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [0, 1, 2, 3]}]})),
    );
    assert_eq!(s, 503, "{v}");
    assert!(
        v.to_string().contains("cuda:7 here (serving.onnx_device)"),
        "{v}"
    );
    let (s, v) = q.http().send(
        token,
        "GET",
        "/api/2.0/mlflow/model-versions/get?name=sig&version=1",
        None,
    );
    assert_eq!(s, 200, "{v}");
    assert!(!v.to_string().contains("qanat.unservable"), "{v}");
}

#[test]
fn an_oversized_inference_request_gets_413_in_oips_shape_and_the_server_goes_on() {
    // A 64 KiB limit; the request below is several times that.
    let q = Qanat::start_with(vec![(
        "QANAT_SERVER_MAX_REQUEST_BYTES".into(),
        "65536".into(),
    )]);
    q.register_files(&q.admin_token, "sig", &[("model.onnx", sigmoid_graph())]);
    let out = deploy(&q, &["create", "sig", "--model", "sig", "--primary", "1"]);
    assert!(out.contains("answers at"), "{out}");
    let big: Vec<f64> = (0..80_000).map(|i| f64::from(i % 7) * 0.125).collect();
    let body = json!({"inputs": [{"name": "input-0", "shape": [20_000, 4], "datatype": "FP32", "data": big}]});
    assert!(body.to_string().len() > 4 * 65536, "the body is large");
    let (s, resp) = q.api("POST", "/v2/models/sig/infer", Some(body));
    assert_eq!(s, 413, "{resp}");
    assert!(
        resp["error"].as_str().is_some_and(|e| !e.is_empty()),
        "OIP's error shape: {resp}"
    );
    // The same as the binary extension (a JSON header, then raw tensor bytes).
    let header = json!({"inputs": [{"name": "input-0", "shape": [20_000, 4], "datatype": "FP32",
        "parameters": {"binary_data_size": 320_000}}]})
    .to_string();
    let mut raw = header.clone().into_bytes();
    raw.extend(std::iter::repeat_n(0u8, 320_000));
    let resp = q
        .http()
        .raw(&q.admin_token, "POST", "/v2/models/sig/infer")
        .header("Inference-Header-Content-Length", header.len().to_string())
        .header("Content-Type", "application/octet-stream")
        .body(raw)
        .send()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 413);
    // Nothing broke: a request within the limit is answered.
    let v = infer_rows(&q, "sig", "FP32", &[vec![0.0, 1.0, -1.0, 2.0]]);
    assert_eq!(output(&v, "y").len(), 4, "{v}");
}

#[test]
fn a_model_stored_outside_its_projects_regions_is_not_loaded_for_serving() {
    // The model's bytes are in `local` (uae-north); the project then allows only
    // eu-west, where a second location is.
    let q = Qanat::start_with_locations(&[("eu", "eu-west")]);
    q.register_files(&q.admin_token, "sig", &[("model.onnx", sigmoid_graph())]);
    let out = deploy(&q, &["create", "sig", "--model", "sig", "--primary", "1"]);
    assert!(out.contains("answers at"), "{out}");
    let v = infer_rows(&q, "sig", "FP32", &[vec![0.0, 1.0, -1.0, 2.0]]);
    assert_eq!(output(&v, "y").len(), 4, "{v}");
    let (ok, _, err) = q.cli(&["projects", "set-regions", "default", "--regions", "eu-west"]);
    assert!(ok, "{err}");
    // A deployment that must load the version now is refused by residency, saying
    // where the bytes are and what the project allows.
    let (ok, out, err) = q.cli(&[
        "deploy",
        "-p",
        "default",
        "create",
        "sig2",
        "--model",
        "sig",
        "--primary",
        "1",
    ]);
    let refused = if ok {
        // Accepted as a spec: its version cannot be loaded, so it answers with the
        // reason.
        let body = json!({"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [0.0, 1.0, 2.0, 3.0]}]});
        let (s, resp) = q.api("POST", "/v2/models/sig2/infer", Some(body));
        assert!(s >= 400, "{s} {resp}");
        resp.to_string()
    } else {
        format!("{out}{err}")
    };
    assert!(
        refused.contains("uae-north") && refused.contains("eu-west"),
        "{refused}"
    );
    // The deployment already serving keeps the version its route loaded before the
    // change (until its route is rebuilt); a call by model name must load it again.
    let body = json!({"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [0.0, 1.0, 2.0, 3.0]}]});
    let (s, resp) = q.api("POST", "/v2/models/sig/versions/1/infer", Some(body));
    assert!(
        s >= 400 && resp.to_string().contains("eu-west"),
        "{s} {resp}"
    );
}
