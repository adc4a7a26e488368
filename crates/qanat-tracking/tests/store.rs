//! The tracking store on every metadata backend (SQLite always, PostgreSQL when
//! `QANAT_TEST_POSTGRES_URL` is set).

use proptest::prelude::*;
mod common;

use qanat_governance::wire::AuditFilter;
use qanat_governance::{AuditOutcome, AuditRecord, Project};
use qanat_store::testing::TestDb;
use qanat_tracking::{Batch, Metric, MetricValue, NewRun, Param, Tag, Tracking, ViewType};

async fn setup(db: &TestDb) -> (Tracking, Project, Project) {
    let (t, _, a, b) = common::setup(db).await;
    (t, a, b)
}

fn metric(key: &str, value: f64, timestamp: i64, step: i64) -> Metric {
    Metric {
        key: key.into(),
        value: MetricValue(value),
        timestamp,
        step,
        ..Metric::default()
    }
}

async fn new_run(t: &Tracking, p: &Project, exp: &str) -> String {
    t.create_run(
        p,
        NewRun {
            experiment_id: exp.into(),
            user_id: "alice".into(),
            ..NewRun::default()
        },
    )
    .await
    .expect("run")
    .info
    .run_id
}

#[tokio::test]
async fn experiments_are_per_project_and_each_has_a_default() {
    for db in TestDb::all(common::SCHEMA).await {
        let (t, a, b) = setup(&db).await;
        assert_eq!(
            t.experiment(&a, "0").await.expect("default").name,
            "Default"
        );
        let ea = t
            .create_experiment(&a, "churn", None, &[])
            .await
            .expect("a");
        let eb = t
            .create_experiment(&b, "churn", None, &[])
            .await
            .expect("b");
        assert_eq!(
            (ea.as_str(), eb.as_str()),
            ("1", "1"),
            "ids count per project"
        );
        assert!(t.create_experiment(&a, "churn", None, &[]).await.is_err());
        let run = new_run(&t, &a, &ea).await;
        assert!(
            t.run(&b, &run).await.is_err(),
            "a run is invisible from another project"
        );
        let page = t
            .search_experiments(&b, ViewType::All, None, None, None, &[])
            .await
            .expect("search");
        assert_eq!(page.items.len(), 2, "Default and b's churn");
    }
}

#[tokio::test]
async fn a_batch_with_a_conflicting_param_stores_nothing() {
    for db in TestDb::all(common::SCHEMA).await {
        let (t, a, _) = setup(&db).await;
        let run = new_run(&t, &a, "0").await;
        let param = |v: &str| Param {
            key: "lr".into(),
            value: v.into(),
        };
        t.log_batch(
            &a,
            &run,
            Batch {
                params: vec![param("0.1")],
                ..Batch::default()
            },
            None,
        )
        .await
        .expect("first");
        let err = t
            .log_batch(
                &a,
                &run,
                Batch {
                    params: vec![param("0.2")],
                    metrics: vec![metric("loss", 1.0, 1, 0)],
                    tags: vec![Tag {
                        key: "t".into(),
                        value: "v".into(),
                    }],
                },
                None,
            )
            .await
            .expect_err("conflict");
        assert!(err.to_string().contains("immutable"), "{err}");
        let got = t.run(&a, &run).await.expect("run");
        assert!(got.data.metrics.is_empty(), "{:?}", got.data.metrics);
        assert!(!got.data.tags.iter().any(|t| t.key == "t"));
        let hist = t
            .metric_history(&a, &run, "loss", None, None)
            .await
            .expect("history");
        assert!(hist.items.is_empty());
    }
}

