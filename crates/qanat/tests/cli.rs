//! What users read from the CLI, pinned by snapshots of the real binary's output
//! (`insta`): the help texts and the tables of the everyday commands. Ids, hashes,
//! times, ports and paths are replaced by placeholders so a snapshot changes only when
//! the output does. `INSTA_UPDATE=always cargo test -p qanat --test cli` rewrites them;
//! review the diff. Under `CI=true` a difference fails.

mod common;

use std::process::Command;

use common::{base_cmd, Qanat};

/// Placeholders for what differs from run to run.
fn filters() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)",
            "[TIME]",
        ),
        (r"\b[0-9a-f]{64}\b", "[HASH]"),
        (r"\b[0-9a-f]{32}\b", "[ID]"),
        (r"\bprj_[0-9a-f]+\b", "[PROJECT_ID]"),
        (r"\busr_[0-9a-f]+\b", "[USER_ID]"),
        (r"\btok_[0-9a-f]+\b", "[TOKEN_ID]"),
        (r"127\.0\.0\.1:\d{5}", "127.0.0.1:[PORT]"),
        (r"/tmp/[^\s│]+", "[TMP]"),
        (r"\d+(\.\d+)? MB/s", "[RATE]"),
    ]
}

fn run(mut cmd: Command) -> String {
    let out = cmd.output().expect("run qanat");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    if !err.is_empty() {
        text.push_str("--- stderr ---\n");
        text.push_str(&err);
    }
    text.push_str(&format!(
        "--- exit: {} ---\n",
        out.status.code().unwrap_or(-1)
    ));
    text
}

fn local(args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = base_cmd(dir.path(), &[]);
    cmd.args(args);
    run(cmd)
}

fn client(q: &Qanat, args: &[&str]) -> String {
    let mut cmd = base_cmd(q.dir.path(), &q.extra_env);
    cmd.env("QANAT_SERVER_URL", &q.url)
        .env("QANAT_TOKEN", &q.admin_token)
        .args(args);
    run(cmd)
}

macro_rules! snap {
    ($name:literal, $value:expr) => {
        insta::with_settings!({ filters => filters() }, {
            insta::assert_snapshot!($name, $value);
        })
    };
}

#[test]
fn help_texts() {
    snap!("help", local(&["--help"]));
    snap!("help_server", local(&["server", "--help"]));
    snap!("help_data", local(&["data", "--help"]));
}

#[test]
fn everyday_commands_print_readable_tables() {
    let q = Qanat::start();
    q.create_project("fraud", &["uae-north"]);
    snap!("projects_ls", client(&q, &["projects", "ls"]));

    let src = q.dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("t.csv"), "id,amount\n1,2.5\n2,3.0\n").expect("write");
    let src = src.to_str().expect("utf-8 path");
    client(&q, &["data", "-p", "fraud", "create", "tx"]);
    client(
        &q,
        &["data", "-p", "fraud", "push", "tx", src, "-m", "first"],
    );
    snap!("data_ls", client(&q, &["data", "-p", "fraud", "ls"]));
    snap!(
        "data_log",
        client(&q, &["data", "-p", "fraud", "log", "tx"])
    );
    snap!("models_ls", client(&q, &["models", "-p", "fraud", "ls"]));
    snap!("audit_verify", client(&q, &["audit", "verify"]));
    // A reference that does not parse is refused before anything is sent.
    snap!(
        "bad_reference",
        client(&q, &["data", "-p", "fraud", "pull", "model:tx@1", "out"])
    );
}
