//! The real server on the scale-out backends: PostgreSQL metadata and an S3-compatible
//! storage location. Each test runs when CI provides the service
//! (`QANAT_TEST_POSTGRES_URL`, `QANAT_TEST_S3_URL` + `QANAT_TEST_S3_ENDPOINT`) and says
//! so and returns otherwise — except under `CI=true`, where a missing variable fails.

mod common;

use common::Qanat;
use qanat_store::testing::TestDb;
use serde_json::{json, Value};

#[test]
fn server_on_postgres_keeps_rbac_audit_and_data_across_kill_9() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let Some(db) = rt.block_on(TestDb::postgres(qanat::wiring::SCHEMA)) else {
        return;
    };
    let mut q = Qanat::start_with(vec![("QANAT_METADATA_URL".into(), db.url.clone())]);
    assert!(
        !q.home().join("qanat.db").exists(),
        "no SQLite file when PostgreSQL is configured"
    );
    q.create_project("pg", &["uae-north"]);
    let viewer = q.user_with_role("vera", "pg", "viewer");
    let h = q.http();
    let resp = h
        .raw(&viewer, "PUT", "/api/v1/projects/pg/objects/a")
        .body("x")
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 403);
    let resp = q
        .request("PUT", "/api/v1/projects/pg/objects/a")
        .body("pg bytes")
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 201);

    q.kill_hard();
    q.spawn_server();
    let h = q.http();
    let got = h
        .raw(&viewer, "GET", "/api/v1/projects/pg/objects/a")
        .send()
        .expect("send");
    assert_eq!(got.text().expect("text"), "pg bytes");
    let (_, denied) = q.api("GET", "/api/v1/audit?actor=vera&outcome=denied", None);
    assert_eq!(denied.as_array().expect("list").len(), 1);
    let (_, v) = q.api("GET", "/api/v1/audit/verify", None);
    assert_eq!(v["ok"], true, "{v}");

    // Datasets on PostgreSQL: push, tables profiled, lineage, gc, pull.
    let src = q.dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    let rows: String = (0..5000).map(|i| format!("{i},{}\n", i * 2)).collect();
    std::fs::write(src.join("t.csv"), format!("a,b\n{rows}")).expect("write");
    std::fs::write(src.join("blob.bin"), vec![7u8; 3 << 20]).expect("write");
    let src_s = src.to_str().expect("utf8");
    q.cli_ok("data -p pg create d");
    let (ok, _, err) = q.cli(&["data", "-p", "pg", "push", "d", src_s]);
    assert!(ok, "{err}");
    let (ok, _, err) = q.cli(&[
        "data",
        "-p",
        "pg",
        "push",
        "d",
        src_s,
        "--derived-from",
        "dataset:d@1",
    ]);
    assert!(ok, "{err}");
    let out = q.cli_ok("data -p pg show d@2 --output json");
    let shown: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(shown["profiles"][0]["profile"]["rows"], 5000);
    let (ok, out, _) = q.cli(&["lineage", "-p", "pg", "dataset:d@2"]);
    assert!(ok && out.contains("derived_from: dataset:d@1"), "{out}");
    q.cli_ok("data -p pg gc --grace 0s");
    let dst = q.dir.path().join("dst");
    let (ok, _, err) = q.cli(&[
        "data",
        "-p",
        "pg",
        "pull",
        "d@2",
        dst.to_str().expect("utf8"),
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::read(dst.join("t.csv")).expect("read"),
        std::fs::read(src.join("t.csv")).expect("read")
    );

    // Deletion and purges on PostgreSQL: a dataset, an experiment with a run, then
    // the whole project (retention 0 days).
    q.kill_hard();
    q.extra_env
        .push(("QANAT_RETENTION_DELETED_DAYS".into(), "0".into()));
    q.spawn_server();
    let (s, e) = q.api(
        "POST",
        "/mlflow/pg/api/2.0/mlflow/experiments/create",
        Some(json!({"name": "tmp"})),
    );
    assert_eq!(s, 200, "{e}");
    let exp = e["experiment_id"].as_str().expect("id").to_string();
    let (s, r) = q.api(
        "POST",
        "/mlflow/pg/api/2.0/mlflow/runs/create",
        Some(json!({"experiment_id": exp})),
    );
    assert_eq!(s, 200, "{r}");
    for args in [
        &["data", "-p", "pg", "rm", "d"][..],
        &["experiments", "-p", "pg", "rm", "tmp"],
    ] {
        let (ok, _, err) = q.cli(args);
        assert!(ok, "{err}");
    }
    let out = q.cli_ok("gc -p pg --grace 0s -o json");
    let r: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        (
            &r["datasets_purged"],
            &r["experiments_purged"],
            &r["runs_purged"]
        ),
        (&json!(1), &json!(1), &json!(1)),
        "{r}"
    );
    q.cli_ok("projects rm pg");
    let out = q.cli_ok("gc -o json");
    let r: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(r["projects_purged"], json!(["pg"]), "{r}");
    drop(q);
    drop(db);
}

