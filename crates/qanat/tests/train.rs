//! The native trainer as a job, through the binary: a dataset pushed with the CLI, a
//! `train` job submitted through the API, metrics per epoch in its run, the model's
//! files as the run's artifacts, and a registered version whose run reads the dataset.

mod common;

use std::time::{Duration, Instant};

use common::Qanat;
use serde_json::{json, Value};

fn server_with_breast_cancer() -> Qanat {
    server_with_breast_cancer_and(vec![])
}

fn server_with_breast_cancer_and(env: Vec<(String, String)>) -> Qanat {
    let mut env = env;
    env.extend([
        ("QANAT_JOBS_CPUS".into(), "2".into()),
        ("QANAT_JOBS_RETRY_BACKOFF_SECS".into(), "1".into()),
    ]);
    let q = Qanat::start_with(env);
    q.push_example("cancer", "breast_cancer.csv");
    q
}

fn finished(q: &Qanat, id: &str) -> Value {
    q.job_finished("default", id, 180)
}

fn job_log(q: &Qanat, id: &str) -> Value {
    q.job_log("default", id)
}

fn mlflow(q: &Qanat, path: &str) -> Value {
    q.mlflow_get("default", path)
}

#[test]
fn a_train_job_logs_its_epochs_stores_its_model_and_registers_it() {
    let q = server_with_breast_cancer();
    let (s, job) = q.api(
        "POST",
        "/api/v1/projects/default/jobs",
        Some(json!({
            "name": "cancer-logistic", "kind": "train", "inputs": ["dataset:cancer@1"],
            "target": "diagnosis", "model": "logistic", "epochs": 30, "seed": 1,
            "register": "cancer-classifier",
        })),
    );
    assert_eq!(s, 201, "{job}");
    let j = finished(&q, job["job_id"].as_str().expect("id"));
    let log = job_log(&q, job["job_id"].as_str().expect("id"));
    assert_eq!(j["state"], "succeeded", "{j:#}\n{}", log["data"]);
    let run_id = j["run_id"].as_str().expect("run");
    let run = mlflow(&q, &format!("runs/get?run_id={run_id}"));
    let data = &run["run"]["data"];
    let metric = |k: &str| {
        data["metrics"]
            .as_array()
            .expect("metrics")
            .iter()
            .find(|m| m["key"] == k)
            .map(|m| m["value"].as_f64().expect("value"))
    };
    assert!(
        metric("best_val_accuracy").expect("best_val_accuracy") > 0.9,
        "{data:#}"
    );
    let param = |k: &str| {
        data["params"]
            .as_array()
            .expect("params")
            .iter()
            .find(|p| p["key"] == k)
            .map(|p| p["value"].clone())
    };
    assert_eq!(param("model"), Some(json!("logistic")));
    assert_eq!(param("rows"), Some(json!("569")));
    // The environment it trained in (provenance): the trainer, the CPU model, the
    // cores, the OS and architecture, the version.
    let tag = |k: &str| {
        data["tags"]
            .as_array()
            .expect("tags")
            .iter()
            .find(|t| t["key"] == k)
            .and_then(|t| t["value"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("tag {k} in {data:#}"))
    };
    assert_eq!(tag("qanat.trainer"), "native");
    assert!(tag("qanat.backend").starts_with("burn "), "{data:#}");
    assert_eq!(tag("qanat.version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(
        tag("qanat.env.os"),
        format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH)
    );
    // The cores the trainer could use: the job's one core (it is pinned to it).
    let cpus: usize = tag("qanat.env.cpus").parse().expect("a count");
    assert_eq!(cpus, 1, "the cores given to the job (resources.cpus 1)");
    let cpu = tag("qanat.env.cpu");
    let model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|c| {
        c.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1).map(|m| m.trim().to_string()))
    });
    if let Some(model) = model {
        assert_eq!(cpu, model, "the CPU model from /proc/cpuinfo");
    }
    let history = mlflow(
        &q,
        &format!("metrics/get-history?run_id={run_id}&metric_key=val_loss"),
    );
    assert!(
        history["metrics"].as_array().expect("history").len() >= 2,
        "{history}"
    );
    let paths = q.artifact_paths("default", run_id, "model");
    assert!(
        paths.iter().any(|p| p == "model/weights.safetensors")
            && paths.iter().any(|p| p == "model/spec.json"),
        "{paths:?}"
    );
    let root = mlflow(&q, &format!("artifacts/list?run_id={run_id}"));
    assert!(root.to_string().contains("split.json"), "{root}");
    // The training rows' profile travels with the model, and is a reference that
    // `monitor compare` takes: the training data against itself does not drift.
    let (ok, profile, err) = q.cli(&[
        "runs",
        "-p",
        "default",
        "artifacts",
        "get",
        run_id,
        "model/reference_profile.json",
        "-",
    ]);
    assert!(ok, "{err}");
    let profile: Value = serde_json::from_str(&profile).expect("a profile");
    // The training split of the 569 rows, not the validation rows.
    assert!(
        profile["rows"].as_u64().is_some_and(|n| n > 300 && n < 569),
        "{}",
        profile["rows"]
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let saved = dir.path().join("reference.json");
    std::fs::write(&saved, profile.to_string()).expect("write");
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/data/breast_cancer.csv");
    let (ok, out, err) = q.cli(&[
        "monitor",
        "compare",
        saved.to_str().expect("utf8"),
        data.to_str().expect("utf8"),
        "-o",
        "json",
    ]);
    assert!(ok, "{err}");
    let drift: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(drift["drifted"], json!(false), "{drift:#}");
    assert!(
        drift["columns"].as_u64().is_some_and(|n| n >= 30),
        "{drift:#}"
    );
    let versions = mlflow(&q, "registered-models/get?name=cancer-classifier");
    assert_eq!(
        versions["registered_model"]["latest_versions"][0]["run_id"], run_id,
        "{versions:#}"
    );
    // The run reads the dataset version: lineage from the model version to the data.
    let (s, lineage) = q.api(
        "GET",
        &format!("/api/v1/projects/default/lineage?ref=run:{run_id}"),
        None,
    );
    assert_eq!(s, 200);
    assert!(
        lineage.to_string().contains("dataset:cancer@1"),
        "{lineage}"
    );
}

