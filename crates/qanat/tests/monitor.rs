//! Monitoring through the binary: a deployment's live traffic drifts, the monitor's
//! rule fires, a signed webhook arrives, the model is retrained on the newest data and
//! canaried, and the retrained version is promoted on live quality — with the lineage
//! inference log → drift report → retraining run → model version. And a version worse
//! on live labels than the one before is rolled back by itself.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Qanat;
use serde_json::{json, Value};

/// The breast cancer table: header and rows.
fn table() -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(format!(
        "{}/../../examples/data/breast_cancer.csv",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("table");
    let mut lines = text.lines();
    let header = lines
        .next()
        .expect("header")
        .split(',')
        .map(str::to_string)
        .collect();
    let rows = lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    (header, rows)
}

/// One OIP request of `rows`, every feature scaled by `scale`, with the request's own
/// `id`; and the true labels.
fn request(id: &str, rows: &[Vec<String>], header: &[String], scale: f64) -> (Value, Vec<String>) {
    let target = header
        .iter()
        .position(|h| h == "diagnosis")
        .expect("target");
    let inputs: Vec<Value> = header
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != target)
        .map(|(i, name)| {
            let data: Vec<f64> = rows
                .iter()
                .map(|r| r[i].parse::<f64>().expect("number") * scale)
                .collect();
            json!({"name": name, "datatype": "FP64", "shape": [rows.len(), 1], "data": data})
        })
        .collect();
    let labels = rows.iter().map(|r| r[target].clone()).collect();
    (json!({"id": id, "inputs": inputs}), labels)
}

/// 200 rows in a fixed shuffled order (the file is not in random order: its first
/// rows hold more malignant cases than the whole, which a monitor rightly calls
/// drift); `part` 0, 1 and 2 are disjoint.
fn spread(part: usize) -> Vec<usize> {
    // 263 and 569 (the rows) are coprime: i ↦ 263·i mod 569 is a permutation.
    (part * 200..part * 200 + 200)
        .map(|i| (i * 263) % 569)
        .collect()
}

/// Sends `picked` rows in requests of 10 rows to `deployment`; returns each request's
/// id with its labels.
fn traffic(
    q: &Qanat,
    deployment: &str,
    tag: &str,
    picked: &[usize],
    scale: f64,
) -> Vec<(String, Vec<String>)> {
    let (header, rows) = table();
    let rows: Vec<Vec<String>> = picked.iter().map(|&i| rows[i].clone()).collect();
    let mut sent = Vec::new();
    for (n, chunk) in rows.chunks(10).enumerate() {
        let id = format!("{tag}-{n}");
        let (body, labels) = request(&id, chunk, &header, scale);
        let (s, out) = q.api(
            "POST",
            &format!("/v2/models/{deployment}/infer"),
            Some(body),
        );
        assert_eq!(s, 200, "{out}");
        sent.push((id, labels));
    }
    sent
}

fn cli_json(q: &Qanat, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-p", "default", "-o", "json"]);
    let (ok, out, err) = q.cli(&all);
    assert!(ok, "qanat {}: {err}", all.join(" "));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Polls `qanat monitor status` until `done` says so (at most `secs`).
fn wait_status(q: &Qanat, deployment: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let s = cli_json(q, &["monitor", "status", deployment]);
        if done(&s) {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "the monitor did not get there in {secs} s: {s:#}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn post_labels(q: &Qanat, deployment: &str, sent: &[(String, Vec<String>)]) -> Value {
    let labels: Vec<Value> = sent
        .iter()
        .map(|(id, l)| json!({"id": id, "value": l}))
        .collect();
    let (s, v) = q.api(
        "POST",
        &format!("/api/v1/projects/default/deployments/{deployment}/labels"),
        Some(json!({ "labels": labels })),
    );
    assert_eq!(s, 200, "{v}");
    v
}

/// A one-shot HTTP receiver: every request's headers and body, answered 200.
/// One delivery: its headers (lower-case names) and body.
type Delivery = (Vec<(String, String)>, String);

fn receiver() -> (String, mpsc::Receiver<Delivery>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut headers = Vec::new();
            let mut line = String::new();
            reader.read_line(&mut line).ok();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.trim_end().split_once(':') {
                    headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                }
            }
            let len: usize = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; len];
            reader.read_exact(&mut body).ok();
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .ok();
            tx.send((headers, String::from_utf8_lossy(&body).into_owned()))
                .ok();
        }
    });
    (url, rx)
}

