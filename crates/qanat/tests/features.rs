//! The feature store through the binary: a feature repo planned and applied with the
//! CLI, versions, RBAC and audit, and bad input refused with what to fix.

mod common;

use arrow_array::types::{Float32Type, Float64Type, Int64Type};
use common::cases::{run_cases, Call, Case, Check};
use common::Qanat;
use qanat_features::RepoFiles as _;
use serde_json::json;

const REPO: &str = include_str!("fixtures/features/driver_stats.yaml");

fn write_repo(dir: &std::path::Path, text: &str) {
    std::fs::create_dir_all(dir).expect("repo dir");
    std::fs::write(dir.join("drivers.yaml"), text).expect("write repo");
}

#[test]
fn a_feature_repo_is_planned_and_applied_with_versions_and_viewers_only_plan() {
    let q = Qanat::start();
    let repo = q.home().join("repo");
    let r = repo.to_str().expect("utf-8 path");
    write_repo(&repo, REPO);

    let (ok, out, err) = q.cli(&["features", "-p", "default", "apply", r]);
    assert!(ok, "{err}");
    assert!(
        out.contains("+ feature_view driver_stats: version 1"),
        "{out}"
    );
    assert!(out.contains("applied: registry at revision 1"), "{out}");

    write_repo(&repo, &REPO.replace("ttl: 1d", "ttl: 2h"));
    let viewer = q.user_with_role("vera", "default", "viewer");
    let (ok, out, err) = q.cli_as(&viewer, &["features", "-p", "default", "plan", r]);
    assert!(ok, "{err}");
    assert!(
        out.contains("~ feature_view driver_stats: version 1 → 2"),
        "{out}"
    );
    assert!(out.contains("ttl: 1day → 2h"), "{out}");
    let (ok, _, err) = q.cli_as(&viewer, &["features", "-p", "default", "apply", r]);
    assert!(!ok && err.contains("PERMISSION_DENIED"), "{err}");

    let (ok, out, err) = q.cli(&["features", "-p", "default", "apply", r]);
    assert!(ok, "{err}");
    assert!(out.contains("revision 2"), "{out}");
    let (ok, out, err) = q.cli(&["features", "-p", "default", "ls"]);
    assert!(ok && out.contains("driver_stats@2"), "{out}{err}");
    let (ok, out, err) = q.cli(&["features", "-p", "default", "show", "driver_stats@1"]);
    assert!(
        ok && out.contains("ttl: 1day") && out.contains("newest is 2"),
        "{out}{err}"
    );

    let (ok, out, err) = q.cli(&["audit", "tail", "--action", "feature.apply", "-n", "10"]);
    assert!(ok && out.contains("feature_registry@2"), "{out}{err}");
}

#[test]
fn bad_feature_repos_and_requests_are_refused_with_what_to_fix() {
    let q = Qanat::start();
    let home = q.home();
    let empty = home.join("empty");
    std::fs::create_dir_all(&empty).expect("dir");
    let broken = home.join("broken");
    write_repo(
        &broken,
        "kind: entity\nname: driver\njoin_keys: [{name: driver_id, type: integer}]\n",
    );
    let typo = home.join("typo");
    write_repo(&typo, &REPO.replace("ttl: 1d", "tll: 1d"));
    let dangling = home.join("dangling");
    write_repo(
        &dangling,
        &REPO.replace("source: stats_src", "source: nowhere"),
    );
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    let (empty, broken, typo, dangling) =
        (path(&empty), path(&broken), path(&typo), path(&dangling));
    let mut repo = qanat_features::FeatureRepo::default();
    repo.add_yaml("repo.yaml", REPO).expect("parses");
    let repo = serde_json::to_value(&repo).expect("json");
    let plan = "/api/v1/projects/default/features/plan";
    let apply = "/api/v1/projects/default/features/apply";

    run_cases(
        &q,
        vec![
            Case::fails(
                "a folder with no definitions",
                &["features", "-p", "default", "plan", &empty],
                "holds no .yaml files",
            ),
            Case::fails(
                "an unknown type names the file and the accepted words",
                &["features", "-p", "default", "plan", &broken],
                "drivers.yaml, document 1 (entity)",
            ),
            Case::fails(
                "a misspelt field is refused, not ignored",
                &["features", "-p", "default", "apply", &typo],
                "unknown field `tll`",
            ),
            Case::fails(
                "a view on an undeclared source",
                &["features", "-p", "default", "apply", &dangling],
                "source 'nowhere' is not declared in the repo",
            ),
            Case::status(
                "nothing of a refused repo was recorded",
                Call::get("/api/v1/projects/default/features/registry"),
                200,
            )
            .checking(vec![Check::Len("/objects", 0)]),
            Case::coded(
                "a repo with problems, over HTTP",
                Call::post(plan).json(json!({"repo": {"feature_views": [{
                    "name": "v", "entities": ["e"], "source": "s", "schema": []}]}})),
                400,
                "INVALID_FEATURE_REPO",
            )
            .saying("entity 'e' is not declared"),
            Case::refused(
                "a wrong type in the body",
                Call::post(plan).json(json!({"repo": {"entities": [{
                    "name": "e", "join_keys": [{"name": "k", "type": "decimal"}]}]}})),
                400,
                "decimal",
            ),
            Case::refused(
                "an apply from a stale plan",
                Call::post(apply).json(json!({"repo": repo, "expected_revision": 7})),
                409,
                "plan again",
            ),
            Case::refused(
                "an unknown kind of object",
                Call::get("/api/v1/projects/default/features/objects/table/x"),
                400,
                "entity, source, feature_view or feature_service",
            ),
            Case::coded(
                "a missing object",
                Call::get("/api/v1/projects/default/features/objects/feature_view/nope"),
                404,
                "RESOURCE_DOES_NOT_EXIST",
            )
            .saying("feature view 'nope'"),
        ],
    );

    // A repo whose file source has no file yet: reading it says which file is
    // missing; online reads refuse unknown features and keys of the wrong type.
    let good = home.join("good");
    write_repo(&good, REPO);
    q.cli_ok(&format!("features -p default apply {}", path(&good)));
    let entities = home.join("entities.csv");
    std::fs::write(
        &entities,
        "driver_id,event_timestamp\n1001,2026-01-01T12:00:00Z\n",
    )
    .expect("entities");
    let entities = path(&entities);
    let online = "/get-online-features";
    run_cases(
        &q,
        vec![
            Case::fails(
                "materializing a file source whose file is missing",
                &["features", "-p", "default", "materialize"],
                "source stats_src: the file 'features/driver_stats.parquet' is missing",
            ),
            Case::fails(
                "a training set of a file source whose file is missing",
                &[
                    "features",
                    "-p",
                    "default",
                    "training-set",
                    "--entities",
                    &entities,
                    "--features",
                    "driver_stats:trips",
                    "--to",
                    "t",
                ],
                "the file 'features/driver_stats.parquet' is missing",
            ),
            Case::refused(
                "an online read of a feature the view does not have",
                Call::post(online).json(
                    json!({"features": ["driver_stats:nope"], "entities": {"driver_id": [1001]}}),
                ),
                400,
                "nope",
            ),
            Case::coded(
                "an online read of a view that does not exist",
                Call::post(online)
                    .json(json!({"features": ["ghost:trips"], "entities": {"driver_id": [1001]}})),
                404,
                "RESOURCE_DOES_NOT_EXIST",
            )
            .saying("ghost"),
            Case::refused(
                "an online read with a join key of the wrong type",
                Call::post(online).json(
                    json!({"features": ["driver_stats:trips"], "entities": {"driver_id": ["abc"]}}),
                ),
                400,
                "driver_id",
            ),
            Case::refused(
                "an online read without the view's join key",
                Call::post(online).json(
                    json!({"features": ["driver_stats:trips"], "entities": {"rider_id": [1]}}),
                ),
                400,
                "driver_id",
            ),
        ],
    );
}