/// A server with its own certificate (`qanat certs dev`): the scheduler hands jobs the
/// certificate to trust, so the train worker's calls back to the server go through.
#[test]
fn a_train_job_reaches_a_server_with_its_own_tls_certificate() {
    let tls = tempfile::tempdir().expect("tempdir");
    common::run_ok(common::base_cmd(tls.path(), &[]).args([
        "certs",
        "dev",
        "--out",
        tls.path().to_str().expect("utf8"),
    ]));
    let file = |f: &str| tls.path().join(f).display().to_string();
    let q = server_with_breast_cancer_and(vec![
        ("QANAT_SERVER_TLS_CERT".into(), file("dev-cert.pem")),
        ("QANAT_SERVER_TLS_KEY".into(), file("dev-key.pem")),
        // For this test's CLI and HTTP client; the server does not read it.
        ("QANAT_CA_CERT".into(), file("dev-cert.pem")),
    ]);
    assert!(q.url.starts_with("https://"), "{}", q.url);
    let id = q.submit(
        json!({"name": "over-tls", "kind": "train", "inputs": ["dataset:cancer@1"],
            "target": "diagnosis", "model": "logistic", "epochs": 2}),
    );
    let j = finished(&q, &id);
    let log = job_log(&q, &id);
    assert_eq!(j["state"], "succeeded", "{j:#}\n{}", log["data"]);
}

