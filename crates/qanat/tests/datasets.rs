//! Datasets through the real binary: push and pull round trips, dedup, interrupted
//! pushes, residency and bad input.

mod common;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::cases::{run_cases, Call, Case, Check};
use common::Qanat;
use qanat_store::testing::noise as data;
use serde_json::{json, Value};

/// CSV rows with varied content, `rows` long.
fn csv_rows(start: usize, rows: usize) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(rows * 40);
    for i in start..start + rows {
        let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20;
        let label = if h.is_multiple_of(7) { "fraud" } else { "ok" };
        let _ = writeln!(
            s,
            "{i},{},{}.{:02},m{},{label}",
            h % 100_000,
            h % 5000,
            h % 100,
            h % 997
        );
    }
    s
}

fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = vec![];
    for e in common::files_under(dir) {
        let rel = e.strip_prefix(dir).expect("prefix").to_path_buf();
        out.push((rel, std::fs::read(&e).expect("read")));
    }
    out.sort();
    out
}

fn stored_bytes(dir: &Path) -> u64 {
    if !dir.exists() {
        return 0;
    }
    common::files_under(dir)
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
}

/// `qanat data -p <project> <args…>` against the test server.
fn qdata(q: &Qanat, project: &str, args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["data", "-p", project];
    all.extend_from_slice(args);
    q.cli(&all)
}

fn setup(q: &Qanat, project: &str, dataset: &str) {
    q.create_project(project, &["uae-north"]);
    let (ok, _, err) = qdata(q, project, &["create", dataset]);
    assert!(ok, "{err}");
}

/// Everything the server stored (objects are named by keyed hashes, so a project's
/// chunks have no folder of their own; each test here has one project).
fn objects_dir(q: &Qanat) -> PathBuf {
    q.home().join("objects")
}

#[test]
fn push_then_pull_restores_every_byte() {
    let q = Qanat::start();
    setup(&q, "rt", "mixed");
    let src = q.dir.path().join("src");
    std::fs::create_dir_all(src.join("nested/deeper")).expect("mkdir");
    std::fs::write(src.join("empty.txt"), b"").expect("write");
    std::fs::write(src.join("small.csv"), b"a,b\n1,2\n").expect("write");
    std::fs::write(src.join("nested/deeper/big.bin"), data(9 << 20, 1)).expect("write");
    std::fs::write(
        src.join(std::ffi::OsStr::from_bytes(b"nested/caf\xe9-latin1.txt")),
        b"non-utf8 name",
    )
    .expect("write");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            src.join("small.csv"),
            std::fs::Permissions::from_mode(0o640),
        )
        .expect("chmod");
    }

    let (ok, out, err) = qdata(
        &q,
        "rt",
        &[
            "push",
            "mixed",
            src.to_str().expect("utf8"),
            "-m",
            "first",
            "--tag",
            "golden",
            "--output",
            "json",
        ],
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["version"], 1);
    assert_eq!(v["file_count"], 4);

    let dst = q.dir.path().join("dst");
    let (ok, _, err) = qdata(
        &q,
        "rt",
        &["pull", "mixed@golden", dst.to_str().expect("utf8")],
    );
    assert!(ok, "{err}");
    assert_eq!(files(&src), files(&dst), "byte-for-byte, names included");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dst.join("small.csv"))
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o640, "modes restored");
    }

    // The log, the dataset and audit entries for the push and the pull.
    let (ok, out, _) = qdata(&q, "rt", &["log", "mixed", "--output", "json"]);
    assert!(ok);
    let log: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(log[0]["tags"], json!(["golden"]));
    let (_, pushes) = q.api("GET", "/api/v1/audit?action=dataset.push", None);
    assert_eq!(pushes.as_array().expect("list").len(), 1);
    let (_, reads) = q.api("GET", "/api/v1/audit?action=dataset.read", None);
    assert_eq!(
        reads.as_array().expect("list").len(),
        4,
        "every file read is audited"
    );
}

