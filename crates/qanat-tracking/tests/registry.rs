//! Logged models and the model registry on every metadata backend (SQLite always,
//! PostgreSQL when `QANAT_TEST_POSTGRES_URL` is set).

mod common;

use common::setup;
use qanat_governance::wire::AuditFilter;
use qanat_governance::{AuditOutcome, AuditRecord, Project};
use qanat_store::testing::TestDb;
use qanat_tracking::{
    Batch, Metric, MetricValue, ModelOrder, ModelOutput, NewLoggedModel, NewModelVersion, NewRun,
    Param, Tag, Tracking,
};

/// A user's audit record, as the API hands one to an alias move.
fn by(user: &str) -> AuditRecord {
    AuditRecord {
        request_id: "req-1".into(),
        actor: user.into(),
        action: "model.alias.set".into(),
        resource: "/test".into(),
        project: Some("a".into()),
        outcome: AuditOutcome::Success,
        detail: "200".into(),
    }
}

fn tag(k: &str, v: &str) -> Tag {
    Tag {
        key: k.into(),
        value: v.into(),
    }
}

/// A run in a new experiment with a logged, finalized model; returns (run, model id).
async fn logged(t: &Tracking, p: &Project, exp_name: &str) -> (String, String) {
    let exp = t
        .create_experiment(p, exp_name, None, &[])
        .await
        .expect("experiment");
    let run = t
        .create_run(
            p,
            NewRun {
                experiment_id: exp.clone(),
                user_id: "alice".into(),
                ..NewRun::default()
            },
        )
        .await
        .expect("run")
        .info
        .run_id;
    let m = t
        .create_logged_model(
            p,
            NewLoggedModel {
                experiment_id: exp,
                name: Some("model".into()),
                source_run_id: Some(run.clone()),
                params: vec![Param {
                    key: "C".into(),
                    value: "1.0".into(),
                }],
                tags: vec![tag("flavor", "sklearn")],
                creator: "alice".into(),
                ..NewLoggedModel::default()
            },
        )
        .await
        .expect("logged model");
    assert_eq!(m.info.status, "LOGGED_MODEL_PENDING");
    assert!(
        m.info
            .artifact_uri
            .ends_with(&format!("/models/{}/artifacts", m.info.model_id)),
        "{}",
        m.info.artifact_uri
    );
    t.finalize_logged_model(p, &m.info.model_id, "LOGGED_MODEL_READY")
        .await
        .expect("finalize");
    (run, m.info.model_id)
}

async fn register(t: &Tracking, p: &Project, name: &str, model_id: &str) -> String {
    t.create_model_version(
        p,
        NewModelVersion {
            name: name.into(),
            source: format!("models:/{model_id}"),
            model_id: Some(model_id.into()),
            user: "alice".into(),
            ..NewModelVersion::default()
        },
    )
    .await
    .expect("version")
    .version
}