#[test]
fn server_writes_encrypted_objects_to_s3_with_residency() {
    let (Some(bucket_url), Some(endpoint)) = (
        qanat_store::testing::service_var("QANAT_TEST_S3_URL"),
        qanat_store::testing::service_var("QANAT_TEST_S3_ENDPOINT"),
    ) else {
        return;
    };
    let prefix = format!("server-{}", std::process::id());
    let (_cfg_dir, cfg) = s3_config(&bucket_url, &endpoint, &prefix);
    let q = Qanat::start_with(vec![("QANAT_CONFIG".into(), cfg.display().to_string())]);
    q.create_project("s3p", &["uae-north"]);
    let secret = "national-id,1234-5678-9012\n".repeat(1000);

    // uae-south is not allowed yet: refused, audited, nothing written.
    let put_archive = || {
        q.request(
            "PUT",
            "/api/v1/projects/s3p/objects/ids.csv?location=archive",
        )
        .body(secret.clone())
        .send()
        .expect("send")
        .status()
        .as_u16()
    };
    assert_eq!(put_archive(), 403);
    let (_, denied) = q.api(
        "GET",
        "/api/v1/audit?action=object.write&outcome=denied",
        None,
    );
    assert_eq!(denied.as_array().expect("list").len(), 1);

    let (s, _) = q.api(
        "PATCH",
        "/api/v1/projects/s3p",
        Some(json!({"allowed_regions": ["uae-north", "uae-south"]})),
    );
    assert_eq!(s, 200);
    assert_eq!(put_archive(), 201);
    let got = q
        .request(
            "GET",
            "/api/v1/projects/s3p/objects/ids.csv?location=archive",
        )
        .send()
        .expect("send");
    assert_eq!(got.text().expect("text"), secret);

    // What the bucket holds is ciphertext, under a name that does not reveal the key.
    let raw = raw_s3_objects(&bucket_url, &endpoint, &prefix);
    assert_eq!(
        raw.len(),
        1,
        "one object in the bucket: {:?}",
        raw.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    let (name, raw) = &raw[0];
    assert!(
        name.starts_with(&format!("{prefix}/k1/"))
            && !name.contains("ids")
            && !name.contains("projects"),
        "the bucket shows a keyed-hash name, not the key: {name}"
    );
    assert!(
        raw.len() > secret.len(),
        "the raw object exists ({} bytes)",
        raw.len()
    );
    assert!(
        !raw.windows(12).any(|w| w == b"national-id,"),
        "plaintext found in the bucket"
    );

    let (_, listed) = q.api("GET", "/api/v1/projects/s3p/objects?location=archive", None);
    let listed: &Vec<Value> = listed.as_array().expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["region"], "uae-south");
    assert_eq!(listed[0]["size"], secret.len());
}

