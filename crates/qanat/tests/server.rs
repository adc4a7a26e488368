//! The real server, over HTTP: authentication, RBAC, audit, residency, durability,
//! bad input, TLS, probes and graceful shutdown.

mod common;

use std::io::Read;
use std::time::Duration;

use common::cases::{run_cases, Call, Case, Check};
use common::{browser, csrf_of, set_cookie, ui_login, Qanat};
use serde_json::{json, Value};

fn sql(q: &Qanat, statement: &str) {
    let url = format!("sqlite://{}/qanat.db", q.home().display());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(&url).await.expect("open db");
        sqlx::query(statement)
            .execute(&pool)
            .await
            .expect(statement);
        pool.close().await;
    });
}

fn audit(q: &Qanat, filter: &str) -> Vec<Value> {
    let (s, v) = q.api("GET", &format!("/api/v1/audit?{filter}"), None);
    assert_eq!(s, 200, "{v}");
    v.as_array().expect("array").clone()
}

#[test]
fn anonymous_viewer_editor_and_the_audit_chain() {
    let q = Qanat::start();
    let h = q.http();
    q.create_project("fraud", &["uae-north"]);
    let viewer = q.user_with_role("vera", "fraud", "viewer");
    let editor = q.user_with_role("eddie", "fraud", "editor");

    // Anonymous: 401 with MLflow's code and a WWW-Authenticate header.
    let resp = h.raw("", "GET", "/api/v1/projects").send().expect("send");
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer");
    let body: Value = resp.json().expect("json");
    assert_eq!(body["error_code"], "UNAUTHENTICATED");
    let (s, _) = h.send("qnt_not-a-real-token", "GET", "/api/v1/projects", None);
    assert_eq!(s, 401);

    // A viewer may read but not write.
    let (s, _) = h.send(&viewer, "GET", "/api/v1/projects/fraud", None);
    assert_eq!(s, 200);
    let resp = h
        .raw(&viewer, "PUT", "/api/v1/projects/fraud/objects/data/x.csv")
        .body("a,b\n1,2\n")
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 403);
    let body: Value = resp.json().expect("json");
    assert_eq!(body["error_code"], "PERMISSION_DENIED");
    assert!(
        body["message"]
            .as_str()
            .expect("msg")
            .contains("needs editor"),
        "{body}"
    );

    // An editor may write; the bytes come back.
    let resp = h
        .raw(&editor, "PUT", "/api/v1/projects/fraud/objects/data/x.csv")
        .body("a,b\n1,2\n")
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 201);
    let got = h
        .raw(&viewer, "GET", "/api/v1/projects/fraud/objects/data/x.csv")
        .send()
        .expect("send");
    assert_eq!(got.status().as_u16(), 200);
    assert_eq!(got.text().expect("body"), "a,b\n1,2\n");

    // Non-members are refused, and an editor cannot manage members.
    let (s, _) = h.send(
        &editor,
        "PUT",
        "/api/v1/projects/fraud/members/vera",
        Some(json!({"role": "admin"})),
    );
    assert_eq!(s, 403);
    let (s, _) = h.send(
        &viewer,
        "POST",
        "/api/v1/projects",
        Some(json!({"name": "mine"})),
    );
    assert_eq!(s, 403);

    // The denied write is in the audit log, with who, what and why.
    let denied = audit(&q, "actor=vera&outcome=denied");
    let write = denied
        .iter()
        .find(|e| e["action"] == "object.write")
        .expect("denied write audited");
    assert_eq!(
        write["resource"],
        "/api/v1/projects/fraud/objects/data/x.csv"
    );
    assert_eq!(write["project"], "fraud");
    assert!(!write["request_id"].as_str().expect("id").is_empty());
    assert!(write["detail"].as_str().expect("detail").starts_with("403"));
    assert!(audit(&q, "actor=anonymous&outcome=denied").len() >= 2);
    assert!(audit(&q, "actor=eddie&action=object.write&outcome=success").len() == 1);
    assert!(
        audit(&q, "actor=vera&action=object.read").len() == 1,
        "governed reads are audited"
    );

    // The chain verifies, through the API and the CLI.
    let (s, v) = q.api("GET", "/api/v1/audit/verify", None);
    assert_eq!(s, 200);
    assert_eq!(v["ok"], true, "{v}");
    q.cli_ok("audit verify");

    // Altered row: detected and named.
    sql(&q, "UPDATE audit_log SET actor = 'mallory' WHERE seq = 3");
    let (_, v) = q.api("GET", "/api/v1/audit/verify", None);
    assert_eq!(v["ok"], false);
    assert!(
        v["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .any(|p| p["seq"] == 3 && p["kind"] == "changed"),
        "{v}"
    );
    let (ok, out, err) = q.cli(&["audit", "verify"]);
    assert!(!ok, "verify must exit non-zero");
    assert!(out.contains("entry 3"), "{out}{err}");

    // Deleted row: detected and named.
    sql(&q, "DELETE FROM audit_log WHERE seq = 5");
    let (_, v) = q.api("GET", "/api/v1/audit/verify", None);
    assert!(
        v["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .any(|p| p["seq"] == 5 && p["kind"] == "missing"),
        "{v}"
    );
}

#[test]
fn residency_refusals_are_403_and_audited() {
    let q = Qanat::start_with_locations(&[("frankfurt", "eu-west")]);
    // A region no storage location is in cannot be allowed.
    let (s, v) = q.api(
        "POST",
        "/api/v1/projects",
        Some(json!({"name": "nowhere", "allowed_regions": ["mars-1"]})),
    );
    assert_eq!(s, 400, "{v}");
    let msg = v["message"].as_str().expect("message");
    assert!(
        msg.contains("'mars-1' has no storage location") && msg.contains("eu-west, uae-north"),
        "{msg}"
    );
    q.create_project("eu-only", &["eu-west"]);
    let (s, v) = q.api(
        "PATCH",
        "/api/v1/projects/eu-only",
        Some(json!({"allowed_regions": ["eu-west", "mars-1"]})),
    );
    assert_eq!(s, 400, "{v}");
    let resp = q
        .request("PUT", "/api/v1/projects/eu-only/objects/pii.csv")
        .body("name\nAlice\n")
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 403);
    let body: Value = resp.json().expect("json");
    assert_eq!(body["error_code"], "RESIDENCY_VIOLATION");
    let msg = body["message"].as_str().expect("message");
    assert!(
        msg.contains("uae-north") && msg.contains("eu-west"),
        "{msg}"
    );

    let entries = audit(&q, "action=object.write&outcome=denied");
    assert_eq!(entries.len(), 1);
    assert!(entries[0]["detail"]
        .as_str()
        .expect("detail")
        .contains("residency"));

    // Nothing was stored.
    let (s, v) = q.api("GET", "/api/v1/projects/eu-only/objects", None);
    assert_eq!(s, 200);
    assert_eq!(v.as_array().expect("list").len(), 0);

    // Once the policy allows the region, the same write succeeds.
    let (s, _) = q.api(
        "PATCH",
        "/api/v1/projects/eu-only",
        Some(json!({"allowed_regions": ["eu-west", "uae-north"]})),
    );
    assert_eq!(s, 200);
    let resp = q
        .request("PUT", "/api/v1/projects/eu-only/objects/pii.csv")
        .body("name\nAlice\n")
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 201);
}

#[test]
fn kill_9_loses_nothing_acknowledged() {
    let mut q = Qanat::start();
    q.create_project("durable", &["uae-north"]);
    let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let resp = q
        .request("PUT", "/api/v1/projects/durable/objects/model.bin")
        .body(payload.clone())
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 201);
    let (s, t) = q.api("POST", "/api/v1/tokens", Some(json!({"name": "after"})));
    assert_eq!(s, 201);
    let new_token = t["token"].as_str().expect("token").to_string();

    q.kill_hard();
    q.spawn_server();
    let h = q.http();

    let got = h
        .raw(
            &new_token,
            "GET",
            "/api/v1/projects/durable/objects/model.bin",
        )
        .send()
        .expect("send");
    assert_eq!(
        got.status().as_u16(),
        200,
        "token and object survive kill -9"
    );
    assert!(got.bytes().expect("bytes")[..] == payload[..]);
    let (_, v) = q.api("GET", "/api/v1/audit/verify", None);
    assert_eq!(v["ok"], true, "{v}");
    assert!(audit(&q, "action=object.write&outcome=success").len() == 1);
}