#[tokio::test]
async fn logged_models_carry_params_tags_metrics_and_outputs() {
    for db in TestDb::all(common::SCHEMA).await {
        let (t, _, a, b) = setup(&db).await;
        let (run, id) = logged(&t, &a, "lm").await;
        assert!(t.logged_model(&b, &id, false).await.is_err(), "per project");
        // log_model re-logs a run's metrics with the model id: the history keeps one
        // point, the model gets its own.
        let point = Metric {
            key: "acc".into(),
            value: MetricValue(0.9),
            timestamp: 10,
            step: 0,
            ..Metric::default()
        };
        // An empty model id means none: the point is the run's only.
        for model_id in [None, Some(String::new()), Some(id.clone())] {
            let batch = Batch {
                metrics: vec![Metric {
                    model_id,
                    ..point.clone()
                }],
                ..Batch::default()
            };
            t.log_batch(&a, &run, batch, None).await.expect("batch");
        }
        let history = t
            .metric_history(&a, &run, "acc", None, None)
            .await
            .expect("history");
        assert_eq!(history.items.len(), 1, "the same point is kept once");
        t.log_outputs(
            &a,
            &run,
            &[ModelOutput {
                model_id: id.clone(),
                step: 0,
            }],
        )
        .await
        .expect("outputs");
        let r = t.run(&a, &run).await.expect("run");
        assert_eq!(r.outputs.model_outputs[0].model_id, id);

        let m = t.logged_model(&a, &id, false).await.expect("get");
        assert_eq!(m.info.status, "LOGGED_MODEL_READY");
        assert_eq!(m.data.params[0].value, "1.0");
        assert_eq!(m.data.metrics.len(), 1);
        assert_eq!(m.data.metrics[0].model_id.as_deref(), Some(id.as_str()));
        // Params are immutable; tags are not.
        let err = t
            .log_logged_model_params(
                &a,
                &id,
                &[Param {
                    key: "C".into(),
                    value: "2".into(),
                }],
            )
            .await;
        assert!(err.is_err());
        t.set_logged_model_tags(&a, &id, &[tag("flavor", "onnx")])
            .await
            .expect("tags");
        let exp = m.info.experiment_id.clone();
        let found = t
            .search_logged_models(
                &a,
                std::slice::from_ref(&exp),
                Some("name = 'model' AND tags.flavor = 'onnx' AND metrics.acc > 0.5"),
                &[ModelOrder {
                    field_name: "creation_timestamp".into(),
                    ascending: false,
                }],
                None,
                None,
            )
            .await
            .expect("search");
        assert_eq!(found.items.len(), 1);
        let none = t
            .search_logged_models(
                &a,
                std::slice::from_ref(&exp),
                Some("metrics.acc > 0.95"),
                &[],
                None,
                None,
            )
            .await
            .expect("search");
        assert!(none.items.is_empty());
        t.delete_logged_model(&a, &id).await.expect("delete");
        assert!(t.logged_model(&a, &id, false).await.is_err());
        assert!(t.logged_model(&a, &id, true).await.is_ok());
        assert!(t.finalize_logged_model(&a, &id, "DONE").await.is_err());
    }
}

