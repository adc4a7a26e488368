//! Optimization through the binary: a model trained by a `train` job is quantized to
//! int8 by `qanat optimize`, measured on a holdout, registered as a new version derived
//! from its source with the report in its run; a model without a signature is refused
//! and nothing is registered.

mod common;

use common::Qanat;
use serde_json::{json, Value};

fn server_with_a_trained_model() -> Qanat {
    let q = Qanat::start_with(vec![("QANAT_JOBS_CPUS".into(), "2".into())]);
    q.push_example("cancer", "breast_cancer.csv");
    q.train(json!({
        "name": "cancer-mlp", "inputs": ["dataset:cancer@1"],
        "target": "diagnosis", "model": "mlp", "hidden": [64, 32], "epochs": 25,
        "seed": 4, "register": "cancer",
    }));
    q
}

fn version(q: &Qanat, name: &str, v: u32) -> Value {
    q.mlflow_get(
        "default",
        &format!("model-versions/get?name={name}&version={v}"),
    )["model_version"]
        .clone()
}

fn tag<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .and_then(|t| t["value"].as_str())
}

#[test]
fn int8_optimization_registers_a_derived_version_with_its_report() {
    let q = server_with_a_trained_model();
    q.cli_ok("optimize -p default cancer@1 --quantize int8 --holdout dataset:cancer@1 --wait");

    let v2 = version(&q, "cancer", 2);
    assert_eq!(
        tag(&v2, "qanat.derived_from"),
        Some("model:cancer@1"),
        "{v2:#}"
    );
    assert_eq!(tag(&v2, "qanat.precision"), Some("int8"), "{v2:#}");
    assert_eq!(tag(&v2, "qanat.optimization"), Some("int8-dynamic"));

    // Lineage: the new version → its source version, and → the optimize run.
    let (s, lineage) = q.api(
        "GET",
        "/api/v1/projects/default/lineage?ref=model:cancer@2",
        None,
    );
    assert_eq!(s, 200, "{lineage}");
    let edges = lineage["edges"].to_string();
    assert!(
        edges.contains("model:cancer@1") && edges.contains("derived_from"),
        "{lineage:#}"
    );

    // The report is the optimize run's: metrics of both sides, and report.json.
    let run_id = v2["run_id"].as_str().expect("run");
    let run = q.mlflow_get("default", &format!("runs/get?run_id={run_id}"));
    let metric = |k: &str| {
        run["run"]["data"]["metrics"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["key"] == k))
            .and_then(|m| m["value"].as_f64())
    };
    let (before, after) = (
        metric("original_accuracy").expect("original_accuracy"),
        metric("optimized_accuracy").expect("optimized_accuracy"),
    );
    assert!(before > 0.9 && after >= before - 0.01, "{run:#}");
    assert!(metric("size_ratio").expect("size_ratio") < 0.5, "{run:#}");
    assert!(metric("optimized_p50_us_batch1").expect("latency") > 0.0);
    let files = q.mlflow_get("default", &format!("artifacts/list?run_id={run_id}"));
    assert!(files.to_string().contains("report.json"), "{files}");
    let model_files = q.mlflow_get(
        "default",
        &format!("artifacts/list?run_id={run_id}&path=model"),
    );
    for f in [
        "spec.json",
        "weights.safetensors",
        "model.onnx",
        "MLmodel",
        "input_example.json",
    ] {
        assert!(model_files.to_string().contains(f), "{f}: {model_files}");
    }

    // Measured on tract (the two models' ONNX graphs) and registered for it.
    q.cli_ok("optimize -p default cancer@1 --quantize int8 --holdout dataset:cancer@1 --runtime tract --register cancer-tract --wait");
    let t1 = version(&q, "cancer-tract", 1);
    assert_eq!(tag(&t1, "qanat.runtime"), Some("tract"), "{t1:#}");
    assert_eq!(tag(&t1, "qanat.derived_from"), Some("model:cancer@1"));
    let run = q.mlflow_get(
        "default",
        &format!("runs/get?run_id={}", t1["run_id"].as_str().expect("run")),
    );
    assert!(
        run["run"]["data"]["params"].to_string().contains("tract"),
        "{run:#}"
    );

    // Structured pruning: half the hidden units go, the rest are fine-tuned by the
    // native trainer, and the smaller network is registered.
    q.cli_ok("optimize -p default cancer@1 --prune structured --sparsity 0.5 --finetune-epochs 3 --max-accuracy-drop 5 --holdout dataset:cancer@1 --register cancer-small --wait");
    let s1 = version(&q, "cancer-small", 1);
    assert_eq!(tag(&s1, "qanat.optimization"), Some("prune-structured"));
    assert_eq!(tag(&s1, "qanat.derived_from"), Some("model:cancer@1"));
    let run = q.mlflow_get(
        "default",
        &format!("runs/get?run_id={}", s1["run_id"].as_str().expect("run")),
    );
    let params = run["run"]["data"]["params"].to_string();
    assert!(params.contains("[30, 32, 16, 1]"), "{params}");

    // Distillation into a student with one hidden layer of 8, with its fidelity.
    q.cli_ok("optimize -p default cancer@1 --distill 8 --finetune-epochs 20 --max-accuracy-drop 10 --holdout dataset:cancer@1 --register cancer-student --wait");
    let d1 = version(&q, "cancer-student", 1);
    assert_eq!(tag(&d1, "qanat.optimization"), Some("distill"));
    let run = q.mlflow_get(
        "default",
        &format!("runs/get?run_id={}", d1["run_id"].as_str().expect("run")),
    );
    let fidelity = run["run"]["data"]["metrics"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["key"] == "fidelity"))
        .and_then(|m| m["value"].as_f64())
        .expect("fidelity");
    assert!(fidelity > 0.8, "{run:#}");
    assert!(
        run["run"]["data"]["params"]
            .to_string()
            .contains("[30, 8, 1]"),
        "{run:#}"
    );
}

