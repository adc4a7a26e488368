//! What users read, pinned: the real binary's `--help` texts, tables and messages, as
//! insta snapshots (in `tests/snapshots/`). Ids, timestamps, ports, rates and temporary
//! paths are redacted; everything else must match.
//!
//! A changed output fails the test and leaves a `.snap.new` beside the snapshot;
//! `INSTA_UPDATE=always cargo test -p qanat --test cli` rewrites them, for review in
//! the diff. Under `CI=true` nothing is written and a mismatch fails.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{Qanat, BIN};
use serde_json::json;

/// The redactions every snapshot shares, plus `dir` (a test's temporary directory).
fn settings(dir: Option<&Path>) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    if let Some(dir) = dir {
        // A server test: its directory and port change with every run.
        s.add_filter(&regex_escape(&dir.display().to_string()), "[TMP]");
        s.add_filter(r"127\.0\.0\.1:\d+", "127.0.0.1:[port]");
    }
    // Placeholders as wide as what they replace, so tables keep their alignment.
    s.add_filter(
        r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z",
        "YYYY-MM-DDTHH:MM:SS.ffffffZ",
    );
    s.add_filter(
        r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}",
        "YYYY-MM-DD HH:MM:SS",
    );
    s.add_filter(
        r"\b(prj|ds|usr)_[0-9a-f]{32}\b",
        format!("${{1}}_{}", "x".repeat(32)),
    );
    s.add_filter(r"\btok_[0-9a-f]{16}\b", format!("tok_{}", "x".repeat(16)));
    s.add_filter(r"\b[0-9a-f]{32}\b", "x".repeat(32));
    // `runs ls` shows a run id's first 12 characters.
    s.add_filter(r"\b[0-9a-f]{12}\b", "x".repeat(12));
    s.add_filter(r"\(\d+\.\d MB/s\)", "([rate])");
    s
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

/// A command's outcome as one text: its status, stdout and stderr.
fn outcome(ok: bool, stdout: &str, stderr: &str) -> String {
    format!("success: {ok}\n----- stdout -----\n{stdout}----- stderr -----\n{stderr}")
}

fn run(q: &Qanat, args: &[&str]) -> String {
    let (ok, out, err) = cli100(q, args);
    outcome(ok, &out, &err)
}

/// `qanat <args>` as the admin, its tables fitted as on a terminal of 100 columns
/// (`COLUMNS`; a pipe gets whole rows otherwise).
fn cli100(q: &Qanat, args: &[&str]) -> (bool, String, String) {
    common::outcome(
        common::base_cmd(q.dir.path(), &q.extra_env)
            .env("QANAT_SERVER_URL", &q.url)
            .env("QANAT_TOKEN", &q.admin_token)
            .env("COLUMNS", "100")
            .args(args),
    )
}

/// The binary with no `QANAT_*` variable set (help texts show the variables' values).
fn bare(args: &[&str]) -> String {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(BIN)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .args(args)
        .output()
        .expect("run qanat");
    outcome(
        status.success(),
        &String::from_utf8_lossy(&stdout),
        &String::from_utf8_lossy(&stderr),
    )
}

#[test]
fn help_texts() {
    let _guard = settings(None).bind_to_scope();
    insta::assert_snapshot!("help", bare(&["--help"]));
    insta::assert_snapshot!("data_help", bare(&["data", "--help"]));
    insta::assert_snapshot!("server_help", bare(&["server", "--help"]));
}

/// Writes a file with mode 0644 whatever the umask: the mode is part of the manifest, and
/// so of the version's content address the snapshots show.
fn write(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
}

/// A project with a dataset of two versions (the second adds a file and tags it).
fn with_dataset() -> Qanat {
    let q = Qanat::start();
    let (ok, _, err) = q.cli(&[
        "projects",
        "create",
        "demo",
        "--regions",
        "uae-north",
        "--description",
        "card fraud",
    ]);
    assert!(ok, "{err}");
    q.cli_ok("data -p demo create tx --tag team=risk");
    let src = q.dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    write(&src.join("tx.csv"), "id,amount\n1,10.5\n2,3.25\n3,7\n");
    q.cli_ok("data -p demo push tx src -m first");
    write(&src.join("README"), "card transactions\n");
    q
}