#[tokio::test]
async fn versions_stages_and_aliases_with_rollback() {
    for db in TestDb::all(common::SCHEMA).await {
        let (t, gov, a, b) = setup(&db).await;
        let (run, m1) = logged(&t, &a, "reg").await;
        t.create_registered_model(&a, "fraud", Some("first"), &[tag("team", "risk")])
            .await
            .expect("create");
        assert!(t
            .create_registered_model(&a, "fraud", None, &[])
            .await
            .is_err());
        t.create_registered_model(&b, "fraud", None, &[])
            .await
            .expect("names are per project");
        assert_eq!(register(&t, &a, "fraud", &m1).await, "1");
        let v1 = t.model_version(&a, "fraud", "1").await.expect("v1");
        assert_eq!(
            v1.run_id.as_deref(),
            Some(run.as_str()),
            "run from the model"
        );
        assert_eq!(v1.status, "READY");
        let (_, m2) = logged(&t, &a, "reg2").await;
        assert_eq!(register(&t, &a, "fraud", &m2).await, "2");

        // Aliases move atomically and remember where they were.
        let mona = by("mona");
        let set = |alias: &'static str, version: &'static str, reason: &'static str| {
            t.set_alias(&a, "fraud", alias, version, reason, &mona)
        };
        assert_eq!(set("champion", "1", "promote").await.expect("alias"), None);
        assert_eq!(
            set("champion", "2", "promote").await.expect("alias"),
            Some("1".into())
        );
        let champion = t.version_by_alias(&a, "fraud", "champion").await;
        assert_eq!(champion.expect("by alias").version, "2");
        let (from, to) = t
            .rollback_alias(&a, "fraud", "champion", &mona)
            .await
            .expect("rollback");
        assert_eq!((from.as_deref(), to.as_str()), (Some("2"), "1"));
        let history = t.alias_history(&a, "fraud").await.expect("history");
        let reasons: Vec<&str> = history.iter().map(|h| h.reason.as_str()).collect();
        assert_eq!(reasons, ["promote", "promote", "rollback"]);
        assert!(set("latest", "1", "set").await.is_err());
        assert!(set("x", "9", "set").await.is_err());

        // Stages: archive the others on the way in.
        t.transition_stage(&a, "fraud", "1", "Production", false)
            .await
            .expect("stage");
        t.transition_stage(&a, "fraud", "2", "production", true)
            .await
            .expect("stage");
        let v1 = t.model_version(&a, "fraud", "1").await.expect("v1");
        assert_eq!(v1.current_stage, "Archived");
        let latest = t
            .latest_versions(&a, "fraud", &["Production".into()])
            .await
            .expect("latest");
        assert_eq!(latest.len(), 1);
        assert_eq!(latest[0].version, "2");

        // Search: filters, registry tag semantics (untagged passes !=).
        let found = t
            .search_model_versions(
                &a,
                Some("name = 'fraud' AND tags.`mlflow.prompt.is_prompt` != 'true'"),
                &["version_number ASC".into()],
                None,
                None,
            )
            .await
            .expect("search");
        let vs: Vec<&str> = found.items.iter().map(|v| v.version.as_str()).collect();
        assert_eq!(vs, ["1", "2"]);
        let models = t
            .search_registered_models(&a, Some("name LIKE 'fr%'"), &[], None, None)
            .await
            .expect("search");
        assert_eq!(models.items.len(), 1);
        assert_eq!(models.items[0].tags, vec![tag("team", "risk")]);

        // Sources outside Qanat's storage are refused; runs:/ sources resolve.
        let outside = t
            .create_model_version(
                &a,
                NewModelVersion {
                    name: "fraud".into(),
                    source: "s3://elsewhere/model".into(),
                    user: "alice".into(),
                    ..NewModelVersion::default()
                },
            )
            .await;
        assert!(outside.is_err());
        let v3 = t
            .create_model_version(
                &a,
                NewModelVersion {
                    name: "fraud".into(),
                    source: format!("runs:/{run}/model"),
                    run_id: Some(run.clone()),
                    user: "alice".into(),
                    ..NewModelVersion::default()
                },
            )
            .await
            .expect("runs source");
        assert!(t
            .download_uri(&a, "fraud", &v3.version)
            .await
            .expect("uri")
            .ends_with(&format!("/{run}/artifacts/model")));
        // A run of project a is not project b's to register, by source or by run_id.
        for (source, run_id) in [
            (format!("runs:/{run}/model"), None),
            (
                "mlflow-artifacts:/elsewhere/model".to_string(),
                Some(run.clone()),
            ),
        ] {
            let e = t
                .create_model_version(
                    &b,
                    NewModelVersion {
                        name: "fraud".into(),
                        source: source.clone(),
                        run_id,
                        user: "mallory".into(),
                        ..NewModelVersion::default()
                    },
                )
                .await
                .expect_err("another project's run")
                .to_string();
            assert!(e.contains("is not in project 'b'"), "{source}: {e}");
        }

        // Lineage: version → logged model → run.
        let graph = gov
            .lineage_upstream(&a.id, "model:fraud@1", 5)
            .await
            .expect("lineage");
        let edges: Vec<(String, String)> = graph
            .edges
            .iter()
            .map(|e| (e.child.clone(), e.relation.clone()))
            .collect();
        assert!(edges.contains(&("model:fraud@1".into(), "registers".into())));
        assert!(edges.contains(&(format!("logged_model:{m1}"), "output_of".into())));

        // Rename carries versions, aliases and lineage; deleting a version drops its
        // aliases and never reuses its number.
        t.rename_registered_model(&a, "fraud", "fraud-v2")
            .await
            .expect("rename");
        assert!(t.registered_model(&a, "fraud").await.is_err());
        assert_eq!(
            t.version_by_alias(&a, "fraud-v2", "champion")
                .await
                .expect("alias follows")
                .version,
            "1"
        );
        assert!(!gov
            .lineage_upstream(&a.id, "model:fraud-v2@1", 1)
            .await
            .expect("lineage")
            .edges
            .is_empty());
        t.delete_model_version(&a, "fraud-v2", "1", "mona")
            .await
            .expect("delete");
        assert!(t
            .version_by_alias(&a, "fraud-v2", "champion")
            .await
            .is_err());
        assert!(t
            .rollback_alias(&a, "fraud-v2", "champion", &by("mona"))
            .await
            .is_err());
        assert_eq!(register(&t, &a, "fraud-v2", &m1).await, "4");
        t.delete_registered_model(&a, "fraud-v2")
            .await
            .expect("delete model");
        assert!(t.registered_model(&a, "fraud-v2").await.is_err());
    }
}