const STATS: &str = "driver_id,event_timestamp,created,conv_rate,trips
1001,2026-01-01T10:00:00Z,2026-01-01T10:05:00Z,0.5,10
1001,2026-01-01T12:00:00Z,2026-01-01T12:05:00Z,0.6,12
1001,2026-01-01T12:00:00Z,2026-01-01T13:00:00Z,0.65,13
1002,2026-01-01T09:00:00Z,2026-01-01T09:01:00Z,0.9,3
1003,2026-01-02T09:00:00Z,2026-01-02T09:01:00Z,0.1,1
";

const RIDES: &str = "driver_id,event_timestamp,label
1001,2026-01-01T11:00:00Z,0
1001,2026-01-01T12:30:00Z,1
1002,2026-01-01T12:00:00Z,1
1003,2026-01-01T12:00:00Z,0
1004,2026-01-01T12:00:00Z,0
";

const DATASET_REPO: &str = include_str!("fixtures/features/dataset_source.yaml");

/// Pushes `stats` as dataset driver-stats and applies `repo` (a feature repo's YAML);
/// returns the repo's folder.
fn load_driver_stats(q: &Qanat, stats: &str, repo: &str) -> std::path::PathBuf {
    let home = q.home();
    std::fs::create_dir_all(home.join("stats")).expect("dir");
    std::fs::write(home.join("stats/driver_stats.csv"), stats).expect("stats");
    let dir = home.join("repo");
    write_repo(&dir, repo);
    let s = |p: std::path::PathBuf| p.to_str().expect("utf-8").to_string();
    for args in [
        vec!["data", "-p", "default", "create", "driver-stats"],
        vec![
            "data",
            "-p",
            "default",
            "push",
            "driver-stats",
            &s(home.join("stats")),
            "-m",
            "stats",
        ],
        vec!["features", "-p", "default", "apply", &s(dir.clone())],
    ] {
        let (ok, _, err) = q.cli(&args);
        assert!(ok, "{args:?}: {err}");
    }
    dir
}

/// `qanat features training-set` in `default` (as `token`'s user, else the admin) of
/// `entities` with `features` into dataset `to`, which must succeed; what it prints.
fn training_set(
    q: &Qanat,
    token: Option<&str>,
    entities: &str,
    features: &str,
    to: &str,
) -> serde_json::Value {
    let args = [
        "features",
        "-p",
        "default",
        "-o",
        "json",
        "training-set",
        "--entities",
        entities,
        "--features",
        features,
        "--to",
        to,
    ];
    let (ok, out, err) = match token {
        Some(t) => q.cli_as(t, &args),
        None => q.cli(&args),
    };
    assert!(ok, "training-set {features} into {to}: {err}");
    serde_json::from_str(&out).expect("json")
}

/// Writes `entities` (a CSV of entity rows) to a file, builds a training set of
/// `features` from it into dataset `to` as the admin, and reads its columns back: the
/// set's summary and its table.
fn training_rows(
    q: &Qanat,
    entities: &str,
    features: &str,
    to: &str,
) -> (serde_json::Value, arrow_array::RecordBatch) {
    let path = q.home().join(format!("{to}-entities.csv"));
    std::fs::write(&path, entities).expect("entities");
    let set = training_set(q, None, path.to_str().expect("utf-8"), features, to);
    let table = pulled(q, &q.admin_token, set["reference"].as_str().expect("ref"));
    (set, table)
}

/// Column `name` of `t`, which must be a primitive array of `T`.
fn primitive<'a, T: arrow_array::ArrowPrimitiveType>(
    t: &'a arrow_array::RecordBatch,
    name: &str,
) -> &'a arrow_array::PrimitiveArray<T> {
    use arrow_array::cast::AsArray;
    t.column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"))
        .as_primitive::<T>()
}

/// The columns of a training set version, read back through `qanat data pull`.
fn pulled(q: &Qanat, token: &str, reference: &str) -> arrow_array::RecordBatch {
    let (dataset, version) = reference
        .trim_start_matches("dataset:")
        .split_once('@')
        .expect("a versioned reference");
    let dir = q.home().join(format!(
        "pulled-{dataset}-{version}-{}",
        &token[token.len().saturating_sub(6)..]
    ));
    let d = dir.to_str().expect("utf-8");
    let (ok, _, err) = q.cli_as(
        token,
        &[
            "data",
            "-p",
            "default",
            "pull",
            &format!("{dataset}@{version}"),
            d,
        ],
    );
    assert!(ok, "{err}");
    let file =
        std::fs::File::open(dir.join("training_set.parquet")).expect("the training set file");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("reader");
    let batches: Vec<_> = reader.map(|b| b.expect("batch")).collect();
    assert_eq!(batches.len(), 1, "one batch for a small training set");
    batches[0].clone()
}