/// A configuration with a local location in uae-north (the default) and an S3
/// location `archive` in uae-south under `prefix` of the bucket: its directory (kept
/// while the server runs) and the file.
fn s3_config(
    bucket_url: &str,
    endpoint: &str,
    prefix: &str,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let cfg_dir = tempfile::tempdir().expect("tempdir");
    let cfg = cfg_dir.path().join("qanat.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[storage]
default_location = "local"

[[storage.locations]]
name = "local"
url = "{local}"
region = "uae-north"

[[storage.locations]]
name = "archive"
url = "{bucket_url}/{prefix}"
region = "uae-south"
[storage.locations.options]
aws_endpoint = "{endpoint}"
aws_region = "us-east-1"
aws_access_key_id = "test"
aws_secret_access_key = "test"
aws_allow_http = "true"
"#,
            local = cfg_dir.path().join("objects").display()
        ),
    )
    .expect("write config");
    (cfg_dir, cfg)
}

/// Every object under `prefix` in the bucket, name and bytes, read straight from it
/// (bypassing Qanat).
fn raw_s3_objects(bucket_url: &str, endpoint: &str, prefix: &str) -> Vec<(String, Vec<u8>)> {
    use futures::TryStreamExt;
    use object_store::ObjectStore;
    let url = url::Url::parse(bucket_url).expect("bucket url");
    let (store, _) = object_store::parse_url_opts(
        &url,
        [
            ("aws_endpoint", endpoint),
            ("aws_region", "us-east-1"),
            ("aws_access_key_id", "test"),
            ("aws_secret_access_key", "test"),
            ("aws_allow_http", "true"),
        ],
    )
    .expect("s3 store");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let under = object_store::path::Path::from(prefix);
        let metas: Vec<object_store::ObjectMeta> = store
            .list(Some(&under))
            .try_collect()
            .await
            .expect("raw list");
        let mut out = Vec::new();
        for m in metas {
            let bytes = store
                .get(&m.location)
                .await
                .expect("raw get")
                .bytes()
                .await
                .expect("raw bytes")
                .to_vec();
            out.push((m.location.to_string(), bytes));
        }
        out
    })
}

