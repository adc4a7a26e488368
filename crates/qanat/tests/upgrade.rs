//! Upgrades: an installation written by an earlier release opens with this binary and
//! everything in it reads back and verifies — datasets (pulled byte for byte), the
//! encrypted object area, runs with their params, metrics and artifacts, registered
//! models with their versions, aliases and alias history, and the audit chain — and new
//! writes work on top of it.
//!
//! Each `tests/fixtures/upgrade-<release>/` was written by that release's binary with
//! `tests/fixtures/make-upgrade-fixture.sh` (which documents the layout); the test copies
//! it, so the fixture itself is never changed. A release that changes the schema adds
//! its fixture, and every fixture keeps being tested.

mod common;

use std::path::{Path, PathBuf};

use common::Qanat;
use qanat_store::testing::ScratchPostgres;
use serde_json::{json, Value};

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("tests/fixtures")
        .map(|e| e.expect("fixture entry").path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("upgrade-"))
        })
        .collect();
    out.sort();
    assert!(
        !out.is_empty(),
        "no upgrade fixture under {}",
        root.display()
    );
    out
}

/// Every file under `dir` with its bytes, by relative path.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).expect("under root").to_path_buf();
                out.push((rel, std::fs::read(&path).expect("read")));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// What the release recorded about the installation it wrote (`expected.json`).
fn expected(backend: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(backend.join("expected.json")).expect("expected.json"))
        .expect("expected.json is JSON")
}

#[test]
fn sqlite_installations_of_earlier_releases_open_with_their_data() {
    for fixture in fixtures() {
        let backend = fixture.join("sqlite");
        let expected = expected(&backend);
        let admin = expected["admin_token"].as_str().expect("admin_token");
        let q = Qanat::open_copy_of(&backend.join("home"), admin, vec![]);
        reads_back_and_accepts_writes(q, &fixture, &expected);
    }
}

#[test]
fn postgres_installations_of_earlier_releases_open_with_their_data() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    for fixture in fixtures() {
        let backend = fixture.join("postgres");
        let Some(db) = rt.block_on(restore(&backend.join("postgres.sql"))) else {
            return;
        };
        let expected = expected(&backend);
        let admin = expected["admin_token"].as_str().expect("admin_token");
        let q = Qanat::open_copy_of(
            &backend.join("home"),
            admin,
            vec![("QANAT_METADATA_URL".into(), db.url.clone())],
        );
        reads_back_and_accepts_writes(q, &fixture, &expected);
    }
}

/// A fresh database holding the release's dump (plain SQL, as the fixture script
/// writes it), with no migration of this binary run yet.
async fn restore(dump: &Path) -> Option<ScratchPostgres> {
    let sql = std::fs::read_to_string(dump).expect("postgres.sql");
    let db = ScratchPostgres::create().await?;
    let pool = sqlx::AnyPool::connect(&db.url)
        .await
        .expect("connect scratch database");
    sqlx::raw_sql(&sql)
        .execute(&pool)
        .await
        .expect("replay the release's dump");
    pool.close().await;
    Some(db)
}