/// The monitor rolls an alias back with no request behind it: the move and its audit
/// entry (actor `service:monitor`) commit together, the chain still verifies, and a
/// refused rollback records nothing.
#[tokio::test]
async fn a_service_rollback_is_audited_in_its_own_transaction() {
    for db in TestDb::all(common::SCHEMA).await {
        let (t, gov, a, _) = setup(&db).await;
        let (_, m1) = logged(&t, &a, "svc1").await;
        let (_, m2) = logged(&t, &a, "svc2").await;
        t.create_registered_model(&a, "churn", None, &[])
            .await
            .expect("model");
        register(&t, &a, "churn", &m1).await;
        register(&t, &a, "churn", &m2).await;
        t.set_alias(&a, "churn", "production", "1", "promote", &by("mona"))
            .await
            .expect("v1");
        t.set_alias(&a, "churn", "production", "2", "promote", &by("mona"))
            .await
            .expect("v2");
        let head = gov.verify_audit().await.expect("verify").head_seq;

        let rec = AuditRecord::by_service(
            "monitor",
            "model.rollback",
            "model:churn@production",
            Some(&a.name),
        )
        .with_detail("drift above threshold");
        assert!(rec.is_service());
        let (from, to) = t
            .rollback_alias(&a, "churn", "production", &rec)
            .await
            .expect("service rollback");
        assert_eq!((from.as_deref(), to.as_str()), (Some("2"), "1"));

        let history = t.alias_history(&a, "churn").await.expect("history");
        let last = history.last().expect("a move");
        assert_eq!(
            (last.changed_by.as_str(), last.reason.as_str()),
            ("service:monitor", "rollback")
        );
        let entries = gov
            .query_audit(&AuditFilter {
                actor: Some("service:monitor".into()),
                ..AuditFilter::default()
            })
            .await
            .expect("audit");
        assert_eq!(entries.len(), 1, "{entries:?}");
        let e = &entries[0];
        assert_eq!(e.seq, head + 1);
        assert_eq!(e.action, "model.rollback");
        assert_eq!(e.project.as_deref(), Some("a"));
        assert_eq!(e.outcome, "success");
        assert_eq!(e.detail, "drift above threshold");
        assert!(e.request_id.starts_with("svc-"), "{}", e.request_id);
        let v = gov.verify_audit().await.expect("verify");
        assert!(v.ok, "{:?}", v.problems);

        // An alias that never moved has nothing to roll back to: refused, and
        // nothing appended.
        t.rollback_alias(&a, "churn", "staging", &rec)
            .await
            .expect_err("no history");
        assert_eq!(gov.verify_audit().await.expect("verify").head_seq, head + 1);
    }
}

/// Each rollback goes one step further back along the alias's history; a promotion
/// after rollbacks starts a new step to undo.
#[tokio::test]
async fn rollbacks_walk_back_along_the_history() {
    for db in TestDb::all(common::SCHEMA).await {
        let (t, _, a, _) = setup(&db).await;
        t.create_registered_model(&a, "walk", None, &[])
            .await
            .expect("create");
        for i in 1..=3 {
            let (_, m) = logged(&t, &a, &format!("walk{i}")).await;
            assert_eq!(register(&t, &a, "walk", &m).await, i.to_string());
            t.set_alias(&a, "walk", "prod", &i.to_string(), "promote", &by("mona"))
                .await
                .expect("promote");
        }
        let back = |t: &Tracking| {
            let t = t.clone();
            let a = a.clone();
            async move { t.rollback_alias(&a, "walk", "prod", &by("mona")).await }
        };
        let step = |r: qanat_tracking::Result<(Option<String>, String)>| {
            let (from, to) = r.expect("rollback");
            (from.unwrap_or_default(), to)
        };
        assert_eq!(step(back(&t).await), ("3".into(), "2".into()));
        assert_eq!(step(back(&t).await), ("2".into(), "1".into()));
        let e = back(&t).await.expect_err("nothing before 1");
        assert!(e.to_string().contains("no earlier version"), "{e}");
        // A promotion after rollbacks is the next move to undo.
        t.set_alias(&a, "walk", "prod", "3", "promote", &by("mona"))
            .await
            .expect("promote again");
        assert_eq!(step(back(&t).await), ("3".into(), "1".into()));
    }
}