#[test]
fn compliance_report_on_postgres_and_s3_matches_the_data() {
    let (Some(bucket_url), Some(endpoint)) = (
        qanat_store::testing::service_var("QANAT_TEST_S3_URL"),
        qanat_store::testing::service_var("QANAT_TEST_S3_ENDPOINT"),
    ) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let Some(db) = rt.block_on(TestDb::postgres(qanat::wiring::SCHEMA)) else {
        return;
    };
    let prefix = format!("report-{}", std::process::id());
    let (_cfg_dir, cfg) = s3_config(&bucket_url, &endpoint, &prefix);
    let q = Qanat::start_with(vec![
        ("QANAT_CONFIG".into(), cfg.display().to_string()),
        ("QANAT_METADATA_URL".into(), db.url.clone()),
    ]);
    q.create_project("rep", &["uae-north"]);
    let put = |key: &str, body: &str| {
        q.request(
            "PUT",
            &format!("/api/v1/projects/rep/objects/{key}?location=archive"),
        )
        .body(body.to_string())
        .send()
        .expect("send")
        .status()
        .as_u16()
    };
    // Refused by residency first (and audited), then allowed.
    assert_eq!(put("a.txt", "refused"), 403);
    let (s, _) = q.api(
        "PATCH",
        "/api/v1/projects/rep",
        Some(json!({"allowed_regions": ["uae-north", "uae-south"]})),
    );
    assert_eq!(s, 200);
    let body = "x".repeat(12_345);
    assert_eq!(put("a.txt", &body), 201);
    // A dataset with emails on the local location, read in clear by a PII reader.
    let src = q.dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    let rows: String = (0..50)
        .map(|i| format!("{i},user{i}@example.ae\n"))
        .collect();
    std::fs::write(src.join("people.csv"), format!("id,email\n{rows}")).expect("write");
    q.cli_ok("data -p rep create people");
    q.cli_ok(&format!("data -p rep push people {}", src.display()));
    let reader = q.user_with_role("rita", "rep", "viewer");
    q.cli_ok("projects grant-pii rep rita");
    let out = q.dir.path().join("pulled");
    let (ok, _, err) = q.cli_as(
        &reader,
        &[
            "data",
            "-p",
            "rep",
            "pull",
            "people",
            out.to_str().expect("utf8"),
        ],
    );
    assert!(ok && !err.contains("pseudonymized"), "{err}");

    let (s, r) = q.api("GET", "/api/v1/compliance/report?project=rep", None);
    assert_eq!(s, 200, "{r}");
    let location = |name: &str| {
        r["locations"]
            .as_array()
            .expect("locations")
            .iter()
            .find(|l| l["name"] == name)
            .cloned()
            .expect("location")
    };
    let archive = location("archive");
    assert_eq!(archive["region"], "uae-south");
    assert_eq!(archive["kind"], "s3");
    assert_eq!(archive["projects"][0]["objects"], 1, "{archive}");
    assert_eq!(archive["projects"][0]["bytes"], 12_345, "{archive}");
    assert!(archive["projects"][0]["stored_bytes"].as_u64() > Some(12_345));
    let local = location("local");
    let (_, log, _) = q.cli(&["data", "-p", "rep", "log", "people", "--output", "json"]);
    let log: Value = serde_json::from_str(&log).expect("json");
    let chunks = log[0]["new_bytes"].as_u64().expect("new bytes");
    let bytes = local["projects"][0]["bytes"].as_u64().expect("bytes");
    assert!(
        bytes >= chunks && bytes < chunks + 65_536,
        "{bytes} vs {chunks}: {local}"
    );
    assert_eq!(r["personal_data"][0]["name"], "people");
    assert_eq!(r["personal_data"][0]["columns"][0]["column"], "email");
    assert_eq!(r["personal_data"][0]["columns"][0]["declared"], false);
    assert_eq!(
        r["residency_refusals"]["count"], 1,
        "{}",
        r["residency_refusals"]
    );
    assert!(r["residency_refusals"]["entries"][0]["detail"]
        .as_str()
        .is_some_and(|d| d.contains("uae-south")));
    let access = r["pii_access"]["entries"].to_string();
    assert!(
        access.contains("pii.grant") && access.contains("PII read in clear"),
        "{access}"
    );
    assert_eq!(r["audit"]["verification"]["ok"], true);
    let (s, page) = {
        let resp = q
            .request("GET", "/api/v1/compliance/report?project=rep&format=html")
            .send()
            .expect("send");
        (resp.status().as_u16(), resp.text().expect("text"))
    };
    assert_eq!(s, 200);
    assert!(
        page.contains("uae-south") && page.contains("people"),
        "{page}"
    );

    // An erasure on PostgreSQL with the chunks in S3: the old version's chunk is
    // destroyed in the bucket, the new version reads.
    q.cli_ok("data -p rep create people-s3 --location archive");
    q.cli_ok(&format!("data -p rep push people-s3 {}", src.display()));
    let out = q.cli_ok(
        "data -p rep erase people-s3 --request-id DSR-PG-1 --match email=user3@example.ae --output json",
    );
    let e: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(e["rows_removed"], 1, "{e}");
    assert_eq!(e["new_version"], 2, "{e}");
    assert!(e["chunks_shredded"].as_u64() >= Some(1), "{e}");
    let pull = |r: &str, dir: &str| {
        let dest = q.dir.path().join(dir);
        let (ok, _, err) = q.cli(&["data", "-p", "rep", "pull", r, dest.to_str().expect("utf8")]);
        (ok, err, dest)
    };
    let (ok, err, _) = pull("people-s3@1", "s3-old");
    assert!(!ok && err.contains("erased by request 'DSR-PG-1'"), "{err}");
    let (ok, err, dest) = pull("people-s3@2", "s3-new");
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(dest.join("people.csv")).expect("read");
    assert!(
        !text.contains("user3@") && text.contains("user4@"),
        "{text}"
    );
    let (ok, out, _) = q.cli(&["data", "-p", "rep", "erasures", "people-s3"]);
    assert!(ok && out.contains("DSR-PG-1"), "{out}");
}
