//! The audit file sink: entries and signed checkpoints outside the database catch a
//! log whose newest entries were deleted and whose head was rewritten — which the hash
//! chain alone does not — and a sink that cannot be written stops writes.

mod common;

use std::time::{Duration, Instant};

use common::Qanat;
use serde_json::{json, Value};

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The sequence number of the newest checkpoint in the sink, once one vouches for at
/// least `seq`.
fn checkpoint_at_least(path: &std::path::Path, seq: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let newest = lines(path)
            .iter()
            .filter_map(|v| v["checkpoint"]["seq"].as_i64())
            .max()
            .unwrap_or(0);
        if newest >= seq {
            return newest;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint reached entry {seq}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs SQL against the server's SQLite database (the server is stopped).
fn tamper(db: &std::path::Path, statements: &[&str]) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(&format!("sqlite://{}", db.display()))
            .await
            .expect("open db");
        for s in statements {
            sqlx::query(s).execute(&pool).await.expect(s);
        }
        pool.close().await;
    });
}

#[test]
fn a_truncated_log_is_caught_by_the_sink_checkpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = dir.path().join("audit.jsonl");
    let mut q = Qanat::start_with(vec![
        ("QANAT_AUDIT_FILE".into(), sink.display().to_string()),
        ("QANAT_AUDIT_CHECKPOINT_EVERY".into(), "3".into()),
        ("QANAT_AUDIT_CHECKPOINT_SECS".into(), "1".into()),
    ]);
    for i in 0..6 {
        q.create_project(&format!("p{i}"), &["uae-north"]);
    }
    let (_, head) = q
        .http()
        .send(&q.admin_token, "GET", "/api/v1/audit?limit=1", None);
    let newest = head[0]["seq"].as_i64().expect("seq");
    let vouched = checkpoint_at_least(&sink, newest);
    // Every entry is in the sink, in order, with the chain's hashes.
    let shipped: Vec<i64> = lines(&sink)
        .iter()
        .filter_map(|v| v["entry"]["seq"].as_i64())
        .collect();
    assert_eq!(shipped, (1..=shipped.len() as i64).collect::<Vec<_>>());

    let (ok, out, err) = q.cli(&[
        "audit",
        "verify",
        "--checkpoint",
        sink.to_str().expect("utf8"),
    ]);
    assert!(ok, "an untouched log matches its checkpoints: {out}{err}");

    // Delete the newest entries, below the last checkpoint, and rewrite the head: the
    // chain still verifies, the checkpoints do not.
    q.kill_hard();
    let cut = vouched - 2;
    tamper(
        &q.home().join("qanat.db"),
        &[
            &format!("DELETE FROM audit_log WHERE seq >= {cut}"),
            "UPDATE audit_head SET seq = (SELECT MAX(seq) FROM audit_log), \
             hash = (SELECT hash FROM audit_log WHERE seq = (SELECT MAX(seq) FROM audit_log)) WHERE id = 1",
        ],
    );
    q.spawn_server();
    let (_, v) = q
        .http()
        .send(&q.admin_token, "GET", "/api/v1/audit/verify", None);
    assert_eq!(v["ok"], true, "the chain alone does not see it: {v}");
    let (ok, out, _) = q.cli(&[
        "audit",
        "verify",
        "--checkpoint",
        sink.to_str().expect("utf8"),
        "-o",
        "json",
    ]);
    assert!(!ok, "a truncation below a checkpoint is caught");
    let report: Value = serde_json::from_str(&out).expect("json report");
    assert_eq!(report["ok"], false);
    assert!(
        report["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .any(|p| p.as_str().unwrap_or("").contains("truncated")),
        "{report}"
    );

    // A forged checkpoint fails its MAC.
    let forged = dir.path().join("forged.jsonl");
    std::fs::write(
        &forged,
        json!({"checkpoint": {"seq": 1, "hash": "00", "time": "2026-01-01T00:00:00Z", "key_id": "x", "mac": "00"}})
            .to_string(),
    )
    .expect("write");
    let (ok, out, _) = q.cli(&[
        "audit",
        "verify",
        "--checkpoint",
        forged.to_str().expect("utf8"),
    ]);
    assert!(!ok, "{out}");
}

#[test]
fn writes_stop_while_a_required_sink_cannot_be_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A path under a directory that does not exist cannot be opened.
    let sink = dir.path().join("missing-dir").join("audit.jsonl");
    let q = Qanat::start_with(vec![(
        "QANAT_AUDIT_FILE".into(),
        sink.display().to_string(),
    )]);
    let h = q.http();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, v) = h.send(
            &q.admin_token,
            "POST",
            "/api/v1/projects",
            Some(json!({"name": "blocked"})),
        );
        if s == 503 {
            assert_eq!(v["error_code"], "AUDIT_UNAVAILABLE", "{v}");
            break;
        }
        assert!(Instant::now() < deadline, "writes went on: {s} {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (s, _) = h.send(&q.admin_token, "GET", "/api/v1/projects", None);
    assert_eq!(s, 200, "reads go on");
    // Once the sink can be written, writes resume.
    std::fs::create_dir_all(sink.parent().expect("dir")).expect("mkdir");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, _) = h.send(
            &q.admin_token,
            "POST",
            "/api/v1/projects",
            Some(json!({"name": "resumed"})),
        );
        if s == 201 {
            break;
        }
        assert!(Instant::now() < deadline, "writes did not resume: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