#[test]
fn project_and_dataset_tables() {
    let q = with_dataset();
    let _guard = settings(Some(q.dir.path())).bind_to_scope();
    insta::assert_snapshot!("whoami", run(&q, &["whoami"]));
    insta::assert_snapshot!("projects_ls", run(&q, &["projects", "ls"]));
    insta::assert_snapshot!(
        "data_push",
        run(
            &q,
            &["data", "-p", "demo", "push", "tx", "src", "-m", "readme", "--tag", "golden"]
        )
    );
    insta::assert_snapshot!("data_ls", run(&q, &["data", "-p", "demo", "ls"]));
    insta::assert_snapshot!("data_log", run(&q, &["data", "-p", "demo", "log", "tx"]));
    insta::assert_snapshot!(
        "data_show_version",
        run(&q, &["data", "-p", "demo", "show", "tx@1"])
    );
    insta::assert_snapshot!(
        "data_diff",
        run(&q, &["data", "-p", "demo", "diff", "tx", "1", "golden"])
    );
    insta::assert_snapshot!(
        "lineage",
        run(&q, &["lineage", "-p", "demo", "dataset:tx@golden"])
    );
    insta::assert_snapshot!("audit_verify", run(&q, &["audit", "verify"]));
    // A table that changed: its rows and columns, not only its bytes.
    let src = q.dir.path().join("src");
    write(
        &src.join("tx.csv"),
        "id,amount,currency\n1,10.5,AED\n2,3.25,AED\n3,7,USD\n4,12,AED\n",
    );
    q.cli_ok("data -p demo push tx src -m currency");
    insta::assert_snapshot!(
        "data_diff_table",
        run(&q, &["data", "-p", "demo", "diff", "tx", "golden", "3"])
    );
}