#[test]
fn members_cannot_outrank_the_one_who_manages_them() {
    let q = Qanat::start();
    q.create_project("team", &["uae-north"]);
    q.create_project("solo", &["uae-north"]);
    let mia = q.user_with_role("mia", "team", "maintainer");
    q.user_with_role("ada", "team", "admin");
    q.user_with_role("eve", "team", "editor");
    let refused =
        |name, call, message| Case::coded(name, call, 403, "PERMISSION_DENIED").saying(message);
    run_cases(
        &q,
        vec![
            refused(
                "a maintainer demotes an admin",
                Call::put("/api/v1/projects/team/members/ada")
                    .token(&mia)
                    .json(json!({"role": "viewer"})),
                "above your role",
            ),
            refused(
                "a maintainer removes an admin",
                Call::delete("/api/v1/projects/team/members/ada").token(&mia),
                "above your role",
            ),
            refused(
                "a maintainer grants admin",
                Call::put("/api/v1/projects/team/members/eve")
                    .token(&mia)
                    .json(json!({"role": "admin"})),
                "up to maintainer",
            ),
            refused(
                "the last admin is removed",
                Call::delete("/api/v1/projects/solo/members/admin"),
                "last admin",
            ),
            refused(
                "the last admin is demoted",
                Call::put("/api/v1/projects/solo/members/admin").json(json!({"role": "editor"})),
                "last admin",
            ),
            Case::status(
                "a maintainer demotes an editor",
                Call::put("/api/v1/projects/team/members/eve")
                    .token(&mia)
                    .json(json!({"role": "viewer"})),
                200,
            ),
        ],
    );
}

#[test]
fn outsiders_cannot_tell_which_projects_exist() {
    let q = Qanat::start();
    q.create_project("secret", &["uae-north"]);
    q.create_project("mine", &["uae-north"]);
    let ann = q.user_with_role("ann", "mine", "viewer");
    let hidden = |name, path: &str, message| {
        Case::coded(
            name,
            Call::get(path).token(&ann),
            404,
            "RESOURCE_DOES_NOT_EXIST",
        )
        .saying(message)
    };
    run_cases(
        &q,
        vec![
            hidden(
                "a project that exists",
                "/api/v1/projects/secret",
                "project 'secret' does not exist",
            ),
            hidden(
                "a project that does not",
                "/api/v1/projects/ghost",
                "project 'ghost' does not exist",
            ),
            hidden(
                "datasets of a project that exists",
                "/api/v1/projects/secret/datasets",
                "project 'secret' does not exist",
            ),
            hidden(
                "MLflow under a project that exists",
                "/mlflow/secret/api/2.0/mlflow/experiments/get?experiment_id=0",
                "project 'secret' does not exist",
            ),
            Case::coded(
                "a member short of the role still hears why",
                Call::post("/api/v1/projects/mine/datasets")
                    .token(&ann)
                    .json(json!({"name": "d"})),
                403,
                "PERMISSION_DENIED",
            )
            .saying("needs editor"),
        ],
    );
    // The audit log keeps the real reason.
    let denied = audit(&q, "actor=ann&outcome=denied");
    assert!(
        denied.iter().any(|e| e["detail"]
            .as_str()
            .unwrap_or("")
            .contains("not a member of project 'secret'")),
        "{denied:?}"
    );
}

/// One JSON access line per request in the server's log file, no colour codes.
#[test]
fn every_request_leaves_one_access_line() {
    let q = Qanat::start_with(vec![("QANAT_LOG_LEVEL".into(), "info".into())]);
    q.create_project("acc", &["uae-north"]);
    let (s, _) = q.api("GET", "/api/v1/projects/acc/datasets?probe=1", None);
    assert_eq!(s, 200);
    let log = std::fs::read_to_string(q.dir.path().join("server.log")).expect("log");
    assert!(!log.contains('\u{1b}'), "ANSI escapes in a log file");
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "qanat::access")
        .filter(|v| v["fields"]["route"] == "/api/v1/projects/{project}/datasets")
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    let f = &lines[0]["fields"];
    assert_eq!(f["actor"], "admin");
    assert_eq!(f["project"], "acc");
    assert_eq!(f["method"], "GET");
    assert_eq!(f["status"], 200);
    assert!(f["request_id"].as_str().is_some_and(|id| !id.is_empty()));
    assert!(f["latency_ms"].as_f64().is_some());
    assert!(
        !log.contains("probe=1") && !log.contains("/projects/acc/datasets"),
        "raw paths and queries stay out of the log"
    );
}

#[test]
fn renaming_a_registered_model_needs_a_maintainer() {
    let q = Qanat::start();
    q.create_project("reg", &["uae-north"]);
    let ed = q.user_with_role("ed", "reg", "editor");
    let mia = q.user_with_role("mia", "reg", "maintainer");
    let api = |path: &str| format!("/mlflow/reg/api/2.0/mlflow/registered-models/{path}");
    let rename = |to: &str| json!({"name": "fraud", "new_name": to});
    run_cases(
        &q,
        vec![
            Case::status(
                "an editor registers a model",
                Call::post(api("create"))
                    .token(&ed)
                    .json(json!({"name": "fraud"})),
                200,
            ),
            Case::coded(
                "an editor renames it",
                Call::post(api("rename"))
                    .token(&ed)
                    .json(rename("taken-over")),
                403,
                "PERMISSION_DENIED",
            ),
            Case::status(
                "a maintainer renames it",
                Call::post(api("rename"))
                    .token(&mia)
                    .json(rename("fraud-v2")),
                200,
            )
            .checking(vec![Check::Eq("/registered_model/name", json!("fraud-v2"))]),
        ],
    );
}

/// Everything under the data directory is the server's alone, also when an older
/// release (or a loose umask) left it readable.
#[test]
fn the_data_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let mut q = Qanat::start();
    q.create_project("p", &["uae-north"]);
    let (s, _) = q.api("PUT", "/api/v1/projects/p/objects/x.bin", None);
    assert_eq!(s, 201);
    let home = q.home();
    let mode = |p: &std::path::Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let mut loose = Vec::new();
    for entry in walkdir::WalkDir::new(&home) {
        let entry = entry.expect("walk");
        let m = mode(entry.path());
        if m & 0o077 != 0 {
            loose.push(format!("{:o} {}", m, entry.path().display()));
        }
    }
    assert!(loose.is_empty(), "readable by others: {loose:#?}");
    // An installation left world-readable is tightened when the server opens it.
    let db = home.join("qanat.db");
    q.kill_hard();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    q.spawn_server();
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(&home), 0o700);
}