#[test]
fn bad_train_jobs_are_refused_at_submit_with_what_to_fix() {
    let q = Qanat::start_with(vec![]);
    for (spec, says) in [
        (json!({"name": "t", "kind": "train", "epochs": 3}), "target"),
        (
            json!({"name": "t", "kind": "train", "target": "y", "learning_rate": 0}),
            "learning_rate",
        ),
        (
            json!({"name": "t", "kind": "train", "target": "y", "model": "forest"}),
            "unknown variant",
        ),
        (
            json!({"name": "t", "kind": "train", "target": "y", "register": 3}),
            "register",
        ),
    ] {
        let (s, e) = q.api("POST", "/api/v1/projects/default/jobs", Some(spec.clone()));
        assert_eq!(s, 400, "{spec}: {e}");
        assert!(e.to_string().contains(says), "{spec}: {e}");
    }
}

#[test]
fn qanat_train_reads_a_config_and_refuses_other_kinds() {
    let q = Qanat::start_with(vec![]);
    let cfg = q.dir.path().join("train.yaml");
    std::fs::write(&cfg, "kind: command\ncommand: [\"true\"]\n").expect("write");
    let (ok, _, err) = q.cli(&["train", "-p", "default", "-c", cfg.to_str().expect("utf8")]);
    assert!(!ok);
    assert!(err.contains("qanat train submits train jobs"), "{err}");
    // Flags complete a config; a bad field is refused by the server with what to fix.
    std::fs::write(&cfg, "epochs: 0\n").expect("write");
    let (ok, _, err) = q.cli(&[
        "train",
        "-p",
        "default",
        "-c",
        cfg.to_str().expect("utf8"),
        "--target",
        "y",
    ]);
    assert!(!ok);
    assert!(err.contains("epochs = 0"), "{err}");
}

/// `base` with `fields` set is refused at submit (400) with a message saying `says`.
fn refused(q: &Qanat, mut base: Value, fields: &Value, says: &str) {
    for (k, v) in fields.as_object().expect("object") {
        base[k] = v.clone();
    }
    let (s, e) = q.api("POST", "/api/v1/projects/default/jobs", Some(base));
    assert_eq!(s, 400, "{fields}: {e}");
    assert!(e.to_string().contains(says), "{fields}: {e}");
}

/// The bytes of a run's artifact `rel`.
fn artifact(q: &Qanat, run_id: &str, rel: &str) -> Vec<u8> {
    let run = mlflow(q, &format!("runs/get?run_id={run_id}"));
    let root = run["run"]["info"]["artifact_uri"]
        .as_str()
        .expect("root")
        .trim_start_matches("mlflow-artifacts:")
        .trim_matches('/')
        .to_string();
    let r = q
        .http()
        .raw(
            &q.admin_token,
            "GET",
            &format!("/mlflow/default/api/2.0/mlflow-artifacts/artifacts/{root}/{rel}"),
        )
        .send()
        .expect("download");
    assert_eq!(r.status().as_u16(), 200, "{rel}");
    r.bytes().expect("bytes").to_vec()
}

/// The pid of the train worker of job `id` (its environment names the job).
fn worker_pid(id: &str) -> Option<u32> {
    let needle = format!("QANAT_JOB_ID={id}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        let is_worker = cmd.split(|b| *b == 0).any(|a| a == b"train-worker");
        let of_job = env.split(|b| *b == 0).any(|v| v == needle.as_bytes());
        (is_worker && of_job).then_some(pid)
    })
}