#[test]
fn models_and_runs_tables() {
    let q = Qanat::start();
    q.create_project("ml", &["uae-north"]);
    let mlflow = |endpoint: &str, body: serde_json::Value| {
        let (s, v) = q.api(
            "POST",
            &format!("/mlflow/ml/api/2.0/mlflow/{endpoint}"),
            Some(body),
        );
        assert_eq!(s, 200, "{endpoint}: {v}");
        v
    };
    let created = mlflow(
        "runs/create",
        json!({"experiment_id": "0", "run_name": "train-1", "start_time": 1_767_225_600_000_i64}),
    );
    let run_id = created["run"]["info"]["run_id"].as_str().expect("run id");
    mlflow(
        "runs/log-metric",
        json!({"run_id": run_id, "key": "auc", "value": 0.91, "timestamp": 1_767_225_600_000_i64}),
    );
    mlflow(
        "runs/log-parameter",
        json!({"run_id": run_id, "key": "depth", "value": "6"}),
    );
    // A run of many metrics: one table line cut to 100 columns, whole with -o wide.
    let wide = mlflow(
        "runs/create",
        json!({"experiment_id": "0", "run_name": "many-metrics", "start_time": 1_767_225_600_000_i64}),
    );
    let wide_id = wide["run"]["info"]["run_id"].as_str().expect("run id");
    let metrics: Vec<_> = (0..30)
        .map(|i| json!({"key": format!("loss_{i:02}"), "value": 0.5, "timestamp": 1_767_225_600_000_i64, "step": 0}))
        .collect();
    mlflow(
        "runs/log-batch",
        json!({"run_id": wide_id, "metrics": metrics}),
    );
    let (ok, out, err) = cli100(&q, &["runs", "-p", "ml", "ls"]);
    assert!(ok, "{err}");
    assert!(
        out.lines().all(|l| l.chars().count() <= 100),
        "wider than 100 columns:\n{out}"
    );
    assert!(out.contains('…') && !out.contains("loss_29"), "{out}");
    let (ok, out, err) = cli100(&q, &["runs", "-p", "ml", "ls", "-o", "wide"]);
    assert!(ok && out.contains("loss_29=0.5"), "{out}{err}");
    // Piped without COLUMNS (a script, grep): whole rows.
    let (ok, out, err) = q.cli(&["runs", "-p", "ml", "ls"]);
    assert!(
        ok && out.contains("loss_29=0.5") && out.contains(wide_id),
        "{out}{err}"
    );
    mlflow("runs/delete", json!({"run_id": wide_id}));
    mlflow("registered-models/create", json!({"name": "fraud"}));
    for _ in 0..2 {
        mlflow(
            "model-versions/create",
            json!({"name": "fraud", "source": format!("runs:/{run_id}/model"), "run_id": run_id}),
        );
    }
    let _guard = settings(Some(q.dir.path())).bind_to_scope();
    insta::assert_snapshot!("runs_ls", run(&q, &["runs", "-p", "ml", "ls"]));
    insta::assert_snapshot!(
        "models_promote",
        run(&q, &["models", "-p", "ml", "promote", "fraud", "2"])
    );
    insta::assert_snapshot!("models_ls", run(&q, &["models", "-p", "ml", "ls"]));
    insta::assert_snapshot!(
        "models_show",
        run(&q, &["models", "-p", "ml", "show", "fraud"])
    );
    insta::assert_snapshot!(
        "experiments_ls",
        run(&q, &["experiments", "ls", "-p", "ml"])
    );
    // A unique prefix names a run, as in git.
    let (ok, out, err) = q.cli(&["runs", "-p", "ml", "show", &run_id[..6], "-o", "json"]);
    assert!(ok, "{err}");
    assert!(out.contains(run_id), "{out}");
    let (ok, _, err) = q.cli(&["runs", "-p", "ml", "show", "abc"]);
    assert!(!ok && err.contains("at least 4"), "{err}");
    // A run's artifacts: listed (one level or all), and downloaded, a file or a tree.
    for (path, body) in [
        ("model/MLmodel", "flavors: {}\n"),
        ("model/data/weights.bin", "0123456789"),
        ("metrics.json", "{}"),
    ] {
        let resp = q
            .request(
                "PUT",
                &format!(
                    "/mlflow/ml/api/2.0/mlflow-artifacts/artifacts/0/{run_id}/artifacts/{path}"
                ),
            )
            .body(body)
            .send()
            .expect("send");
        assert_eq!(resp.status().as_u16(), 200, "{path}");
    }
    insta::assert_snapshot!(
        "runs_artifacts_ls",
        run(
            &q,
            &["runs", "-p", "ml", "artifacts", "ls", &run_id[..8], "-r"]
        )
    );
    let (ok, out, err) = q.cli(&[
        "runs",
        "-p",
        "ml",
        "artifacts",
        "ls",
        run_id,
        "model",
        "-o",
        "json",
    ]);
    assert!(ok, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        listed,
        json!([{"path": "model/MLmodel", "is_dir": false, "file_size": 12}, {"path": "model/data", "is_dir": true}])
    );
    let dest = q.dir.path().join("got");
    let dest_s = dest.to_str().expect("utf8");
    let get =
        |path: &str, to: &str| q.cli(&["runs", "-p", "ml", "artifacts", "get", run_id, path, to]);
    let (ok, _, err) = get("model", dest_s);
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::read(dest.join("model/data/weights.bin")).expect("file"),
        b"0123456789"
    );
    assert_eq!(
        std::fs::read(dest.join("model/MLmodel")).expect("file"),
        b"flavors: {}\n"
    );
    let (ok, out, err) = get("metrics.json", "-");
    assert!(ok && out == "{}", "{out} {err}");
    let (ok, _, err) = get("../x", dest_s);
    assert!(!ok && err.contains("relative to the run's root"), "{err}");
    // Rollbacks walk back along the history, then say when there is nothing left.
    run(&q, &["models", "-p", "ml", "promote", "fraud", "1"]);
    run(&q, &["models", "-p", "ml", "rollback", "fraud"]);
    insta::assert_snapshot!(
        "models_rollback_again",
        run(&q, &["models", "-p", "ml", "rollback", "fraud"])
    );
    insta::assert_snapshot!(
        "models_history",
        run(
            &q,
            &[
                "models",
                "history",
                "fraud",
                "-p",
                "ml",
                "--alias",
                "production"
            ]
        )
    );
}