#[test]
fn bad_input_gets_a_clear_4xx() {
    let q = Qanat::start();
    q.create_project("p", &["uae-north"]);
    let (s, tok) = q.api(
        "POST",
        "/api/v1/tokens",
        Some(json!({"name": "brief", "expires_in_seconds": 1})),
    );
    assert_eq!(s, 201, "{tok}");
    let expired = tok["token"].as_str().expect("token").to_string();
    std::thread::sleep(Duration::from_millis(1500));
    let big = format!(
        "{{\"name\": \"x\", \"description\": \"{}\"}}",
        "a".repeat(2 << 20)
    );
    let invalid = |name, call| Case::coded(name, call, 400, "INVALID_PARAMETER_VALUE");
    let missing = |name, call| Case::coded(name, call, 404, "RESOURCE_DOES_NOT_EXIST");
    run_cases(
        &q,
        vec![
            Case::coded(
                "malformed JSON",
                Call::post("/api/v1/projects")
                    .header("content-type", "application/json")
                    .bytes("{\"name\": "),
                400,
                "MALFORMED_REQUEST",
            ),
            invalid(
                "a field of the wrong type",
                Call::post("/api/v1/projects").json(json!({"name": 42})),
            ),
            invalid(
                "an unknown field",
                Call::post("/api/v1/projects").json(json!({"name": "x", "colour": 1})),
            ),
            invalid(
                "a run search filter of 1,000 AND terms",
                Call::post("/api/2.0/mlflow/runs/search").json(json!({
                    "experiment_ids": ["0"],
                    "filter": (0..1000)
                        .map(|i| format!("metrics.m{i} > 0"))
                        .collect::<Vec<_>>()
                        .join(" AND "),
                })),
            )
            .saying("a filter is at most"),
            invalid(
                "an object key that is not UTF-8",
                Call::get("/api/v1/projects/p/objects/a%FFb"),
            )
            .saying("not valid UTF-8"),
            invalid(
                "a project name that is not UTF-8",
                Call::get("/api/v1/projects/%FF/datasets"),
            )
            .saying("not valid UTF-8"),
            invalid(
                "an unknown audit outcome",
                Call::get("/api/v1/audit?outcome=maybe"),
            )
            .saying("use success, denied or failure"),
            invalid(
                "no checkpoint to verify",
                Call::post("/api/v1/audit/verify-checkpoints").json(json!([])),
            )
            .saying("at least one checkpoint"),
            invalid(
                "a checkpoint without its MAC",
                Call::post("/api/v1/audit/verify-checkpoints").json(json!([{"seq": 1}])),
            ),
            invalid("an audit limit of 0", Call::get("/api/v1/audit?limit=0"))
                .saying("use 1 to 1000"),
            invalid(
                "an audit time that is not RFC 3339",
                Call::get("/api/v1/audit?since=yesterday"),
            )
            .saying("not an RFC 3339 time"),
            invalid(
                "an invalid project name",
                Call::post("/api/v1/projects").json(json!({"name": "Bad Name!"})),
            ),
            invalid(
                "an invalid region name",
                Call::post("/api/v1/projects")
                    .json(json!({"name": "x", "allowed_regions": ["UAE North"]})),
            ),
            Case::coded(
                "a body that is not JSON",
                Call::post("/api/v1/projects").bytes("name=x"),
                415,
                "UNSUPPORTED_MEDIA_TYPE",
            ),
            Case::coded(
                "a body over the 1 MiB limit",
                Call::post("/api/v1/projects")
                    .header("content-type", "application/json")
                    .bytes(big),
                413,
                "REQUEST_TOO_LARGE",
            ),
            missing("an unknown project", Call::get("/api/v1/projects/nope")),
            missing(
                "an object in an unknown project",
                Call::put("/api/v1/projects/nope/objects/a").bytes("x"),
            ),
            missing(
                "an unknown user",
                Call::patch("/api/v1/users/ghost").json(json!({"disabled": true})),
            ),
            missing(
                "an unknown token",
                Call::delete("/api/v1/tokens/tok_missing"),
            ),
            missing("an unknown route", Call::get("/api/v1/nothing-here")),
            Case::coded(
                "a method the route does not take",
                Call::delete("/api/v1/projects"),
                405,
                "METHOD_NOT_ALLOWED",
            ),
            invalid(
                "path traversal in an object key",
                Call::put("/api/v1/projects/p/objects/a%2F..%2Fb").bytes("x"),
            ),
            missing(
                "an object that is not there",
                Call::get("/api/v1/projects/p/objects/missing.bin"),
            ),
            invalid(
                "a limit that is not a number",
                Call::get("/api/v1/audit?limit=abc"),
            ),
            invalid(
                "a since that is not a time",
                Call::get("/api/v1/audit?since=yesterday"),
            ),
            Case::coded(
                "a malformed Authorization header",
                Call::get("/api/v1/whoami")
                    .token("")
                    .header("authorization", "Basic abc"),
                401,
                "UNAUTHENTICATED",
            ),
            Case::refused(
                "an expired token",
                Call::get("/api/v1/whoami").token(expired),
                401,
                "expired",
            ),
            invalid(
                "a token with a negative lifetime",
                Call::post("/api/v1/tokens").json(json!({"name": "x", "expires_in_seconds": -5})),
            ),
        ],
    );
}

#[test]
fn keys_rotate_and_objects_stay_readable() {
    let q = Qanat::start();
    q.create_project("k", &["uae-north"]);
    for i in 0..3 {
        let resp = q
            .request("PUT", &format!("/api/v1/projects/k/objects/f{i}"))
            .body(format!("content {i}"))
            .send()
            .expect("send");
        assert_eq!(resp.status().as_u16(), 201);
    }
    let key_file_before = std::fs::read(q.home().join("master.key")).expect("key file");
    let out = q.cli_ok("keys rotate --output json");
    let report: Value = serde_json::from_str(&out).expect("json");
    // Three objects' keys, and the key that names objects on disk.
    assert_eq!(report["rewrapped_data_keys"], 4);
    assert_ne!(
        std::fs::read(q.home().join("master.key")).expect("key file"),
        key_file_before
    );
    for i in 0..3 {
        let got = q
            .request("GET", &format!("/api/v1/projects/k/objects/f{i}"))
            .send()
            .expect("send");
        assert_eq!(got.text().expect("text"), format!("content {i}"));
    }
    assert_eq!(audit(&q, "action=keys.rotate").len(), 1);
}

#[test]
fn keys_a_file_system_could_not_hold_are_stored_and_no_reply_names_a_server_path() {
    let q = Qanat::start();
    q.create_project("ks", &["uae-north"]);
    let long = format!("deep/{}", "n".repeat(300));
    let put = |path: &str, body: &str| {
        q.request("PUT", path)
            .body(body.to_string())
            .send()
            .expect("send")
    };
    // Objects: a 300-byte segment (ENAMETOOLONG before), `a` and `a/b` side by side
    // ("Not a directory" before), in either order.
    for (key, body) in [
        (long.as_str(), "long"),
        ("a", "file a"),
        ("a/b", "file a/b"),
        ("c/d", "cd"),
        ("c", "c"),
    ] {
        let resp = put(&format!("/api/v1/projects/ks/objects/{key}"), body);
        let status = resp.status().as_u16();
        let text = resp.text().expect("text");
        assert_eq!(status, 201, "{key}: {text}");
        let got = q
            .request("GET", &format!("/api/v1/projects/ks/objects/{key}"))
            .send()
            .expect("send")
            .text()
            .expect("text");
        assert_eq!(got, body, "{key}");
    }
    // MLflow artifacts: a path that is a file and a directory at once.
    for (path, body) in [
        ("0/x/artifacts/model", "file"),
        ("0/x/artifacts/model/weights", "w"),
    ] {
        let resp = put(
            &format!("/mlflow/ks/api/2.0/mlflow-artifacts/artifacts/{path}"),
            body,
        );
        assert_eq!(
            resp.status().as_u16(),
            200,
            "{path}: {}",
            resp.text().unwrap_or_default()
        );
    }
    let (s, listed) = q.api(
        "GET",
        "/mlflow/ks/api/2.0/mlflow-artifacts/artifacts?path=0/x/artifacts",
        None,
    );
    assert_eq!(s, 200, "{listed}");
    let mut names: Vec<(String, bool)> = listed["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            (
                f["path"].as_str().expect("path").to_string(),
                f["is_dir"] == true,
            )
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [("model".to_string(), false), ("model".to_string(), true)]
    );

    // No reply anywhere above or on failure carries the server's directory.
    let home = q.home().display().to_string();
    let resp = put(
        &format!("/api/v1/projects/ks/objects/{}", "z".repeat(1100)),
        "x",
    );
    assert_eq!(resp.status().as_u16(), 400);
    let text = resp.text().expect("text");
    assert!(!text.contains(&home), "{text}");
}