#[test]
fn a_model_without_a_signature_is_refused_and_nothing_is_registered() {
    let q = server_with_a_trained_model();
    // A version whose files hold weights but no spec.json.
    let exp = q.mlflow_get("default", "experiments/get-by-name?experiment_name=Default");
    let exp_id = exp["experiment"]["experiment_id"].as_str().expect("id");
    let (s, run) = q.api(
        "POST",
        "/mlflow/default/api/2.0/mlflow/runs/create",
        Some(json!({"experiment_id": exp_id})),
    );
    assert_eq!(s, 200, "{run}");
    let root = run["run"]["info"]["artifact_uri"].as_str().expect("root");
    let run_id = run["run"]["info"]["run_id"].as_str().expect("run id");
    let path = root
        .trim_start_matches("mlflow-artifacts:")
        .trim_matches('/');
    let put = q
        .http()
        .raw(
            &q.admin_token,
            "PUT",
            &format!(
                "/mlflow/default/api/2.0/mlflow-artifacts/artifacts/{path}/model/weights.safetensors"
            ),
        )
        .body(vec![0u8; 16])
        .send()
        .expect("upload");
    assert!(put.status().is_success(), "{:?}", put.text());
    let (s, reg) = q.api(
        "POST",
        "/mlflow/default/api/2.0/mlflow/model-versions/create",
        Some(
            json!({"name": "cancer", "source": format!("runs:/{run_id}/model"), "run_id": run_id}),
        ),
    );
    assert_eq!(s, 200, "{reg}");
    assert_eq!(reg["model_version"]["version"], "2");

    let (ok, out, err) = q.cli(&[
        "optimize",
        "-p",
        "default",
        "cancer@2",
        "--quantize",
        "int8",
        "--holdout",
        "dataset:cancer@1",
        "--wait",
    ]);
    assert!(!ok, "{out}");
    let text = format!("{out}{err}");
    assert!(text.contains("failed"), "{text}");
    let (s, list) = q.api("GET", "/api/v1/projects/default/jobs?state=failed", None);
    assert_eq!(s, 200, "{list}");
    assert_eq!(list["jobs"][0]["kind"], "optimize", "{list}");
    let job_id = list["jobs"][0]["job_id"].as_str().expect("job");
    let log = q.job_log("default", job_id);
    assert!(
        log["data"]
            .as_str()
            .unwrap_or("")
            .contains("has neither spec.json"),
        "{log}"
    );
    // Nothing new was registered.
    let (s, _) = q.api(
        "GET",
        "/mlflow/default/api/2.0/mlflow/model-versions/get?name=cancer&version=3",
        None,
    );
    assert_eq!(s, 404);

    // Bad fields are refused at submit, before anything runs.
    let (ok, _, err) = q.cli(&[
        "optimize",
        "-p",
        "default",
        "cancer@1",
        "--quantize",
        "int4",
        "--holdout",
        "dataset:cancer@1",
    ]);
    assert!(!ok);
    assert!(err.contains("int8"), "{err}");
}

