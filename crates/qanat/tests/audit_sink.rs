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
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, v) = q.api("POST", "/api/v1/projects", Some(json!({"name": "blocked"})));
        if s == 503 {
            assert_eq!(v["error_code"], "AUDIT_UNAVAILABLE", "{v}");
            break;
        }
        assert!(Instant::now() < deadline, "writes went on: {s} {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (s, _) = q.api("GET", "/api/v1/projects", None);
    assert_eq!(s, 200, "reads go on");
    // So do reads that MLflow (and checkpoint verification) send as POSTs.
    let (s, v) = q.api(
        "POST",
        "/mlflow/default/api/2.0/mlflow/experiments/search",
        Some(json!({"max_results": 10})),
    );
    assert_eq!(s, 200, "a search is a read: {v}");
    let (s, v) = q.api("POST", "/api/v1/audit/verify-checkpoints", Some(json!([])));
    assert_eq!(s, 400, "checked, not refused: {v}");
    // Once the sink can be written, writes resume.
    std::fs::create_dir_all(sink.parent().expect("dir")).expect("mkdir");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, _) = q.api("POST", "/api/v1/projects", Some(json!({"name": "resumed"})));
        if s == 201 {
            break;
        }
        assert!(Instant::now() < deadline, "writes did not resume: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What a test webhook received: each request's Authorization header and JSON body.
type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>;

/// A minimal HTTP receiver that answers every request with `status` (changeable).
fn webhook_receiver() -> (
    String,
    Received,
    std::sync::Arc<std::sync::atomic::AtomicU16>,
) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!(
        "http://{}/hook?key=qs-secret",
        listener.local_addr().expect("addr")
    );
    let got: Received = Default::default();
    let status = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(200));
    let (g, st) = (got.clone(), status.clone());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let (mut len, mut auth) = (0usize, String::new());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("authorization:") {
                    auth = line["authorization:".len()..].trim().to_string();
                }
            }
            let mut body = vec![0u8; len];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let code = st.load(std::sync::atomic::Ordering::Acquire);
            if code == 200 {
                if let Ok(v) = serde_json::from_slice(&body) {
                    g.lock().expect("lock").push((auth, v));
                }
            }
            let _ = write!(
                conn,
                "HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    (url, got, status)
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn entries_and_checkpoints_reach_syslog_and_a_webhook() {
    let syslog = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    let syslog_addr = syslog.local_addr().expect("addr");
    let messages: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let m = messages.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = syslog.recv(&mut buf) {
            m.lock()
                .expect("lock")
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    });
    let (hook, received, status) = webhook_receiver();
    let q = Qanat::start_with(vec![
        ("QANAT_AUDIT_SYSLOG".into(), format!("udp://{syslog_addr}")),
        ("QANAT_AUDIT_WEBHOOK".into(), hook),
        ("QANAT_AUDIT_WEBHOOK_TOKEN".into(), "tok-secret".into()),
        ("QANAT_AUDIT_CHECKPOINT_EVERY".into(), "3".into()),
        ("QANAT_AUDIT_CHECKPOINT_SECS".into(), "1".into()),
        ("QANAT_LOG_LEVEL".into(), "info".into()),
    ]);
    for i in 0..4 {
        q.create_project(&format!("s{i}"), &["uae-north"]);
    }
    let newest = |q: &Qanat| {
        let (_, head) = q
            .http()
            .send(&q.admin_token, "GET", "/api/v1/audit?limit=1", None);
        head[0]["seq"].as_i64().expect("seq")
    };
    let last = newest(&q);
    let items = |r: &Received| -> Vec<Value> {
        r.lock()
            .expect("lock")
            .iter()
            .flat_map(|(_, v)| v.as_array().cloned().unwrap_or_default())
            .collect()
    };
    let syslog_items = || -> Vec<Value> {
        messages
            .lock()
            .expect("lock")
            .iter()
            .map(|m| {
                // <110>1 TIME HOST qanat PID audit - {json}
                assert!(m.starts_with("<110>1 "), "{m}");
                let json = m.splitn(8, ' ').nth(7).expect("message part");
                serde_json::from_str(json).expect("json message")
            })
            .collect()
    };
    let vouched = |items: &[Value]| {
        items
            .iter()
            .filter_map(|v| v["checkpoint"]["seq"].as_i64())
            .max()
            .unwrap_or(0)
    };
    wait_for("a webhook checkpoint", || {
        vouched(&items(&received)) >= last
    });
    wait_for("a syslog checkpoint", || vouched(&syslog_items()) >= last);
    for (sink, got) in [("webhook", items(&received)), ("syslog", syslog_items())] {
        let seqs: std::collections::BTreeSet<i64> = got
            .iter()
            .filter_map(|v| v["entry"]["seq"].as_i64())
            .collect();
        assert!(
            (1..=last).all(|s| seqs.contains(&s)),
            "{sink} missed entries: {seqs:?}"
        );
    }
    assert!(received
        .lock()
        .expect("lock")
        .iter()
        .all(|(auth, _)| auth == "Bearer tok-secret"));

    // The webhook's checkpoints verify the log.
    let cps = q.dir.path().join("from-webhook.jsonl");
    let text: String = items(&received)
        .iter()
        .filter(|v| v.get("checkpoint").is_some())
        .map(|v| format!("{v}\n"))
        .collect();
    std::fs::write(&cps, text).expect("write");
    let (ok, out, err) = q.cli(&[
        "audit",
        "verify",
        "--checkpoint",
        cps.to_str().expect("utf8"),
    ]);
    assert!(ok, "{out}{err}");

    // The webhook fails: writes stop (fail closed); it answers again: they resume,
    // and nothing was skipped meanwhile.
    status.store(503, std::sync::atomic::Ordering::Release);
    let mut n = 0;
    wait_for("writes to be refused", || {
        n += 1;
        let (s, v) = q.api(
            "POST",
            "/api/v1/projects",
            Some(json!({"name": format!("w{n}")})),
        );
        s == 503 && v["error_code"] == "AUDIT_UNAVAILABLE"
    });
    status.store(200, std::sync::atomic::Ordering::Release);
    wait_for("writes to resume", || {
        n += 1;
        let (s, _) = q.api(
            "POST",
            "/api/v1/projects",
            Some(json!({"name": format!("w{n}")})),
        );
        s == 201
    });
    let last = newest(&q);
    wait_for("the webhook to catch up", || {
        let seqs: std::collections::BTreeSet<i64> = items(&received)
            .iter()
            .filter_map(|v| v["entry"]["seq"].as_i64())
            .collect();
        (1..=last).all(|s| seqs.contains(&s))
    });
    let log = std::fs::read_to_string(q.dir.path().join("server.log")).expect("log");
    assert!(
        log.contains("audit sink cannot be written"),
        "the failure is logged"
    );
    assert!(
        !log.contains("tok-secret") && !log.contains("qs-secret"),
        "secrets in the log"
    );
}

#[test]
fn a_sink_that_cannot_work_stops_the_server_before_it_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (var, value, says) in [
        ("QANAT_AUDIT_SYSLOG", "syslog.example:514", "udp://host:514"),
        ("QANAT_AUDIT_WEBHOOK", "ftp://siem.example/x", "http(s) URL"),
    ] {
        let out = common::base_cmd(dir.path(), &[(var.into(), value.into())])
            .arg("server")
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{var}: {err}");
        assert!(
            !dir.path().join("home").join("qanat.db").exists(),
            "nothing initialized"
        );
    }
}
