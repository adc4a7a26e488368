//! A data directory written by the previous release opens with this binary, and
//! everything in it reads back and verifies: the audit chain, a dataset version's files,
//! an encrypted object, an MLflow run, a registered model behind an alias. New writes
//! work on top of it. The fixture and the script that made it are in
//! `tests/fixtures/` (see `make-upgrade-fixture.sh`).

mod common;

use std::path::{Path, PathBuf};

use common::Qanat;
use serde_json::{json, Value};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade-0.1")
}

#[test]
fn a_previous_release_data_directory_opens_and_reads_back() {
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture().join("fixture.json")).expect("fixture.json"),
    )
    .expect("fixture json");
    let token = meta["token"].as_str().expect("token");
    let run_id = meta["run_id"].as_str().expect("run id");
    let q = Qanat::open_copy_of(&fixture().join("home"), token);
    let h = q.http();

    // The audit chain written by the old release still verifies.
    let (s, v) = h.send(token, "GET", "/api/v1/audit/verify", None);
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["ok"], true, "{v}");
    let before = v["head_seq"].as_i64().expect("head");
    assert!(before >= 10, "the fixture's history is there: {v}");

    // The dataset version pulls back byte for byte.
    let out = q.dir.path().join("pulled");
    let (ok, _, err) = q.cli(&[
        "data",
        "-p",
        "fraud",
        "pull",
        "tx@1",
        out.to_str().expect("utf-8 path"),
    ]);
    assert!(ok, "pull: {err}");
    for f in ["transactions.csv", "README.txt"] {
        assert_eq!(
            std::fs::read(out.join(f)).expect("pulled file"),
            std::fs::read(fixture().join("src").join(f)).expect("source file"),
            "{f}"
        );
    }

    // The encrypted object decrypts with the old master key.
    let resp = h
        .raw(token, "GET", "/api/v1/projects/fraud/objects/notes/a.txt")
        .send()
        .expect("get object");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.text().expect("text"), "object bytes");

    // The run keeps its params, metrics and tags.
    let m = "/mlflow/fraud/api/2.0/mlflow";
    let (s, r) = h.send(token, "GET", &format!("{m}/runs/get?run_id={run_id}"), None);
    assert_eq!(s, 200, "{r}");
    let data = &r["run"]["data"];
    assert_eq!(
        data["params"][0],
        json!({"key": "lr", "value": "0.1"}),
        "{r}"
    );
    assert_eq!(data["metrics"][0]["key"], "auc");
    assert_eq!(data["metrics"][0]["value"], 0.91);
    assert_eq!(r["run"]["info"]["status"], "FINISHED");

    // The registered model and its alias.
    let (s, v) = h.send(
        token,
        "GET",
        &format!("{m}/registered-models/alias?name=churn-model&alias=champion"),
        None,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["model_version"]["version"], "1");
    assert_eq!(v["model_version"]["run_id"], run_id);

    // New writes on top: a second dataset version, a new run, an alias move.
    let src = q.dir.path().join("src2");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("more.csv"), "id,amount,label\n4,1.0,1\n").expect("write");
    let (ok, _, err) = q.cli(&[
        "data",
        "-p",
        "fraud",
        "push",
        "tx",
        src.to_str().expect("utf-8 path"),
        "-m",
        "after the upgrade",
    ]);
    assert!(ok, "push: {err}");
    let exp = meta["experiment_id"].as_str().expect("experiment id");
    let (s, v) = h.send(
        token,
        "POST",
        &format!("{m}/runs/create"),
        Some(json!({"experiment_id": exp})),
    );
    assert_eq!(s, 200, "{v}");
    let (s, v) = h.send(
        token,
        "POST",
        &format!("{m}/model-versions/create"),
        Some(json!({"name": "churn-model", "source": "mlflow-artifacts:/x", "run_id": run_id})),
    );
    assert_eq!(s, 200, "{v}");
    let (s, v) = h.send(
        token,
        "POST",
        "/api/v1/projects/fraud/models/churn-model/aliases/champion/promote",
        Some(json!({"version": "2"})),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["previous_version"], "1");

    let (_, v) = h.send(token, "GET", "/api/v1/audit/verify", None);
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["head_seq"].as_i64().expect("head") > before);
}