#[test]
fn a_result_over_its_budget_is_refused_unless_forced() {
    let q = server_with_a_trained_model();
    // A student with one hidden unit, trained for one epoch, against a budget of no
    // loss at all.
    let args = |force: bool| {
        let mut a = vec![
            "optimize",
            "-p",
            "default",
            "cancer@1",
            "--distill",
            "1",
            "--finetune-epochs",
            "1",
            "--max-accuracy-drop",
            "0",
            "--holdout",
            "dataset:cancer@1",
            "--register",
            "cancer-tiny",
            "--wait",
        ];
        if force {
            a.push("--force");
        }
        a
    };
    let (ok, out, err) = q.cli(&args(false));
    assert!(!ok, "refused: {out}{err}");
    let jobs: Value = serde_json::from_str(&q.cli_ok("jobs -p default -o json ls")).expect("json");
    let refused = jobs
        .as_array()
        .and_then(|j| j.iter().find(|j| j["kind"] == "optimize"))
        .expect("the optimize job")
        .clone();
    assert_eq!(refused["state"], "failed", "{refused}");
    // The verdict is in its log: what was measured, the budget, what to do.
    let log = q.cli_ok(&format!(
        "jobs -p default logs {}",
        refused["job_id"].as_str().expect("id")
    ));
    assert!(
        log.contains("refused: accuracy")
            && log.contains("exceeds the budget of 0")
            && log.contains("force the registration"),
        "{log}"
    );
    // Nothing was registered.
    let (s, v) = q.api(
        "GET",
        "/api/2.0/mlflow/registered-models/get?name=cancer-tiny",
        None,
    );
    assert_eq!(s, 404, "{v}");
    // The refused job's run still holds the report: both accuracies.
    let run = q.mlflow_get(
        "default",
        &format!(
            "runs/get?run_id={}",
            refused["run_id"].as_str().expect("run")
        ),
    );
    let metrics = run["run"]["data"]["metrics"].to_string();
    assert!(
        metrics.contains("original_accuracy") && metrics.contains("optimized_accuracy"),
        "{run:#}"
    );

    // Forced: registered anyway, and the job says so.
    let (ok, out, err) = q.cli(&args(true));
    assert!(ok, "{out}{err}");
    let v1 = version(&q, "cancer-tiny", 1);
    assert_eq!(
        tag(&v1, "qanat.derived_from"),
        Some("model:cancer@1"),
        "{v1:#}"
    );
    let jobs: Value = serde_json::from_str(&q.cli_ok("jobs -p default -o json ls")).expect("json");
    let forced = jobs
        .as_array()
        .and_then(|j| {
            j.iter()
                .find(|j| j["kind"] == "optimize" && j["state"] == "succeeded")
        })
        .expect("the forced job")
        .clone();
    let log = q.cli_ok(&format!(
        "jobs -p default logs {}",
        forced["job_id"].as_str().expect("id")
    ));
    assert!(log.contains("forced"), "{log}");
}