#[test]
fn a_training_set_is_a_dataset_version_joined_point_in_time_with_lineage_and_pii_hidden() {
    use arrow_array::cast::AsArray;
    use arrow_array::Array;

    let q = Qanat::start();
    let home = q.home();
    std::fs::write(home.join("rides.csv"), RIDES).expect("rides");
    load_driver_stats(&q, STATS, DATASET_REPO);
    let s = |p: std::path::PathBuf| p.to_str().expect("utf-8").to_string();

    // An editor builds it from a local file of entity rows: the PII feature comes out
    // pseudonymized.
    let editor = q.user_with_role("eddie", "default", "editor");
    let rides = s(home.join("rides.csv"));
    let set = training_set(&q, Some(&editor), &rides, "driver_stats", "rides-train");
    assert_eq!(set["reference"], "dataset:rides-train@1");
    assert_eq!(set["rows"], 5);
    assert_eq!(set["pseudonymized"], json!(["trips"]));
    let t = pulled(&q, &editor, "dataset:rides-train@1");
    let conv: Vec<Option<f32>> = primitive::<Float32Type>(&t, "conv_rate").iter().collect();
    // 1001 at 11:00 → the 10:00 row; at 12:30 → the 12:00 tie won by the later write;
    // 1002's only row is 3 h old (ttl 2 h); 1003's is in the future; 1004 has none.
    assert_eq!(conv, vec![Some(0.5), Some(0.65), None, None, None]);
    let trips = t.column_by_name("trips").expect("trips").as_string::<i32>();
    assert!(
        trips.value(0).starts_with("pii:") && trips.value(0) != trips.value(1),
        "{trips:?}"
    );
    assert!(trips.is_null(2));

    // A maintainer sees it in clear, as a new version.
    let out = q.cli_ok("features -p default -o json training-set --entities dataset:rides-train-entities@1 --features driver_stats:trips --full-feature-names --to rides-train");
    let set: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(set["reference"], "dataset:rides-train@2");
    let t = pulled(&q, &q.admin_token, "dataset:rides-train@2");
    let trips: Vec<Option<i64>> = primitive::<Int64Type>(&t, "driver_stats__trips")
        .iter()
        .collect();
    assert_eq!(trips, vec![Some(10), Some(13), None, None, None]);
    // The set declares its PII feature columns, so the editor's pull of the
    // maintainer's clear version comes pseudonymized all the same.
    let (s, d) = q.api("GET", "/api/v1/projects/default/datasets/rides-train", None);
    assert_eq!(s, 200, "{d}");
    assert_eq!(
        d["pii_columns"],
        json!(["trips", "driver_stats__trips"]),
        "{d}"
    );
    let t = pulled(&q, &editor, "dataset:rides-train@2");
    let trips = t
        .column_by_name("driver_stats__trips")
        .expect("trips")
        .as_string::<i32>();
    assert!(
        trips.value(0).starts_with("pii:") && trips.is_null(2),
        "{trips:?}"
    );

    let out = q.cli_ok("lineage -p default dataset:rides-train@2");
    for want in [
        "features_from: feature_view:driver_stats@1",
        "derived_from: dataset:driver-stats@1",
        "derived_from: dataset:rides-train-entities@1",
    ] {
        assert!(out.contains(want), "{want} missing from:\n{out}");
    }
}

const ONLINE_REPO: &str = include_str!("fixtures/features/online.yaml");

/// Every online store here: redb, and Redis when `QANAT_TEST_REDIS_URL` is set (CI).
fn online_stores() -> Vec<Vec<(String, String)>> {
    let mut out = vec![vec![]];
    if let Some(url) = qanat_store::testing::service_var("QANAT_TEST_REDIS_URL") {
        out.push(vec![("QANAT_FEATURES_ONLINE_STORE".to_string(), url)]);
    }
    out
}

fn column(resp: &serde_json::Value, name: &str) -> serde_json::Value {
    let names = resp["metadata"]["feature_names"].as_array().expect("names");
    let i = names
        .iter()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("{name} in {names:?}"));
    resp["results"][i].clone()
}