#[test]
fn probes_metrics_and_openapi() {
    let q = Qanat::start();
    let h = q.http();
    let (s, v) = h.send("", "GET", "/healthz", None);
    assert_eq!((s, v["status"].as_str()), (200, Some("ok")));
    let (s, v) = h.send("", "GET", "/readyz", None);
    assert_eq!(s, 200, "{v}");
    let (s, doc) = h.send("", "GET", "/api/v1/openapi.json", None);
    assert_eq!(s, 200);
    assert!(doc["openapi"].as_str().expect("version").starts_with("3."));
    assert!(doc["paths"]["/api/v1/projects"]["post"].is_object());
    // Each job kind this server runs publishes its fields, typed.
    let schemas = &doc["components"]["schemas"];
    let kinds: Vec<&str> = schemas["JobSpec"]["allOf"][1]["oneOf"]
        .as_array()
        .expect("the kinds")
        .iter()
        .filter_map(|k| k["allOf"][0]["properties"]["kind"]["enum"][0].as_str())
        .collect();
    assert_eq!(kinds, ["command", "optimize", "sweep", "train"], "{doc}");
    let train = &schemas["TrainFields"];
    assert!(
        train.to_string().contains("\"register\"")
            && schemas["TrainConfig"]["properties"]["epochs"]["type"] == "integer",
        "{train}"
    );
    assert_eq!(schemas["OptimizeParams"]["required"][0], "model");
    assert!(schemas["SweepConfig"]["properties"]["space"].is_object());

    let resp = h.raw("", "GET", "/api/v1/projects").send().expect("send");
    let rid = resp
        .headers()
        .get("x-request-id")
        .expect("request id")
        .to_str()
        .expect("str")
        .to_string();
    assert_eq!(rid.len(), 36);
    let text = h
        .raw(&q.admin_token, "GET", "/metrics")
        .send()
        .expect("send")
        .text()
        .expect("text");
    assert!(
        text.contains(
            "qanat_http_requests_total{method=\"GET\",route=\"/api/v1/projects\",status=\"401\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("qanat_http_request_duration_seconds_bucket"),
        "{text}"
    );
}

#[test]
fn the_cli_keeps_a_login_per_server_and_names_the_server_it_talks_to() {
    let (a, b) = (Qanat::start(), Qanat::start());
    let creds = a.dir.path().join("both.json");
    let cli = |args: &[&str]| {
        common::outcome(
            common::base_cmd(a.dir.path(), &[])
                .env("QANAT_CREDENTIALS", &creds)
                .args(args),
        )
    };
    let server_of = |args: &[&str]| -> String {
        let (ok, out, err) = cli(args);
        assert!(ok, "{args:?}: {err}");
        let me: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(me["name"], "admin", "{me}");
        me["server"].as_str().unwrap_or_default().to_string()
    };
    for q in [&a, &b] {
        let (ok, _, err) = cli(&["login", "--server", &q.url, "--token", &q.admin_token]);
        assert!(
            ok && err.contains(&format!("logged in to {}", q.url)),
            "{err}"
        );
    }
    // The latest login is the one commands use; the other server is still reached with
    // its own token.
    assert_eq!(server_of(&["whoami", "-o", "json"]), b.url);
    assert_eq!(
        server_of(&["whoami", "-o", "json", "--server", &a.url]),
        a.url
    );
    // A refused token names the server and how to log in to it.
    let (ok, _, err) = cli(&["login", "--server", &a.url, "--token", "qnt_not-a-token"]);
    assert!(
        !ok && err.contains(&format!("logging in to {}", a.url)),
        "{err}"
    );
    let (ok, _, err) = cli(&["whoami", "--server", &a.url, "--token", "qnt_not-a-token"]);
    assert!(
        !ok && err.contains(&format!("qanat login --server {} --token", a.url)),
        "{err}"
    );
    let (ok, _, err) = cli(&["login"]);
    assert!(!ok && err.contains(&format!("--server {}", b.url)), "{err}");
    // Logging out of one keeps the other.
    let (ok, _, err) = cli(&["logout", "--server", &b.url]);
    assert!(
        ok && err.contains(&format!("logged out of {}", b.url)),
        "{err}"
    );
    let (ok, _, err) = cli(&["whoami", "--server", &b.url]);
    assert!(!ok && err.contains("not logged in"), "{err}");
    assert_eq!(
        server_of(&["whoami", "-o", "json", "--server", &a.url]),
        a.url
    );
    // The one-server file earlier versions wrote is still read.
    std::fs::write(
        &creds,
        json!({"server": format!("{}/", a.url), "token": a.admin_token}).to_string(),
    )
    .expect("write");
    assert_eq!(server_of(&["whoami", "-o", "json"]), a.url);
}

#[test]
fn cli_login_whoami_and_tables() {
    let q = Qanat::start();
    // init already logged this CLI in? No: the server bound port 0, so it could not.
    let (ok, _, err) = q.cli(&["login", "--token", &q.admin_token]);
    assert!(ok, "{err}");
    let creds = q.dir.path().join("credentials.json");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&creds)
            .expect("creds")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }
    let out = q.cli_ok("whoami --output json");
    let me: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(me["name"], "admin");
    assert_eq!(me["is_admin"], true);

    q.cli_ok("projects create demo --regions uae-north");
    let (ok, out, _) = q.cli(&["projects", "ls"]);
    assert!(
        ok && out.contains("demo") && out.contains("uae-north"),
        "{out}"
    );
    q.cli_ok("users create ci-bot --service");
    let out = q.cli_ok("tokens create --user ci-bot --name ci --expires-in 30d");
    assert!(out.trim().starts_with("qnt_"));
    let out = q.cli_ok("tokens ls --output json");
    let tokens: Value = serde_json::from_str(&out).expect("json");
    assert!(
        tokens
            .as_array()
            .expect("list")
            .iter()
            .all(|t| t.get("token").is_none()),
        "secrets never listed"
    );
    let (ok, out, _) = q.cli(&["config", "show"]);
    assert!(ok && out.contains("[server]"));

    // Object round trip through the CLI, and a refusal with a clear message.
    let file = q.dir.path().join("in.bin");
    std::fs::write(&file, b"cli bytes").expect("write");
    let (ok, _, err) = q.cli(&[
        "objects",
        "put",
        "demo",
        "dir/in.bin",
        file.to_str().expect("utf8"),
    ]);
    assert!(ok, "{err}");
    let outf = q.dir.path().join("out.bin");
    let (ok, _, err) = q.cli(&[
        "objects",
        "get",
        "demo",
        "dir/in.bin",
        outf.to_str().expect("utf8"),
    ]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(&outf).expect("read"), b"cli bytes");
    let (ok, _, err) = q.cli(&["objects", "get", "demo", "nope", "-"]);
    assert!(!ok && err.contains("RESOURCE_DOES_NOT_EXIST"), "{err}");
}

#[test]
fn tls_1_3_only_with_dev_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tls_dir = dir.path().join("tls");
    common::run_ok(common::base_cmd(dir.path(), &[]).args([
        "certs",
        "dev",
        "--out",
        tls_dir.to_str().expect("utf8"),
    ]));
    let cert = tls_dir.join("dev-cert.pem");
    let key = tls_dir.join("dev-key.pem");
    let q = Qanat::start_with(vec![
        ("QANAT_SERVER_TLS_CERT".into(), cert.display().to_string()),
        ("QANAT_SERVER_TLS_KEY".into(), key.display().to_string()),
    ]);
    assert!(q.url.starts_with("https://"), "{}", q.url);
    let url = q.url.replace("127.0.0.1", "localhost");
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&cert).expect("cert")).expect("pem");
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(ca.clone())
        .build()
        .expect("client");
    let resp = client
        .get(format!("{url}/healthz"))
        .send()
        .expect("TLS request");
    assert_eq!(resp.status().as_u16(), 200);
    // Under TLS the UI's cookies are Secure: the login form's and the session's.
    let ui = reqwest::blocking::Client::builder()
        .add_root_certificate(ca.clone())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let form = ui.get(format!("{url}/ui/login")).send().expect("form");
    let login_cookie = common::set_cookie(&form, "qanat_login").expect("login cookie");
    let csrf = common::csrf_of(&form.text().unwrap_or_default());
    let logged_in = ui
        .post(format!("{url}/ui/login"))
        .header("cookie", login_cookie.split(';').next().unwrap_or_default())
        .form(&[("token", q.admin_token.as_str()), ("csrf", csrf.as_str())])
        .send()
        .expect("login");
    assert_eq!(logged_in.status(), 303);
    let session = common::set_cookie(&logged_in, "qanat_session").expect("session cookie");
    for c in [&login_cookie, &session] {
        assert!(
            c.contains("; Secure") && c.contains("HttpOnly") && c.contains("SameSite="),
            "{c}"
        );
    }
    // TLS 1.2 is refused.
    let old = reqwest::blocking::Client::builder()
        .add_root_certificate(ca)
        .max_tls_version(reqwest::tls::Version::TLS_1_2)
        .build()
        .expect("client");
    assert!(
        old.get(format!("{url}/healthz")).send().is_err(),
        "TLS 1.2 must be refused"
    );
    // Plain HTTP to the TLS port is not served.
    let plain = reqwest::blocking::Client::new();
    let http_url = url.replace("https://", "http://");
    assert!(plain
        .get(format!("{http_url}/healthz"))
        .send()
        .map(|r| !r.status().is_success())
        .unwrap_or(true));
}

/// A body that trickles out slowly, so the request is in flight during shutdown.
struct Trickle {
    left: usize,
}

impl Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(100));
        let n = self.left.min(buf.len()).min(1000);
        buf[..n].fill(b'x');
        self.left -= n;
        Ok(n)
    }
}