#[tokio::test]
async fn a_batch_commits_its_audit_entry_with_it_or_not_at_all() {
    for db in TestDb::all(common::SCHEMA).await {
        let (t, gov, a, _) = common::setup(&db).await;
        let run = new_run(&t, &a, "0").await;
        let record = |request_id: &str| AuditRecord {
            request_id: request_id.into(),
            actor: "alice".into(),
            action: "mlflow.run.log_batch".into(),
            resource: "/api/2.0/mlflow/runs/log-batch".into(),
            project: Some("a".into()),
            outcome: AuditOutcome::Success,
            detail: "200".into(),
        };
        let batch = |lr: &str| Batch {
            params: vec![Param {
                key: "lr".into(),
                value: lr.into(),
            }],
            metrics: vec![metric("loss", 0.5, 1, 0)],
            ..Batch::default()
        };
        t.log_batch(&a, &run, batch("0.1"), Some(&record("req-ok")))
            .await
            .expect("log");
        // Refused inside the transaction (params are immutable): no entry either.
        t.log_batch(&a, &run, batch("0.2"), Some(&record("req-refused")))
            .await
            .expect_err("immutable");
        let entries = gov
            .query_audit(&AuditFilter {
                action: Some("mlflow.run.log_batch".into()),
                ..AuditFilter::default()
            })
            .await
            .expect("query");
        let ids: Vec<&str> = entries.iter().map(|e| e.request_id.as_str()).collect();
        assert_eq!(ids, ["req-ok"], "{entries:?}");
        assert_eq!(entries[0].outcome, "success");
        let chain = gov.verify_audit().await.expect("verify");
        assert!(chain.ok, "{:?}", chain.problems);
    }
}

#[tokio::test]
async fn nan_and_infinities_survive_the_round_trip() {
    for db in TestDb::all(common::SCHEMA).await {
        let (t, a, _) = setup(&db).await;
        let run = new_run(&t, &a, "0").await;
        let batch = Batch {
            metrics: vec![
                metric("nan", f64::NAN, 1, 0),
                metric("inf", f64::INFINITY, 1, 0),
                metric("ninf", f64::NEG_INFINITY, 1, 0),
            ],
            ..Batch::default()
        };
        t.log_batch(&a, &run, batch, None).await.expect("log");
        let got = t.run(&a, &run).await.expect("run");
        let v = |k: &str| {
            got.data
                .metrics
                .iter()
                .find(|m| m.key == k)
                .map(|m| m.value.0)
                .expect("metric")
        };
        assert!(v("nan").is_nan());
        assert_eq!(v("inf"), f64::INFINITY);
        assert_eq!(v("ninf"), f64::NEG_INFINITY);
    }
}