#[test]
fn materialized_and_pushed_features_are_served_online_with_ttl_and_pii_enforced() {
    for env in online_stores() {
        let backend = if env.is_empty() { "redb" } else { "redis" };
        let q = Qanat::start_with(env);
        load_driver_stats(&q, STATS, ONLINE_REPO);
        // A window that ends before 1001's second row: the newest row up to then.
        let out = q.cli_ok(
            "features -p default -o json materialize --end 2026-01-01T11:00:00Z --run-id first",
        );
        let done: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(done[0]["written"], 2, "{backend}: {done}");
        // The run's progress stays readable: every view done, and how far.
        let out = q.cli_ok("features -p default -o json materializations first");
        let run: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(run[0]["state"], "succeeded", "{backend}: {run}");
        let view = run[0]["views"]
            .as_array()
            .expect("views")
            .iter()
            .find(|v| v["feature_view"] == "driver_stats")
            .cloned()
            .expect("driver_stats in the run");
        assert_eq!(view["state"], "done", "{backend}: {run}");
        assert_eq!(
            (&view["entities"], &view["written"]),
            (&json!(2), &json!(2)),
            "{backend}: {run}"
        );
        assert_eq!(view["materialized_until"], "2026-01-01T11:00:00Z");
        // Run ids are unique per project; an unknown one is a clear error.
        let (ok, _, err) = q.cli(&[
            "features",
            "-p",
            "default",
            "materialize",
            "--run-id",
            "first",
        ]);
        assert!(!ok && err.contains("already exists"), "{backend}: {err}");
        let (ok, _, err) = q.cli(&["features", "-p", "default", "materializations", "nope"]);
        assert!(!ok && err.contains("nope"), "{backend}: {err}");

        let h = q.http();
        let read = |token: &str, path: &str| {
            let (st, body) = h.send(
                token,
                "POST",
                path,
                Some(json!({"entities": {"driver_id": [1001, 1002, 1004]},
                            "features": ["driver_stats:conv_rate", "driver_stats:trips"]})),
            );
            assert_eq!(st, 200, "{backend}: {body}");
            body
        };
        let r = read(&q.admin_token, "/get-online-features");
        assert_eq!(
            r["metadata"]["feature_names"],
            json!(["driver_id", "conv_rate", "trips"]),
            "{backend}"
        );
        assert_eq!(column(&r, "driver_id")["values"], json!([1001, 1002, 1004]));
        let conv = column(&r, "conv_rate");
        assert_eq!(conv["values"], json!([0.5, 0.9, null]), "{backend}");
        assert_eq!(
            conv["statuses"],
            json!(["PRESENT", "PRESENT", "NOT_FOUND"]),
            "{backend}"
        );
        assert_eq!(
            conv["event_timestamps"][0], "2026-01-01T10:00:00Z",
            "{backend}"
        );

        // Incremental: from where the last window ended; the tie at 12:00 goes to the
        // later write.
        q.cli_ok("features -p default materialize --views driver_stats");
        let viewer = q.user_with_role("vic", "default", "viewer");
        let r = read(&viewer, "/feast/default/get-online-features");
        assert_eq!(
            column(&r, "conv_rate")["values"][0],
            json!(0.65),
            "{backend}"
        );
        // A viewer gets the PII feature pseudonymized; the admin in clear.
        let trips = column(&r, "trips")["values"][0].clone();
        assert!(
            trips.as_str().is_some_and(|t| t.starts_with("pii:")),
            "{backend}: {trips}"
        );
        let r = read(&q.admin_token, "/get-online-features");
        assert_eq!(column(&r, "trips")["values"][0], json!(13), "{backend}");

        // Push: good rows written, bad rows listed with their reasons.
        let now = chrono_now();
        let (st, body) = q.api(
            "POST",
            "/push",
            Some(
                json!({"push_source_name": "rides_push", "to": "online", "df": {
                "driver_id": [1001, 1002, 1003],
                "event_timestamp": [now, now, "2026-01-01T00:00:00Z"],
                "speed": [50.5, "fast", 400],
                "city": ["dxb", "auh", "nyc"]}}),
            ),
        );
        assert_eq!(st, 200, "{backend}: {body}");
        assert_eq!(body["accepted"], 1);
        assert_eq!(
            body["rejected"][0]["reasons"],
            json!(["speed = \"fast\" is not a float64"])
        );
        assert_eq!(body["rejected"][1]["row"], 2);
        let (st, body) = q.api("POST", "/get-online-features", Some(json!({"entities": {"driver_id": [1001, 1002]},
                        "features": ["ride_stats:speed", "ride_stats:city"], "full_feature_names": true})));
        assert_eq!(st, 200, "{backend}: {body}");
        let speed = column(&body, "ride_stats__speed");
        assert_eq!(speed["values"], json!([50.5, null]), "{backend}");
        assert_eq!(
            speed["statuses"],
            json!(["PRESENT", "NOT_FOUND"]),
            "{backend}"
        );

        // An old pushed value is outside the view's 1 h ttl: not served.
        let (st, body) = q.api("POST", "/push", Some(json!({"push_source_name": "rides_push", "df": {
                "driver_id": [1002], "event_timestamp": ["2026-01-01 08:00:00"], "speed": [10.0], "city": [null]}})));
        assert_eq!(st, 200, "{backend}: {body}");
        let (_, body) = q.api(
            "POST",
            "/get-online-features",
            Some(json!({"entities": {"driver_id": [1002]}, "features": ["ride_stats:speed"]})),
        );
        assert_eq!(
            column(&body, "speed")["statuses"],
            json!(["OUTSIDE_MAX_AGE"]),
            "{backend}"
        );
        assert_eq!(column(&body, "speed")["values"], json!([null]), "{backend}");

        let (ok, out, err) = q.cli(&["features", "-p", "default", "ls"]);
        assert!(ok && out.contains("ride_stats@1"), "{backend}: {out}{err}");
        let (ok, out, err) = q.cli(&[
            "audit",
            "tail",
            "--action",
            "feature.online.read",
            "-n",
            "5",
        ]);
        assert!(
            ok && out.contains("feature.online.read"),
            "{backend}: {out}{err}"
        );
    }
}

#[test]
fn online_feature_writes_are_refused_outside_the_projects_regions() {
    // The online store is in the default location's region (uae-north) unless
    // configured; a second location makes eu-west a region a project may allow.
    let q = Qanat::start_with_locations(&[("eu", "eu-west")]);
    load_driver_stats(&q, STATS, ONLINE_REPO);
    let out = q.cli_ok("features -p default -o json materialize --end 2026-01-01T11:00:00Z");
    let done: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(done[0]["written"], 2, "{done}");
    q.cli_ok("projects set-regions default --regions eu-west");

    // Materializing would write the project's rows into uae-north: refused, naming
    // the store, its region and what the project allows; nothing is written.
    let (ok, out, err) = q.cli(&["features", "-p", "default", "materialize"]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("online store") && err.contains("uae-north") && err.contains("eu-west"),
        "{err}"
    );
    let push = |to: &str| {
        q.api(
            "POST",
            "/push",
            Some(json!({"push_source_name": "rides_push", "to": to, "df": {
                "driver_id": [1001], "event_timestamp": [chrono_now()],
                "speed": [50.5], "city": ["dxb"]}})),
        )
    };
    let (st, body) = push("online");
    assert_eq!(st, 403, "{body}");
    assert_eq!(body["error_code"], "RESIDENCY_VIOLATION", "{body}");
    let (st, body) = q.api(
        "POST",
        "/get-online-features",
        Some(json!({"entities": {"driver_id": [1001]}, "features": ["ride_stats:speed"]})),
    );
    assert_eq!(st, 200, "{body}");
    assert_eq!(
        column(&body, "speed")["statuses"],
        json!(["NOT_FOUND"]),
        "{body}"
    );
    // What was materialized before the change is still served (reads move no bytes
    // into a region).
    let (st, body) = q.api(
        "POST",
        "/get-online-features",
        Some(json!({"entities": {"driver_id": [1001]}, "features": ["driver_stats:conv_rate"]})),
    );
    assert_eq!(st, 200, "{body}");
    assert_eq!(column(&body, "conv_rate")["values"], json!([0.5]), "{body}");
    // Both refusals are in the audit log, where the compliance report finds them.
    let (st, audit) = q.api("GET", "/api/v1/audit?action=feature.push", None);
    assert_eq!(st, 200, "{audit}");
    assert!(
        audit.to_string().contains("data residency"),
        "the refused push is audited with its reason: {audit}"
    );
    let (_, audit) = q.api("GET", "/api/v1/audit?action=feature.materialize", None);
    assert!(audit.to_string().contains("data residency"), "{audit}");

    // Allowing the online store's region again lets the same push through.
    q.cli_ok("projects set-regions default --regions eu-west,uae-north");
    let (st, body) = push("online");
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["accepted"], 1, "{body}");
}