fn reads_back_and_accepts_writes(mut q: Qanat, fixture: &Path, expected: &Value) {
    let release = expected["release"].as_str().expect("release");
    let project = expected["project"].as_str().expect("project");
    let dataset = expected["dataset"].as_str().expect("dataset");
    let model = expected["model"].as_str().expect("model");
    let run = expected["run_id"].as_str().expect("run_id");
    let editor = expected["editor_token"].as_str().expect("editor_token");
    let h = q.http();
    let ml = |path: &str| format!("/mlflow/{project}/api/2.0/mlflow/{path}");

    // The audit chain the release wrote is intact and whole.
    let verified = audit_verify(&q);
    let entries = verified["entries_checked"]
        .as_u64()
        .expect("entries_checked");
    assert!(
        entries >= expected["audit_entries"].as_u64().expect("audit_entries"),
        "{release}: {verified}"
    );
    let (_, pushes) = q.api(
        "GET",
        &format!("/api/v1/audit?action=dataset.push&project={project}"),
        None,
    );
    assert_eq!(
        pushes.as_array().map(Vec::len),
        Some(2),
        "{release}: {pushes}"
    );

    // Datasets: both versions, the tag, and every byte of each.
    let (ok, out, err) = q.cli(&["data", "-p", project, "log", dataset, "--output", "json"]);
    assert!(ok, "{release}: {err}");
    let log: Value = serde_json::from_str(&out).expect("log is JSON");
    let versions: Vec<(i64, Value)> = log
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| (v["version"].as_i64().unwrap_or(0), v["tags"].clone()))
        .collect();
    assert_eq!(
        versions,
        [(2, json!([])), (1, json!(["golden"]))],
        "{release}: {log}"
    );
    for (reference, source) in [("golden", "v1"), ("2", "v2")] {
        let dst = q.dir.path().join(format!("pulled-{source}"));
        let (ok, _, err) = q.cli(&[
            "data",
            "-p",
            project,
            "pull",
            &format!("{dataset}@{reference}"),
            dst.to_str().expect("utf-8 temp path"),
        ]);
        assert!(ok, "{release}: pull {dataset}@{reference}: {err}");
        assert_eq!(
            files(&dst),
            files(&fixture.join("source").join(source)),
            "{release}: {dataset}@{reference} byte for byte"
        );
    }

    // The encrypted object area.
    let object = q
        .request(
            "GET",
            &format!(
                "/api/v1/projects/{project}/objects/{}",
                expected["object_key"].as_str().expect("object_key")
            ),
        )
        .send()
        .expect("get object");
    assert_eq!(object.status().as_u16(), 200, "{release}");
    assert_eq!(object.text().expect("text"), "opaque bytes\n", "{release}");

    // The run: params, latest metric, its history, tags, status and its artifact.
    let (s, v) = h.send(editor, "GET", &ml(&format!("runs/get?run_id={run}")), None);
    assert_eq!(s, 200, "{release}: {v}");
    let data = &v["run"]["data"];
    assert_eq!(
        data["params"],
        json!([{"key": "depth", "value": "6"}, {"key": "lr", "value": "0.1"}]),
        "{release}: {v}"
    );
    assert_eq!(
        data["metrics"],
        json!([{"key": "loss", "step": 1, "timestamp": 1700000002000_i64, "value": 0.25}]),
        "{release}: {v}"
    );
    assert!(
        data["tags"]
            .as_array()
            .expect("tags")
            .contains(&json!({"key": "team", "value": "risk"})),
        "{release}: {v}"
    );
    assert_eq!(v["run"]["info"]["status"], "FINISHED", "{release}: {v}");
    assert_eq!(
        v["run"]["info"]["artifact_uri"], expected["artifact_uri"],
        "{release}: {v}"
    );
    let (s, v) = h.send(
        editor,
        "GET",
        &ml(&format!("metrics/get-history?run_id={run}&metric_key=loss")),
        None,
    );
    assert_eq!(s, 200, "{release}: {v}");
    let history: Vec<f64> = v["metrics"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|m| m["value"].as_f64())
        .collect();
    assert_eq!(history, [0.5, 0.25], "{release}: {v}");
    let artifact_path = expected["artifact_uri"]
        .as_str()
        .and_then(|u| u.strip_prefix("mlflow-artifacts:/"))
        .expect("artifact_uri");
    let artifact = h
        .raw(
            editor,
            "GET",
            &format!(
                "/mlflow/{project}/api/2.0/mlflow-artifacts/artifacts/{artifact_path}/model/weights.bin"
            ),
        )
        .send()
        .expect("get artifact");
    assert_eq!(artifact.status().as_u16(), 200, "{release}");
    assert_eq!(
        artifact.text().expect("text"),
        "model weights v1",
        "{release}"
    );

    // The registered model: two versions of the run, both aliases, the alias history.
    let (s, v) = q.api(
        "GET",
        &format!("/api/v1/projects/{project}/models/{model}"),
        None,
    );
    assert_eq!(s, 200, "{release}: {v}");
    assert_eq!(
        v["model"]["aliases"],
        json!([{"alias": "champion", "version": "1"}, {"alias": "production", "version": "2"}]),
        "{release}: {v}"
    );
    let sources: Vec<(&str, &str)> = v["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|m| {
            (
                m["version"].as_str().unwrap_or(""),
                m["run_id"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(sources, [("2", run), ("1", run)], "{release}: {v}");
    let moves: Vec<(&str, &str)> = v["alias_history"]
        .as_array()
        .expect("alias_history")
        .iter()
        .map(|m| {
            (
                m["alias"].as_str().unwrap_or(""),
                m["version"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        moves,
        [("champion", "1"), ("production", "1"), ("production", "2")],
        "{release}: {v}"
    );

    // New writes on the upgraded installation, in every domain.
    let (ok, _, err) = q.cli(&["models", "-p", project, "rollback", model]);
    assert!(
        ok,
        "{release}: rollback over the release's alias history: {err}"
    );
    let (s, v) = h.send(
        editor,
        "GET",
        &ml(&format!(
            "registered-models/alias?name={model}&alias=production"
        )),
        None,
    );
    assert_eq!(s, 200, "{release}: {v}");
    assert_eq!(v["model_version"]["version"], "1", "{release}: {v}");
    let (s, v) = h.send(
        editor,
        "POST",
        &ml("model-versions/create"),
        Some(json!({"name": model, "source": format!("runs:/{run}/model"), "run_id": run})),
    );
    assert_eq!(s, 200, "{release}: {v}");
    assert_eq!(v["model_version"]["version"], "3", "{release}: {v}");
    let (s, v) = h.send(
        editor,
        "POST",
        &ml("runs/create"),
        Some(json!({"experiment_id": expected["experiment_id"], "run_name": "after-upgrade"})),
    );
    assert_eq!(s, 200, "{release}: {v}");
    let new_run = v["run"]["info"]["run_id"]
        .as_str()
        .expect("run id")
        .to_string();
    let (s, v) = h.send(
        editor,
        "POST",
        &ml("runs/log-batch"),
        Some(
            json!({"run_id": new_run, "params": [{"key": "lr", "value": "0.05"}],
                    "metrics": [{"key": "loss", "value": 0.2, "timestamp": 1, "step": 0}]}),
        ),
    );
    assert_eq!(s, 200, "{release}: {v}");
    let (s, v) = h.send(
        editor,
        "POST",
        &ml("runs/search"),
        Some(json!({"experiment_ids": [expected["experiment_id"]], "filter": "params.lr = '0.1'"})),
    );
    assert_eq!(s, 200, "{release}: {v}");
    assert_eq!(
        v["runs"].as_array().map(Vec::len),
        Some(1),
        "{release}: {v}"
    );

    let src = q.dir.path().join("v3");
    common::copy_dir(&fixture.join("source/v2"), &src);
    std::fs::write(
        src.join("after-upgrade.txt"),
        b"written by the new binary\n",
    )
    .expect("write");
    let (ok, out, err) = q.cli(&[
        "data",
        "-p",
        project,
        "push",
        dataset,
        src.to_str().expect("utf-8 temp path"),
        "-m",
        "after the upgrade",
        "--output",
        "json",
    ]);
    assert!(ok, "{release}: {err}");
    let pushed: Value = serde_json::from_str(&out).expect("push prints JSON");
    assert_eq!(pushed["version"], 3, "{release}: {pushed}");
    let (new_bytes, total) = (&pushed["new_bytes"], &pushed["total_size"]);
    assert!(
        new_bytes.as_u64().expect("new_bytes") < total.as_u64().expect("total_size"),
        "{release}: the release's chunks are reused: {pushed}"
    );
    let dst = q.dir.path().join("pulled-v3");
    let (ok, _, err) = q.cli(&[
        "data",
        "-p",
        project,
        "pull",
        &format!("{dataset}@3"),
        dst.to_str().expect("utf-8 temp path"),
    ]);
    assert!(ok, "{release}: {err}");
    assert_eq!(
        files(&dst),
        files(&src),
        "{release}: version 3 byte for byte"
    );
    q.user_with_role("grace", project, "viewer");

    // A second start finds every migration applied; the chain still verifies and has
    // grown by the new writes.
    q.kill_hard();
    q.spawn_server();
    let after = audit_verify(&q);
    assert!(
        after["entries_checked"].as_u64().expect("entries_checked") > entries,
        "{release}: {after}"
    );
}

/// `qanat audit verify`, which fails unless the chain is intact.
fn audit_verify(q: &Qanat) -> Value {
    let out = q.cli_ok("audit verify --output json");
    let v: Value = serde_json::from_str(&out).expect("verify prints JSON");
    assert_eq!(v["ok"], true, "{v}");
    v
}

/// The schema's migrations are numbered 1, 2, … with no gap: a new migration takes the
/// next free number, whichever domain owns it, so every database records the same
/// versions for the same schema.
#[test]
fn the_schema_numbers_its_migrations_without_gaps() {
    let versions: Vec<i64> = qanat::wiring::schema()
        .expect("the server's schema")
        .versions()
        .into_iter()
        .map(|(v, _)| v)
        .collect();
    let expected: Vec<i64> = (1..=versions.len() as i64).collect();
    assert_eq!(versions, expected);
}