#[test]
fn a_train_job_killed_mid_run_resumes_from_its_checkpoint_and_ends_bit_identical() {
    let q = server_with_breast_cancer();
    let spec = |name: &str| {
        json!({
            "name": name, "kind": "train", "inputs": ["dataset:cancer@1"],
            "target": "diagnosis", "model": "mlp", "hidden": [32, 32], "epochs": 40,
            "batch_size": 16, "patience": 0, "seed": 9, "max_retries": 1,
        })
    };
    let killed = q.submit(spec("killed"));
    // Wait for a few epochs (each logged, then checkpointed), then kill -9 the worker.
    let start = Instant::now();
    let pid = loop {
        let (_, j) = q.api(
            "GET",
            &format!("/api/v1/projects/default/jobs/{killed}"),
            None,
        );
        if let Some(run_id) = j["run_id"].as_str() {
            let h = mlflow(
                &q,
                &format!("metrics/get-history?run_id={run_id}&metric_key=val_loss"),
            );
            let epochs = h["metrics"].as_array().map_or(0, Vec::len);
            if (3..30).contains(&epochs) {
                if let Some(pid) = worker_pid(&killed) {
                    break pid;
                }
            }
            assert!(
                epochs < 30,
                "the job ran too fast to be killed mid-run: {j}"
            );
        }
        assert!(start.elapsed() < Duration::from_secs(120), "never ran: {j}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let j = finished(&q, &killed);
    let log = job_log(&q, &killed);
    assert_eq!(j["state"], "succeeded", "{j:#}");
    assert_eq!(j["attempt"], 2, "{j:#}");
    assert!(
        log.to_string()
            .contains("resuming from the run's last checkpoint"),
        "{log}"
    );
    let whole = q.submit(spec("whole"));
    let w = finished(&q, &whole);
    assert_eq!(w["state"], "succeeded", "{w:#}");
    let (a, b) = (
        j["run_id"].as_str().expect("run"),
        w["run_id"].as_str().expect("run"),
    );
    assert_eq!(
        artifact(&q, a, "model/weights.safetensors"),
        artifact(&q, b, "model/weights.safetensors"),
        "the resumed job's weights differ from an uninterrupted run's"
    );
    // Every epoch is in the killed job's history once resumed (an epoch logged but not
    // yet checkpointed when killed is logged again, with the same value).
    let h = mlflow(
        &q,
        &format!("metrics/get-history?run_id={a}&metric_key=val_loss"),
    );
    let mut steps: Vec<i64> = h["metrics"]
        .as_array()
        .expect("history")
        .iter()
        .map(|m| m["step"].as_i64().expect("step"))
        .collect();
    steps.dedup();
    steps.sort_unstable();
    steps.dedup();
    assert_eq!(steps, (0..40).collect::<Vec<_>>());
    // The checkpoint is an artifact of the run, in the encrypted store.
    assert!(artifact(&q, a, "checkpoints/last.ckpt").starts_with(b"QNTCKPT1"));
}

fn sweep_spec(name: &str, trials: u32, epochs: u32) -> Value {
    json!({
        "name": name, "kind": "sweep", "inputs": ["dataset:cancer@1"],
        "resources": {"cpus": 0.2},
        "trial": {"target": "diagnosis", "model": "mlp", "epochs": epochs, "seed": 1},
        "trial_resources": {"cpus": 0.5},
        "space": {
            "learning_rate": {"type": "loguniform", "low": 0.0005, "high": 0.05},
            "hidden": {"type": "categorical", "values": [[8], [32, 16]]},
        },
        "algorithm": "tpe", "trials": trials, "parallel": 2, "metric": "val_accuracy",
        "register": format!("{name}-best"),
    })
}

/// The trial jobs of sweep job `id` (named `<id>-t<n>`).
fn trial_jobs(q: &Qanat, id: &str) -> Vec<Value> {
    let (s, list) = q.api("GET", "/api/v1/projects/default/jobs?limit=1000", None);
    assert_eq!(s, 200, "{list}");
    list["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter(|j| {
            j["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(&format!("{id}-t")))
        })
        .cloned()
        .collect()
}

/// A run's (as `runs/get` answers) latest value of metric `key`.
fn metric_of(run: &Value, key: &str) -> Option<f64> {
    run["run"]["data"]["metrics"]
        .as_array()?
        .iter()
        .find(|m| m["key"] == key)
        .and_then(|m| m["value"].as_f64())
}

fn tag(run: &Value, key: &str) -> Option<String> {
    run["run"]["data"]["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .and_then(|t| t["value"].as_str().map(String::from))
}

/// A finished sweep: its trials are child runs, and the registered model is the best
/// trial's.
fn check_sweep(q: &Qanat, id: &str, trials: usize) {
    let j = finished(q, id);
    let log = job_log(q, id);
    assert_eq!(j["state"], "succeeded", "{j:#}\n{}", log["data"]);
    let sweep_run = j["run_id"].as_str().expect("run").to_string();
    let jobs = trial_jobs(q, id);
    let mut names: Vec<&str> = jobs.iter().filter_map(|j| j["name"].as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), trials, "each trial once: {names:?}");
    assert_eq!(jobs.len(), trials, "no trial submitted twice: {names:?}");
    let mut best: Option<(f64, String)> = None;
    for t in &jobs {
        let run_id = t["run_id"].as_str().expect("trial run");
        let run = mlflow(q, &format!("runs/get?run_id={run_id}"));
        assert_eq!(
            tag(&run, "mlflow.parentRunId").as_deref(),
            Some(sweep_run.as_str())
        );
        if t["state"] == "succeeded" {
            let acc = metric_of(&run, "best_val_accuracy").expect("best_val_accuracy");
            if best.as_ref().is_none_or(|(b, _)| acc > *b) {
                best = Some((acc, run_id.to_string()));
            }
        }
    }
    let (best_acc, best_run) = best.expect("a trial succeeded");
    let sweep = mlflow(q, &format!("runs/get?run_id={sweep_run}"));
    let chosen = tag(&sweep, "qanat.sweep.best_run").expect("best_run tag");
    let chosen_run = mlflow(q, &format!("runs/get?run_id={chosen}"));
    let chosen_acc = metric_of(&chosen_run, "best_val_accuracy").expect("chosen accuracy");
    assert_eq!(
        chosen_acc, best_acc,
        "best is {best_run}, sweep chose {chosen}"
    );
    let name = format!("{}-best", j["name"].as_str().expect("name"));
    let model = mlflow(q, &format!("registered-models/get?name={name}"));
    assert_eq!(
        model["registered_model"]["latest_versions"][0]["run_id"], chosen,
        "{model:#}"
    );
}

#[test]
fn a_sweep_runs_its_trials_as_child_runs_and_registers_the_best() {
    let q = server_with_breast_cancer();
    let mut spec = sweep_spec("cancer-sweep", 4, 8);
    spec["asha"] = json!({"min_epochs": 2, "reduction": 2});
    let id = q.submit(spec);
    check_sweep(&q, &id, 4);
    // Bad sweeps are refused at submit with what to fix; nothing runs.
    for (bad, says) in [
        (json!({"metric": "speed"}), "metric"),
        (
            json!({"space": {"learning_rate": {"type": "loguniform", "low": 0, "high": 1}}}),
            "0 < low < high",
        ),
        (
            json!({"space": {"colour": {"type": "categorical", "values": ["red"]}}}),
            "unknown field",
        ),
    ] {
        refused(&q, sweep_spec("bad", 2, 2), &bad, says);
    }
}

#[test]
fn a_sweep_survives_a_server_restart_and_runs_each_trial_once() {
    let mut q = server_with_breast_cancer();
    let id = q.submit(sweep_spec("restarted-sweep", 4, 25));
    // Wait until the sweep has trials running, then kill the server (-9).
    let start = Instant::now();
    while trial_jobs(&q, &id).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no trial started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    q.kill_hard();
    q.spawn_server();
    check_sweep(&q, &id, 4);
    let (_, j) = q.api("GET", &format!("/api/v1/projects/default/jobs/{id}"), None);
    assert!(j["attempt"].as_u64().expect("attempt") >= 2, "{j:#}");
    let log = job_log(&q, &id);
    assert!(log.to_string().contains("resuming the sweep"), "{log}");
}

#[test]
fn data_problems_are_refused_at_submit_from_the_stored_profiles() {
    let q = server_with_breast_cancer();
    for (fields, says) in [
        (
            json!({"target": "diagnosis_x"}),
            "target 'diagnosis_x' is not a column of dataset:cancer@1",
        ),
        (
            json!({"target": "diagnosis", "features": ["radius_mean", "colour"]}),
            "feature 'colour' is not a column",
        ),
        (
            json!({"target": "diagnosis", "task": "regression"}),
            "cannot be a regression target",
        ),
    ] {
        let base = json!({"name": "bad", "kind": "train", "inputs": ["dataset:cancer@1"]});
        refused(&q, base, &fields, says);
    }
    // A column with no value at all (empty in every row of a CSV).
    let dir = q.dir.path().join("empty-col");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("t.csv"), "x,blank,y\n1,,a\n2,,b\n3,,a\n").expect("write");
    q.cli_ok("data -p default create blanks");
    q.cli_ok(&format!("data -p default push blanks {}", dir.display()));
    let base = json!({"name": "bad", "kind": "train", "inputs": ["dataset:blanks@1"]});
    refused(
        &q,
        base,
        &json!({"target": "y"}),
        "feature 'blank' has no values in dataset:blanks@1",
    );
    // A sweep whose space leads to a bad trial is refused the same way.
    let mut spec = sweep_spec("bad-sweep", 2, 2);
    spec["space"]["features"] =
        json!({"type": "categorical", "values": [["radius_mean"], ["nope"]]});
    let (s, e) = q.api("POST", "/api/v1/projects/default/jobs", Some(spec));
    assert_eq!(s, 400, "{e}");
    assert!(e.to_string().contains("feature 'nope'"), "{e}");
    // Nothing ran, nothing was registered.
    let (_, list) = q
        .http()
        .send(&q.admin_token, "GET", "/api/v1/projects/default/jobs", None);
    assert_eq!(list["jobs"].as_array().map(Vec::len), Some(0), "{list}");
}

/// A metric's history in a run, ordered by step.
fn history(q: &Qanat, run_id: &str, key: &str) -> Vec<f64> {
    let h = mlflow(
        q,
        &format!("metrics/get-history?run_id={run_id}&metric_key={key}"),
    );
    let mut points: Vec<(i64, f64)> = h["metrics"]
        .as_array()
        .unwrap_or_else(|| panic!("{key} of {run_id}: {h}"))
        .iter()
        .map(|m| {
            (
                m["step"].as_i64().expect("step"),
                m["value"].as_f64().expect("value"),
            )
        })
        .collect();
    points.sort_by_key(|p| p.0);
    points.into_iter().map(|p| p.1).collect()
}

#[test]
fn learning_rate_schedules_and_class_weights_change_what_is_trained() {
    let q = server_with_breast_cancer();
    let base = json!({
        "kind": "train", "inputs": ["dataset:cancer@1"], "target": "diagnosis",
        "model": "logistic", "epochs": 10, "seed": 1, "learning_rate": 0.02,
        "patience": 0, "resources": {"cpus": 0.5},
    });
    let with = |name: &str, extra: Value| {
        let mut spec = base.clone();
        spec["name"] = json!(name);
        for (k, v) in extra.as_object().expect("fields") {
            spec[k] = v.clone();
        }
        q.submit(spec)
    };
    let constant = with("constant", json!({}));
    let cosine = with(
        "cosine",
        json!({"schedule": {"kind": "cosine", "min_factor": 0.1}}),
    );
    // A rate divided by a million after the first epoch: training stops there.
    let frozen = with(
        "frozen",
        json!({"schedule": {"kind": "step", "every": 1, "gamma": 1e-6}}),
    );
    let weighted = with("weighted", json!({"class_weights": {"malignant": 20.0}}));
    let mut runs = std::collections::HashMap::new();
    for (name, id) in [
        ("constant", &constant),
        ("cosine", &cosine),
        ("frozen", &frozen),
        ("weighted", &weighted),
    ] {
        let j = finished(&q, id);
        assert_eq!(
            j["state"],
            "succeeded",
            "{name}: {j:#}\n{}",
            job_log(&q, id)
        );
        runs.insert(name, j["run_id"].as_str().expect("run").to_string());
    }

    // The rate logged per epoch is the schedule's: constant, then cosine from 0.02 down
    // to 0.1 × 0.02 at the last epoch.
    let rates = history(&q, &runs["constant"], "learning_rate");
    assert_eq!(rates.len(), 10, "{rates:?}");
    assert!(rates.iter().all(|r| (r - 0.02).abs() < 1e-9), "{rates:?}");
    let rates = history(&q, &runs["cosine"], "learning_rate");
    assert_eq!(rates.len(), 10, "{rates:?}");
    for (epoch, r) in rates.iter().enumerate() {
        let t = epoch as f64 / 9.0;
        let want = 0.02 * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * t).cos()));
        assert!((r - want).abs() < 1e-9, "epoch {epoch}: {r} vs {want}");
    }
    // And it is the rate the optimizer used: with the frozen rate the loss stays where
    // the first epoch left it, while at a constant rate it goes on falling.
    let frozen_loss = history(&q, &runs["frozen"], "train_loss");
    let constant_loss = history(&q, &runs["constant"], "train_loss");
    let moved = |l: &[f64]| (l[1] - l[9]).abs();
    assert!(
        moved(&frozen_loss) < 1e-4,
        "frozen after epoch 1: {frozen_loss:?}"
    );
    assert!(
        moved(&constant_loss) > 100.0 * moved(&frozen_loss).max(1e-6),
        "constant {constant_loss:?} vs frozen {frozen_loss:?}"
    );

    // Class weights: the rows of the class weighted 20x pull the model towards it:
    // on the held-out rows of the output example its probability of malignant is
    // higher on average, and no row it called malignant without weights turns benign.
    let logits = |run: &str| -> Vec<f64> {
        let out = artifact(&q, run, "model/output_example.json");
        let out: Value = serde_json::from_slice(&out).expect("json");
        logits_of(&out)
    };
    let plain = logits(&runs["constant"]);
    let heavy = logits(&runs["weighted"]);
    assert_eq!(plain.len(), heavy.len());
    let p = |l: &[f64]| l.iter().map(|x| 1.0 / (1.0 + (-x).exp())).sum::<f64>() / l.len() as f64;
    assert!(
        p(&heavy) > p(&plain) + 0.01,
        "mean P(malignant) weighted {} vs plain {}: {heavy:?} {plain:?}",
        p(&heavy),
        p(&plain)
    );
    for (a, b) in plain.iter().zip(&heavy) {
        assert!(
            *a <= 0.0 || *b > 0.0,
            "a row called malignant without weights is benign with them: {plain:?} {heavy:?}"
        );
    }
    let val_accuracy = |run: &str| history(&q, run, "val_accuracy");
    assert_ne!(
        val_accuracy(&runs["weighted"]),
        val_accuracy(&runs["constant"])
    );
}

