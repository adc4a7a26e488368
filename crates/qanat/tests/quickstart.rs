//! `qanat quickstart`, the README's main command: the whole lifecycle runs to the end,
//! again on the data directory it left (and on one a failed start left), and a data
//! directory it did not make is refused, untouched.

mod common;

use common::base_cmd;

#[test]
fn the_quickstart_runs_to_a_promoted_canary_with_its_lineage_and_runs_again() {
    let dir = tempfile::tempdir().expect("dir");
    let mine = dir.path().join("mine");
    std::fs::create_dir_all(&mine).expect("mkdir");
    std::fs::write(mine.join("keep.txt"), "mine").expect("write");
    let out = base_cmd(dir.path(), &[])
        .args(["quickstart", "--exit", "--home"])
        .arg(&mine)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("did not make"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(mine.join("keep.txt")).expect("kept"),
        "mine"
    );

    // A port in use stops it before anything is made, with the flag to use.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = busy.local_addr().expect("addr").port().to_string();
    let out = base_cmd(dir.path(), &[])
        .env_remove("QANAT_HOME")
        .args(["quickstart", "--exit", "--port", &port])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains(&format!("port {port} is in use"))
            && err.contains("--port"),
        "{err}"
    );
    assert!(!err.contains("API token"), "no token made: {err}");
    assert!(!dir.path().join(".qanat-quickstart").exists());
    drop(busy);

    let mut last_stdout = String::new();
    for run in 0..2 {
        // The default data directory, ./.qanat-quickstart.
        let out = base_cmd(dir.path(), &[])
            .env_remove("QANAT_HOME")
            .args(["quickstart", "--exit"])
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "run {run}:\n{text}\n{err}");
        for want in [
            "[14/14]",
            // Calm traffic first, then a drifted window that fires the rule.
            "OK — ",
            "DRIFT — ",
            // The int8 version served is retrained from its source, then quantized
            // again; the result gets a canary, judged on labels and promoted.
            "registered model:cancer@3",
            "quantize int8 of model:cancer@3",
            "canary done — promoted: version 4",
            "diagnosis serves version 4 at 100%",
            // Lineage: model version ← retraining run ← drift report ← inference log.
            "model:cancer@4 —derived_from→ model:cancer@3",
            "model:cancer@3 —output_of→ run:",
            "—triggered_by→ drift_report:diagnosis@",
            "—computed_from→ inference_log:diagnosis",
            "—input→ dataset:cancer-train@2",
            "dataset:cancer-train@2 —features_from→ feature_view:cells@1",
            // Each step names its page in the web UI.
            "the web UI: http://",
            "/ui/p/default/jobs/job-",
            "/ui/p/default/features",
            "/ui/p/default/datasets/cancer-train/versions/",
            "/ui/p/default/monitors/diagnosis",
            "/ui/p/default/lineage?ref=model:cancer@4",
        ] {
            assert!(text.contains(want), "run {run}: no '{want}' in\n{text}");
        }
        assert_eq!(
            text.contains("Removed the earlier quickstart's"),
            run == 1,
            "run {run}: {text}"
        );
        last_stdout = text.to_string();
    }
    // A login that an earlier quickstart (another directory, its server gone) left for
    // this address is replaced by this run's, and `--exit` removes that one with its
    // server: no login is left pointing at nothing.
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = free.local_addr().expect("addr").port().to_string();
    drop(free);
    let server = format!("http://127.0.0.1:{port}");
    let credentials = dir.path().join("credentials.json");
    let mut servers = serde_json::Map::new();
    servers.insert(server.clone(), serde_json::json!({"token": "qnt_gone"}));
    let stale = serde_json::json!({"current": server, "servers": servers});
    std::fs::write(&credentials, stale.to_string()).expect("stale login");
    let out = base_cmd(dir.path(), &[])
        .env("QANAT_SERVER_BIND", format!("127.0.0.1:{port}"))
        .args(["quickstart", "--exit", "--home"])
        .arg(dir.path().join("elsewhere"))
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("The CLI on this machine is logged in to {server}")),
        "{err}"
    );
    let left = std::fs::read_to_string(&credentials).unwrap_or_default();
    assert!(!left.contains("qnt_"), "{left}");

    let files = dir.path().join(".qanat-quickstart/quickstart");
    let report = std::fs::read_dir(&files)
        .expect("files")
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("drift-report-"))
        .expect("a drift report");
    let page = std::fs::read_to_string(report.path()).expect("report");
    assert!(
        page.starts_with("<!doctype html>") && page.contains("<svg"),
        "{}",
        &page[..page.len().min(200)]
    );
    assert!(files.join("features/cancer.yaml").exists());
    // The compliance report of the quickstart's project: the figures it printed are
    // the page's.
    let page = std::fs::read_to_string(files.join("compliance-report.html")).expect("report");
    assert!(page.contains("The chain verifies"), "{page}");
    let printed = last_stdout
        .lines()
        .find(|l| l.contains("compliance: project default keeps"))
        .unwrap_or_else(|| panic!("{last_stdout}"));
    let bytes: u64 = printed
        .split(" objects, ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|b| b.parse().ok())
        .unwrap_or_else(|| panic!("{printed}"));
    assert!(bytes > 100_000, "the datasets, models and logs: {printed}");
    // The page was made a moment later (an inference log file may have landed in
    // between): its figure for the project is the printed one, or a little more.
    let on_page: u64 = page
        .split("<td>default</td>")
        .nth(1)
        .and_then(|rest| rest.split("<td>").nth(2))
        .and_then(|cell| cell.split('<').next())
        .and_then(|b| b.parse().ok())
        .unwrap_or_else(|| panic!("no bytes for default on the page: {page}"));
    assert!(
        on_page >= bytes && on_page < bytes + bytes / 10,
        "printed {bytes}, the page {on_page}"
    );
}