/// The simple reference for `latest_metrics`: replay the history in order, keeping for
/// each key the point with the greatest (step, timestamp, value), NaN ordering as 0,
/// the earlier point winning exact ties.
fn reference_latest(points: &[Metric]) -> std::collections::BTreeMap<String, (i64, i64, u64)> {
    let ord = |m: &Metric| {
        (
            m.step,
            m.timestamp,
            if m.value.0.is_nan() { 0.0 } else { m.value.0 },
        )
    };
    let mut out: std::collections::BTreeMap<String, &Metric> = Default::default();
    for m in points {
        match out.get(&m.key) {
            Some(cur) if ord(m).partial_cmp(&ord(cur)) != Some(std::cmp::Ordering::Greater) => {}
            _ => {
                out.insert(m.key.clone(), m);
            }
        }
    }
    out.into_iter()
        .map(|(k, m)| (k, (m.step, m.timestamp, m.value.0.to_bits())))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// What a run shows for each metric is what replaying its whole history gives,
    /// however the points are split into batches.
    #[test]
    fn latest_metrics_match_a_replay_of_the_history(
        batches in proptest::collection::vec(
            proptest::collection::vec((0usize..3, 0i64..3, 0i64..3, prop_oneof![Just(f64::NAN), (-2i32..3).prop_map(f64::from)]), 1..6),
            1..5,
        )
    ) {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let db = TestDb::sqlite(common::SCHEMA).await;
            let (t, a, _) = setup(&db).await;
            let run = new_run(&t, &a, "0").await;
            let mut all = Vec::new();
            for batch in &batches {
                let metrics: Vec<Metric> = batch
                    .iter()
                    .map(|(k, step, ts, v)| metric(&format!("m{k}"), *v, *ts, *step))
                    .collect();
                all.extend(metrics.clone());
                t.log_batch(&a, &run, Batch { metrics, ..Batch::default() }, None).await.expect("log");
            }
            let got: std::collections::BTreeMap<String, (i64, i64, u64)> = t
                .run(&a, &run)
                .await
                .expect("run")
                .data
                .metrics
                .into_iter()
                .map(|m| (m.key, (m.step, m.timestamp, m.value.0.to_bits())))
                .collect();
            let want = reference_latest(&all);
            // NaN bits may differ (any NaN is NaN): compare NaN-ness there.
            prop_assert_eq!(got.len(), want.len());
            for (k, (s, ts, bits)) in &want {
                let (gs, gts, gbits) = got[k];
                prop_assert_eq!((gs, gts), (*s, *ts), "key {}", k);
                let (w, g) = (f64::from_bits(*bits), f64::from_bits(gbits));
                prop_assert!(w == g || (w.is_nan() && g.is_nan()), "key {}: {} vs {}", k, g, w);
            }
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn a_search_ordered_by_its_bounded_metric_pages_in_value_order() {
    for db in TestDb::all(common::SCHEMA).await {
        let (t, a, _) = setup(&db).await;
        let exp = t
            .create_experiment(&a, "driven", None, &[])
            .await
            .expect("experiment");
        let mut want = Vec::new();
        for i in 0..30 {
            let run = new_run(&t, &a, &exp).await;
            // Every third run has no acc, every seventh a NaN: neither may match.
            let value = match i {
                _ if i % 3 == 0 => continue,
                _ if i % 7 == 0 => f64::NAN,
                _ => ((i * 37) % 30) as f64 / 30.0,
            };
            let batch = Batch {
                metrics: vec![metric("acc", value, 1, 0)],
                ..Batch::default()
            };
            t.log_batch(&a, &run, batch, None).await.expect("log");
            if value > 0.3 {
                want.push((value, run));
            }
        }
        for ascending in [false, true] {
            let mut expected = want.clone();
            expected.sort_by(|x, y| x.0.partial_cmp(&y.0).expect("no NaN"));
            if !ascending {
                expected.reverse();
            }
            let order = vec![format!(
                "metrics.acc {}",
                if ascending { "ASC" } else { "DESC" }
            )];
            let mut got = Vec::new();
            let mut token: Option<String> = None;
            loop {
                let page = t
                    .search_runs(
                        &a,
                        std::slice::from_ref(&exp),
                        Some("metrics.acc > 0.3 and metrics.acc <= 1"),
                        &order,
                        ViewType::ActiveOnly,
                        Some(4),
                        token.as_deref(),
                    )
                    .await
                    .expect("search");
                got.extend(page.items.into_iter().map(|r| r.info.run_id));
                match page.next_page_token {
                    Some(next) => token = Some(next),
                    None => break,
                }
            }
            let values: Vec<f64> = expected.iter().map(|(v, _)| *v).collect();
            let got_values: Vec<f64> = got
                .iter()
                .map(|id| expected.iter().find(|(_, r)| r == id).expect("a match").0)
                .collect();
            assert_eq!(got.len(), expected.len());
            assert_eq!(got_values, values, "ascending={ascending}");
        }
    }
}

/// Every run of `exp` matching `filter` in `order`, read `size` at a time from the
/// first page (or from `token`) through the page tokens.
async fn walk(
    t: &Tracking,
    p: &Project,
    exp: &str,
    filter: Option<&str>,
    order: &[String],
    size: i64,
    mut token: Option<String>,
) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let page = t
            .search_runs(
                p,
                &[exp.to_string()],
                filter,
                order,
                ViewType::ActiveOnly,
                Some(size),
                token.as_deref(),
            )
            .await
            .expect("search");
        assert!(page.items.len() as i64 <= size);
        got.extend(page.items.into_iter().map(|r| r.info.run_id));
        match page.next_page_token {
            Some(next) => token = Some(next),
            None => return got,
        }
    }
}