/// The logits (of the second class, malignant) in a binary model's output example.
fn logits_of(out: &Value) -> Vec<f64> {
    out["output"]
        .as_array()
        .unwrap_or_else(|| panic!("an output column in {out}"))
        .iter()
        .map(|r| r[0].as_f64().expect("a logit"))
        .collect()
}

#[test]
fn a_sweep_runs_trials_in_parallel_and_asha_prunes_the_ones_behind() {
    let q = server_with_breast_cancer();
    // A grid in a fixed order: two trials at a good rate, then two at a rate that
    // learns nothing in a few epochs. Two at a time.
    let id = q.submit(json!({
        "name": "asha", "kind": "sweep", "inputs": ["dataset:cancer@1"],
        // The sweep reads every running trial's curve at each poll: half a core keeps
        // it from falling behind trials that finish an epoch every few milliseconds.
        "resources": {"cpus": 0.5},
        "trial": {"target": "diagnosis", "model": "mlp", "hidden": [8], "epochs": ASHA_EPOCHS,
                  "patience": 0, "seed": 1},
        "trial_resources": {"cpus": 0.5},
        "space": {
            "learning_rate": {"type": "categorical", "values": [0.03, 0.00001]},
            "weight_decay": {"type": "categorical", "values": [0.0, 0.0001]},
        },
        "algorithm": "grid", "trials": 4, "parallel": 2, "metric": "val_loss",
        "asha": {"min_epochs": 2, "reduction": 2},
        "register": "asha-best",
    }));
    let j = finished(&q, &id);
    let log = job_log(&q, &id);
    assert_eq!(j["state"], "succeeded", "{j:#}\n{}", log["data"]);
    // A pruned trial's cancellation may still be under way when the sweep ends.
    let mut trials: Vec<Value> = trial_jobs(&q, &id)
        .iter()
        .map(|t| finished(&q, t["job_id"].as_str().expect("job id")))
        .collect();
    assert_eq!(trials.len(), 4, "{trials:#?}");
    trials.sort_by_key(|t| t["name"].as_str().map(str::to_string));
    let rate = |t: &Value| -> f64 {
        let run = mlflow(
            &q,
            &format!("runs/get?run_id={}", t["run_id"].as_str().expect("run")),
        );
        run["run"]["data"]["params"]
            .as_array()
            .expect("params")
            .iter()
            .find(|p| p["key"] == "learning_rate")
            .and_then(|p| p["value"].as_str()?.parse().ok())
            .expect("learning_rate param")
    };
    // Every slow trial was stopped by ASHA (its job cancelled) before its last epoch.
    let slow: Vec<&Value> = trials.iter().filter(|t| rate(t) < 0.001).collect();
    assert_eq!(slow.len(), 2, "{trials:#?}");
    for t in &slow {
        assert_eq!(t["state"], "cancelled", "{t:#}\n{}", log["data"]);
        let epochs = history(&q, t["run_id"].as_str().expect("run"), "val_loss").len();
        assert!(
            (2..ASHA_EPOCHS as usize).contains(&epochs),
            "pruned after {epochs} epochs: {}",
            log["data"]
        );
    }
    let text = log["data"].to_string();
    assert!(text.contains("pruned after"), "{text}");
    let sweep = mlflow(
        &q,
        &format!("runs/get?run_id={}", j["run_id"].as_str().expect("run")),
    );
    let pruned = metric_of(&sweep, "trials_pruned").expect("trials_pruned");
    assert!(pruned >= 2.0, "{pruned}");
    // The best is a fast trial, and it ran to its last epoch.
    let best = tag(&sweep, "qanat.sweep.best_run").expect("best_run");
    let winner = trials
        .iter()
        .find(|t| t["run_id"] == best.as_str())
        .expect("the best is a trial");
    assert_eq!(winner["state"], "succeeded");
    assert!(rate(winner) > 0.01);
    assert_eq!(history(&q, &best, "val_loss").len(), ASHA_EPOCHS as usize);
    // Two trials ran at once: the first two started before either ended.
    // RFC 3339 times in UTC with microseconds: ordered as strings.
    let span = |t: &Value| {
        let at = |k: &str| {
            let s = t[k].as_str().unwrap_or_else(|| panic!("{k} in {t:#}"));
            assert_eq!(s.len(), "2026-01-01T00:00:00.000000Z".len(), "{s}");
            s.to_string()
        };
        (at("started_at"), at("finished_at"))
    };
    let (a, b) = (span(&trials[0]), span(&trials[1]));
    assert!(a.0 < b.1 && b.0 < a.1, "trial 0 {a:?}, trial 1 {b:?}");
    // (Not checked: "never more than two" by the jobs' times. A pruned trial counts
    // as done once its cancellation is asked for, and the next trial may start while
    // the cancelled one is still stopping.)
}

/// Epochs of each trial of the ASHA sweep: enough that a trial lives through many of
/// the sweep's polls (every 500 ms) after its first rung, even in a release build.
const ASHA_EPOCHS: u32 = 300;
