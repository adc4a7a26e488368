//! The feature store through the binary: a feature repo planned and applied with the
//! CLI, versions, RBAC and audit, and bad input refused with what to fix.

mod common;

use common::cases::{run_cases, Call, Case, Check, Expect};
use common::Qanat;
use serde_json::json;

const REPO: &str = r#"
kind: entity
name: driver
join_keys: [{name: driver_id, type: int64}]
---
kind: source
name: stats_src
type: file
path: features/driver_stats.parquet
timestamp_field: event_timestamp
---
kind: feature_view
name: driver_stats
entities: [driver]
source: stats_src
ttl: 1d
schema:
  - {name: conv_rate, type: float32, range: {min: 0, max: 1}}
  - {name: trips, type: int64}
"#;

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
            Case {
                name: "a folder with no definitions",
                call: Call::cli(&["features", "-p", "default", "plan", &empty]),
                expect: Expect::Fails,
                message: "holds no .yaml files",
                ..Case::default()
            },
            Case {
                name: "an unknown type names the file and the accepted words",
                call: Call::cli(&["features", "-p", "default", "plan", &broken]),
                expect: Expect::Fails,
                message: "drivers.yaml, document 1 (entity)",
                ..Case::default()
            },
            Case {
                name: "a misspelt field is refused, not ignored",
                call: Call::cli(&["features", "-p", "default", "apply", &typo]),
                expect: Expect::Fails,
                message: "unknown field `tll`",
                ..Case::default()
            },
            Case {
                name: "a view on an undeclared source",
                call: Call::cli(&["features", "-p", "default", "apply", &dangling]),
                expect: Expect::Fails,
                message: "source 'nowhere' is not declared in the repo",
                ..Case::default()
            },
            Case {
                name: "nothing of a refused repo was recorded",
                call: Call::get("/api/v1/projects/default/features/registry"),
                expect: Expect::Status(200),
                checks: vec![Check::Len("/objects", 0)],
                ..Case::default()
            },
            Case {
                name: "a repo with problems, over HTTP",
                call: Call::post(plan).json(json!({"repo": {"feature_views": [{
                    "name": "v", "entities": ["e"], "source": "s", "schema": []}]}})),
                expect: Expect::Status(400),
                code: "INVALID_FEATURE_REPO",
                message: "entity 'e' is not declared",
                ..Case::default()
            },
            Case {
                name: "a wrong type in the body",
                call: Call::post(plan).json(json!({"repo": {"entities": [{
                    "name": "e", "join_keys": [{"name": "k", "type": "decimal"}]}]}})),
                expect: Expect::Status(400),
                message: "decimal",
                ..Case::default()
            },
            Case {
                name: "an apply from a stale plan",
                call: Call::post(apply).json(json!({"repo": repo, "expected_revision": 7})),
                expect: Expect::Status(409),
                message: "plan again",
                ..Case::default()
            },
            Case {
                name: "an unknown kind of object",
                call: Call::get("/api/v1/projects/default/features/objects/table/x"),
                expect: Expect::Status(400),
                message: "entity, source, feature_view or feature_service",
                ..Case::default()
            },
            Case {
                name: "a missing object",
                call: Call::get("/api/v1/projects/default/features/objects/feature_view/nope"),
                expect: Expect::Status(404),
                code: "RESOURCE_DOES_NOT_EXIST",
                message: "feature view 'nope'",
                ..Case::default()
            },
        ],
    );
}