#[test]
fn graceful_shutdown_finishes_in_flight_requests() {
    let mut q = Qanat::start();
    q.create_project("g", &["uae-north"]);
    let h = q.http();
    let token = q.admin_token.clone();
    let url = q.url.clone();
    let upload = std::thread::spawn(move || {
        let client = reqwest::blocking::Client::new();
        client
            .put(format!("{url}/api/v1/projects/g/objects/slow.bin"))
            .bearer_auth(token)
            .body(reqwest::blocking::Body::sized(
                Trickle { left: 20_000 },
                20_000,
            ))
            .send()
            .map(|r| r.status().as_u16())
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut child = q.child.take().expect("server");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let result = upload.join().expect("upload thread");
    assert_eq!(result.ok(), Some(201), "the in-flight upload completes");
    let exit = child.wait().expect("wait");
    assert!(
        exit.success(),
        "server exits cleanly after SIGTERM: {exit:?}"
    );
    drop(h);
    q.spawn_server();
    let got = q
        .http()
        .raw(&q.admin_token, "GET", "/api/v1/projects/g/objects/slow.bin")
        .send()
        .expect("send");
    assert_eq!(got.bytes().expect("bytes").len(), 20_000);
}

#[test]
fn tampered_objects_fail_with_a_clear_error() {
    let q = Qanat::start();
    q.create_project("t", &["uae-north"]);
    let resp = q
        .request("PUT", "/api/v1/projects/t/objects/small.txt")
        .body("a small, sensitive file")
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 201);
    // The only object stored (its name on disk is a keyed hash of its key).
    let stored: Vec<_> = walkdir::WalkDir::new(q.home().join("objects"))
        .into_iter()
        .map(|e| e.expect("walk"))
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .collect();
    assert_eq!(stored.len(), 1, "{stored:?}");
    let path = &stored[0];
    let mut bytes = std::fs::read(path).expect("stored object");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x80;
    std::fs::write(path, &bytes).expect("tamper");
    let resp = q
        .request("GET", "/api/v1/projects/t/objects/small.txt")
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 500);
    let v: Value = resp.json().expect("json");
    assert_eq!(v["error_code"], "DATA_INTEGRITY_ERROR", "{v}");
    assert_eq!(
        audit(&q, "action=object.read&outcome=failure").len(),
        1,
        "the failed read is audited"
    );
}

#[test]
fn concurrent_writers_all_succeed() {
    let q = Qanat::start();
    q.create_project("busy", &["uae-north"]);
    let url = q.url.clone();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let url = url.clone();
            let token = q.admin_token.clone();
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::new();
                let mut statuses = vec![];
                for i in 0..20 {
                    let put = client
                        .put(format!("{url}/api/v1/projects/busy/objects/t{t}/o{i}"))
                        .bearer_auth(&token)
                        .body(format!("{t}-{i}"))
                        .send()
                        .expect("send");
                    statuses.push(put.status().as_u16());
                    let tok = client
                        .post(format!("{url}/api/v1/tokens"))
                        .bearer_auth(&token)
                        .json(&json!({"name": format!("t{t}-{i}")}))
                        .send()
                        .expect("send");
                    statuses.push(tok.status().as_u16());
                }
                statuses
            })
        })
        .collect();
    for t in threads {
        let statuses = t.join().expect("thread");
        assert!(statuses.iter().all(|s| *s == 201), "{statuses:?}");
    }
    let (_, listed) = q
        .http()
        .send(&q.admin_token, "GET", "/api/v1/projects/busy/objects", None);
    assert_eq!(listed.as_array().expect("list").len(), 160);
    let (_, v) = q
        .http()
        .send(&q.admin_token, "GET", "/api/v1/audit/verify", None);
    assert_eq!(v["ok"], true);
    assert!(v["entries_checked"].as_u64().expect("n") >= 321);
}

#[test]
fn json_logs_carry_request_ids_and_never_tokens() {
    let mut q = Qanat::start_with(vec![
        ("QANAT_LOG_FORMAT".into(), "json".into()),
        ("QANAT_LOG_LEVEL".into(), "debug".into()),
    ]);
    q.create_project("logs", &["uae-north"]);
    let (s, _) = q.api("GET", "/api/v1/whoami", None);
    assert_eq!(s, 200);
    q.kill_hard();
    let logs = std::fs::read_to_string(q.dir.path().join("server.log")).expect("server log");
    assert!(!logs.is_empty());
    let secret = &q.admin_token[4..];
    assert!(!logs.contains(secret), "a token reached the log");
    let mut with_request_id = 0;
    for line in logs.lines().filter(|l| l.starts_with('{')) {
        let v: Value = serde_json::from_str(line).expect("each log line is JSON");
        if v["span"]["request_id"]
            .as_str()
            .is_some_and(|id| id.len() == 36)
        {
            with_request_id += 1;
        }
    }
    assert!(
        with_request_id > 0,
        "request spans carry the request id:\n{logs}"
    );
}

#[test]
fn slow_requests_time_out_with_a_json_408() {
    use std::io::Write;
    let q = Qanat::start_with(vec![(
        "QANAT_SERVER_REQUEST_TIMEOUT_SECS".into(),
        "1".into(),
    )]);
    q.create_project("slow", &["uae-north"]);
    q.cli_ok("data -p slow create d");
    // A chunk upload that sends half its body and stalls (the route has the timeout).
    let addr = q.url.trim_start_matches("http://").to_string();
    let mut conn = std::net::TcpStream::connect(&addr).expect("connect");
    let id = "0".repeat(64);
    let head = format!(
        "PUT /api/v1/projects/slow/datasets/d/chunks/{id} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n",
        q.admin_token
    );
    conn.write_all(head.as_bytes()).expect("write head");
    conn.write_all(&[b'x'; 500]).expect("write half the body");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let mut reply = String::new();
    let _ = conn.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    let body = reply.split("\r\n\r\n").nth(1).expect("body");
    let v: Value = serde_json::from_str(body).expect("JSON body");
    assert_eq!(v["error_code"], "REQUEST_TIMEOUT");
    assert!(v["message"]
        .as_str()
        .expect("msg")
        .contains("request_timeout_secs"));
}