#[tokio::test]
async fn page_tokens_continue_after_the_last_row_and_refuse_what_does_not_fit() {
    use base64::Engine;
    for db in TestDb::all(common::SCHEMA).await {
        let (t, a, _) = setup(&db).await;
        let exp = t
            .create_experiment(&a, "keyset", None, &[])
            .await
            .expect("experiment");
        // Start times tie in threes (the run id breaks them); an acc that is a number,
        // NaN or missing; a param that some runs lack; an end time that some lack.
        for i in 0..23i64 {
            let run = t
                .create_run(
                    &a,
                    NewRun {
                        experiment_id: exp.clone(),
                        user_id: "alice".into(),
                        start_time: Some(1_000 + i / 3),
                        ..NewRun::default()
                    },
                )
                .await
                .expect("run")
                .info
                .run_id;
            let mut batch = Batch::default();
            match i % 5 {
                0 => {}
                1 => batch.metrics.push(metric("acc", f64::NAN, 1, 0)),
                // Ties in value too.
                _ => batch
                    .metrics
                    .push(metric("acc", (i % 4) as f64 / 4.0, 1, 0)),
            }
            if i % 4 != 0 {
                batch.params.push(Param {
                    key: "lr".into(),
                    value: format!("0.{}", i % 6),
                });
            }
            t.log_batch(&a, &run, batch, None).await.expect("log");
            if i % 3 == 0 {
                t.update_run(
                    &a,
                    &run,
                    qanat_tracking::RunUpdate {
                        status: Some("FINISHED".into()),
                        end_time: Some(5_000 - i),
                        run_name: None,
                    },
                )
                .await
                .expect("end");
            }
        }
        let orders: Vec<Vec<String>> = vec![
            vec![],
            vec!["metrics.acc DESC".into()],
            vec!["metrics.acc ASC".into()],
            vec!["params.lr ASC".into(), "metrics.acc DESC".into()],
            vec!["params.lr DESC".into()],
            vec!["attributes.end_time ASC".into()],
            vec!["attributes.end_time DESC".into(), "params.lr".into()],
            vec!["attributes.run_name".into()],
        ];
        for order in &orders {
            for filter in [
                None,
                Some("metrics.acc >= 0.25"),
                Some("params.lr != '0.1'"),
            ] {
                let all = walk(&t, &a, &exp, filter, order, 1000, None).await;
                assert!(!all.is_empty(), "{order:?} {filter:?}");
                if filter.is_none() {
                    // Every run, those with a NaN or no acc included, whatever the order.
                    assert_eq!(all.len(), 23, "{order:?}");
                }
                for size in [1, 2, 3, 7] {
                    let paged = walk(&t, &a, &exp, filter, order, size, None).await;
                    assert_eq!(paged, all, "{order:?} {filter:?} by {size}");
                }
                // An offset token (earlier versions hand them out) goes on from there,
                // and the pages after it are keyset pages.
                let offset = base64::engine::general_purpose::STANDARD.encode(r#"{"offset": 5}"#);
                let rest = walk(&t, &a, &exp, filter, order, 3, Some(offset)).await;
                assert_eq!(rest, all[5.min(all.len())..], "{order:?} {filter:?} from 5");
            }
        }

        // Where every run has the value, the last valued page ends the search.
        let full = t
            .create_experiment(&a, "all-valued", None, &[])
            .await
            .expect("experiment");
        for i in 0..7 {
            let run = new_run(&t, &a, &full).await;
            let batch = Batch {
                metrics: vec![metric("acc", (i % 3) as f64, 1, 0)],
                ..Batch::default()
            };
            t.log_batch(&a, &run, batch, None).await.expect("log");
        }
        let by_acc = vec!["metrics.acc DESC".to_string()];
        let all = walk(&t, &a, &full, None, &by_acc, 1000, None).await;
        assert_eq!(all.len(), 7);
        for size in [1, 2, 3, 7] {
            let paged = walk(&t, &a, &full, None, &by_acc, size, None).await;
            assert_eq!(paged, all, "all valued, by {size}");
        }

        // Runs started while a reader pages from the newest are not shown twice, and no
        // run is skipped: the next page starts after the last run seen, not at a count.
        let first = t
            .search_runs(
                &a,
                std::slice::from_ref(&exp),
                None,
                &[],
                ViewType::ActiveOnly,
                Some(5),
                None,
            )
            .await
            .expect("first page");
        let seen: Vec<String> = first.items.iter().map(|r| r.info.run_id.clone()).collect();
        for _ in 0..4 {
            t.create_run(
                &a,
                NewRun {
                    experiment_id: exp.clone(),
                    user_id: "alice".into(),
                    start_time: Some(9_000),
                    ..NewRun::default()
                },
            )
            .await
            .expect("newer run");
        }
        let rest = walk(&t, &a, &exp, None, &[], 5, first.next_page_token).await;
        let mut both = seen.clone();
        both.extend(rest);
        let before: Vec<String> = walk(&t, &a, &exp, None, &[], 1000, None)
            .await
            .into_iter()
            .skip(4)
            .collect();
        assert_eq!(both, before);

        // A token read against another order, or not a token at all, is refused.
        let by_acc = vec!["metrics.acc DESC".to_string()];
        let valued = t
            .search_runs(
                &a,
                std::slice::from_ref(&exp),
                None,
                &by_acc,
                ViewType::ActiveOnly,
                Some(2),
                None,
            )
            .await
            .expect("by acc")
            .next_page_token
            .expect("more");
        let by_lr = t
            .search_runs(
                &a,
                std::slice::from_ref(&exp),
                None,
                &["params.lr".into()],
                ViewType::ActiveOnly,
                Some(2),
                None,
            )
            .await
            .expect("by lr")
            .next_page_token
            .expect("more");
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        for (order, token) in [
            (vec![], valued.clone()),
            (vec!["params.lr".to_string()], valued.clone()),
            (by_acc.clone(), by_lr.clone()),
            (vec![], by_lr.clone()),
            (vec![], b64(r#"{"in": "all", "after": ["x", 1]}"#)),
            (vec![], b64(r#"{"in": "all", "after": [1000, 1]}"#)),
            (vec![], b64(r#"{"in": "all", "after": [1000, "a", "b"]}"#)),
            (
                by_acc.clone(),
                b64(r#"{"in": "valued", "after": [0.5, 1000, "a"]}"#),
            ),
            (vec![], b64("{\"in\": \"all\"")),
            (vec![], "%%%".to_string()),
        ] {
            let e = t
                .search_runs(
                    &a,
                    std::slice::from_ref(&exp),
                    None,
                    &order,
                    ViewType::ActiveOnly,
                    Some(2),
                    Some(&token),
                )
                .await
                .expect_err("a token that does not fit");
            assert!(e.to_string().contains("page token"), "{e}");
        }
    }
}

fn params(keys: &[&str]) -> Batch {
    Batch {
        params: keys
            .iter()
            .map(|k| Param {
                key: (*k).into(),
                value: "v".into(),
            })
            .collect(),
        ..Batch::default()
    }
}

#[tokio::test]
async fn a_run_holds_at_most_its_caps_and_its_user_is_the_callers() {
    for db in TestDb::all(common::SCHEMA).await {
        let (t, a, _) = setup(&db).await;
        let t = t.with_limits(qanat_tracking::RunLimits {
            max_params: 3,
            max_tags: 4,
        });
        // The client's mlflow.user is replaced by the authenticated caller.
        let run = t
            .create_run(
                &a,
                NewRun {
                    experiment_id: "0".into(),
                    user_id: "alice".into(),
                    tags: vec![Tag {
                        key: "mlflow.user".into(),
                        value: "mallory".into(),
                    }],
                    ..NewRun::default()
                },
            )
            .await
            .expect("run");
        let id = run.info.run_id.clone();
        let user = |r: &qanat_tracking::Run| {
            r.data
                .tags
                .iter()
                .find(|t| t.key == "mlflow.user")
                .map(|t| t.value.clone())
        };
        assert_eq!(user(&run).as_deref(), Some("alice"));
        let forged = Batch {
            tags: vec![Tag {
                key: "mlflow.user".into(),
                value: "mallory".into(),
            }],
            ..Batch::default()
        };
        let e = t
            .log_batch(&a, &id, forged, None)
            .await
            .expect_err("mlflow.user is the server's");
        assert!(e.to_string().contains("set by the server"), "{e}");

        t.log_batch(&a, &id, params(&["a", "b"]), None)
            .await
            .expect("two params");
        let e = t
            .log_batch(&a, &id, params(&["c", "d"]), None)
            .await
            .expect_err("a fourth param");
        assert!(e.to_string().contains("at most 3"), "{e}");
        // Refused whole: neither c nor d was stored; the cap still admits one more.
        let got = t.run(&a, &id).await.expect("run");
        assert_eq!(got.data.params.len(), 2, "{:?}", got.data.params);
        t.log_batch(&a, &id, params(&["c", "a"]), None)
            .await
            .expect("a third param, and a repeat");
        let tags = |keys: &[&str]| Batch {
            tags: keys
                .iter()
                .map(|k| Tag {
                    key: (*k).into(),
                    value: "v".into(),
                })
                .collect(),
            ..Batch::default()
        };
        t.log_batch(&a, &id, tags(&["x", "y"]), None)
            .await
            .expect("name, user and two tags");
        let e = t
            .log_batch(&a, &id, tags(&["z"]), None)
            .await
            .expect_err("a fifth tag");
        assert!(e.to_string().contains("at most 4"), "{e}");
        assert_eq!(
            user(&t.run(&a, &id).await.expect("run")).as_deref(),
            Some("alice")
        );
    }
}

/// A chart's curve: each run's ends and the first step at or after evenly spread
/// targets over that run's own steps, runs in the order asked for, other projects'
/// runs and unknown ids yielding nothing — on both backends.
#[tokio::test]
async fn curves_seek_spread_steps_and_keep_each_runs_ends() {
    for db in TestDb::all(common::SCHEMA).await {
        let (t, a, b) = setup(&db).await;
        let (r1, r2) = (new_run(&t, &a, "0").await, new_run(&t, &a, "0").await);
        // r1: steps 0..10; r2: steps 0, 10, 20, … 190 and two points at step 190.
        let logs: [(&String, Vec<i64>); 2] = [
            (&r1, (0..10).collect()),
            (&r2, (0..20).map(|s| s * 10).collect()),
        ];
        for (run, steps) in logs {
            let mut metrics: Vec<_> = steps
                .iter()
                .map(|&s| metric("loss", s as f64, 1, s))
                .collect();
            if run == &r2 {
                metrics.push(metric("loss", 0.5, 2, 190));
            }
            t.log_batch(
                &a,
                run,
                Batch {
                    metrics,
                    ..Batch::default()
                },
                None,
            )
            .await
            .expect("logged");
        }
        let runs = vec![r2.clone(), r1.clone(), "f".repeat(32), r2.clone()];
        let got = t.metric_curves(&a, &runs, "loss", 4).await.expect("curves");
        let steps = |r: &str| -> Vec<i64> {
            got.iter()
                .filter(|(run, _)| run == r)
                .map(|(_, m)| m.step)
                .collect()
        };
        assert_eq!(
            steps(&r1),
            [0, 2, 4, 6, 9],
            "targets 0, 2.25, 4.5, 6.75 and the last"
        );
        assert_eq!(
            steps(&r2),
            [0, 50, 100, 150, 190, 190],
            "every point at a chosen step"
        );
        assert_eq!(got[0].0, r2, "runs in the order asked for, once each");
        assert!(t
            .metric_curves(&a, &runs, "acc", 4)
            .await
            .expect("none")
            .is_empty());
        let other = t.metric_curves(&b, &runs, "loss", 4).await.expect("other");
        assert!(other.is_empty(), "another project's runs yield nothing");
    }
}

/// The chart's sampled history keeps at most `max_results` steps spread over the range
/// plus every run's first and last step, runs in the order asked for — on both
/// backends, reading only the chosen points.
#[tokio::test]
async fn sampled_history_keeps_spread_steps_and_each_runs_ends() {
    for db in TestDb::all(common::SCHEMA).await {
        let (t, a, _) = setup(&db).await;
        let (r1, r2) = (new_run(&t, &a, "0").await, new_run(&t, &a, "0").await);
        for (run, n) in [(&r1, 10), (&r2, 20)] {
            let metrics = (0..n).map(|s| metric("loss", 1.0, 1, s)).collect();
            t.log_batch(
                &a,
                run,
                Batch {
                    metrics,
                    ..Batch::default()
                },
                None,
            )
            .await
            .expect("logged");
        }
        let runs = vec![r2.clone(), r1.clone()];
        let got = t
            .metric_history_sampled(&a, &runs, "loss", 5, None)
            .await
            .expect("sampled");
        let steps = |r: &str| -> Vec<i64> {
            got.iter()
                .filter(|(run, _)| run == r)
                .map(|(_, m)| m.step)
                .collect()
        };
        assert_eq!(steps(&r1), [0, 4, 8, 9]);
        assert_eq!(steps(&r2), [0, 4, 8, 9, 12, 16, 19]);
        assert_eq!(got[0].0, r2, "runs in the order asked for");
        let ranged = t
            .metric_history_sampled(&a, &runs, "loss", 5, Some((0, 4)))
            .await
            .expect("ranged");
        assert_eq!(ranged.len(), 10);
    }
}