/// A store configured in another region (a Redis in a second data centre) is checked
/// against that region, not the default location's.
#[test]
fn a_configured_online_region_is_the_one_checked() {
    let q = Qanat::start_with_locations_env(
        &[("eu", "eu-west")],
        vec![("QANAT_FEATURES_ONLINE_REGION".into(), "eu-west".into())],
    );
    load_driver_stats(&q, STATS, ONLINE_REPO);
    // default allows only uae-north: the online store in eu-west is out of bounds.
    let (ok, _, err) = q.cli(&["features", "-p", "default", "materialize"]);
    assert!(!ok && err.contains("'eu-west'"), "{err}");
    q.cli_ok("projects set-regions default --regions uae-north,eu-west");
    let out = q.cli_ok("features -p default -o json materialize --end 2026-01-01T11:00:00Z");
    let done: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(done[0]["written"], 2, "{done}");
}

fn chrono_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

const ARRIVING_REPO: &str = include_str!("fixtures/features/arriving.yaml");

/// Publishes JSON messages to a NATS subject (the stream sources' producer side).
fn publish(url: &str, subject: &str, messages: &[serde_json::Value]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = async_nats::connect(url).await.expect("NATS");
        let js = async_nats::jetstream::new(client);
        for m in messages {
            js.publish(subject.to_string(), m.to_string().into())
                .await
                .expect("publish")
                .await
                .expect("stored");
        }
    });
}