#[test]
fn errors_say_what_is_wrong() {
    let q = with_dataset();
    let _guard = settings(Some(q.dir.path())).bind_to_scope();
    insta::assert_snapshot!(
        "error_bad_reference",
        run(&q, &["lineage", "-p", "demo", "tx@1"])
    );
    insta::assert_snapshot!(
        "error_wrong_kind",
        run(&q, &["data", "-p", "demo", "pull", "model:tx@1", "out"])
    );
    insta::assert_snapshot!(
        "error_bad_version",
        run(&q, &["data", "-p", "demo", "pull", "tx@0", "out"])
    );
    insta::assert_snapshot!(
        "error_missing_version",
        run(&q, &["data", "-p", "demo", "pull", "tx@9", "out"])
    );
    // --token wins over QANAT_TOKEN (which holds the admin's token here).
    insta::assert_snapshot!(
        "error_bad_token",
        run(&q, &["whoami", "--token", "qnt_not-a-token"])
    );
    insta::assert_snapshot!(
        "error_unknown_project",
        run(&q, &["data", "-p", "nope", "ls"])
    );
}

/// Starts `qanat <args>` (a server), returns the address it says it listens on, and
/// stops it.
fn listening_address(dir: &Path, env: &[(String, String)], args: &[&str]) -> String {
    use std::io::{BufRead, BufReader};
    let mut child = common::base_cmd(dir, env)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn qanat server");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("qanat server listening on ") {
                let _ = tx.send(url.to_string());
            }
        }
    });
    let url = rx.recv_timeout(std::time::Duration::from_secs(60));
    let _ = child.kill();
    let _ = child.wait();
    url.expect("the server did not start")
}

#[test]
fn home_bind_and_port_flags_win_over_the_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("elsewhere");
    let home_arg = home.to_str().expect("utf8");
    common::run_ok(
        common::base_cmd(dir.path(), &[]).args(["--home", home_arg, "init", "--output", "json"]),
    );
    assert!(
        home.join("master.key").exists(),
        "--home is where init writes"
    );
    assert!(!dir.path().join("home").exists(), "not QANAT_HOME");

    // An environment address the server could not use: only the flags make it start.
    let bad_bind = vec![(
        "QANAT_SERVER_BIND".to_string(),
        "127.0.0.1:not-a-port".to_string(),
    )];
    let url = listening_address(
        dir.path(),
        &bad_bind,
        &["--home", home_arg, "server", "--port", "0"],
    );
    assert!(
        url.starts_with("http://127.0.0.1:"),
        "--port keeps the host: {url}"
    );
    let url = listening_address(
        dir.path(),
        &bad_bind,
        &["--home", home_arg, "server", "--bind", "127.0.0.1:0"],
    );
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
}

#[test]
fn a_reader_that_leaves_ends_the_command_quietly() {
    // `qanat … | head`: the reader is gone before the command prints.
    let dir = tempfile::tempdir().expect("dir");
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = common::base_cmd(dir.path(), &[])
        .args(["config", "show"])
        .stdout(writer)
        .output()
        .expect("run");
    let _guard = settings(Some(dir.path())).bind_to_scope();
    insta::assert_snapshot!(
        "broken_pipe",
        outcome(
            out.status.success(),
            "",
            &String::from_utf8_lossy(&out.stderr)
        )
    );
}