fn write(q: &Qanat, name: &str, text: &str) -> String {
    let path = q.dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    path.to_str().expect("utf8").to_string()
}

#[test]
fn injected_drift_alerts_retrains_on_fresh_data_canaries_and_promotes_with_lineage() {
    let q = Qanat::start_with(vec![
        ("QANAT_JOBS_CPUS".into(), "2".into()),
        ("QANAT_EVENTS_WEBHOOK_SCHEMES".into(), "http".into()),
        ("QANAT_EVENTS_ALLOW_PRIVATE_NETWORKS".into(), "true".into()),
    ]);
    let http = q.http();
    let token = &q.admin_token;
    q.push_example("cancer", "breast_cancer.csv");
    q.train(json!({
        "name": "cancer-mlp", "inputs": ["dataset:cancer@1"], "target": "diagnosis",
        "model": "mlp", "hidden": [16], "epochs": 20, "seed": 2, "register": "cancer",
    }));
    // A signed webhook subscribed to the monitor's alerts.
    let (url, hooks) = receiver();
    let (s, v) = http.send(
        token,
        "POST",
        "/api/2.0/mlflow/webhooks",
        Some(json!({
            "name": "alerts", "url": url, "secret": "s3cret",
            "events": [{"entity": "monitor_alert", "action": "created"}],
        })),
    );
    assert_eq!(s, 200, "{v}");
    q.cli_ok("deploy -p default create web --model cancer --primary 1");

    // Bad specs are refused with what to fix; a monitor of no deployment is a 404.
    let bad = write(&q, "bad.yaml", "window: {rows: 100, seconds: 60}\n");
    let (ok, _, err) = q.cli(&["monitor", "-p", "default", "set", "web", "-f", &bad]);
    assert!(!ok && err.contains("exactly one of seconds"), "{err}");
    let (ok, _, err) = q.cli(&[
        "monitor",
        "-p",
        "default",
        "set",
        "nope",
        "--window-rows",
        "9",
    ]);
    assert!(!ok && err.contains("nope"), "{err}");

    let spec = write(
        &q,
        "monitor.yaml",
        "window: {rows: 100}\nmin_rows: 50\n\
         alerts:\n  - name: drift\n    metric: drift_share\n    above: 0.3\n    windows: 2\n    actions: [notify, retrain, canary]\n\
         canary: {weight: 30, windows: 1, min_labels: 10, margin: 0.2}\n",
    );
    let m = cli_json(&q, &["monitor", "set", "web", "-f", &spec]);
    assert_eq!(m["spec"]["window"], json!({"rows": 100}));

    // Two windows of traffic like the training data: checked, no drift, no alert.
    traffic(&q, "web", "calm", &spread(0), 1.0);
    let s = wait_status(&q, "web", 60, |s| {
        s["checks"].as_array().is_some_and(|c| c.len() >= 2)
    });
    for c in s["checks"].as_array().expect("checks") {
        assert_eq!(c["status"], "ok", "{c:#}");
        let v = &c["versions"][0];
        assert_eq!(
            (v["version"].as_str(), v["rows"].as_u64()),
            (Some("1"), Some(100))
        );
        assert!(v["drift"]["share"].as_f64().expect("share") <= 0.3, "{v:#}");
        // The target is not an input: the 30 features are tested.
        assert_eq!(v["drift"]["columns"], 30, "{v:#}");
    }
    assert!(s["alerts"].as_array().expect("alerts").is_empty());

    // Fresh data arrives (a new version of the dataset), then the traffic drifts.
    let fresh = q.dir.path().join("fresh");
    std::fs::create_dir_all(&fresh).expect("mkdir");
    let (header, rows) = table();
    let mut text = header.join(",");
    for r in &rows[..450] {
        text.push('\n');
        text.push_str(&r.join(","));
    }
    std::fs::write(fresh.join("breast_cancer.csv"), text + "\n").expect("write");
    let (ok, _, err) = q.cli(&[
        "data",
        "-p",
        "default",
        "push",
        "cancer",
        fresh.to_str().expect("utf8"),
    ]);
    assert!(ok, "{err}");
    traffic(&q, "web", "drifted", &spread(1), 1.8);

    // Two drifted windows in a row: the rule fires, the webhook is told, the job of
    // version 1 runs again on dataset:cancer@2 and its version gets a canary.
    let s = wait_status(&q, "web", 240, |s| {
        s["alerts"]
            .as_array()
            .and_then(|a| a.first())
            .is_some_and(|a| a["state"] != "open" && a["state"] != "retraining")
    });
    let checks = s["checks"].as_array().expect("checks");
    assert!(checks.len() >= 4, "{s:#}");
    assert_eq!(checks[0]["status"], "drift", "{:#}", checks[0]);
    // Its outputs drifted with its inputs.
    let predictions = &checks[0]["versions"][0]["predictions"];
    assert!(
        predictions
            .as_array()
            .is_some_and(|p| p.iter().any(|c| c["drifted"] == true)),
        "{predictions:#}"
    );
    let alert = &s["alerts"][0];
    assert_eq!(alert["state"], "canary", "{alert:#}");
    assert_eq!(alert["rule"], "drift");
    assert_eq!(alert["candidate"], "2", "{alert:#}");
    let fired_on = alert["check"].as_i64().expect("check");
    let actions: Vec<(&str, &str)> = alert["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap_or(""),
                a["outcome"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("notify", "done"),
            ("retrain", "waiting"),
            ("retrain", "done"),
            ("canary", "waiting")
        ],
        "{alert:#}"
    );
    let job = alert["job"].as_str().expect("job");
    let detail = cli_json(&q, &["jobs", "show", job]);
    assert_eq!(
        detail["spec"]["inputs"],
        json!(["dataset:cancer@2"]),
        "{detail:#}"
    );
    assert_eq!(detail["submitted_by"], "monitor");
    let d = cli_json(&q, &["deploy", "status", "web"]);
    let targets: Vec<(String, u64)> = d["targets"]
        .as_array()
        .expect("arms")
        .iter()
        .map(|a| {
            (
                a["version"].as_str().unwrap_or("").to_string(),
                a["weight"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        targets,
        [("1".to_string(), 70), ("2".to_string(), 30)],
        "{d:#}"
    );

    // The webhook got a signed monitor_alert.created.
    let (headers, body) = hooks
        .recv_timeout(Duration::from_secs(30))
        .expect("a delivery");
    let header = |k: &str| {
        headers
            .iter()
            .find(|(h, _)| h == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert!(
        qanat_events::verify(
            b"s3cret",
            &header("x-mlflow-delivery-id"),
            &header("x-mlflow-timestamp"),
            &body,
            &header("x-mlflow-signature"),
        ),
        "the delivery's signature does not verify: {headers:?}"
    );
    let event: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(event["entity"], "monitor_alert", "{event:#}");
    assert_eq!(event["data"]["deployment"], "web", "{event:#}");
    assert_eq!(event["data"]["metric"], "drift_share");

    // Lineage: the retrained version ← its run ← the drift report ← the inference log.
    let g = cli_json(&q, &["lineage", "model:cancer@2"]);
    let edges: Vec<(String, String, String)> = g["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| {
            (
                e["child"].as_str().unwrap_or("").to_string(),
                e["relation"].as_str().unwrap_or("").to_string(),
                e["parent"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let report = format!("drift_report:web@{fired_on}");
    let has = |child: &str, rel: &str, parent: &str| {
        edges
            .iter()
            .any(|(c, r, p)| c.starts_with(child) && r == rel && p.starts_with(parent))
    };
    assert!(has("model:cancer@2", "output_of", "run:"), "{edges:#?}");
    assert!(has("run:", "triggered_by", &report), "{edges:#?}");
    assert!(
        has(&report, "computed_from", "inference_log:web"),
        "{edges:#?}"
    );
    assert!(
        has(&report, "compared_with", "model:cancer@1"),
        "{edges:#?}"
    );
    assert!(has("run:", "input", "dataset:cancer@2"), "{edges:#?}");

    // The canary is judged on live labels: calm traffic, labelled, split 70/30. The
    // retrained version is no worse, so it is promoted.
    let sent = traffic(&q, "web", "judged", &spread(0), 1.0);
    let stored = post_labels(&q, "web", &sent);
    assert_eq!(stored["stored"], 20);
    // The canary may be judged on the first labelled window, before the second is
    // checked: wait for both windows' labels too.
    let s = wait_status(&q, "web", 60, |s| {
        s["alerts"][0]["state"] == "done" && s["labels"]["matched"] == 20
    });
    let last = s["alerts"][0]["actions"]
        .as_array()
        .expect("actions")
        .last()
        .cloned();
    let last = last.expect("an action");
    assert_eq!(
        (last["action"].as_str(), last["outcome"].as_str()),
        (Some("canary"), Some("done")),
        "{last:#}"
    );
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("promoted")),
        "{last:#}"
    );
    let d = cli_json(&q, &["deploy", "status", "web"]);
    assert_eq!(d["targets"][0]["version"], "2", "{d:#}");
    assert_eq!(d["targets"].as_array().map(Vec::len), Some(1), "{d:#}");
    // Live quality was measured on both arms.
    let judged = s["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["versions"].as_array().is_some_and(|v| v.len() == 2))
        .cloned()
        .expect("a window both versions answered");
    for v in judged["versions"].as_array().expect("versions") {
        assert!(
            v["quality"]["accuracy"].as_f64().expect("accuracy") > 0.8,
            "{v:#}"
        );
        assert!(v["quality"]["auc"].as_f64().expect("auc") > 0.8, "{v:#}");
    }
    assert_eq!(s["labels"]["matched"], 20, "{:#}", s["labels"]);

    // The monitors' state is in /metrics.
    let metrics = http
        .raw(&q.admin_token, "GET", "/metrics")
        .send()
        .expect("metrics")
        .text()
        .expect("text");
    for want in [
        "qanat_monitor_checks{project=\"default\",deployment=\"web\",state=\"drift\"}",
        "qanat_monitor_alerts{project=\"default\",deployment=\"web\",state=\"done\"} 1",
        // Whichever version answered min_rows of the newest window was tested (the
        // split is random: the other may have had too few rows).
        "qanat_monitor_drift_share{project=\"default\",deployment=\"web\",version=",
    ] {
        assert!(metrics.contains(want), "no {want} in {metrics}");
    }
    // Live quality of whichever version answered the newest checked window: the judged
    // traffic's last rows may all have gone to one arm (the split is random), and both
    // arms' quality in the judged window was checked above.
    assert!(
        metrics.lines().any(|l| l.starts_with(
            "qanat_monitor_live_quality{project=\"default\",deployment=\"web\",version=\""
        ) && l.contains("metric=\"accuracy\"}")),
        "no live accuracy in {metrics}"
    );

    // The report of the drifted window is a page; the monitor's actions are audited.
    let out = q.dir.path().join("report.html");
    let (ok, text, err) = q.cli(&[
        "monitor",
        "-p",
        "default",
        "report",
        "web",
        "--check",
        &fired_on.to_string(),
        "--html",
        out.to_str().expect("utf8"),
    ]);
    assert!(ok, "{err}");
    assert!(text.contains("DRIFT"), "{text}");
    let page = std::fs::read_to_string(&out).expect("report");
    assert!(
        page.starts_with("<!doctype html>") && page.contains("<svg"),
        "{}",
        &page[..200]
    );
    let audit = q.cli_ok("audit tail -n 200 --actor service:monitor -o json");
    for action in [
        "monitor.alert",
        "job.submit",
        "deployment.update",
        "deployment.promote",
    ] {
        assert!(
            audit.contains(action),
            "no {action} by the monitor in {audit}"
        );
    }
}

#[test]
fn a_version_worse_on_live_labels_is_rolled_back_and_unknown_labels_are_reported() {
    rollback_scenario(vec![]);
}

/// The same on PostgreSQL metadata (when CI provides it; see backends.rs).
#[test]
fn monitors_roll_back_on_postgres_too() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let Some(db) = rt.block_on(qanat_store::testing::TestDb::postgres(
        qanat::wiring::SCHEMA,
    )) else {
        return;
    };
    rollback_scenario(vec![("QANAT_METADATA_URL".into(), db.url.clone())]);
}

fn rollback_scenario(mut env: Vec<(String, String)>) {
    env.push(("QANAT_JOBS_CPUS".into(), "2".into()));
    let q = Qanat::start_with(env);
    let http = q.http();
    let token = &q.admin_token;
    q.push_example("cancer", "breast_cancer.csv");
    // The same table with its labels swapped: a model trained on it is wrong.
    let (header, rows) = table();
    let target = header
        .iter()
        .position(|h| h == "diagnosis")
        .expect("target");
    let flipped_dir = q.dir.path().join("flipped");
    std::fs::create_dir_all(&flipped_dir).expect("mkdir");
    let mut text = header.join(",");
    for r in &rows {
        let mut r = r.clone();
        r[target] = if r[target] == "malignant" {
            "benign"
        } else {
            "malignant"
        }
        .into();
        text.push('\n');
        text.push_str(&r.join(","));
    }
    std::fs::write(flipped_dir.join("flipped.csv"), text + "\n").expect("write");
    q.cli_ok("data -p default create flipped");
    let (ok, _, err) = q.cli(&[
        "data",
        "-p",
        "default",
        "push",
        "flipped",
        flipped_dir.to_str().expect("utf8"),
    ]);
    assert!(ok, "{err}");
    for data in ["dataset:cancer@1", "dataset:flipped@1"] {
        q.train(json!({
            "name": "cancer-mlp", "inputs": [data], "target": "diagnosis",
            "model": "mlp", "hidden": [16], "epochs": 20, "seed": 2, "register": "cancer",
        }));
    }
    let alias = |version: &str| {
        let (s, v) = http.send(
            token,
            "POST",
            "/api/2.0/mlflow/registered-models/alias",
            Some(json!({"name": "cancer", "alias": "production", "version": version})),
        );
        assert_eq!(s, 200, "{v}");
    };
    alias("1");
    q.cli_ok("deploy -p default create web --model cancer --primary @production");
    let spec = write(
        &q,
        "monitor.yaml",
        "window: {rows: 60}\nmin_rows: 30\n\
         alerts:\n  - name: worse\n    metric: accuracy\n    drop: 0.1\n    actions: [rollback]\n",
    );
    cli_json(&q, &["monitor", "set", "web", "-f", &spec]);

    // Labelled traffic on version 1; labels for ids no request had are kept apart.
    let sent = traffic(&q, "web", "v1", &spread(0)[..60], 1.0);
    post_labels(&q, "web", &sent);
    let mut unknown = sent[..1].to_vec();
    unknown[0].0 = "no-such-request".into();
    post_labels(&q, "web", &unknown);
    let s = wait_status(&q, "web", 60, |s| {
        s["checks"][0]["versions"][0]["quality"]["labelled"] == 60
    });
    let good = s["checks"][0]["versions"][0]["quality"]["accuracy"]
        .as_f64()
        .expect("accuracy");
    assert!(good > 0.85, "{s:#}");

    // The alias moves to version 2; its live accuracy collapses; the monitor moves
    // the alias back.
    alias("2");
    std::thread::sleep(Duration::from_secs(2));
    let sent = traffic(&q, "web", "v2", &spread(0)[60..120], 1.0);
    post_labels(&q, "web", &sent);
    let s = wait_status(&q, "web", 60, |s| s["alerts"][0]["state"] == "done");
    let alert = &s["alerts"][0];
    assert_eq!(alert["rule"], "worse");
    assert_eq!(alert["version"], "2", "{alert:#}");
    assert!(
        alert["value"].as_f64().expect("value") < good - 0.1,
        "{alert:#}"
    );
    let rollback = &alert["actions"][0];
    assert_eq!(
        (rollback["action"].as_str(), rollback["outcome"].as_str()),
        (Some("rollback"), Some("done")),
        "{alert:#}"
    );
    assert_eq!(rollback["object"], "model:cancer@1", "{alert:#}");
    let (s2, v) = http.send(
        token,
        "GET",
        "/api/2.0/mlflow/registered-models/alias?name=cancer&alias=production",
        None,
    );
    assert_eq!(
        (s2, v["model_version"]["version"].as_str()),
        (200, Some("1")),
        "{v}"
    );
    // Requests go to version 1 again.
    let (header, rows) = table();
    let (body, _) = request("after", &rows[..2], &header, 1.0);
    let start = Instant::now();
    loop {
        let (st, out) = http.send(token, "POST", "/v2/models/web/infer", Some(body.clone()));
        assert_eq!(st, 200, "{out}");
        if out["model_version"] == "1" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "still {out}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The label for an id no logged request had is reported, not scored.
    assert_eq!(s["labels"]["unmatched"], 1, "{:#}", s["labels"]);
    assert_eq!(
        s["labels"]["unmatched_examples"],
        json!(["no-such-request"])
    );
    let audit = q.cli_ok("audit tail -n 100 --actor service:monitor -o json");
    assert!(audit.contains("model.alias.rollback"), "{audit}");

    // Labels the API refuses say why.
    for (body, want) in [
        (json!({"labels": []}), "labels is empty"),
        (
            json!({"labels": [{"id": "a", "value": {"x": 1}}]}),
            "not a class",
        ),
        (
            json!({"labels": [{"id": "a", "value": 1}, {"id": "a", "value": 2}]}),
            "given twice",
        ),
        (json!({"labels": [{"id": "", "value": 1}]}), "id is empty"),
    ] {
        let (st, v) = http.send(
            token,
            "POST",
            "/api/v1/projects/default/deployments/web/labels",
            Some(body),
        );
        assert_eq!(st, 400, "{v}");
        assert!(v.to_string().contains(want), "{v} (wanted {want})");
    }
    let (st, _) = http.send(
        token,
        "POST",
        "/api/v1/projects/default/deployments/nope/labels",
        Some(json!({"labels": [{"id": "a", "value": 1}]})),
    );
    assert_eq!(st, 404);
}

/// A version registered the way the MLflow client registers one (a run of its own,
/// files uploaded as artifacts, no reference profile among them) whose run logged a
/// Qanat dataset as its training input is profiled from that dataset when it is
/// registered, and its traffic is checked against it instead of `no_reference`.
#[test]
fn a_version_registered_from_mlflow_is_profiled_from_its_logged_training_dataset() {
    let q = Qanat::start_with(vec![("QANAT_JOBS_CPUS".into(), "2".into())]);
    q.push_example("cancer", "breast_cancer.csv");
    q.train(json!({
        "name": "cancer-mlp", "inputs": ["dataset:cancer@1"], "target": "diagnosis",
        "model": "mlp", "hidden": [16], "epochs": 10, "seed": 2, "register": "trained",
    }));
    let source = q.mlflow_get(
        "default",
        "model-versions/get-download-uri?name=trained&version=1",
    )["artifact_uri"]
        .as_str()
        .expect("source")
        .trim_start_matches("mlflow-artifacts:/")
        .to_string();

    // A run of its own, as `mlflow.start_run()` makes it, with the model's files (not
    // its reference profile) and the training set logged as an input.
    let (s, run) = q.api(
        "POST",
        "/api/2.0/mlflow/runs/create",
        Some(json!({"experiment_id": "0"})),
    );
    assert_eq!(s, 200, "{run}");
    let run_id = run["run"]["info"]["run_id"].as_str().expect("run id");
    let artifacts = run["run"]["info"]["artifact_uri"]
        .as_str()
        .expect("artifact uri")
        .trim_start_matches("mlflow-artifacts:/")
        .to_string();
    for file in ["MLmodel", "spec.json", "weights.safetensors", "model.onnx"] {
        let got = q
            .request(
                "GET",
                &format!("/api/2.0/mlflow-artifacts/artifacts/{source}/{file}"),
            )
            .send()
            .expect("download");
        assert_eq!(got.status(), 200, "{file}");
        let bytes = got.bytes().expect("bytes");
        let put = q
            .request(
                "PUT",
                &format!("/api/2.0/mlflow-artifacts/artifacts/{artifacts}/model/{file}"),
            )
            .body(bytes)
            .send()
            .expect("upload");
        assert_eq!(put.status(), 200, "{file}");
    }
    let (s, v) = q.api(
        "POST",
        "/api/2.0/mlflow/runs/log-inputs",
        Some(json!({"run_id": run_id, "datasets": [{
            "tags": [{"key": "mlflow.data.context", "value": "training"}],
            "dataset": {"name": "cancer", "digest": "d1", "source_type": "qanat",
                        "source": "{\"uri\": \"qanat://default/cancer@1\"}"},
        }]})),
    );
    assert_eq!(s, 200, "{v}");
    for (path, body) in [
        ("registered-models/create", json!({"name": "imported"})),
        (
            "model-versions/create",
            json!({"name": "imported", "run_id": run_id,
                   "source": format!("mlflow-artifacts:/{artifacts}/model")}),
        ),
    ] {
        let (s, v) = q.api("POST", &format!("/api/2.0/mlflow/{path}"), Some(body));
        assert_eq!(s, 200, "{path}: {v}");
    }

    q.cli_ok("deploy -p default create web --model imported --primary 1");
    let spec = write(&q, "monitor.yaml", "window: {rows: 60}\nmin_rows: 30\n");
    cli_json(&q, &["monitor", "set", "web", "-f", &spec]);
    traffic(&q, "web", "calm", &spread(0)[..60], 1.0);
    let s = wait_status(&q, "web", 60, |s| {
        s["checks"][0]["versions"][0]["status"].is_string()
    });
    let checked = &s["checks"][0]["versions"][0];
    assert_eq!(checked["status"], "ok", "{s:#}");
    assert_eq!(checked["drift"]["columns"], 30, "{checked:#}");
}

#[test]
fn time_windows_tumble_back_to_back_and_count_every_logged_row() {
    let q = Qanat::start_with(vec![("QANAT_JOBS_CPUS".into(), "2".into())]);
    q.push_example("cancer", "breast_cancer.csv");
    q.train(json!({
        "name": "cancer-mlp", "inputs": ["dataset:cancer@1"], "target": "diagnosis",
        "model": "mlp", "hidden": [8], "epochs": 3, "seed": 2, "register": "cancer",
    }));
    q.cli_ok("deploy -p default create web --model cancer --primary 1");
    let m = cli_json(
        &q,
        &[
            "monitor",
            "set",
            "web",
            "--window-seconds",
            "3",
            "--min-rows",
            "20",
        ],
    );
    assert_eq!(m["spec"]["window"], json!({"seconds": 3}), "{m}");
    // Two bursts more than a window apart: 60 rows, then 40.
    let rows = spread(0);
    traffic(&q, "web", "a", &rows[..60], 1.0);
    std::thread::sleep(Duration::from_secs(4));
    traffic(&q, "web", "b", &rows[60..100], 1.0);
    // Every row is counted in some window, and a window after the traffic has none.
    let s = wait_status(&q, "web", 90, |s| {
        let checks = s["checks"].as_array().cloned().unwrap_or_default();
        let total: u64 = checks.iter().filter_map(|c| c["rows"].as_u64()).sum();
        total == 100 && checks.first().is_some_and(|c| c["rows"] == 0)
    });
    let mut checks = s["checks"].as_array().expect("checks").clone();
    checks.reverse();
    let micros = |c: &Value, k: &str| {
        qanat_store::parse_micros(c[k].as_str().expect("a time")).expect("RFC 3339")
    };
    for pair in checks.windows(2) {
        // Back to back: each window starts where the one before ended.
        assert_eq!(
            micros(&pair[1], "window_start"),
            micros(&pair[0], "window_end"),
            "{pair:#?}"
        );
    }
    for c in &checks {
        assert_eq!(
            micros(c, "window_end") - micros(c, "window_start"),
            3_000_000,
            "three seconds each: {c:#}"
        );
        let rows = c["rows"].as_u64().expect("rows");
        let status = c["status"].as_str().expect("status");
        if rows < 20 {
            assert_eq!(status, "not_enough_data", "{c:#}");
        } else {
            assert!(matches!(status, "ok" | "drift"), "{c:#}");
            assert_eq!(c["versions"][0]["rows"].as_u64(), Some(rows), "{c:#}");
        }
    }
    // The bursts fell in different windows (they were 4 s apart).
    let busy = checks
        .iter()
        .filter(|c| c["rows"].as_u64() > Some(0))
        .count();
    assert!(busy >= 2, "{checks:#?}");
}