#[test]
fn pushed_and_streamed_rows_reach_the_online_and_offline_stores_and_join_into_training_sets() {
    let nats = qanat_store::testing::service_var("QANAT_TEST_NATS_URL");
    for env in online_stores() {
        let backend = if env.is_empty() { "redb" } else { "redis" };
        let mut env = env;
        if let Some(url) = &nats {
            env.push(("QANAT_FEATURES_NATS_URL".into(), url.clone()));
        }
        let q = Qanat::start_with(env);
        let home = q.home();
        // A subject of this run's own, so runs never read each other's messages.
        let subject = format!(
            "qanat.test.rides.{}",
            home.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("x")
                .replace('.', "_")
        );
        let subject = format!("{subject}.{}", std::process::id());
        let repo = home.join("repo");
        write_repo(&repo, &ARRIVING_REPO.replace("SUBJECT", &subject));
        let s = |p: std::path::PathBuf| p.to_str().expect("utf-8").to_string();
        let (ok, _, err) = q.cli(&["features", "-p", "default", "apply", &s(repo)]);
        assert!(ok, "{backend}: {err}");
        let h = q.http();

        // Push to both stores: the good rows go online and into the offline store, the
        // bad one is listed.
        let (st, body) = q.api("POST", "/push", Some(json!({"push_source_name": "rides_push", "to": "online_and_offline", "df": {
                "driver_id": [1, 1, 2],
                "event_timestamp": ["2026-01-01T10:00:00Z", "2026-01-02T10:00:00Z", "2026-01-01T10:00:00Z"],
                "speed": [10.0, 20.0, -5.0]}})));
        assert_eq!(st, 200, "{backend}: {body}");
        assert_eq!(body["accepted"], 2, "{backend}: {body}");
        assert_eq!(
            body["offline_files"], 2,
            "{backend}: one file per event date: {body}"
        );
        assert_eq!(body["rejected"][0]["row"], 2, "{backend}: {body}");
        // Offline only: not served online.
        let (st, body) = q.api(
            "POST",
            "/push",
            Some(
                json!({"push_source_name": "rides_push", "to": "offline", "df": {
                "driver_id": [3], "event_timestamp": ["2026-01-01T12:00:00Z"], "speed": [30.0]}}),
            ),
        );
        assert_eq!(st, 200, "{backend}: {body}");
        assert_eq!(body["written"], 0, "{backend}: {body}");
        let (st, body) = q.api(
            "POST",
            "/get-online-features",
            Some(json!({"entities": {"driver_id": [1, 3]}, "features": ["pushed_rides:speed"]})),
        );
        assert_eq!(st, 200, "{backend}: {body}");
        assert_eq!(
            column(&body, "speed")["values"],
            json!([20.0, null]),
            "{backend}"
        );

        // A training set reads the pushed rows back from the offline store, point in
        // time: driver 1 at noon on Jan 1 sees 10.0 (20.0 is from the future).
        let (_, table) = training_rows(
            &q,
            "driver_id,event_timestamp\n1,2026-01-01T12:00:00Z\n1,2026-01-03T00:00:00Z\n3,2026-01-01T13:00:00Z\n",
            "pushed_rides:speed",
            "pushed-train",
        );
        let speed: Vec<Option<f64>> = primitive::<Float64Type>(&table, "speed").iter().collect();
        assert_eq!(speed, vec![Some(10.0), Some(20.0), Some(30.0)], "{backend}");

        let Some(url) = &nats else {
            continue;
        };
        // The server attaches a consumer (making the subject's stream) within seconds
        // of the apply.
        let streams = |q: &Qanat| -> serde_json::Value {
            let out = q.cli_ok("features -p default -o json streams");
            serde_json::from_str(&out).expect("json")
        };
        let mut attached = serde_json::Value::Null;
        for _ in 0..100 {
            attached = streams(&q);
            if attached[0]["connected"] == true {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        assert_eq!(attached[0]["connected"], true, "{backend}: {attached}");
        // Streaming: rows published on the subject are checked, written online and
        // appended offline; a bad message is counted, not retried forever.
        let now = chrono_now();
        publish(
            url,
            &subject,
            &[
                json!({"driver_id": 7, "event_timestamp": now, "speed": 42.5, "city": "dxb"}),
                json!([{"driver_id": 8, "event_timestamp": now, "speed": 12.0, "city": "auh"},
                       {"driver_id": 9, "event_timestamp": now, "speed": 12.0, "city": "nyc"}]),
                json!("not a row"),
            ],
        );
        let mut served = serde_json::Value::Null;
        for _ in 0..150 {
            let (st, body) = q.api(
                "POST",
                "/get-online-features",
                Some(json!({"entities": {"driver_id": [7, 8, 9]},
                            "features": ["streamed_rides:speed", "streamed_rides:city"]})),
            );
            assert_eq!(st, 200, "{backend}: {body}");
            served = body;
            if column(&served, "speed")["statuses"] == json!(["PRESENT", "PRESENT", "NOT_FOUND"]) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        assert_eq!(
            column(&served, "speed")["values"],
            json!([42.5, 12.0, null]),
            "{backend}: {served}"
        );
        let mut status = serde_json::Value::Null;
        for _ in 0..50 {
            status = streams(&q);
            if status[0]["rejected"] == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        assert_eq!(status[0]["source"], "rides_stream", "{backend}: {status}");
        assert_eq!(status[0]["ingested"], 2, "{backend}: {status}");
        assert_eq!(status[0]["rejected"], 2, "{backend}: {status}");
        let metrics = h
            .raw(&q.admin_token, "GET", "/metrics")
            .send()
            .expect("metrics")
            .text()
            .expect("text");
        assert!(
            metrics.contains("qanat_feature_stream_pending_messages{")
                && metrics.contains("qanat_feature_freshness_lag_seconds{project=\"default\",feature_view=\"streamed_rides\"}"),
            "{backend}: {metrics}"
        );
        let (ok, out, err) = q.cli(&[
            "audit",
            "tail",
            "--action",
            "feature.stream.ingest",
            "-n",
            "5",
        ]);
        assert!(
            ok && out.contains("service:features-stream"),
            "{backend}: {out}{err}"
        );
        // The streamed rows are in the offline store too.
        let entities = format!("driver_id,event_timestamp\n7,{now}\n");
        let (_, table) = training_rows(&q, &entities, "streamed_rides:speed", "streamed-train");
        let speed = primitive::<Float64Type>(&table, "speed");
        assert_eq!(speed.value(0), 42.5, "{backend}");
        drop(q);
        delete_stream_of(url, &subject);
    }
}

/// Removes the JetStream stream the server made for a test's subject.
fn delete_stream_of(url: &str, subject: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = async_nats::connect(url).await.expect("NATS");
        let js = async_nats::jetstream::new(client);
        if let Ok(name) = js.stream_by_subject(subject.to_string()).await {
            let _ = js.delete_stream(name).await;
        }
    });
}

const SQL_REPO: &str = include_str!("fixtures/features/sql.yaml");

#[test]
fn sql_sources_and_view_transformations_feed_training_sets_and_materialization() {
    let q = Qanat::start();
    let home = q.home();
    std::fs::write(home.join("rides.csv"), RIDES).expect("rides");
    let repo = load_driver_stats(&q, STATS, SQL_REPO);
    let s = |p: std::path::PathBuf| p.to_str().expect("utf-8").to_string();
    let (set, table) = training_rows(&q, RIDES, "busy:trips,scaled:conv_pct", "sql-train");
    assert!(
        set["sources"]
            .as_array()
            .is_some_and(|a| a.contains(&json!("dataset:driver-stats@1"))),
        "lineage reaches the dataset under the sql source: {set}"
    );
    let trips: Vec<Option<i64>> = primitive::<Int64Type>(&table, "trips").iter().collect();
    // 1002's only row has 3 trips: filtered out by the sql source.
    assert_eq!(trips, vec![Some(10), Some(13), None, None, None]);
    let pct: Vec<Option<f64>> = primitive::<Float64Type>(&table, "conv_pct")
        .iter()
        .collect();
    let want = [Some(50.0), Some(65.0), Some(90.0), None, None];
    assert_eq!(pct.len(), want.len());
    for (got, want) in pct.iter().zip(want) {
        match (got, want) {
            (Some(g), Some(w)) => assert!((g - w).abs() < 1e-9, "{pct:?}"),
            (g, w) => assert_eq!(*g, w, "{pct:?}"),
        }
    }

    // Materialization runs the same SQL: the transformed value is served online.
    q.cli_ok("features -p default materialize");
    let (st, body) = q.api(
        "POST",
        "/get-online-features",
        Some(json!({"entities": {"driver_id": [1001, 1002]},
                    "features": ["busy:trips", "scaled:conv_pct"]})),
    );
    assert_eq!(st, 200, "{body}");
    assert_eq!(
        column(&body, "trips")["values"],
        json!([13, null]),
        "{body}"
    );
    assert_eq!(
        column(&body, "trips")["statuses"],
        json!(["PRESENT", "NOT_FOUND"]),
        "{body}"
    );
    assert_eq!(
        column(&body, "conv_pct")["values"][1],
        json!(90.0),
        "{body}"
    );

    // A transformation that does not run is the caller's error, naming the view.
    write_repo(
        &repo,
        &SQL_REPO.replace("conv_rate * 100 AS conv_pct", "conv_rat * 100 AS conv_pct"),
    );
    let (ok, _, err) = q.cli(&["features", "-p", "default", "apply", &s(repo)]);
    assert!(ok, "{err}");
    let (ok, _, err) = q.cli(&[
        "features",
        "-p",
        "default",
        "training-set",
        "--entities",
        &s(home.join("rides.csv")),
        "--features",
        "scaled:conv_pct",
        "--to",
        "sql-train",
    ]);
    assert!(!ok && err.contains("feature view scaled: sql:"), "{err}");
}

#[test]
fn a_training_set_larger_than_the_join_memory_is_joined_on_disk_and_keeps_its_rows() {
    // 1 MiB of join memory, and about 2 MiB of input rows: the partitioned join runs.
    let q = Qanat::start_with(vec![("QANAT_FEATURES_JOIN_MEMORY".into(), "1MiB".into())]);
    let home = q.home();
    let mut stats = String::from("driver_id,event_timestamp,created,conv_rate,trips\n");
    for k in 0..20_000 {
        // The value known at noon is the key itself; the one after noon is a trap.
        stats.push_str(&format!(
            "{k},2026-01-01T10:00:00Z,2026-01-01T10:00:00Z,0.5,{k}\n{k},2026-01-01T13:00:00Z,2026-01-01T13:00:00Z,0.5,-1\n"
        ));
    }
    let mut rides = String::from("driver_id,event_timestamp\n");
    for i in 0..30_000 {
        rides.push_str(&format!("{},2026-01-01T12:00:00Z\n", (i * 7) % 25_000));
    }
    std::fs::write(home.join("rides.csv"), rides).expect("rides");
    load_driver_stats(&q, &stats, &DATASET_REPO.replace("pii: true", "pii: false"));
    let s = |p: std::path::PathBuf| p.to_str().expect("utf-8").to_string();
    let set = training_set(
        &q,
        None,
        &s(home.join("rides.csv")),
        "driver_stats:trips",
        "big-train",
    );
    assert_eq!(set["rows"], 30_000, "{set}");
    let dir = home.join("pulled-big");
    let (ok, _, err) = q.cli(&[
        "data",
        "-p",
        "default",
        "pull",
        set["reference"]
            .as_str()
            .expect("ref")
            .trim_start_matches("dataset:"),
        &s(dir.clone()),
    ]);
    assert!(ok, "{err}");
    let file = std::fs::File::open(dir.join("training_set.parquet")).expect("file");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("parquet")
        .build()
        .expect("reader");
    let mut position = 0i64;
    for batch in reader {
        let batch = batch.expect("batch");
        let ids = primitive::<Int64Type>(&batch, "driver_id");
        let trips = primitive::<Int64Type>(&batch, "trips");
        for i in 0..batch.num_rows() {
            // The entity rows' order is kept, and each gets its own key's noon value
            // (none for keys without features).
            assert_eq!(ids.value(i), (position * 7) % 25_000);
            let want = (ids.value(i) < 20_000).then_some(ids.value(i));
            assert_eq!(
                arrow_array::Array::is_valid(&trips, i).then(|| trips.value(i)),
                want,
                "row {position}"
            );
            position += 1;
        }
    }
    assert_eq!(position, 30_000);
}

#[test]
fn removing_a_pii_flag_needs_a_maintainer() {
    let q = Qanat::start();
    let dir = load_driver_stats(&q, STATS, ONLINE_REPO);
    let editor = q.user_with_role("eddie", "default", "editor");
    let maintainer = q.user_with_role("maya", "default", "maintainer");
    let d = dir.to_str().expect("utf-8").to_string();
    write_repo(&dir, &ONLINE_REPO.replace("pii: true", "pii: false"));
    let (ok, _, err) = q.cli_as(&editor, &["features", "-p", "default", "apply", &d]);
    assert!(!ok, "an editor turned PII protection off");
    assert!(
        err.contains("removing the pii flag of driver_stats.")
            && err.contains("needs a maintainer"),
        "{err}"
    );
    // Other changes stay an editor's; the flag's removal is the maintainer's.
    let (ok, _, err) = q.cli_as(&maintainer, &["features", "-p", "default", "apply", &d]);
    assert!(ok, "{err}");
    let (s, audit) = q.api("GET", "/api/v1/audit?action=feature.apply", None);
    assert_eq!(s, 200, "{audit}");
    let text = audit.to_string();
    assert!(text.contains("maya") && text.contains("eddie"), "{text}");
}

/// The compliance report lists a feature view's personal data: the features marked
/// `pii: true`, and those it does not mark whose source dataset's column holds
/// personal data or whose name says so, flagged as unprotected.
#[test]
fn the_compliance_report_finds_personal_data_a_feature_view_does_not_mark() {
    let q = Qanat::start();
    let mut stats = String::from(
        "driver_id,event_timestamp,created,conv_rate,trips,contact,driver_full_name\n",
    );
    for i in 0..40 {
        stats.push_str(&format!(
            "{},2026-01-01T10:00:00Z,2026-01-01T10:05:00Z,0.5,{i},driver{i}@example.ae,Driver Number{}\n",
            1000 + i,
            ["A", "B", "C", "D"][i % 4]
        ));
    }
    let repo = DATASET_REPO.replace(
        "  - {name: trips, type: int64, pii: true}",
        "  - {name: trips, type: int64, pii: true}\n  - {name: contact, type: string}\n  - {name: driver_full_name, type: string}",
    );
    load_driver_stats(&q, &stats, &repo);
    let (ok, out, err) = q.cli(&["compliance", "report", "-p", "default", "--output", "json"]);
    assert!(ok, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).expect("json");
    let view = r["personal_data"]
        .as_array()
        .expect("holdings")
        .iter()
        .find(|h| h["kind"] == "feature_view" && h["name"] == "driver_stats")
        .unwrap_or_else(|| panic!("the view is listed: {r}"))
        .clone();
    let col = |name: &str| {
        view["columns"]
            .as_array()
            .expect("columns")
            .iter()
            .find(|c| c["column"] == name)
            .cloned()
    };
    let trips = col("trips").expect("trips");
    assert_eq!(trips["declared"], true, "{view}");
    let contact = col("contact").unwrap_or_else(|| panic!("contact found: {view}"));
    assert_eq!(contact["declared"], false, "{view}");
    assert_eq!(contact["kinds"], json!(["email"]), "{view}");
    assert!(
        contact["protection"]
            .as_str()
            .is_some_and(|p| p.starts_with("NONE")),
        "{view}"
    );
    let name = col("driver_full_name").unwrap_or_else(|| panic!("name found: {view}"));
    assert_eq!(name["kinds"], json!(["person_name"]), "{view}");
    assert!(col("conv_rate").is_none(), "{view}");

    // Applying says so; a project that requires declaration refuses it until the
    // features are marked.
    let dir = q.home().join("repo");
    let d = dir.to_str().expect("utf-8");
    let (ok, _, err) = q.cli(&["features", "-p", "default", "apply", d]);
    assert!(ok, "{err}");
    assert!(
        err.contains("warning: features hold personal data without pii: true")
            && err.contains("driver_stats.contact (email)")
            && err.contains("driver_stats.driver_full_name (person_name)"),
        "{err}"
    );
    q.cli_ok("projects require-pii-declared default true");
    let repo = repo.replace("ttl: 2h", "ttl: 3h");
    write_repo(&dir, &repo);
    let (ok, _, err) = q.cli(&["features", "-p", "default", "apply", d]);
    assert!(
        !ok && err.contains("requires personal data to be declared")
            && err.contains("nothing was applied"),
        "{err}"
    );
    write_repo(
        &dir,
        &repo
            .replace(
                "{name: contact, type: string}",
                "{name: contact, type: string, pii: true}",
            )
            .replace(
                "{name: driver_full_name, type: string}",
                "{name: driver_full_name, type: string, pii: true}",
            ),
    );
    let (ok, out, err) = q.cli(&["features", "-p", "default", "apply", d]);
    assert!(ok && !err.contains("warning"), "{out}{err}");
    assert!(out.contains("applied"), "{out}");
}

#[test]
fn personal_data_in_file_pushed_and_training_set_values_is_found_and_flagged() {
    let q = Qanat::start();
    let home = q.home();
    // A file source (not a dataset: no profile), read by materialization and by a
    // training set; a push source.
    let mut riders = String::from("driver_id,event_timestamp,contact,rating\n");
    for i in 0..30 {
        riders.push_str(&format!(
            "{},2026-01-01T10:00:00Z,rider{i}@example.ae,4.{}\n",
            100 + i,
            i % 10
        ));
    }
    let csv = home.join("riders.csv");
    std::fs::write(&csv, riders).expect("riders");
    q.cli_ok(&format!(
        "objects put default features/riders.csv {}",
        csv.display()
    ));
    let repo = "kind: entity
name: driver
join_keys: [{name: driver_id, type: int64}]
---
kind: source
name: riders_src
type: file
path: features/riders.csv
timestamp_field: event_timestamp
---
kind: feature_view
name: riders
entities: [driver]
source: riders_src
schema:
  - {name: contact, type: string}
  - {name: rating, type: float64}
---
kind: feature_view
name: riders_offline
entities: [driver]
source: riders_src
online: false
schema:
  - {name: contact, type: string}
---
kind: source
name: calls_push
type: push
timestamp_field: event_timestamp
---
kind: feature_view
name: calls
entities: [driver]
source: calls_push
schema:
  - {name: caller, type: string}
";
    let dir = home.join("repo");
    write_repo(&dir, repo);
    let d = dir.to_str().expect("utf-8");
    let (ok, _, err) = q.cli(&["features", "-p", "default", "apply", d]);
    assert!(ok, "{err}");
    assert!(
        !err.contains("warning"),
        "nothing is known of the values yet: {err}"
    );
    let found = |name: &str| -> Option<serde_json::Value> {
        let (ok, out, err) = q.cli(&["compliance", "report", "-p", "default", "--output", "json"]);
        assert!(ok, "{err}");
        let r: serde_json::Value = serde_json::from_str(&out).expect("json");
        r["personal_data"]
            .as_array()
            .expect("holdings")
            .iter()
            .find(|h| h["kind"] == "feature_view" && h["name"] == name)
            .cloned()
    };
    assert!(found("riders").is_none(), "not scanned yet");

    // Materializing reads the file's values: the emails are found.
    q.cli_ok("features -p default materialize");
    let riders = found("riders").expect("the materialized view is listed");
    let contact = &riders["columns"][0];
    assert_eq!(contact["column"], "contact", "{riders}");
    assert_eq!(contact["kinds"], json!(["email"]), "{riders}");
    assert_eq!(contact["declared"], false, "{riders}");
    assert!(
        contact["protection"]
            .as_str()
            .is_some_and(|p| p.contains("as found in its values")),
        "{riders}"
    );
    assert_eq!(
        riders["columns"].as_array().map(Vec::len),
        Some(1),
        "{riders}"
    );
    // Found, it is protected as if marked: a viewer reads pseudonyms online, the
    // admin (who holds the PII permission) the emails.
    let online = |token: &str| {
        let (st, body) = q.http().send(
            token,
            "POST",
            "/get-online-features",
            Some(json!({"entities": {"driver_id": [100]}, "features": ["riders:contact", "riders:rating"]})),
        );
        assert_eq!(st, 200, "{body}");
        (
            column(&body, "contact")["values"][0].clone(),
            column(&body, "rating")["values"][0].clone(),
        )
    };
    let viewer = q.user_with_role("vic", "default", "viewer");
    let (contact, rating) = online(&viewer);
    assert!(
        contact.as_str().is_some_and(|c| c.starts_with("pii:")),
        "{contact}"
    );
    assert_eq!(rating, json!(4.0));
    let (contact, _) = online(&q.admin_token);
    assert_eq!(contact, json!("rider0@example.ae"));

    // Pushed values: UAE mobile numbers.
    let (st, body) = q.api(
        "POST",
        "/push",
        Some(json!({"push_source_name": "calls_push", "df": {
            "driver_id": [1, 2, 3],
            "event_timestamp": ["2026-01-01T10:00:00Z", "2026-01-01T10:00:00Z", "2026-01-01T10:00:00Z"],
            "caller": ["+971 50 123 4567", "+971 55 765 4321", "+971 52 111 2233"]}})),
    );
    assert_eq!(st, 200, "{body}");
    let calls = found("calls").expect("the pushed view is listed");
    assert_eq!(calls["columns"][0]["column"], "caller", "{calls}");
    assert_eq!(calls["columns"][0]["kinds"], json!(["phone"]), "{calls}");

    // An offline view read only into a training set: its output's profile shows it.
    assert!(found("riders_offline").is_none());
    training_set(
        &q,
        None,
        &{
            let p = home.join("entities.csv");
            std::fs::write(
                &p,
                "driver_id,event_timestamp\n100,2026-01-02T00:00:00Z\n101,2026-01-02T00:00:00Z\n",
            )
            .expect("entities");
            p.to_str().expect("utf-8").to_string()
        },
        "riders_offline:contact",
        "riders-train",
    );
    let offline = found("riders_offline").expect("the offline view is listed");
    assert_eq!(
        offline["columns"][0]["kinds"],
        json!(["email"]),
        "{offline}"
    );

    // The UI's feature page names them.
    let session = common::ui_login(&q, &q.admin_token);
    let features_page = || {
        common::browser()
            .get(format!("{}/ui/p/default/features", q.url))
            .header("cookie", &session)
            .send()
            .expect("page")
            .text()
            .expect("html")
    };
    let page = features_page();
    assert!(!page.contains("All 2 versions"), "one version each so far");
    assert!(
        page.contains("Personal data found")
            && page.contains("<code>caller</code> (phone)")
            && page.contains("<code>contact</code> (email)"),
        "{page}"
    );

    // Planning the same repo again says so; marking the features quiets it.
    let (ok, _, err) = q.cli(&["features", "-p", "default", "plan", d]);
    assert!(ok, "{err}");
    for f in [
        "riders.contact (email)",
        "riders_offline.contact (email)",
        "calls.caller (phone)",
    ] {
        assert!(err.contains(f), "{f}: {err}");
    }
    write_repo(
        &dir,
        &repo
            .replace(
                "{name: contact, type: string}",
                "{name: contact, type: string, pii: true}",
            )
            .replace(
                "{name: caller, type: string}",
                "{name: caller, type: string, pii: true}",
            )
            // And the offline view gains a feature: its second version.
            .replace(
                "online: false\nschema:\n  - {name: contact, type: string, pii: true}",
                "online: false\nschema:\n  - {name: contact, type: string, pii: true}\n  - {name: rating, type: float64}",
            ),
    );
    let (ok, out, err) = q.cli(&["features", "-p", "default", "apply", d]);
    assert!(ok && !err.contains("warning"), "{out}{err}");
    let riders = found("riders").expect("still listed, now declared");
    assert_eq!(riders["columns"][0]["declared"], true, "{riders}");
    // Marking is metadata; the view that gained a feature has a second version, and
    // the UI lists both, each with its features and lineage.
    let page = features_page();
    for shown in [
        "All 2 versions",
        "Versions of riders_offline",
        "lineage of riders_offline@1",
        "lineage of riders_offline@2",
        "<td>contact, rating</td>",
    ] {
        assert!(page.contains(shown), "{shown} is not on the page: {page}");
    }
    assert_eq!(page.matches("All 2 versions").count(), 1, "{page}");
}