#[test]
fn appending_one_percent_stores_only_the_new_chunks() {
    let q = Qanat::start();
    setup(&q, "dd", "tx");
    let src = q.dir.path().join("tx");
    std::fs::create_dir_all(&src).expect("mkdir");
    // ~250 MB: large enough that re-cutting the chunk at the append point (up to
    // 4 MiB) is small next to 3%; docs/benchmarks.md has the 1 GiB measurement.
    let rows = 7_000_000;
    let base = csv_rows(0, rows);
    std::fs::write(src.join("tx.csv"), &base).expect("write");
    let (ok, _, err) = qdata(&q, "dd", &["push", "tx", src.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    let before = stored_bytes(&objects_dir(&q));
    assert!(
        before as usize >= base.len(),
        "first version stores everything"
    );

    let mut appended = base.clone();
    appended.push_str(&csv_rows(rows, rows / 100));
    std::fs::write(src.join("tx.csv"), &appended).expect("write");
    let (ok, out, err) = qdata(
        &q,
        "dd",
        &[
            "push",
            "tx",
            src.to_str().expect("utf8"),
            "--output",
            "json",
        ],
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    let after = stored_bytes(&objects_dir(&q));
    let new = after - before;
    let ratio = new as f64 / appended.len() as f64;
    eprintln!(
        "{} byte CSV + 1% rows: {new} new bytes stored ({:.2}%)",
        base.len(),
        ratio * 100.0
    );
    assert!(ratio < 0.03, "stored {:.2}% new bytes", ratio * 100.0);
    assert!((v["new_bytes"].as_u64().expect("n") as f64) < 0.03 * appended.len() as f64);

    // The diff names the changed file and how much of it is new.
    let (ok, out, err) = qdata(&q, "dd", &["diff", "tx", "1", "2", "--output", "json"]);
    assert!(ok, "{err}");
    let d: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(d["added"], json!([]));
    assert_eq!(d["removed"], json!([]));
    assert_eq!(d["changed"][0]["path"], "tx.csv");
    assert_eq!(d["changed"][0]["new_size"], appended.len());
    assert!(d["changed"][0]["new_chunk_bytes"].as_u64().expect("n") < appended.len() as u64 / 30);

    // Pushing the same content again stores nothing.
    let (ok, _, err) = qdata(&q, "dd", &["push", "tx", src.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    assert_eq!(stored_bytes(&objects_dir(&q)), after);
}

#[test]
fn a_killed_push_leaves_no_version_and_the_rerun_completes() {
    let mut q = Qanat::start();
    setup(&q, "kp", "big");
    let src = q.dir.path().join("big");
    std::fs::create_dir_all(&src).expect("mkdir");
    for i in 0..6 {
        std::fs::write(src.join(format!("part-{i}.bin")), data(8 << 20, 10 + i)).expect("write");
    }
    let chunks = objects_dir(&q);
    let mut push = common::base_cmd(q.dir.path(), &q.extra_env)
        .env("QANAT_SERVER_URL", &q.url)
        .env("QANAT_TOKEN", &q.admin_token)
        .args([
            "data",
            "-p",
            "kp",
            "push",
            "big",
            src.to_str().expect("utf8"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("push");
    // Kill the server as soon as some chunks have landed.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while stored_bytes(&chunks) < (2 << 20) {
        assert!(
            std::time::Instant::now() < deadline,
            "push made no progress"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    q.kill_hard();
    let status = push.wait().expect("wait");
    assert!(!status.success(), "the interrupted push reports failure");
    let partial = stored_bytes(&chunks);

    q.spawn_server();
    let (s, v) = q.api("GET", "/api/v1/projects/kp/datasets/big/versions", None);
    assert_eq!(s, 200);
    assert_eq!(
        v.as_array().expect("list").len(),
        0,
        "no half version is visible"
    );

    let (ok, _, err) = qdata(&q, "kp", &["push", "big", src.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    let new_line = err
        .lines()
        .rev()
        .find(|l| l.contains("pushed version"))
        .expect("summary");
    assert!(new_line.contains("pushed version 1"), "{new_line}");
    let total = stored_bytes(&chunks);
    assert!(partial > 0 && total > partial);
    let dst = q.dir.path().join("back");
    let (ok, _, err) = qdata(&q, "kp", &["pull", "big@1", dst.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    assert_eq!(files(&src), files(&dst));
}

#[test]
fn residency_and_bad_input_are_refused_clearly() {
    let q = Qanat::start_with_locations(&[("frankfurt", "eu-west")]);
    // The default location is in uae-north: a dataset there in an eu-west project is
    // refused.
    q.create_project("eu", &["eu-west"]);
    setup(&q, "ok", "d");
    let viewer = q.user_with_role("vic", "ok", "viewer");
    let looped = q.dir.path().join("loop");
    std::fs::create_dir_all(&looped).expect("mkdir");
    std::os::unix::fs::symlink(&looped, looped.join("again")).expect("symlink");
    std::fs::write(looped.join("f"), b"x").expect("write");
    let looped = looped.to_str().expect("utf8");
    let odd = q.dir.path().join("odd");
    std::fs::create_dir_all(&odd).expect("mkdir");
    std::fs::write(odd.join("a\\b.csv"), b"x").expect("write");
    let odd = odd.to_str().expect("utf8");

    let fake = "0".repeat(64);
    let chunk = |id: &str| format!("/api/v1/projects/ok/datasets/d/chunks/{id}");
    let versions = "/api/v1/projects/ok/datasets/d/versions";
    let pack = "/api/v1/projects/ok/datasets/d/chunks";
    let manifest = json!({"files": [{"path": "a", "size": 5, "mode": 420, "blake3": fake, "chunks": [{"id": fake, "size": 5}]}]});
    let one = blake3::hash(b"x").to_hex().to_string();
    let lying = json!({"files": [{"path": "a", "size": 5, "mode": 420, "blake3": one, "chunks": [{"id": one, "size": 5}]}]});
    let escaping = json!({"files": [{"path": "../escape", "size": 0, "mode": 420, "blake3": fake, "chunks": []}]});
    // Packs: frames of a chunk's id, its length and its bytes.
    let frame = |id: &[u8; 32], data: &[u8]| {
        let mut f = id.to_vec();
        f.extend_from_slice(&(data.len() as u32).to_be_bytes());
        f.extend_from_slice(data);
        f
    };
    let good = *blake3::hash(b"packed").as_bytes();
    let good_hex = blake3::Hash::from_bytes(good).to_hex().to_string();
    let mut mixed = frame(&good, b"packed");
    mixed.extend(frame(&[0u8; 32], b"liar"));

    run_cases(
        &q,
        vec![
            Case::fails(
                "a dataset outside the project's regions",
                &["data", "-p", "eu", "create", "people"],
                "RESIDENCY_VIOLATION",
            ),
            Case::status("the residency refusal is audited", Call::get("/api/v1/audit?action=dataset.create&outcome=denied"), 200).checking(vec![Check::Len("", 1)]),
            Case::fails(
                "dataset regions outside the project's",
                &["data", "-p", "ok", "create", "wide", "--regions", "us-east"],
                "not allowed by project",
            ),
            Case::fails(
                "pushing a path that is not there",
                &["data", "-p", "ok", "push", "d", "/definitely/not/here"],
                "/definitely/not/here",
            ),
            Case::fails(
                "pushing a symlink loop",
                &["data", "-p", "ok", "push", "d", looped],
                "symlink loop",
            ),
            Case::fails(
                "pushing a file whose name holds a backslash",
                &["data", "-p", "ok", "push", "d", odd],
                "backslash",
            ),
            Case::status("failed pushes leave no version", Call::get(versions), 200).checking(vec![Check::Len("", 0)]),
            Case::status(
                "a chunk whose bytes do not match its id",
                Call::put(chunk(&fake)).bytes("hello"),
                400,
            ),
            Case::refused("a manifest naming chunks never uploaded", Call::post(versions).json(json!({"manifest": manifest})), 400, "not stored"),
            Case::status(
                "a chunk larger than any the chunker makes",
                Call::put(chunk(&fake)).bytes(vec![0u8; 5 << 20]),
                413,
            ),
            Case::status(
                "a chunk that matches its id",
                Call::put(chunk(&one)).bytes("x"),
                201,
            ),
            Case::refused("a manifest giving a stored chunk a size it does not have", Call::post(versions).json(json!({"manifest": lying})), 400, "1 bytes"),
            Case::status(
                "a manifest path escaping the dataset",
                Call::post(versions).json(json!({"manifest": escaping})),
                400,
            ),
            Case::refused("a manifest path with a backslash", Call::post(versions).json(json!({"manifest": {"files": [
                    {"path": "..\\..\\x", "size": 0, "mode": 420, "blake3": fake, "chunks": []}]}})), 400, "backslash in path"),
            Case::refused("a manifest path with a control character", Call::post(versions).json(json!({"manifest": {"files": [
                    {"path": "a\nb", "size": 0, "mode": 420, "blake3": fake, "chunks": []}]}})), 400, "control character in path"),
            Case::refused("a manifest file mode beyond 0o777", Call::post(versions).json(json!({"manifest": {"files": [
                    {"path": "a", "size": 0, "mode": 0o104_755, "blake3": fake, "chunks": []}]}})), 400, "beyond 0o777"),
            Case::status(
                "an unknown version",
                Call::get(format!("{versions}/7")),
                404,
            ),
            Case::status(
                "an unknown dataset",
                Call::get("/api/v1/projects/ok/datasets/nope"),
                404,
            ),
            Case::refused("a pack with a frame that does not hash to its id", Call::post(pack).bytes(mixed), 400, "do not hash"),
            Case::status("a refused pack stores none of its chunks", Call::post(format!("{pack}/missing")).json(json!({"ids": [good_hex]})), 200).checking(vec![Check::Len("/missing", 1)]),
            Case::status(
                "a cut-short pack",
                Call::post(pack).bytes(frame(&good, b"packed")[..20].to_vec()),
                400,
            ),
            Case::status("a good pack", Call::post(pack).bytes(frame(&good, b"packed")), 201).checking(vec![Check::Eq("/new_chunks", json!(1))]),
            Case::status("the same pack again stores nothing new", Call::post(pack).bytes(frame(&good, b"packed")), 201).checking(vec![Check::Eq("/new_chunks", json!(0))]),
            Case::status("an empty pack", Call::post(pack).bytes(Vec::new()), 400),
            Case::status(
                "a viewer uploading a chunk",
                Call::put(chunk(&one)).token(&viewer).bytes("x"),
                403,
            ),
            Case::status(
                "a viewer uploading a pack",
                Call::post(pack)
                    .token(&viewer)
                    .bytes(frame(&good, b"packed")),
                403,
            ),
        ],
    );
}

#[test]
fn a_tampered_chunk_fails_the_pull_and_leaves_no_file() {
    let q = Qanat::start();
    setup(&q, "tp", "d");
    let src = q.dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("f.bin"), data(3 << 20, 77)).expect("write");
    let (ok, _, err) = qdata(&q, "tp", &["push", "d", src.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    // The largest object is a chunk of f.bin (manifests and profiles are small).
    let victim = common::files_under(&objects_dir(&q))
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("a stored chunk");
    let victim = &victim;
    let mut bytes = std::fs::read(victim).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(victim, bytes).expect("tamper");
    let dst = q.dir.path().join("dst");
    let (ok, _, err) = qdata(&q, "tp", &["pull", "d", dst.to_str().expect("utf8")]);
    assert!(!ok, "a tampered chunk must fail the pull");
    assert!(
        err.contains("f.bin") || err.contains("DATA_INTEGRITY"),
        "{err}"
    );
    assert!(
        !dst.join("f.bin").exists(),
        "no file under the requested name"
    );
    assert!(
        common::files_under(&dst).is_empty(),
        "no partial file left: {:?}",
        common::files_under(&dst)
    );
}

#[test]
fn gc_frees_abandoned_chunks_and_keeps_versions() {
    let q = Qanat::start();
    setup(&q, "gcp", "d");
    let src = q.dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("keep.bin"), data(2 << 20, 5)).expect("write");
    let (ok, _, err) = qdata(&q, "gcp", &["push", "d", src.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    // An abandoned push: a chunk uploaded, never committed.
    let orphan = b"orphaned bytes nobody committed".to_vec();
    let id = blake3::hash(&orphan).to_hex().to_string();
    let resp = q
        .http()
        .raw(
            &q.admin_token,
            "PUT",
            &format!("/api/v1/projects/gcp/datasets/d/chunks/{id}"),
        )
        .body(orphan)
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 201);

    // Within the grace period nothing goes; with none, the orphan goes.
    let (ok, out, err) = qdata(&q, "gcp", &["gc", "--output", "json"]);
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(r["chunks_deleted"], 0);
    let (ok, out, err) = qdata(&q, "gcp", &["gc", "--grace", "0s", "--output", "json"]);
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(r["chunks_deleted"], 1, "{r}");
    assert_eq!(r["bytes_freed"], 31);

    let dst = q.dir.path().join("dst");
    let (ok, _, err) = qdata(&q, "gcp", &["pull", "d", dst.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    assert_eq!(files(&src), files(&dst));
    // Editors may not gc; it is audited.
    let editor = q.user_with_role("ed", "gcp", "editor");
    let (s, _) = q
        .http()
        .send(&editor, "POST", "/api/v1/projects/gcp/gc", Some(json!({})));
    assert_eq!(s, 403);
    let (_, audited) = q.api("GET", "/api/v1/audit?action=project.gc", None);
    assert_eq!(audited.as_array().expect("list").len(), 3);
}

#[test]
fn lineage_walks_versions_sources_and_producers() {
    let q = Qanat::start();
    setup(&q, "lin", "raw");
    let (ok, _, err) = qdata(&q, "lin", &["create", "clean"]);
    assert!(ok, "{err}");
    let src = q.dir.path().join("raw");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("a.csv"), b"x,y\n1,2\n").expect("write");
    let (ok, _, err) = qdata(
        &q,
        "lin",
        &[
            "push",
            "raw",
            src.to_str().expect("utf8"),
            "--tag",
            "extract",
        ],
    );
    assert!(ok, "{err}");
    std::fs::write(src.join("a.csv"), b"x,y\n1,2\n3,4\n").expect("write");
    let (ok, _, err) = qdata(&q, "lin", &["push", "raw", src.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    let (ok, _, err) = qdata(
        &q,
        "lin",
        &[
            "push",
            "clean",
            src.to_str().expect("utf8"),
            "--derived-from",
            "dataset:raw@latest",
            "--derived-from",
            "dataset:raw@extract",
        ],
    );
    assert!(ok, "{err}");

    let out = q.cli_ok("lineage -p lin dataset:clean@1 --output json");
    let g: Value = serde_json::from_str(&out).expect("json");
    let edges: Vec<(String, String, String)> = g["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| {
            (
                e["child"].as_str().unwrap_or("").into(),
                e["relation"].as_str().unwrap_or("").into(),
                e["parent"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    for want in [
        ("dataset:clean@1", "derived_from", "dataset:raw@2"),
        ("dataset:clean@1", "derived_from", "dataset:raw@1"),
        ("dataset:clean@1", "produced_by", "user:admin"),
        ("dataset:raw@2", "previous_version", "dataset:raw@1"),
    ] {
        assert!(
            edges
                .iter()
                .any(|(c, r, p)| (c.as_str(), r.as_str(), p.as_str()) == want),
            "missing {want:?} in {edges:?}"
        );
    }
    let (ok, out, _) = q.cli(&["lineage", "-p", "lin", "dataset:clean@1"]);
    assert!(
        ok && out.contains("derived_from: dataset:raw@2")
            && out.contains("previous_version: dataset:raw@1"),
        "{out}"
    );
    // An unknown source is refused and nothing is committed.
    let (ok, _, err) = qdata(
        &q,
        "lin",
        &[
            "push",
            "clean",
            src.to_str().expect("utf8"),
            "--derived-from",
            "dataset:nope@1",
        ],
    );
    assert!(!ok && err.contains("nope"), "{err}");
    let (_, v) = q.api("GET", "/api/v1/projects/lin/datasets/clean/versions", None);
    assert_eq!(v.as_array().expect("list").len(), 1);
}

fn write_parquet(path: &Path, rows: i64) {
    use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("score", DataType::Float64, true),
        Field::new("city", DataType::Utf8, true),
    ]));
    let ids: Vec<i64> = (0..rows).collect();
    let scores: Vec<Option<f64>> = (0..rows)
        .map(|i| {
            if i % 10 == 0 {
                None
            } else {
                Some(i as f64 / 2.0)
            }
        })
        .collect();
    let cities: Vec<&str> = (0..rows)
        .map(|i| if i % 3 == 0 { "Abu Dhabi" } else { "Dubai" })
        .collect();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            std::sync::Arc::new(Int64Array::from(ids)),
            std::sync::Arc::new(Float64Array::from(scores)),
            std::sync::Arc::new(StringArray::from(cities)),
        ],
    )
    .expect("batch");
    let file = std::fs::File::create(path).expect("create");
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema, None).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
}

#[test]
fn csv_and_parquet_versions_carry_schema_and_profile() {
    let q = Qanat::start();
    setup(&q, "tab", "t");
    let src = q.dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("tx.csv"), csv_rows(0, 20_000)).expect("write");
    write_parquet(&src.join("people.parquet"), 3000);
    std::fs::write(src.join("notes.txt"), b"not a table").expect("write");
    let (ok, _, err) = qdata(&q, "tab", &["push", "t", src.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    let (ok, out, err) = qdata(&q, "tab", &["show", "t@1", "--output", "json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    let profiles = v["profiles"].as_array().expect("profiles");
    assert_eq!(
        profiles.len(),
        2,
        "only the tables are profiled: {profiles:?}"
    );
    let csv = profiles
        .iter()
        .find(|p| p["path"] == "tx.csv")
        .expect("csv")["profile"]
        .clone();
    assert_eq!(csv["format"], "csv");
    assert_eq!(csv["rows"], 20_000 - 1, "the first row is the header");
    assert_eq!(csv["columns"][0]["data_type"], "Int64");
    let pq = profiles
        .iter()
        .find(|p| p["path"] == "people.parquet")
        .expect("parquet")["profile"]
        .clone();
    assert_eq!(pq["format"], "parquet");
    assert_eq!(pq["rows"], 3000);
    let score = &pq["columns"][1];
    assert_eq!(score["data_type"], "Float64");
    assert!((score["null_fraction"].as_f64().expect("f") - 0.1).abs() < 1e-9);
    let city = &pq["columns"][2];
    assert_eq!(city["top"][0]["value"], "Dubai");
    assert_eq!(city["top"][0]["count"], 2000);
    assert_eq!(city["distinct_estimate"], 2);
    // The human view shows the profile too.
    let (ok, out, _) = qdata(&q, "tab", &["show", "t@1"]);
    assert!(
        ok && out.contains("people.parquet (parquet, 3000 rows)"),
        "{out}"
    );

    // diff reports row-count and schema deltas.
    std::fs::write(src.join("tx.csv"), csv_rows(0, 25_000)).expect("write");
    let (ok, _, err) = qdata(&q, "tab", &["push", "t", src.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    let (ok, out, _) = qdata(&q, "tab", &["diff", "t", "1", "2", "--output", "json"]);
    assert!(ok);
    let d: Value = serde_json::from_str(&out).expect("json");
    let tx = d["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .find(|t| t["path"] == "tx.csv")
        .expect("tx delta")
        .clone();
    assert_eq!(tx["rows_before"], 19_999);
    assert_eq!(tx["rows_after"], 24_999);
}

#[test]
fn a_push_that_breaks_the_declared_schema_is_refused_with_a_report() {
    let q = Qanat::start();
    q.create_project("sch", &["uae-north"]);
    let schema = q.dir.path().join("schema.json");
    std::fs::write(
        &schema,
        serde_json::to_vec(&json!({"columns": [
            {"name": "id", "type": "Int64", "nullable": false},
            {"name": "amount", "type": "Float64", "nullable": false},
            {"name": "customer", "type": "Utf8", "pii": true}
        ]}))
        .expect("json"),
    )
    .expect("write");
    let (ok, _, err) = qdata(
        &q,
        "sch",
        &["create", "tx", "--schema", schema.to_str().expect("utf8")],
    );
    assert!(ok, "{err}");
    let src = q.dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(
        src.join("bad.csv"),
        "id,amount,customer\n1,10.5,ann\n2,,bob\n3,7.25,cy\nx4,1.0,dee\n",
    )
    .expect("write");
    let (ok, _, err) = qdata(&q, "sch", &["push", "tx", src.to_str().expect("utf8")]);
    assert!(!ok, "a violating push must fail");
    assert!(err.contains("SCHEMA_VIOLATION"), "{err}");
    assert!(
        err.contains("column 'amount'") && err.contains("row 1"),
        "names the column and an example row: {err}"
    );
    assert!(
        err.contains("column 'id'") && err.contains("Utf8"),
        "reports the type problem: {err}"
    );
    let (_, v) = q.api("GET", "/api/v1/projects/sch/datasets/tx/versions", None);
    assert_eq!(
        v.as_array().expect("list").len(),
        0,
        "nothing was committed"
    );
    let (_, refused) = q.api(
        "GET",
        "/api/v1/audit?action=dataset.push&outcome=failure",
        None,
    );
    assert_eq!(refused.as_array().expect("list").len(), 1);

    std::fs::write(
        src.join("bad.csv"),
        "id,amount,customer\n1,10.5,ann\n2,3.0,\n",
    )
    .expect("write");
    let (ok, _, err) = qdata(&q, "sch", &["push", "tx", src.to_str().expect("utf8")]);
    assert!(
        ok,
        "a conforming push (nullable customer may be empty) succeeds: {err}"
    );
    let (_, d) = q.api("GET", "/api/v1/projects/sch/datasets/tx", None);
    assert_eq!(d["schema"]["columns"][2]["pii"], true);
    // A schema with an unknown type is refused at creation.
    std::fs::write(&schema, br#"{"columns": [{"name": "x", "type": "Money"}]}"#).expect("write");
    let (ok, _, err) = qdata(
        &q,
        "sch",
        &["create", "bad", "--schema", schema.to_str().expect("utf8")],
    );
    assert!(!ok && err.contains("Money"), "{err}");
}

#[test]
fn copy_between_locations_checks_residency_at_the_destination() {
    let cfg_dir = tempfile::tempdir().expect("tempdir");
    let cfg = cfg_dir.path().join("qanat.toml");
    std::fs::write(
        &cfg,
        format!(
            "[storage]\ndefault_location = \"landing\"\n\n[[storage.locations]]\nname = \"landing\"\nurl = \"{}\"\nregion = \"uae-north\"\n\n[[storage.locations]]\nname = \"archive\"\nurl = \"{}\"\nregion = \"uae-south\"\n",
            cfg_dir.path().join("landing").display(),
            cfg_dir.path().join("archive").display()
        ),
    )
    .expect("config");
    let q = Qanat::start_with(vec![("QANAT_CONFIG".into(), cfg.display().to_string())]);
    q.create_project("cp", &["uae-north", "uae-south"]);
    let (ok, _, err) = qdata(&q, "cp", &["create", "raw"]);
    assert!(ok, "{err}");
    let (ok, _, err) = qdata(&q, "cp", &["create", "cold", "--location", "archive"]);
    assert!(ok, "{err}");
    let src = q.dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("f.bin"), data(3 << 20, 21)).expect("write");
    let (ok, _, err) = qdata(&q, "cp", &["push", "raw", src.to_str().expect("utf8")]);
    assert!(ok, "{err}");

    // The project stops allowing uae-south: the copy there is refused and audited.
    let (s, _) = q.api(
        "PATCH",
        "/api/v1/projects/cp",
        Some(json!({"allowed_regions": ["uae-north"]})),
    );
    assert_eq!(s, 200);
    let (ok, _, err) = qdata(&q, "cp", &["copy", "raw@1", "cold"]);
    assert!(
        !ok && err.contains("RESIDENCY_VIOLATION") && err.contains("uae-south"),
        "{err}"
    );
    let (_, denied) = q.api(
        "GET",
        "/api/v1/audit?action=dataset.copy&outcome=denied",
        None,
    );
    assert_eq!(denied.as_array().expect("list").len(), 1);
    assert_eq!(
        stored_bytes(&cfg_dir.path().join("archive")),
        0,
        "nothing reached the archive"
    );

    // Allowed again: the copy lands in the archive location, byte for byte.
    let (s, _) = q.api(
        "PATCH",
        "/api/v1/projects/cp",
        Some(json!({"allowed_regions": ["uae-north", "uae-south"]})),
    );
    assert_eq!(s, 200);
    let (ok, out, err) = qdata(
        &q,
        "cp",
        &["copy", "raw@1", "cold", "-m", "archive", "--output", "json"],
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["version"], 1);
    assert_eq!(
        v["new_bytes"],
        3 << 20,
        "every byte was new to the archive: {v}"
    );
    assert!(stored_bytes(&cfg_dir.path().join("archive")) > 3 << 20);
    // A copy into the same location stores nothing and says so.
    let (ok, _, err) = qdata(&q, "cp", &["create", "raw-copy"]);
    assert!(ok, "{err}");
    let (ok, out, err) = qdata(&q, "cp", &["copy", "raw@1", "raw-copy", "--output", "json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["new_bytes"], 0, "{v}");
    let dst = q.dir.path().join("dst");
    let (ok, _, err) = qdata(&q, "cp", &["pull", "cold", dst.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    assert_eq!(files(&src), files(&dst));
    let (ok, out, _) = q.cli(&["lineage", "-p", "cp", "dataset:cold@1"]);
    assert!(ok && out.contains("derived_from: dataset:raw@1"), "{out}");
}

/// What a new user trips on at their first push is refused before any byte is sent,
/// and leaves no version behind.
#[test]
fn pushes_that_cannot_succeed_are_refused_before_uploading() {
    let q = Qanat::start();
    q.create_project("first", &["uae-north"]);
    q.cli_ok("data -p first create d");
    let viewer = q.user_with_role("val", "first", "viewer");
    let dir = q.dir.path().join("in");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("big.bin"), data(8 << 20, 9)).expect("write");
    let empty = q.dir.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let (dir, empty) = (dir.to_str().expect("utf8"), empty.to_str().expect("utf8"));

    let (ok, _, err) = q.cli_as(&viewer, &["data", "-p", "first", "push", "d", dir]);
    assert!(!ok && err.contains("PERMISSION_DENIED"), "{err}");
    let (ok, _, err) = q.cli(&["data", "-p", "first", "push", "d", dir, "--tag", "v3"]);
    assert!(
        !ok && err.contains("would read as a version number"),
        "{err}"
    );
    let (ok, _, err) = q.cli(&["data", "-p", "first", "push", "d", empty]);
    assert!(!ok && err.contains("--allow-empty"), "{err}");
    let (s, v) = q.api("GET", "/api/v1/projects/first/datasets/d/versions", None);
    assert_eq!((s, v), (200, json!([])), "no version from refused pushes");

    // A CSV with a row of more fields than its header: refused with the line.
    let ragged = q.dir.path().join("ragged");
    std::fs::create_dir_all(&ragged).expect("mkdir");
    std::fs::write(
        ragged.join("t.csv"),
        "id,amount\n1,9.5\n\"2, quoted\",3\n3,1,200\n",
    )
    .expect("write");
    let (ok, _, err) = q.cli(&[
        "data",
        "-p",
        "first",
        "push",
        "d",
        ragged.to_str().expect("utf8"),
    ]);
    assert!(
        !ok && err.contains("t.csv: line 4 has 3 fields but the header has 2"),
        "{err}"
    );
    let (s, v) = q.api("GET", "/api/v1/projects/first/datasets/d/versions", None);
    assert_eq!((s, v), (200, json!([])), "no version from a ragged push");

    let (ok, _, err) = q.cli(&["data", "-p", "first", "push", "d", dir, "--tag", "2026-11"]);
    assert!(ok, "a date-like tag is a tag: {err}");
    let (ok, _, err) = q.cli(&["data", "-p", "first", "push", "d", empty, "--allow-empty"]);
    assert!(ok, "{err}");
}

/// `pull` into a directory with files refuses unless told; `--delete` mirrors the
/// version like `rsync --delete`; `-o json` prints what was written.
#[test]
fn pull_respects_what_is_already_in_the_directory() {
    let q = Qanat::start();
    q.create_project("pl", &["uae-north"]);
    q.cli_ok("data -p pl create d");
    let src = q.dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).expect("mkdir");
    std::fs::write(src.join("a.txt"), b"a").expect("write");
    std::fs::write(src.join("sub/b.txt"), b"b").expect("write");
    let (ok, _, err) = q.cli(&["data", "-p", "pl", "push", "d", src.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    let dst = q.dir.path().join("dst");
    std::fs::create_dir_all(dst.join("old")).expect("mkdir");
    std::fs::write(dst.join("old/stale.txt"), b"stale").expect("write");
    std::fs::write(dst.join("a.txt"), b"mine").expect("write");
    let dst_s = dst.to_str().expect("utf8");

    let (ok, _, err) = q.cli(&["data", "-p", "pl", "pull", "d", dst_s]);
    assert!(!ok && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(dst.join("a.txt")).expect("read"), b"mine");

    let (ok, out, err) = q.cli(&[
        "data", "pull", "d", dst_s, "--delete", "-p", "pl", "-o", "json",
    ]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON on stdout");
    assert_eq!(v["files"], 2);
    assert_eq!(v["deleted"], json!(["old/stale.txt"]));
    assert_eq!(std::fs::read(dst.join("a.txt")).expect("read"), b"a");
    assert!(!dst.join("old").exists(), "emptied directories go too");

    // Errors are JSON too, with the server's code.
    let (ok, _, err) = q.cli(&[
        "data", "-p", "pl", "pull", "d@9", dst_s, "--force", "-o", "json",
    ]);
    assert!(!ok);
    let e: Value = serde_json::from_str(err.trim()).expect("JSON error on stderr");
    assert_eq!(e["error_code"], "RESOURCE_DOES_NOT_EXIST", "{e}");
}

/// Deleting a dataset hides it at once and keeps it restorable; gc purges it (and the
/// chunks only it used) once the retention period is over.
#[test]
fn a_deleted_dataset_is_restorable_until_gc_purges_it_after_retention() {
    let mut q = Qanat::start();
    setup(&q, "del", "d");
    let (ok, _, err) = qdata(&q, "del", &["create", "keep"]);
    assert!(ok, "{err}");
    let src = q.dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("only-d.bin"), data(2 << 20, 31)).expect("write");
    let (ok, _, err) = qdata(&q, "del", &["push", "d", src.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    let other = q.dir.path().join("other");
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::write(other.join("k.bin"), data(1 << 20, 32)).expect("write");
    let (ok, _, err) = qdata(&q, "del", &["push", "keep", other.to_str().expect("utf8")]);
    assert!(ok, "{err}");

    // Only project admins delete.
    let editor = q.user_with_role("eddie", "del", "editor");
    let (ok, _, err) = q.cli_as(&editor, &["data", "-p", "del", "rm", "d"]);
    assert!(!ok && err.contains("PERMISSION_DENIED"), "{err}");
    let (ok, _, err) = qdata(&q, "del", &["rm", "d"]);
    assert!(ok && err.contains("qanat data restore d"), "{err}");

    // Hidden everywhere, its name still taken, listed as deleted.
    let (ok, out, _) = qdata(&q, "del", &["ls", "-o", "json"]);
    assert!(ok);
    let names: Vec<Value> = serde_json::from_str::<Vec<Value>>(&out).expect("json");
    assert_eq!(
        names.iter().map(|d| d["name"].clone()).collect::<Vec<_>>(),
        [json!("keep")]
    );
    let dst = q.dir.path().join("dst");
    let (ok, _, err) = qdata(&q, "del", &["pull", "d", dst.to_str().expect("utf8")]);
    assert!(!ok && err.contains("RESOURCE_DOES_NOT_EXIST"), "{err}");
    let (ok, _, err) = qdata(&q, "del", &["create", "d"]);
    assert!(!ok && err.contains("qanat data restore d"), "{err}");
    let (ok, out, _) = qdata(&q, "del", &["ls", "--deleted", "-o", "json"]);
    assert!(ok);
    let deleted: Vec<Value> = serde_json::from_str(&out).expect("json");
    assert_eq!(deleted.len(), 1);
    assert!(deleted[0]["deleted_at"].is_string(), "{out}");

    // Within the retention period gc keeps it and its chunks; restore brings it back.
    let before = stored_bytes(&objects_dir(&q));
    let (ok, out, err) = qdata(&q, "del", &["gc", "--grace", "0s", "-o", "json"]);
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        (r["datasets_purged"].as_u64(), r["chunks_deleted"].as_u64()),
        (Some(0), Some(0)),
        "{r}"
    );
    assert_eq!(stored_bytes(&objects_dir(&q)), before);
    let (ok, _, err) = qdata(&q, "del", &["restore", "d"]);
    assert!(ok, "{err}");
    let (ok, _, err) = qdata(&q, "del", &["pull", "d", dst.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    assert_eq!(files(&src), files(&dst));

    // Deleted again, with the retention period over: gc purges it and frees the
    // chunks only it used; the other dataset is untouched and the name is free.
    let (ok, _, err) = qdata(&q, "del", &["rm", "d"]);
    assert!(ok, "{err}");
    q.kill_hard();
    q.extra_env
        .push(("QANAT_RETENTION_DELETED_DAYS".into(), "0".into()));
    q.spawn_server();
    let (ok, out, err) = qdata(&q, "del", &["gc", "--grace", "0s", "-o", "json"]);
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(r["datasets_purged"], 1, "{r}");
    assert!(r["bytes_freed"].as_u64().expect("n") >= 2 << 20, "{r}");
    assert!(stored_bytes(&objects_dir(&q)) < before - (2 << 20));
    let (ok, out, _) = qdata(&q, "del", &["ls", "--deleted", "-o", "json"]);
    assert!(ok && out.trim() == "[]", "{out}");
    let back = q.dir.path().join("back");
    let (ok, _, err) = qdata(&q, "del", &["pull", "keep", back.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    assert_eq!(files(&other), files(&back));
    let (ok, _, err) = qdata(&q, "del", &["create", "d"]);
    assert!(ok, "{err}");
    let (_, audited) = q.api("GET", "/api/v1/audit?action=dataset.delete", None);
    assert_eq!(
        audited.as_array().expect("list").len(),
        3,
        "two deletes and the refused one"
    );
}

/// Luhn's check digit for `body`.
fn luhn_digit(body: &str) -> u32 {
    let sum: u32 = body
        .bytes()
        .rev()
        .enumerate()
        .map(|(i, b)| {
            let d = u32::from(b - b'0');
            if i % 2 == 0 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                d
            }
        })
        .sum();
    (10 - sum % 10) % 10
}

/// ISO 7064 mod 97 of an IBAN's digits-and-letters string.
fn mod97(s: &str) -> u32 {
    s.bytes().fold(0, |rem, b| {
        let n = if b.is_ascii_digit() {
            u32::from(b - b'0')
        } else {
            u32::from(b - b'A') + 10
        };
        if n >= 10 {
            (rem * 100 + n) % 97
        } else {
            (rem * 10 + n) % 97
        }
    })
}

/// Personal data in a pushed table is found by its values, each identifier with a
/// check digit only when the digit is right: for each kind, a column of valid values
/// and one of near-misses (the check digit, the top-level domain, the prefix changed).
/// Recall and false positives are printed per kind; the goal is every valid one found
/// and none of the others.
#[test]
fn personal_data_in_a_push_is_found_and_near_misses_are_not() {
    let q = Qanat::start();
    setup(&q, "pii", "people");
    let n = 300usize;
    let digits = |i: usize, salt: u64, len: usize| -> String {
        let mut h = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt;
        (0..len)
            .map(|_| {
                h = h
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                char::from(b'0' + ((h >> 33) % 10) as u8)
            })
            .collect()
    };
    // (kind, the column of valid values, the column of near-misses)
    let kinds = [
        "emirates_id",
        "iban",
        "payment_card",
        "email",
        "phone",
        "ip_address",
    ];
    // Neutral column names: found by the values alone.
    let col = |k: &str, valid: bool| {
        let j = kinds.iter().position(|x| *x == k).unwrap_or(0);
        format!("{}{j}", if valid { "good" } else { "near" })
    };
    let mut header = Vec::new();
    for k in kinds {
        header.push(col(k, true));
        header.push(col(k, false));
    }
    let mut csv = header.join(",") + "\n";
    for i in 0..n {
        // Emirates ID, digits only (read as a number column): 784, a birth year, seven
        // digits and the Luhn digit; the near-miss has another last digit.
        let body = format!("784{}{}", 1950 + i % 55, digits(i, 1, 7));
        let d = luhn_digit(&body);
        let eid = format!("{body}{d}");
        let eid_bad = format!("{body}{}", (d + 1) % 10);
        // A UAE IBAN: AE, check digits, a 3-digit bank code, a 16-digit account.
        let bban = format!("{}{}", digits(i, 2, 3), digits(i, 3, 16));
        let check = 98 - mod97(&format!("{bban}AE00"));
        let iban = format!("AE{check:02}{bban}");
        let iban_bad = format!(
            "AE{:02}{bban}",
            (check + 1) % 97 + if check == 96 { 2 } else { 0 }
        );
        // A Visa card number, spaced in fours; the near-miss has another Luhn digit.
        let card_body = format!("4{}", digits(i, 4, 14));
        let c = luhn_digit(&card_body);
        let spaced = |s: String| {
            s.as_bytes()
                .chunks(4)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let card = spaced(format!("{card_body}{c}"));
        let card_bad = spaced(format!("{card_body}{}", (c + 1) % 10));
        let email = format!("user{i}@example{}.ae", i % 7);
        let email_bad = format!("user{i}@example{}", i % 7);
        let phone = format!("+971 5{} {} {}", i % 10, digits(i, 5, 3), digits(i, 6, 4));
        let phone_bad = format!("5{}{}{}", i % 10, digits(i, 5, 3), digits(i, 6, 4));
        let ip = format!("10.{}.{}.{}", i % 256, (i * 7) % 256, (i * 13) % 250 + 1);
        let ip_bad = format!("10.{}.{}.{}", i % 256, (i * 7) % 256, 256 + i % 200);
        csv.push_str(
            &[
                eid, eid_bad, iban, iban_bad, card, card_bad, email, email_bad, phone, phone_bad,
                ip, ip_bad,
            ]
            .join(","),
        );
        csv.push('\n');
    }
    let src = q.dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("people.csv"), csv).expect("write");
    let (ok, _, err) = qdata(&q, "pii", &["push", "people", src.to_str().expect("utf8")]);
    assert!(ok, "{err}");
    let (ok, out, err) = qdata(&q, "pii", &["show", "people@1", "--output", "json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    let columns = v["profiles"][0]["profile"]["columns"]
        .as_array()
        .expect("columns")
        .clone();
    let matched = |column: &str, kind: &str| -> u64 {
        columns
            .iter()
            .find(|c| c["name"] == column)
            .and_then(|c| c["pii"].as_array())
            .and_then(|f| f.iter().find(|f| f["kind"] == kind))
            .and_then(|f| f["matched"].as_u64())
            .unwrap_or(0)
    };
    let mut problems = Vec::new();
    for k in kinds {
        let found = matched(&col(k, true), k);
        let false_positives = matched(&col(k, false), k);
        eprintln!(
            "{k:>13}: recall {found}/{n} ({:.1}%), near-misses flagged {false_positives}/{n}",
            100.0 * found as f64 / n as f64
        );
        if found != n as u64 || false_positives != 0 {
            problems.push(k);
        }
        // The kind is reported on the column of valid values only.
        let reported = |column: String| {
            columns
                .iter()
                .find(|c| c["name"] == column.as_str())
                .and_then(|c| c["pii"].as_array())
                .is_some_and(|f| f.iter().any(|f| f["kind"] == k))
        };
        assert!(reported(col(k, true)), "{k} not reported: {columns:?}");
        assert!(
            !reported(col(k, false)),
            "{k} reported on near-misses: {columns:?}"
        );
    }
    assert!(problems.is_empty(), "kinds short of the goal: {problems:?}");

    // The table output names the kind and the share.
    let (ok, out, _) = qdata(&q, "pii", &["show", "people@1", "--output", "wide"]);
    assert!(ok && out.contains("email 100%"), "{out}");
}

/// Every line of a pulled CSV as its fields (no quoting in these files).
fn csv_fields(path: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .expect("read")
        .lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

#[test]
fn personal_data_is_pseudonymized_for_readers_without_the_pii_permission() {
    let q = Qanat::start();
    setup(&q, "crm", "customers");
    let vera = q.user_with_role("vera", "crm", "viewer");
    let max = q.user_with_role("max", "crm", "maintainer");
    // Emails are found by their values; customer_ref is personal data nobody could
    // find (the dataset declares it later).
    let mut csv = String::from("id,email,customer_ref,segment\n");
    for i in 0..60 {
        csv.push_str(&format!(
            "{i},person{}@example.ae,CR{:05},{}\n",
            i % 30,
            i * 37 % 1000,
            if i % 2 == 0 { "gold" } else { "blue" }
        ));
    }
    let src = q.dir.path().join("crm-src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("customers.csv"), &csv).expect("write");
    let (ok, _, err) = qdata(
        &q,
        "crm",
        &["push", "customers", src.to_str().expect("utf8")],
    );
    assert!(ok, "{err}");
    assert!(
        err.contains("does not declare") && err.contains("column 'email' (email"),
        "the push is accepted and flagged: {err}"
    );

    // A viewer's pull: emails become keyed pseudonyms (the same email, the same
    // pseudonym), everything else is as pushed.
    let pull_as = |token: &str, dir: &str| -> (PathBuf, String) {
        let out = q.dir.path().join(dir);
        let (ok, _, err) = q.cli_as(
            token,
            &[
                "data",
                "-p",
                "crm",
                "pull",
                "customers@1",
                out.to_str().expect("utf8"),
            ],
        );
        assert!(ok, "{err}");
        (out.join("customers.csv"), err)
    };
    let (file, err) = pull_as(&vera, "vera-1");
    assert!(
        err.contains("pseudonymized") && err.contains("customers.csv [email]"),
        "{err}"
    );
    let rows = csv_fields(&file);
    let pushed: Vec<Vec<String>> = csv
        .lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), pushed.len());
    assert_eq!(rows[0], pushed[0], "the header is kept");
    for (got, want) in rows.iter().zip(&pushed).skip(1) {
        assert!(got[1].starts_with("pii:") && got[1].len() == 36, "{got:?}");
        assert_eq!((&got[0], &got[2], &got[3]), (&want[0], &want[2], &want[3]));
    }
    assert_eq!(rows[1][1], rows[31][1], "person0 twice: one pseudonym");
    assert_ne!(rows[1][1], rows[2][1]);
    assert!(!std::fs::read_to_string(&file)
        .expect("read")
        .contains("@example.ae"));
    // Its profile shows no value of the column either.
    let (ok, out, err) = q.cli_as(
        &vera,
        &[
            "data",
            "-p",
            "crm",
            "show",
            "customers@1",
            "--output",
            "json",
        ],
    );
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    let email = v["profiles"][0]["profile"]["columns"]
        .as_array()
        .expect("columns")
        .iter()
        .find(|c| c["name"] == "email")
        .expect("email column")
        .clone();
    assert!(
        email["min"].is_null() && email["max"].is_null() && email["top"] == json!([]),
        "{email}"
    );
    assert!(!out.contains("@example.ae"), "{out}");
    assert_eq!(v["pseudonymized"][0]["columns"], json!(["email"]));
    assert_eq!(v["undeclared_pii"][0]["column"], "email");

    // A maintainer has no PII permission by role: pseudonyms too, until a project
    // admin grants it; then the bytes as pushed, and the read is audited.
    let (_, err) = pull_as(&max, "max-1");
    assert!(err.contains("pseudonymized"), "{err}");
    let (ok, _, err) = q.cli_as(&max, &["projects", "grant-pii", "crm", "max"]);
    assert!(!ok && err.contains("admin"), "only admins grant it: {err}");
    q.cli_ok("projects grant-pii crm max");
    let readers = q.cli_ok("projects pii-readers crm --output json");
    assert!(readers.contains("\"max\""), "{readers}");
    let (file, err) = pull_as(&max, "max-2");
    assert!(!err.contains("pseudonymized"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).expect("read"), csv);
    let (s, audit) = q.api("GET", "/api/v1/audit?actor=max&limit=50", None);
    assert_eq!(s, 200, "{audit}");
    let clear_reads: Vec<&Value> = audit["entries"]
        .as_array()
        .or(audit.as_array())
        .expect("entries")
        .iter()
        .filter(|e| {
            e["action"] == "dataset.read"
                && e["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("PII read in clear") && d.contains("[email]"))
        })
        .collect();
    assert_eq!(clear_reads.len(), 1, "{audit}");
    let (s, audit) = q.api("GET", "/api/v1/audit?action=pii.grant&limit=5", None);
    assert_eq!(s, 200);
    assert!(audit.to_string().contains("pii.grant"), "{audit}");
    q.cli_ok("projects revoke-pii crm max");
    let (_, err) = pull_as(&max, "max-3");
    assert!(err.contains("pseudonymized"), "revoked: {err}");

    // Declared columns are protected whether or not anything finds them, and are no
    // longer flagged.
    let (ok, _, err) = q.cli_as(
        &vera,
        &[
            "data",
            "-p",
            "crm",
            "declare-pii",
            "customers",
            "customer_ref",
        ],
    );
    assert!(
        !ok && err.contains("editor"),
        "viewers do not declare: {err}"
    );
    let (ok, out, err) = qdata(
        &q,
        "crm",
        &["declare-pii", "customers", "customer_ref", "email"],
    );
    assert!(ok && out.contains("customer_ref,email"), "{out}{err}");
    let (file, _) = pull_as(&vera, "vera-2");
    let rows = csv_fields(&file);
    assert!(rows[1][2].starts_with("pii:"), "{:?}", rows[1]);
    assert_eq!(rows[1][3], "gold");
    let (ok, out, _) = q.cli_as(&vera, &["data", "-p", "crm", "show", "customers@1"]);
    assert!(ok && !out.contains("undeclared personal data"), "{out}");

    // A job's inputs are what its submitter would pull: an editor without the
    // permission gets pseudonyms, recorded in the job's events and the audit log.
    let eddie = q.user_with_role("eddie", "crm", "editor");
    let out = q.shared();
    std::fs::create_dir_all(&out).expect("shared");
    let (s, job) = q.http().send(
        &eddie,
        "POST",
        "/api/v1/projects/crm/jobs",
        Some(json!({
            "name": "reads-customers",
            "inputs": ["dataset:customers@1"],
            "command": format!("cp $QANAT_INPUTS/customers/customers.csv {}/job-input.csv", out.display()),
        })),
    );
    assert_eq!(s, 201, "{job}");
    let id = job["job_id"].as_str().expect("id").to_string();
    let j = q.job_finished("crm", &id, 60);
    assert_eq!(j["state"], "succeeded", "{j:#}");
    let rows = csv_fields(&out.join("job-input.csv"));
    assert!(
        rows[1][1].starts_with("pii:") && rows[1][2].starts_with("pii:"),
        "{:?}",
        rows[1]
    );
    assert_eq!((rows[1][0].as_str(), rows[1][3].as_str()), ("0", "gold"));
    let said = j["events"].as_array().expect("events").iter().any(|e| {
        e["event"] == "input-pii"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("pseudonymized (eddie does not hold"))
    });
    assert!(said, "{j:#}");

    // A project that requires declaration refuses a push with undeclared personal
    // data, says what to declare, and stores no version.
    let (ok, out, err) = q.cli(&["projects", "require-pii-declared", "crm", "true"]);
    assert!(ok && out.contains("must be declared"), "{out}{err}");
    let mut phones = String::from("id,email,contact\n");
    for i in 0..40 {
        phones.push_str(&format!(
            "{i},p{i}@example.ae,+971 50 {:03} {:04}\n",
            i * 7 % 1000,
            i * 131 % 10_000
        ));
    }
    std::fs::write(src.join("customers.csv"), &phones).expect("write");
    let (ok, _, err) = qdata(
        &q,
        "crm",
        &["push", "customers", src.to_str().expect("utf8")],
    );
    assert!(!ok, "refused");
    assert!(
        err.contains("requires personal data to be declared")
            && err.contains("column 'contact' (phone")
            && err.contains("qanat data declare-pii customers contact")
            && err.contains("nothing was stored"),
        "{err}"
    );
    let (_, log, _) = qdata(&q, "crm", &["log", "customers", "--output", "json"]);
    let log: Value = serde_json::from_str(&log).expect("json");
    assert_eq!(log.as_array().map(Vec::len), Some(1), "{log}");
    q.cli_ok("data -p crm declare-pii customers contact");
    let (ok, _, err) = qdata(
        &q,
        "crm",
        &["push", "customers", src.to_str().expect("utf8")],
    );
    assert!(ok && !err.contains("does not declare"), "{err}");
    // Undeclaring shows a column in clear to everyone: not an editor's call.
    let (ok, _, err) = q.cli_as(
        &eddie,
        &[
            "data",
            "-p",
            "crm",
            "declare-pii",
            "customers",
            "--replace",
            "email",
        ],
    );
    assert!(!ok && err.contains("undeclaring 'customer_ref'"), "{err}");
    // A copy keeps its source's declaration: the undetectable column stays hidden.
    q.cli_ok("data -p crm create customers-copy");
    q.cli_ok("data -p crm copy customers@1 customers-copy");
    let out = q.dir.path().join("vera-copy");
    let (ok, _, err) = q.cli_as(
        &vera,
        &[
            "data",
            "-p",
            "crm",
            "pull",
            "customers-copy@1",
            out.to_str().expect("utf8"),
        ],
    );
    assert!(ok, "{err}");
    let rows = csv_fields(&out.join("customers.csv"));
    assert!(rows[1][2].starts_with("pii:"), "{:?}", rows[1]);

    // Inference logs kept a week: gc enforces it and its audit entry says what went.
    let out = q.cli_ok("projects set-retention crm --inference-log-days 7");
    assert!(out.contains("7 days"), "{out}");
    let (ok, out, err) = q.cli(&["gc", "-p", "crm", "--output", "json"]);
    assert!(
        ok && out.contains("\"inference_log_files_deleted\": 0"),
        "{out}{err}"
    );
    let (_, gcs) = q.api("GET", "/api/v1/audit?action=project.gc&limit=5", None);
    assert!(
        gcs.to_string()
            .contains("inference log file(s) past retention deleted"),
        "{gcs}"
    );

    // A master key rotation (installation-wide) shows in the project's report; one
    // refused (a maintainer is no global admin) is in the audit log, not among them.
    let (s, refused) = q
        .http()
        .send(&max, "POST", "/api/v1/admin/keys/rotate", None);
    assert_eq!(s, 403, "{refused}");
    let (s, rotated) = q.api("POST", "/api/v1/admin/keys/rotate", None);
    assert_eq!(s, 200, "{rotated}");

    // The compliance report of the project: its figures are the data's.
    let (ok, out, err) = q.cli(&["compliance", "report", "-p", "crm", "--output", "json"]);
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(&out).expect("json");
    let local = r["locations"]
        .as_array()
        .expect("locations")
        .iter()
        .find(|l| l["name"] == "local")
        .expect("the local location")
        .clone();
    assert_eq!(local["region"], "uae-north");
    let crm = &local["projects"][0];
    assert_eq!(
        (crm["project"].as_str(), crm["region_allowed"].as_bool()),
        (Some("crm"), Some(true))
    );
    let mut chunk_bytes = 0;
    for d in ["customers", "customers-copy"] {
        let (_, log, _) = qdata(&q, "crm", &["log", d, "--output", "json"]);
        let log: Value = serde_json::from_str(&log).expect("json");
        chunk_bytes += log
            .as_array()
            .expect("versions")
            .iter()
            .map(|v| v["new_bytes"].as_u64().unwrap_or(0))
            .sum::<u64>();
    }
    let bytes = crm["bytes"].as_u64().expect("bytes");
    assert!(
        bytes >= chunk_bytes && bytes < chunk_bytes + (1 << 20),
        "{bytes} bytes stored against {chunk_bytes} bytes of chunks (and small manifests, profiles, logs): {local}"
    );
    let held: Vec<(String, String, bool)> = r["personal_data"]
        .as_array()
        .expect("personal data")
        .iter()
        .filter(|h| h["name"] == "customers")
        .flat_map(|h| h["columns"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            (
                c["column"].as_str().unwrap_or("").to_string(),
                c["kinds"].to_string(),
                c["declared"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert!(
        held.contains(&("email".into(), "[\"email\"]".into(), true)),
        "{held:?}"
    );
    assert!(
        held.contains(&("contact".into(), "[\"phone\"]".into(), true)),
        "{held:?}"
    );
    // The copy holds version 1's columns, customer_ref among them, declared.
    let copy = r["personal_data"]
        .as_array()
        .expect("personal data")
        .iter()
        .find(|h| h["name"] == "customers-copy")
        .expect("the copy")
        .to_string();
    assert!(
        copy.contains("\"column\":\"customer_ref\",\"declared\":true"),
        "{copy}"
    );
    let access = r["pii_access"]["entries"].to_string();
    assert!(
        access.contains("pii.grant")
            && access.contains("pii.revoke")
            && access.contains("PII read in clear"),
        "{access}"
    );
    assert_eq!(r["projects"][0]["require_pii_declared"], true);
    assert_eq!(r["projects"][0]["inference_log_days"], 7);
    assert!(
        r["retention"]["gc_runs"]["count"].as_u64() >= Some(1),
        "{}",
        r["retention"]
    );
    assert_eq!(r["audit"]["verification"]["ok"], true);
    assert_eq!(r["keys"]["active_key_id"], rotated["new_key_id"]);
    assert!(
        r["keys"]["key_ids"]
            .as_array()
            .is_some_and(|ids| ids.contains(&rotated["new_key_id"])),
        "{}",
        r["keys"]
    );
    assert_eq!(r["keys"]["rotations"]["count"], 1, "{}", r["keys"]);
    assert_eq!(
        r["keys"]["rotations"]["entries"][0]["action"],
        "keys.rotate"
    );
    let checkpoint = &r["audit"]["checkpoint"];
    assert!(
        checkpoint["seq"].as_i64() > Some(0)
            && checkpoint["hash"].as_str().is_some_and(|h| h.len() == 64)
            && checkpoint["mac"].as_str().is_some_and(|m| !m.is_empty()),
        "the report carries a signed checkpoint of the audit chain's head: {checkpoint}"
    );
    // A page to hand over; a viewer may not have the report.
    let page = q.dir.path().join("report.html");
    let (ok, _, err) = q.cli(&[
        "compliance",
        "report",
        "-p",
        "crm",
        "--html",
        page.to_str().expect("utf8"),
    ]);
    assert!(ok, "{err}");
    let html = std::fs::read_to_string(&page).expect("page");
    assert!(
        html.contains("Compliance report") && html.contains("customer_ref"),
        "{html}"
    );
    let (ok, _, err) = q.cli_as(&vera, &["compliance", "report", "-p", "crm"]);
    assert!(!ok && err.contains("admin"), "{err}");
    // A period that is not one is refused with what to write instead.
    for (args, says) in [
        (vec!["--since", "yesterday"], "is not an RFC 3339 time"),
        (
            vec![
                "--since",
                "2026-12-01T00:00:00Z",
                "--until",
                "2026-11-01T00:00:00Z",
            ],
            "since must be before until",
        ),
    ] {
        let mut all = vec!["compliance", "report", "-p", "crm"];
        all.extend(args);
        let (ok, _, err) = q.cli(&all);
        assert!(!ok && err.contains("400") && err.contains(says), "{err}");
    }
    let (s, v) = q.api("GET", "/api/v1/compliance/report?format=pdf", None);
    assert!(
        s == 400 && v.to_string().contains("not one of json, html"),
        "{s} {v}"
    );
}

#[test]
fn erasing_a_data_subject_removes_their_rows_and_destroys_the_old_versions_chunks() {
    let q = Qanat::start();
    setup(&q, "dsr", "customers");
    let max = q.user_with_role("max", "dsr", "maintainer");
    let subject = "layla.subject@example.ae";
    // About 3 MiB of customers, so the table is several chunks; the subject's two rows
    // sit near the start.
    let mut customers = String::from("id,email,phone,segment\n");
    for i in 0..60_000 {
        let email = if i == 100 || i == 101 {
            subject.to_string()
        } else {
            format!("person{i}@example.ae")
        };
        customers.push_str(&format!("{i},{email},+9715{:08},seg{}\n", i, i % 7));
    }
    let src = q.dir.path().join("dsr-src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("customers.csv"), &customers).expect("write");
    let (ok, _, err) = qdata(
        &q,
        "dsr",
        &["push", "customers", src.to_str().expect("utf8")],
    );
    assert!(ok, "{err}");
    // Version 2 appends rows and adds an orders table (the subject's phone, no email
    // column) and a file that is not a table.
    customers.push_str("60000,late@example.ae,+971500000001,seg1\n");
    std::fs::write(src.join("customers.csv"), &customers).expect("write");
    std::fs::write(
        src.join("orders.csv"),
        "order,phone,total\n1,+971500000100,10\n2,+971500000007,20\n3, +971500000100 ,30\n",
    )
    .expect("write");
    std::fs::write(src.join("readme.txt"), "customers of the demo\n").expect("write");
    let (ok, _, err) = qdata(
        &q,
        "dsr",
        &["push", "customers", src.to_str().expect("utf8")],
    );
    assert!(ok, "{err}");

    let erase = |token: &str, extra: &[&str]| {
        let mut args = vec![
            "data",
            "-p",
            "dsr",
            "erase",
            "customers",
            "--match",
            "email=layla.subject@example.ae",
            "--match",
            "phone=+971500000100",
        ];
        args.extend_from_slice(extra);
        q.cli_as(token, &args)
    };
    // Only project admins erase; bad requests are refused with what to fix.
    let (ok, _, err) = erase(&max, &["--request-id", "DSR-1"]);
    assert!(
        !ok && (err.contains("403") || err.contains("admin")),
        "{err}"
    );
    let (ok, _, err) = erase(&q.admin_token, &["--request-id", "DSR 1"]);
    assert!(!ok && err.contains("request id"), "{err}");
    let (ok, _, err) = qdata(
        &q,
        "dsr",
        &[
            "erase",
            "customers",
            "--request-id",
            "DSR-0",
            "--match",
            "emial=x@y.ae",
        ],
    );
    assert!(
        !ok && err.contains("'emial'") && err.contains("nothing was erased"),
        "{err}"
    );
    let (ok, _, err) = qdata(
        &q,
        "dsr",
        &[
            "erase",
            "customers",
            "--request-id",
            "DSR-0",
            "--match",
            "email= ",
        ],
    );
    assert!(!ok && err.contains("empty"), "{err}");
    let (ok, out, _) = qdata(&q, "dsr", &["log", "customers"]);
    assert!(ok && !out.contains("erasure"), "nothing was written: {out}");

    // The erasure.
    let (ok, out, err) = erase(
        &q.admin_token,
        &[
            "--request-id",
            "DSR-1",
            "--reason",
            "subject request",
            "--output",
            "json",
        ],
    );
    assert!(ok, "{out}{err}");
    let e: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(e["request_id"], "DSR-1");
    assert_eq!(e["new_version"], 3, "{e}");
    assert_eq!(e["rows_removed"], 4, "two customers rows, two orders: {e}");
    assert!(e["completed_at"].is_string(), "{e}");
    assert!(
        !out.contains(subject) && !out.contains("500000100"),
        "no value in the record: {out}"
    );
    let files = e["files"].as_array().expect("files");
    let held: Vec<(i64, &str, u64)> = files
        .iter()
        .map(|f| {
            (
                f["version"].as_i64().expect("v"),
                f["path"].as_str().expect("path"),
                f["rows"].as_u64().expect("rows"),
            )
        })
        .collect();
    assert!(held.contains(&(1, "customers.csv", 2)), "{held:?}");
    assert!(held.contains(&(2, "customers.csv", 2)), "{held:?}");
    assert!(held.contains(&(2, "orders.csv", 2)), "{held:?}");
    // Only the chunks around the rows went: the table is several chunks.
    let v1 = files
        .iter()
        .find(|f| f["version"] == 1)
        .expect("version 1's file");
    let shredded = v1["chunks_shredded"].as_u64().expect("n");
    let (ok, out, err) = qdata(&q, "dsr", &["show", "customers@1", "--output", "json"]);
    assert!(ok, "{err}");
    let shown: Value = serde_json::from_str(&out).expect("json");
    let chunks = shown["manifest"]["files"][0]["chunks"]
        .as_array()
        .expect("chunks")
        .len() as u64;
    assert!(shredded >= 1 && shredded < chunks, "{shredded} of {chunks}");
    // Version 1's profile quotes nothing of the erased file any more.
    assert!(!out.contains(subject), "{out}");
    assert!(out.contains("erased by request DSR-1"), "{out}");

    // The new version: every other row as it was, byte for byte.
    let pull = |r: &str, dir: &str| {
        let dest = q.dir.path().join(dir);
        let (ok, _, err) = qdata(&q, "dsr", &["pull", r, dest.to_str().expect("utf8")]);
        (ok, err, dest)
    };
    let (ok, err, dest) = pull("customers@3", "v3");
    assert!(ok, "{err}");
    let want: String = customers
        .lines()
        .filter(|l| !l.contains(subject))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        std::fs::read_to_string(dest.join("customers.csv")).expect("read"),
        want
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("orders.csv")).expect("read"),
        "order,phone,total\n2,+971500000007,20\n"
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("readme.txt")).expect("read"),
        "customers of the demo\n"
    );
    // The old versions' files that held the rows cannot be read, and say why.
    for old in ["customers@1", "customers@2"] {
        let (ok, err, _) = pull(old, &format!("old-{old}"));
        assert!(!ok, "{old} must not be readable");
        assert!(
            err.contains("erased by request 'DSR-1'") && err.contains("version 3 holds"),
            "{err}"
        );
    }
    let (s, body) = q.api(
        "GET",
        "/api/v1/projects/dsr/datasets/customers/versions/1/files/0",
        None,
    );
    assert_eq!(s, 410, "{body}");
    assert_eq!(body["error_code"], "DATA_ERASED", "{body}");

    // Lineage records the erasure: the new version comes from it, it from the old.
    let (ok, out, err) = q.cli(&["lineage", "-p", "dsr", "dataset:customers@3"]);
    assert!(ok, "{err}");
    assert!(out.contains("erasure:DSR-1"), "{out}");
    let (ok, out, err) = q.cli(&["lineage", "-p", "dsr", "erasure:DSR-1"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("dataset:customers@1") && out.contains("dataset:customers@2"),
        "{out}"
    );
    // The record, the audit entry (no values) and a repeat refused.
    let (ok, out, _) = qdata(&q, "dsr", &["erasures", "customers"]);
    assert!(
        ok && out.contains("DSR-1") && out.contains("email"),
        "{out}"
    );
    let (s, audit) = q.api("GET", "/api/v1/audit?action=dataset.erase&limit=5", None);
    assert_eq!(s, 200);
    let text = audit.to_string();
    assert!(
        text.contains("erasure DSR-1") && text.contains("4 row(s) removed"),
        "{text}"
    );
    assert!(
        !text.contains(subject) && !text.contains("500000100"),
        "{text}"
    );
    let (ok, _, err) = erase(&q.admin_token, &["--request-id", "DSR-1"]);
    assert!(!ok && err.contains("already exists"), "{err}");
    // The UI: the dataset's page lists the erasure, the old version's says why its
    // profile is gone.
    let session = common::ui_login(&q, &q.admin_token);
    let page = |path: &str| {
        let resp = common::browser()
            .get(format!("{}{path}", q.url))
            .header("cookie", &session)
            .send()
            .expect("page");
        assert_eq!(resp.status(), 200, "{path}");
        resp.text().expect("html")
    };
    let html = page("/ui/p/dsr/datasets/customers");
    assert!(
        html.contains("Erasures of data subjects") && html.contains("DSR-1"),
        "{html}"
    );
    assert!(!html.contains(subject), "{html}");
    let html = page("/ui/p/dsr/datasets/customers/versions/1");
    assert!(html.contains("erased by request DSR-1"), "{html}");
    assert!(!html.contains(subject), "{html}");

    // A second subject, erased from the same dataset: the files the first erasure
    // broke cannot be scanned and do not stop it; the new version reads, byte for
    // byte, and the version before it does not.
    let (ok, out, err) = qdata(
        &q,
        "dsr",
        &[
            "erase",
            "customers",
            "--request-id",
            "DSR-2",
            "--match",
            "email=person5@example.ae",
            "--output",
            "json",
        ],
    );
    assert!(ok, "{out}{err}");
    let e2: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(e2["new_version"], 4, "{e2}");
    assert_eq!(e2["rows_removed"], 1, "{e2}");
    let (ok, err, dest) = pull("customers@4", "v4");
    assert!(ok, "{err}");
    let want4: String = want
        .lines()
        .filter(|l| !l.contains("person5@example.ae"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        std::fs::read_to_string(dest.join("customers.csv")).expect("read"),
        want4
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("orders.csv")).expect("read"),
        "order,phone,total\n2,+971500000007,20\n",
        "a file without the rows keeps its chunks"
    );
    let (ok, err, _) = pull("customers@3", "v3-after-dsr2");
    assert!(!ok && err.contains("'DSR-2'"), "{err}");
    // A malformed body is refused without quoting the values it holds.
    let (s, body) = q.api(
        "POST",
        "/api/v1/projects/dsr/datasets/customers/erasures",
        Some(json!({"request_id": "DSR-3", "match": [{"column": "phone", "values": [971_501_234_567_i64]}]})),
    );
    assert_eq!(s, 400, "{body}");
    assert!(!body.to_string().contains("971501234567"), "{body}");
    // A gc afterwards is undisturbed by the missing chunks.
    let (ok, _, err) = qdata(&q, "dsr", &["gc", "--grace", "0s"]);
    assert!(ok, "{err}");
    let (ok, err, _) = pull("customers@4", "v4-after-gc");
    assert!(ok, "{err}");

    // Old versions kept 30 days (tagged and latest ones always); the report shows the
    // setting and the erasure, without the values.
    let (ok, out, err) = q.cli(&[
        "projects",
        "set-retention",
        "dsr",
        "--dataset-version-days",
        "30",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("30 days (latest and tagged: always)"), "{out}");
    let (ok, _, err) = q.cli(&[
        "projects",
        "set-retention",
        "dsr",
        "--dataset-version-days",
        "40000",
    ]);
    assert!(!ok && err.contains("at most 36500"), "{err}");
    let (ok, out, err) = q.cli(&["compliance", "report", "-p", "dsr", "--output", "json"]);
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(r["projects"][0]["dataset_version_days"], 30, "{r}");
    let erasures = r["retention"]["erasures"].as_array().expect("erasures");
    assert_eq!(erasures.len(), 2, "newest first: {r}");
    assert_eq!(erasures[1]["project"], "dsr", "{r}");
    assert_eq!(erasures[1]["erasure"]["request_id"], "DSR-1", "{r}");
    assert_eq!(erasures[1]["erasure"]["rows_removed"], 4, "{r}");
    assert_eq!(erasures[0]["erasure"]["request_id"], "DSR-2", "{r}");
    assert!(!out.contains(subject), "the report holds no erased value");
}