#[test]
fn mlflow_logging_commits_one_audit_entry_with_its_data() {
    let q = Qanat::start();
    let h = q.http();
    // The root-mounted MLflow API's project comes with the installation.
    let (s, v) = q.api(
        "GET",
        "/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default",
        None,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["experiment"]["experiment_id"], "0", "{v}");
    let created = audit(&q, "action=project.create&project=default");
    assert_eq!(created.len(), 1, "{created:?}");
    q.create_project("ml", &["uae-north"]);
    let eddie = q.user_with_role("eddie", "ml", "editor");
    let api = |path: &str| format!("/mlflow/ml/api/2.0/mlflow/{path}");
    let (s, v) = h.send(
        &eddie,
        "POST",
        &api("experiments/create"),
        Some(json!({"name": "audited"})),
    );
    assert_eq!(s, 200, "{v}");
    let (s, v) = h.send(
        &eddie,
        "POST",
        &api("runs/create"),
        Some(json!({"experiment_id": v["experiment_id"], "start_time": 1})),
    );
    assert_eq!(s, 200, "{v}");
    let run = v["run"]["info"]["run_id"]
        .as_str()
        .expect("run id")
        .to_string();
    let batch = |lr: &str| {
        json!({"run_id": run, "params": [{"key": "lr", "value": lr}],
               "metrics": [{"key": "loss", "value": 0.5, "timestamp": 1, "step": 0}]})
    };
    let (s, v) = h.send(&eddie, "POST", &api("runs/log-batch"), Some(batch("0.1")));
    assert_eq!(s, 200, "{v}");
    // Params are immutable: refused, nothing stored, and the refusal is recorded.
    let (s, v) = h.send(&eddie, "POST", &api("runs/log-batch"), Some(batch("0.2")));
    assert_eq!(s, 400, "{v}");
    let (s, v) = h.send(
        &eddie,
        "POST",
        &api("runs/log-metric"),
        Some(json!({"run_id": run, "key": "loss", "value": 0.25, "timestamp": 2, "step": 1})),
    );
    assert_eq!(s, 200, "{v}");

    // One entry per request: the successes were appended in the write's own transaction.
    let entries = audit(&q, "action=mlflow.run.log");
    let seen: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| {
            (
                e["outcome"].as_str().unwrap_or(""),
                e["detail"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(seen.len(), 3, "{entries:?}");
    assert_eq!(seen[0], ("success", "200"));
    assert_eq!(seen[1].0, "failure");
    assert!(seen[1].1.starts_with("400 "), "{:?}", seen[1]);
    assert_eq!(seen[2], ("success", "200"));
    assert!(entries
        .iter()
        .all(|e| e["actor"] == "eddie" && e["project"] == "ml"));
    // A run's creation is appended in its own transaction too: one entry for the run
    // above, and a refused creation still recorded, by the middleware.
    let (s, v) = h.send(
        &eddie,
        "POST",
        &api("runs/create"),
        Some(json!({"experiment_id": "987654"})),
    );
    assert_eq!(s, 404, "{v}");
    let created = audit(&q, "action=mlflow.run.create&project=ml");
    let seen: Vec<(&str, &str, &str)> = created
        .iter()
        .map(|e| {
            (
                e["outcome"].as_str().unwrap_or(""),
                e["detail"].as_str().unwrap_or(""),
                e["actor"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(seen.len(), 2, "{created:?}");
    assert_eq!(seen[0], ("success", "200", "eddie"));
    assert_eq!(seen[1].0, "failure");
    assert!(seen[1].1.starts_with("404 "), "{:?}", seen[1]);
    let (s, v) = h.send(
        &eddie,
        "GET",
        &format!(
            "{}?run_id={run}&metric_key=loss",
            api("metrics/get-history")
        ),
        None,
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["metrics"].as_array().map(Vec::len), Some(2), "{v}");
    let (_, v) = q.api("GET", "/api/v1/audit/verify", None);
    assert_eq!(v["ok"], true, "{v}");
}

/// A bad listen address is refused before anything is written: no data directory,
/// no bootstrap admin left behind by the failed start.
#[test]
fn a_bad_bind_address_is_refused_before_the_home_is_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = common::base_cmd(dir.path(), &[])
        .args(["server", "--bind", "nonsense"])
        .output()
        .expect("run qanat server");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'nonsense' is not an address"), "{err}");
    assert!(
        !dir.path().join("home").exists(),
        "the home was created: {err}"
    );
}

/// Experiments and projects are deleted by admins, hidden at once, restorable, and
/// purged with their bytes by gc after the retention period (0 days here); a
/// registered model version keeps the run it comes from.
#[test]
fn deleted_experiments_and_projects_are_restorable_until_gc_purges_them() {
    let q = Qanat::start_with(vec![("QANAT_RETENTION_DELETED_DAYS".into(), "0".into())]);
    q.create_project("gone", &["uae-north"]);
    let h = q.http();
    let mlflow = |endpoint: &str, body: Value| {
        let (s, v) = q.api(
            "POST",
            &format!("/mlflow/gone/api/2.0/mlflow/{endpoint}"),
            Some(body),
        );
        assert_eq!(s, 200, "{endpoint}: {v}");
        v
    };
    let mut runs = Vec::new();
    for name in ["scratch", "shipped"] {
        let exp = mlflow("experiments/create", json!({"name": name}))["experiment_id"]
            .as_str()
            .expect("id")
            .to_string();
        let run = mlflow("runs/create", json!({"experiment_id": exp}))["run"]["info"]["run_id"]
            .as_str()
            .expect("run")
            .to_string();
        mlflow(
            "runs/log-parameter",
            json!({"run_id": run, "key": "lr", "value": "0.1"}),
        );
        let resp = q.request("PUT", &format!("/mlflow/gone/api/2.0/mlflow-artifacts/artifacts/{exp}/{run}/artifacts/model.bin"))
            .body("weights")
            .send()
            .expect("send");
        assert_eq!(resp.status().as_u16(), 200);
        runs.push((exp, run));
    }
    mlflow("registered-models/create", json!({"name": "fraud"}));
    mlflow(
        "model-versions/create",
        json!({"name": "fraud", "source": format!("runs:/{}/model", runs[1].1), "run_id": runs[1].1}),
    );

    // Only project admins delete experiments.
    let editor = q.user_with_role("ed", "gone", "editor");
    let (ok, _, err) = q.cli_as(&editor, &["experiments", "-p", "gone", "rm", "scratch"]);
    assert!(!ok && err.contains("PERMISSION_DENIED"), "{err}");
    for name in ["scratch", "shipped"] {
        let (ok, _, err) = q.cli(&["experiments", "-p", "gone", "rm", name]);
        assert!(ok, "{err}");
    }
    let (ok, out, _) = q.cli(&["experiments", "-p", "gone", "ls", "-o", "json"]);
    assert!(ok && !out.contains("scratch"), "{out}");
    q.cli_ok("experiments -p gone restore scratch");
    let (ok, out, _) = q.cli(&["experiments", "-p", "gone", "ls", "-o", "json"]);
    assert!(ok && out.contains("scratch"), "{out}");
    q.cli_ok("experiments -p gone rm scratch");

    // gc purges the unused one with its run and artifact; the registry keeps the other.
    let out = q.cli_ok("gc -p gone -o json");
    let r: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        (
            &r["experiments_purged"],
            &r["runs_purged"],
            &r["artifacts_deleted"],
            &r["kept_for_registry"]
        ),
        (&json!(1), &json!(1), &json!(1), &json!(1)),
        "{r}"
    );
    let artifact = |(exp, run): &(String, String)| {
        q.request(
            "GET",
            &format!(
                "/mlflow/gone/api/2.0/mlflow-artifacts/artifacts/{exp}/{run}/artifacts/model.bin"
            ),
        )
        .send()
        .expect("send")
        .status()
        .as_u16()
    };
    assert_eq!(artifact(&runs[0]), 404);
    assert_eq!(artifact(&runs[1]), 200);
    let (s, _) = q.api(
        "GET",
        &format!("/mlflow/gone/api/2.0/mlflow/runs/get?run_id={}", runs[0].1),
        None,
    );
    assert_eq!(s, 404);

    // Projects: admins delete; gone for everyone; restorable by global admins only.
    let maintainer = q.user_with_role("mo", "gone", "maintainer");
    let (ok, _, err) = q.cli_as(&maintainer, &["projects", "rm", "gone"]);
    assert!(!ok && err.contains("PERMISSION_DENIED"), "{err}");
    let (ok, _, err) = q.cli(&["projects", "rm", "gone"]);
    assert!(ok && err.contains("qanat projects restore gone"), "{err}");
    let (s, _) = q.api("GET", "/api/v1/projects/gone", None);
    assert_eq!(s, 404);
    let (s, _) = h.send(
        &maintainer,
        "GET",
        "/mlflow/gone/api/2.0/mlflow/experiments/search",
        None,
    );
    assert_eq!(s, 404);
    let (s, v) = q.api("POST", "/api/v1/projects", Some(json!({"name": "gone"})));
    assert!(
        s == 409 && v["message"].as_str().expect("msg").contains("restore gone"),
        "{v}"
    );
    let (ok, _, err) = q.cli_as(&maintainer, &["projects", "restore", "gone"]);
    assert!(!ok && err.contains("PERMISSION_DENIED"), "{err}");
    let (ok, out, _) = q.cli(&["projects", "ls", "--deleted", "-o", "json"]);
    assert!(
        ok && out.contains("\"gone\"") && out.contains("deleted_at"),
        "{out}"
    );
    q.cli_ok("projects restore gone");
    assert_eq!(artifact(&runs[1]), 200, "restored with everything it held");

    // Deleted again and purged: every object and row of it goes; the audit log stays.
    q.cli_ok("projects rm gone");
    let out = q.cli_ok("gc -o json");
    let r: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(r["projects_purged"], json!(["gone"]), "{r}");
    let left: Vec<_> = walkdir::WalkDir::new(q.home().join("objects"))
        .into_iter()
        .map(|e| e.expect("walk"))
        .filter(|e| e.file_type().is_file())
        .collect();
    assert!(left.is_empty(), "objects left: {left:?}");
    let (ok, out, _) = q.cli(&["projects", "ls", "--deleted", "-o", "json"]);
    assert!(ok && out.trim() == "[]", "{out}");
    q.create_project("gone", &["uae-north"]);
    let (s, v) = q.api(
        "GET",
        "/mlflow/gone/api/2.0/mlflow/registered-models/get?name=fraud",
        None,
    );
    assert_eq!(s, 404, "a new project of the same name starts empty: {v}");
    assert_eq!(audit(&q, "action=project.delete&outcome=success").len(), 2);
    assert_eq!(
        audit(&q, "action=mlflow.experiment.delete&outcome=denied").len(),
        1
    );
}

#[test]
fn metrics_need_a_token_scoped_to_them_unless_an_admin_opts_in() {
    let q = Qanat::start();
    let h = q.http();
    let get = |token: &str, path: &str| {
        let r = h.raw(token, "GET", path).send().expect("send");
        (r.status().as_u16(), r.text().unwrap_or_default())
    };
    // Outsiders cannot tell which projects exist from the metrics.
    assert_eq!(get("", "/metrics").0, 401);
    let viewer = q.user_with_role("vera", "default", "viewer");
    assert_eq!(get(&viewer, "/metrics").0, 403);
    // Only a global admin makes a token scoped to metrics; it reads /metrics only.
    let (s, e) = h.send(
        &viewer,
        "POST",
        "/api/v1/tokens",
        Some(json!({"name": "prom", "scope": "metrics"})),
    );
    assert_eq!(s, 403, "{e}");
    let (s, t) = h.send(
        &q.admin_token,
        "POST",
        "/api/v1/tokens",
        Some(json!({"name": "prom", "user": "vera", "scope": "metrics"})),
    );
    assert_eq!(s, 201, "{t}");
    let prom = t["token"].as_str().expect("token");
    let (s, text) = get(prom, "/metrics");
    assert_eq!(s, 200);
    assert!(text.contains("route=\"/metrics\""), "{text}");
    let (s, body) = get(prom, "/api/v1/projects");
    assert_eq!(s, 403, "{body}");
    assert!(body.contains("scoped to metrics"), "{body}");

    // Opted in: anonymous callers get the series summed over their labels.
    let q = Qanat::start_with(vec![(
        "QANAT_SERVER_METRICS_ANONYMOUS".into(),
        "true".into(),
    )]);
    q.create_project("secret-project", &["uae-north"]);
    let h = q.http();
    let (s, text) = {
        let r = h.raw("", "GET", "/metrics").send().expect("send");
        (r.status().as_u16(), r.text().unwrap_or_default())
    };
    assert_eq!(s, 200);
    assert!(text.contains("qanat_http_requests_total "), "{text}");
    assert!(
        text.contains("qanat_http_request_duration_seconds_bucket{le="),
        "{text}"
    );
    assert!(
        !text.contains("route=") && !text.contains("secret-project"),
        "{text}"
    );
}

/// The UI's pages pass the one authorization point like the API: a viewer opens their
/// project's pages and gets 404 for another's, an admin-only page is refused to them,
/// and governed reads (datasets, the compliance report) are audited with who read.
#[test]
fn ui_pages_are_authorized_per_project_and_governed_reads_audited() {
    let q = Qanat::start();
    q.create_project("fraud", &["uae-north"]);
    let vera = q.user_with_role("vera", "fraud", "viewer");
    let b = browser();
    let get = |session: &str, path: &str| {
        let r = b
            .get(format!("{}{path}", q.url))
            .header("cookie", session)
            .send()
            .expect("page");
        (r.status().as_u16(), r.text().unwrap_or_default())
    };
    let viewer = ui_login(&q, &vera);
    assert_eq!(get(&viewer, "/ui/p/fraud/datasets").0, 200);
    let (home, html) = get(&viewer, "/ui/");
    assert!(home == 200 && html.contains("/ui/p/fraud") && !html.contains("/ui/p/default"));
    for path in [
        "/ui/p/default/datasets",
        "/ui/p/default/models",
        "/ui/p/nope/runs",
    ] {
        assert_eq!(get(&viewer, path).0, 404, "{path}");
    }
    for path in ["/ui/compliance", "/ui/audit"] {
        assert_eq!(get(&viewer, path).0, 403, "{path}");
    }

    let admin = ui_login(&q, &q.admin_token);
    let (status, html) = get(&admin, "/ui/compliance?project=fraud");
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("<h1>Compliance report</h1>")
            && html.contains("project <strong>fraud</strong>")
            && html.contains("Where data lives"),
        "{html}"
    );

    let read = audit(&q, "action=ui.datasets");
    assert!(
        read.iter()
            .any(|e| e["actor"] == "vera" && e["project"] == "fraud" && e["outcome"] == "success"),
        "{read:?}"
    );
    assert!(
        read.iter()
            .any(|e| e["actor"] == "vera" && e["outcome"] == "denied"),
        "the refused read is audited too: {read:?}"
    );
    let report = audit(&q, "action=ui.compliance");
    assert!(
        report
            .iter()
            .any(|e| e["actor"] == "admin" && e["outcome"] == "success"),
        "{report:?}"
    );
    assert!(
        report
            .iter()
            .any(|e| e["actor"] == "vera" && e["outcome"] == "denied"),
        "{report:?}"
    );
}

/// The UI: a token logs in to a session that only pages accept, pages carry a strict
/// CSP, a page without a session sends the browser to the login form, and logging
/// out ends the session at once.
#[test]
fn the_ui_logs_in_with_a_token_into_a_session_that_logging_out_ends() {
    let q = Qanat::start();
    let b = browser();
    let resp = b
        .get(format!("{}/ui/p/default/models", q.url))
        .send()
        .expect("page");
    assert_eq!(resp.status(), 303);
    assert_eq!(
        resp.headers()["location"],
        "/ui/login?next=%2Fui%2Fp%2Fdefault%2Fmodels"
    );

    // The form's own cookie is required: a login posted from elsewhere is refused.
    let refused = b
        .post(format!("{}/ui/login", q.url))
        .form(&[
            ("token", q.admin_token.as_str()),
            ("csrf", "00"),
            ("next", "/ui/"),
        ])
        .send()
        .expect("login");
    assert_eq!(refused.status(), 403);
    // A wrong token says so, on the form.
    let form = b.get(format!("{}/ui/login", q.url)).send().expect("form");
    let full = set_cookie(&form, "qanat_login").expect("cookie");
    assert!(
        full.contains("HttpOnly") && !full.contains("Secure"),
        "plain HTTP: {full}"
    );
    let pair = full.split(';').next().unwrap_or_default().to_string();
    let csrf = csrf_of(&form.text().unwrap_or_default());
    let bad = b
        .post(format!("{}/ui/login", q.url))
        .header("cookie", &pair)
        .form(&[("token", "qnt_nope"), ("csrf", csrf.as_str())])
        .send()
        .expect("login");
    assert_eq!(bad.status(), 401);
    assert!(bad.text().unwrap_or_default().contains("not valid"));

    let session = ui_login(&q, &q.admin_token);
    let page = b
        .get(format!("{}/ui/", q.url))
        .header("cookie", &session)
        .send()
        .expect("page");
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    let html = page.text().unwrap_or_default();
    assert!(
        html.contains("<h1>Projects</h1>") && html.contains("/ui/p/default"),
        "{html}"
    );

    // The cookie opens pages, never the API.
    let api = b
        .get(format!("{}/api/v1/projects", q.url))
        .header("cookie", &session)
        .send()
        .expect("api");
    assert_eq!(api.status(), 401);

    // Logging out (a form, with its CSRF token) ends the session.
    let out = b
        .post(format!("{}/ui/logout", q.url))
        .header("cookie", &session)
        .form(&[("csrf", csrf_of(&html).as_str())])
        .send()
        .expect("logout");
    assert_eq!(out.status(), 303);
    let after = b
        .get(format!("{}/ui/", q.url))
        .header("cookie", &session)
        .send()
        .expect("page");
    assert_eq!(after.status(), 303, "the session was revoked");
    let logins = audit(&q, "action=ui.login");
    assert!(
        logins.iter().any(|e| e["outcome"] == "success"),
        "{logins:?}"
    );
    assert!(
        logins.iter().any(|e| e["outcome"] == "denied"),
        "{logins:?}"
    );

    // Without [security.oidc] there is no single sign-on: no link on the login
    // page, and its routes say so with 404 (tests/compat/sso.sh runs it against a
    // real provider).
    let form = b.get(format!("{}/ui/login", q.url)).send().expect("form");
    assert!(!form.text().unwrap_or_default().contains("id=\"sso\""));
    let start = b
        .get(format!("{}/ui/login/sso", q.url))
        .send()
        .expect("sso start");
    assert_eq!(start.status(), 404);
    assert!(start
        .text()
        .unwrap_or_default()
        .contains("single sign-on is not configured"));
    let cli = b
        .get(format!("{}/api/v1/auth/sso", q.url))
        .send()
        .expect("sso settings");
    assert_eq!(cli.status(), 404);
}

/// Every form of the UI needs its session's CSRF token and the role its action needs;
/// a project's pages are hidden from people outside it. Every page of an empty
/// project renders.
#[test]
fn ui_forms_need_their_csrf_token_and_pages_their_project() {
    let q = Qanat::start();
    q.create_project("fraud", &["uae-north"]);
    let viewer = q.user_with_role("vera", "fraud", "viewer");
    let outsider = q.user_with_role("otto", "default", "viewer");
    let b = browser();
    let admin = ui_login(&q, &q.admin_token);
    let page = |cookie: &str, path: &str| {
        let r = b
            .get(format!("{}{path}", q.url))
            .header("cookie", cookie)
            .send()
            .expect("page");
        (r.status().as_u16(), r.text().unwrap_or_default())
    };
    for path in [
        "/ui/p/fraud",
        "/ui/p/fraud/experiments",
        "/ui/p/fraud/experiments/0",
        "/ui/p/fraud/models",
        "/ui/p/fraud/datasets",
        "/ui/p/fraud/features",
        "/ui/p/fraud/jobs",
        "/ui/p/fraud/deployments",
        "/ui/p/fraud/monitors",
        "/ui/p/fraud/lineage?ref=model:x@1",
        "/ui/audit",
    ] {
        let (s, html) = page(&admin, path);
        assert_eq!(s, 200, "{path}: {html}");
        assert!(html.contains("<h1>"), "{path}");
    }
    let (s, html) = page(
        &admin,
        "/ui/p/fraud/experiments/0?filter=metrics.a%20%3E%3E%201",
    );
    assert_eq!(s, 200);
    assert!(
        html.contains("class=\"error\""),
        "a bad filter says why: {html}"
    );
    // A query or path the page cannot read is a 400 page that says which part.
    let (s, html) = page(&admin, "/ui/p/fraud/monitors/web?check=abc");
    assert_eq!(s, 400, "{html}");
    assert!(
        html.contains("bad query string") && html.contains("<h1>"),
        "{html}"
    );
    let (s, html) = page(&admin, "/ui/p/fraud/compare");
    assert_eq!(s, 400, "{html}");
    assert!(html.contains("tick at least one run"), "{html}");

    let (_, home) = page(&admin, "/ui/");
    let token = csrf_of(&home);
    let promote = |cookie: &str, csrf: Option<&str>| {
        let mut form = vec![("alias", "production"), ("version", "1")];
        if let Some(c) = csrf {
            form.push(("csrf", c));
        }
        let r = b
            .post(format!("{}/ui/p/fraud/models/nothing/promote", q.url))
            .header("cookie", cookie)
            .form(&form)
            .send()
            .expect("form");
        (r.status().as_u16(), r.text().unwrap_or_default())
    };
    let (s, html) = promote(&admin, None);
    assert_eq!(s, 403, "{html}");
    assert!(html.contains("CSRF"), "{html}");
    // Another session's token is no better.
    let other = ui_login(&q, &q.admin_token);
    let (_, other_home) = page(&other, "/ui/");
    let (s, _) = promote(&admin, Some(&csrf_of(&other_home)));
    assert_eq!(s, 403);
    // With its token the form reaches the registry (which has no such model).
    let (s, html) = promote(&admin, Some(&token));
    assert_eq!(s, 404, "{html}");

    // A viewer: their project's pages, no maintainer's form.
    let vera = ui_login(&q, &viewer);
    let (s, _) = page(&vera, "/ui/p/fraud/models");
    assert_eq!(s, 200);
    let (_, vera_home) = page(&vera, "/ui/");
    let (s, html) = promote(&vera, Some(&csrf_of(&vera_home)));
    assert_eq!(s, 403, "{html}");
    assert!(html.contains("Not allowed"), "{html}");
    let (s, _) = page(&vera, "/ui/audit");
    assert_eq!(s, 403, "the audit log is for global admins");
    // Someone outside the project cannot tell it exists.
    let otto = ui_login(&q, &outsider);
    let (s, html) = page(&otto, "/ui/p/fraud/datasets");
    assert_eq!(s, 404, "{html}");
    assert!(
        !vera_home.contains("/ui/p/default\""),
        "vera is not in default"
    );
    let (_, otto_home) = page(&otto, "/ui/");
    assert!(!otto_home.contains("/ui/p/fraud"), "{otto_home}");
}

#[test]
fn an_unknown_role_is_refused_naming_the_roles_there_are() {
    let q = Qanat::start();
    let h = q.http();
    let (s, _) = h.send(
        &q.admin_token,
        "POST",
        "/api/v1/users",
        Some(json!({"name": "bob"})),
    );
    assert_eq!(s, 201);
    // Over HTTP: 400, the word refused and the four roles.
    let (s, body) = h.send(
        &q.admin_token,
        "PUT",
        "/api/v1/projects/default/members/bob",
        Some(json!({"role": "owner"})),
    );
    assert_eq!(s, 400, "{body}");
    let msg = body["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("owner")
            && ["viewer", "editor", "maintainer", "admin"]
                .iter()
                .all(|r| msg.contains(r)),
        "{body}"
    );
    // From the CLI: refused before anything is sent, with the same words.
    let (ok, _, err) = q.cli(&["projects", "grant", "default", "bob", "Owner"]);
    assert!(
        !ok && err.contains("Owner")
            && ["viewer", "editor", "maintainer", "admin"]
                .iter()
                .all(|r| err.contains(r)),
        "{err}"
    );
    // Nothing was granted.
    let (s, body) = h.send(
        &q.admin_token,
        "GET",
        "/api/v1/projects/default/members",
        None,
    );
    assert_eq!(s, 200);
    assert!(!body.to_string().contains("\"bob\""), "{body}");
    // A role in another case is not a role either (the words are exact).
    let (s, _) = h.send(
        &q.admin_token,
        "PUT",
        "/api/v1/projects/default/members/bob",
        Some(json!({"role": "Viewer"})),
    );
    assert_eq!(s, 400);
}

#[test]
fn nul_and_control_characters_are_refused_in_every_kind_of_name() {
    let q = Qanat::start();
    let h = q.http();
    let run = {
        let (s, v) = q.api(
            "POST",
            "/api/2.0/mlflow/runs/create",
            Some(json!({"experiment_id": "0"})),
        );
        assert_eq!(s, 200, "{v}");
        v["run"]["info"]["run_id"]
            .as_str()
            .expect("run")
            .to_string()
    };
    for bad in ["a\u{0}b", "a\u{7}b", "a\nb", "a\u{1b}[31mb"] {
        let calls: Vec<(&str, String, Value)> = vec![
            (
                "project",
                "/api/v1/projects".into(),
                json!({"name": bad, "allowed_regions": []}),
            ),
            ("user", "/api/v1/users".into(), json!({"name": bad})),
            ("token", "/api/v1/tokens".into(), json!({"name": bad})),
            (
                "dataset",
                "/api/v1/projects/default/datasets".into(),
                json!({"name": bad}),
            ),
            (
                "experiment",
                "/api/2.0/mlflow/experiments/create".into(),
                json!({"name": bad}),
            ),
            (
                "run name",
                "/api/2.0/mlflow/runs/create".into(),
                json!({"experiment_id": "0", "run_name": bad}),
            ),
            (
                "tag key",
                "/api/2.0/mlflow/runs/set-tag".into(),
                json!({"run_id": run, "key": bad, "value": "v"}),
            ),
            (
                "param key",
                "/api/2.0/mlflow/runs/log-parameter".into(),
                json!({"run_id": run, "key": bad, "value": "v"}),
            ),
            (
                "metric key",
                "/api/2.0/mlflow/runs/log-metric".into(),
                json!({"run_id": run, "key": bad, "value": 1.0, "timestamp": 0}),
            ),
            (
                "registered model",
                "/api/2.0/mlflow/registered-models/create".into(),
                json!({"name": bad}),
            ),
            (
                "job",
                "/api/v1/projects/default/jobs".into(),
                json!({"name": bad, "command": "true"}),
            ),
            (
                "deployment",
                "/api/v1/projects/default/deployments".into(),
                json!({"name": bad, "model": "m", "primary": "1"}),
            ),
            (
                "feature entity",
                "/api/v1/projects/default/features/plan".into(),
                json!({"repo": {"entities": [{"name": bad, "join_keys": [{"name": "k", "type": "int64"}]}]}}),
            ),
        ];
        for (what, path, body) in calls {
            let (s, v) = h.send(&q.admin_token, "POST", &path, Some(body));
            assert!(
                (400..500).contains(&s) && s != 404,
                "{what} named {bad:?}: {s} {v}"
            );
        }
    }
    // The server is still whole.
    assert_eq!(q.api("GET", "/api/v1/projects", None).0, 200);
}
