//! The watcher: every second it looks at each monitor, cuts the windows of the
//! inference log that have closed, checks them, matches late labels with the windows
//! they belong to, and moves alerts along (see [`crate::actions`]).
//!
//! A window is claimed with a conditional UPDATE of the monitor's `next_start` in the
//! same transaction that stores its check, so two servers never store one window
//! twice, and a crash before the commit leaves the window to be checked again: the
//! check is computed from the log, which does not change.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use qanat_core::{Kind, ObjectRef};
use qanat_governance::Project;
use qanat_model::package::REFERENCE_PROFILE;
use qanat_serving::log::LogRecord;
use qanat_store::{format_micros, now_micros};
use serde_json::Value;
use sqlx::Row;

use crate::monitors::{check_from, parse_spec, report_key, to_json};
use crate::profile::TableProfile;
use crate::spec::MonitorSpec;
use crate::table;
use crate::wire::{CheckStatus, VersionCheck};
use crate::{quality, report, window, Monitors, Result};

/// How long after its time a record is sure to be in the log: the writer flushes
/// every second, so a window is cut only when nothing more of it can arrive.
const SETTLE_US: i64 = 3_000_000;
/// Windows one monitor may catch up on in one pass.
const CATCH_UP: usize = 10;
/// A time window this many periods behind skips ahead (the server was down).
const MAX_BEHIND: i64 = 1_000;
/// How many recent windows late labels are matched against.
const LATE_WINDOWS: i64 = 50;
/// How long a server's hold on a monitor lasts unless its next pass renews it: after
/// that, another server's watcher takes the monitor over.
const LEASE_US: i64 = 30_000_000;
/// A held lease with more than this left is not renewed yet: the pass that uses it
/// has at least this long before another server may take the monitor over.
const LEASE_KEEP_US: i64 = 20_000_000;

/// One monitor as the watcher works on it.
pub(crate) struct Watched {
    pub(crate) project: Project,
    pub(crate) deployment: String,
    pub(crate) spec: MonitorSpec,
    pub(crate) next_start: i64,
    pub(crate) checks: i64,
    /// Who set the monitor's spec (named in the audit of what it does).
    pub(crate) set_by: String,
}

/// What one version's references are, by version.
type References = HashMap<String, Option<Arc<TableProfile>>>;

/// The result of testing one window (computed off the async runtime).
struct Tested {
    versions: Vec<VersionCheck>,
    matched: Vec<String>,
    html: Option<String>,
}

/// Tests a window: each version's inputs and outputs against its reference, and its
/// rows against the labels. Pure: the same log and labels give the same check.
fn test_window(
    records: &[LogRecord],
    refs: &References,
    labels: &HashMap<String, Value>,
    spec: &MonitorSpec,
    cx: &report::Context,
    model: &str,
) -> Tested {
    let choices = spec.choices();
    let mut versions = Vec::new();
    let mut matched = Vec::new();
    let mut html = None;
    for (v, recs) in window::by_version(records) {
        let (rows_scored, ids) = window::scored(&recs, labels);
        matched.extend(ids);
        let rows = window::rows(&recs);
        let mut check = VersionCheck {
            version: v.clone(),
            rows,
            status: CheckStatus::NotEnoughData,
            drift: None,
            predictions: Vec::new(),
            quality: quality::score(&rows_scored),
            note: None,
        };
        let reference = refs.get(&v).cloned().flatten();
        match reference {
            _ if rows < spec.min_rows => {
                check.note = Some(format!(
                    "not enough data: {rows} rows, the monitor tests {} or more",
                    spec.min_rows
                ));
            }
            None => {
                check.status = CheckStatus::NoReference;
                check.note = Some(format!(
                    "version {v} of {model} has no reference profile: there is no {REFERENCE_PROFILE} with its model files, and its run logged no Qanat dataset (qanat://…) as its training input to profile; there is nothing to compare its traffic with"
                ));
            }
            Some(r) => {
                let features = window::features(&r);
                let current = window::inputs(&recs, &r);
                let drift = table::compare(&features, &current, &choices);
                if drift.columns == 0 {
                    check.note = Some(format!(
                        "none of the {} inputs the model was trained on is in the log",
                        features.columns.len()
                    ));
                } else {
                    check.status = if drift.drifted {
                        CheckStatus::Drift
                    } else {
                        CheckStatus::Ok
                    };
                }
                if !r.predictions.is_empty() {
                    let outputs = window::outputs(&recs, &r);
                    check.predictions =
                        table::compare(&window::predictions(&r), &outputs, &choices)
                            .by_column
                            .into_iter()
                            .filter(|c| c.statistic.is_some())
                            .collect();
                }
                if html.is_none() && drift.columns > 0 {
                    let cx = report::Context {
                        current: format!("{}, version {v}", cx.current),
                        reference: format!(
                            "{}, its training rows",
                            ObjectRef::at(Kind::Model, model, &v.to_string())
                        ),
                        ..cx.clone()
                    };
                    html = Some(report::html(&drift, &features, &current, &cx));
                }
                check.drift = Some(drift);
            }
        }
        versions.push(check);
    }
    Tested {
        versions,
        matched,
        html,
    }
}

/// Takes or renews `holder`'s lease on a monitor at `now` (micros): false while
/// another holder's lease runs.
pub(crate) async fn take_lease(
    meta: &qanat_store::MetaStore,
    holder: &str,
    project_id: &str,
    deployment: &str,
    now: i64,
) -> Result<bool> {
    let taken = sqlx::query(
        "UPDATE monitors SET lease_holder = $1, lease_until = $2 WHERE project_id = $3 AND deployment = $4 \
         AND (lease_holder IS NULL OR lease_holder = $5 OR lease_until < $6)",
    )
    .bind(holder)
    .bind(now + LEASE_US)
    .bind(project_id)
    .bind(deployment)
    .bind(holder)
    .bind(now)
    .execute(meta.writer())
    .await?;
    Ok(taken.rows_affected() == 1)
}

impl Monitors {
    /// Starts the watcher: a pass over every monitor each `every`.
    pub fn spawn(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = this.pass().await {
                    tracing::warn!(error = %e, "a monitoring pass failed; the next one retries");
                }
            }
        })
    }

    /// One pass over every monitor of every live project.
    #[qanat_macros::boxed]
    pub async fn pass(&self) -> Result<()> {
        let rows = sqlx::query(
            "SELECT m.*, p.name AS project_name FROM monitors m JOIN projects p ON p.id = m.project_id \
             WHERE p.deleted_at IS NULL ORDER BY m.project_id, m.deployment",
        )
        .fetch_all(self.inner.meta.reader())
        .await?;
        for r in rows {
            // One monitor that cannot be read (a spec a newer server wrote) or fails
            // does not stop the others.
            let deployment: String = r.try_get("deployment").unwrap_or_default();
            let result = async {
                let project_name: String = r.try_get("project_name")?;
                let mut w = Watched {
                    project: self.inner.gov.project(&project_name).await?,
                    deployment: r.try_get("deployment")?,
                    spec: parse_spec(&r.try_get::<String, _>("spec")?)?,
                    next_start: r.try_get("next_start")?,
                    checks: r.try_get("checks")?,
                    set_by: r.try_get("updated_by")?,
                };
                self.watch(&mut w).await
            }
            .await;
            if let Err(e) = result {
                tracing::warn!(deployment = %deployment, error = %e, "monitoring a deployment failed; the next pass retries");
            }
        }
        Ok(())
    }

    /// Whether this server holds the monitor's lease for the pass about to run. A
    /// lease with more than [`LEASE_KEEP_US`] left is used as it is; a shorter one is
    /// renewed (one write per monitor every ten seconds or so, not every pass).
    async fn hold(&self, w: &Watched) -> Result<bool> {
        let key = (w.project.id.to_string(), w.deployment.clone());
        let now = now_micros();
        let held = self
            .inner
            .leases
            .lock()
            .ok()
            .and_then(|m| m.get(&key).copied());
        if held.is_some_and(|until| until - now > LEASE_KEEP_US) {
            return Ok(true);
        }
        let taken = take_lease(
            &self.inner.meta,
            &self.inner.holder,
            w.project.id.as_str(),
            &w.deployment,
            now,
        )
        .await?;
        if let Ok(mut m) = self.inner.leases.lock() {
            if taken {
                m.insert(key, now + LEASE_US);
            } else {
                m.remove(&key);
            }
        }
        Ok(taken)
    }

    async fn watch(&self, w: &mut Watched) -> Result<()> {
        // One server at a time acts on a monitor: its alerts' actions (a canary
        // started, judged, promoted or taken back) are not claimed one by one.
        if !self.hold(w).await? {
            return Ok(());
        }
        let Some(d) = self
            .inner
            .serving
            .deployments()
            .find(&w.project, &w.deployment)
            .await?
        else {
            // The deployment was deleted: nothing answers, nothing to check.
            return Ok(());
        };
        let model = d.spec.model.clone();
        for _ in 0..CATCH_UP {
            let Some((end, records)) = self.next_window(w).await? else {
                break;
            };
            if !self.store_check(w, &model, end, records).await? {
                // Another server stored this window first.
                return Ok(());
            }
            self.evaluate(w, &model).await?;
        }
        if self.late_labels(w).await? {
            self.evaluate(w, &model).await?;
        }
        self.progress(w, &model).await
    }

    /// The next closed window, with its records, or `None` while it is open.
    async fn next_window(&self, w: &mut Watched) -> Result<Option<(i64, Vec<LogRecord>)>> {
        let settled = now_micros() - SETTLE_US;
        let storage = &self.inner.storage;
        let pid = w.project.id.as_str();
        if let Some(secs) = w.spec.window.seconds {
            let len = i64::try_from(secs).unwrap_or(i64::MAX / 2) * 1_000_000;
            let behind = (settled - w.next_start) / len;
            if behind > MAX_BEHIND {
                let to = w.next_start + (behind - 1) * len;
                let moved = sqlx::query(
                    "UPDATE monitors SET next_start = $1 WHERE project_id = $2 AND deployment = $3 AND next_start = $4",
                )
                .bind(to)
                .bind(pid)
                .bind(&w.deployment)
                .bind(w.next_start)
                .execute(self.inner.meta.writer())
                .await?;
                if moved.rows_affected() != 1 {
                    return Ok(None);
                }
                tracing::info!(deployment = %w.deployment, skipped = behind - 1, "the monitor was far behind (no server ran): windows skipped");
                w.next_start = to;
            }
            let end = w.next_start + len;
            if end > settled {
                return Ok(None);
            }
            let records =
                qanat_serving::log::read_between(storage, pid, &w.deployment, w.next_start, end)
                    .await?;
            return Ok(Some((end, records)));
        }
        let want = w.spec.window.rows.unwrap_or(u64::MAX);
        if settled <= w.next_start {
            return Ok(None);
        }
        let mut records =
            qanat_serving::log::read_between(storage, pid, &w.deployment, w.next_start, settled)
                .await?;
        let mut seen = 0u64;
        let Some(last) = records.iter().position(|r| {
            if r.role == "answer" {
                seen += u64::from(r.rows);
            }
            seen >= want
        }) else {
            return Ok(None);
        };
        let end = records[last].time + 1;
        records.retain(|r| r.time < end);
        Ok(Some((end, records)))
    }

    /// Labels not matched yet (and, with `check`, those matched in that window).
    async fn labels(&self, w: &Watched, check: Option<i64>) -> Result<HashMap<String, Value>> {
        let rows = sqlx::query(
            "SELECT request_id, label FROM monitor_labels WHERE project_id = $1 AND deployment = $2 \
             AND (check_no IS NULL OR check_no = $3)",
        )
        .bind(w.project.id.as_str())
        .bind(&w.deployment)
        .bind(check.unwrap_or(-1))
        .fetch_all(self.inner.meta.reader())
        .await?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get("request_id")?;
                let label: String = r.try_get("label")?;
                Ok((id, serde_json::from_str(&label).unwrap_or(Value::Null)))
            })
            .collect()
    }

    async fn references(
        &self,
        w: &Watched,
        model: &str,
        records: &[LogRecord],
    ) -> Result<References> {
        let mut refs = HashMap::new();
        for r in records {
            if !refs.contains_key(&r.version) && r.role == "answer" {
                let p = self.reference(&w.project, model, &r.version).await?;
                refs.insert(r.version.clone(), p);
            }
        }
        Ok(refs)
    }

    /// Tests the window `[w.next_start, end)` and stores its check, claiming the
    /// window. False when another server claimed it first.
    async fn store_check(
        &self,
        w: &mut Watched,
        model: &str,
        end: i64,
        records: Vec<LogRecord>,
    ) -> Result<bool> {
        let n = w.checks + 1;
        let refs = self.references(w, model, &records).await?;
        // Labels posted from here on are looked for again by `late_labels`.
        let looked = now_micros();
        let labels = self.labels(w, None).await?;
        let cx = report::Context {
            title: format!("{} — check {n}", w.deployment),
            reference: String::new(),
            current: format!(
                "deployment {} from {} to {}",
                w.deployment,
                format_micros(w.next_start),
                format_micros(end)
            ),
            generated_at: format_micros(now_micros()),
        };
        let spec = w.spec.clone();
        let model_name = model.to_string();
        let (tested, rows) = tokio::task::spawn_blocking(move || {
            let rows: u64 = records
                .iter()
                .filter(|r| r.role == "answer")
                .map(|r| u64::from(r.rows))
                .sum();
            (
                test_window(&records, &refs, &labels, &spec, &cx, &model_name),
                rows,
            )
        })
        .await
        .map_err(|e| crate::Error::Internal(format!("testing a window stopped: {e}")))?;
        let pid = w.project.id.as_str().to_string();
        let key = match &tested.html {
            Some(html) => {
                // A key of its own: a server that loses the claim below leaves an
                // orphan, never a report of another window under this check's key.
                let key = report_key(&pid, &w.deployment, n);
                let location = self.inner.storage.default_location().to_string();
                self.inner
                    .storage
                    .put_bytes(&location, &key.parse()?, bytes::Bytes::from(html.clone()))
                    .await?;
                Some(key)
            }
            None => None,
        };
        let status = tested
            .versions
            .first()
            .map_or(CheckStatus::NotEnoughData, |v| v.status);
        let now = now_micros();
        let mut tx = self.inner.meta.writer().begin().await?;
        let claimed = sqlx::query(
            "UPDATE monitors SET next_start = $1, checks = $2 WHERE project_id = $3 AND deployment = $4 AND next_start = $5 AND checks = $6",
        )
        .bind(end)
        .bind(n)
        .bind(&pid)
        .bind(&w.deployment)
        .bind(w.next_start)
        .bind(w.checks)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if claimed != 1 {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO monitor_checks (project_id, deployment, check_no, window_start, window_end, rows_seen, status, result, report_key, labels_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(&pid)
        .bind(&w.deployment)
        .bind(n)
        .bind(w.next_start)
        .bind(end)
        .bind(i64::try_from(rows).unwrap_or(i64::MAX))
        .bind(status.as_str())
        .bind(to_json(&tested.versions)?)
        .bind(&key)
        .bind(looked)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        mark_matched(&mut tx, &pid, &w.deployment, n, &tested.matched).await?;
        let mut parents = vec![(
            ObjectRef::unversioned(Kind::InferenceLog, w.deployment.as_str()),
            "computed_from",
        )];
        parents.extend(tested.versions.iter().map(|v| {
            (
                ObjectRef::at(Kind::Model, model, &v.version),
                "compared_with",
            )
        }));
        qanat_governance::lineage::record_edges(
            &mut tx,
            &w.project.id,
            &drift_report(&w.deployment, n),
            &parents,
        )
        .await?;
        tx.commit().await?;
        tracing::info!(deployment = %w.deployment, check = n, status = %status, rows, "window checked");
        w.next_start = end;
        w.checks = n;
        Ok(true)
    }

    /// Matches labels posted since recent windows were checked with those windows,
    /// and rescores them. True when a window's quality changed.
    async fn late_labels(&self, w: &Watched) -> Result<bool> {
        let pid = w.project.id.as_str();
        let newest: Option<i64> = sqlx::query(
            "SELECT MAX(created_at) AS t FROM monitor_labels WHERE project_id = $1 AND deployment = $2 AND check_no IS NULL",
        )
        .bind(pid)
        .bind(&w.deployment)
        .fetch_one(self.inner.meta.reader())
        .await?
        .try_get("t")?;
        let Some(newest) = newest else {
            return Ok(false);
        };
        let stale = sqlx::query(
            "SELECT * FROM monitor_checks WHERE project_id = $1 AND deployment = $2 AND labels_at <= $3 AND window_start <= $3 \
             ORDER BY check_no DESC LIMIT $4",
        )
        .bind(pid)
        .bind(&w.deployment)
        .bind(newest)
        .bind(LATE_WINDOWS)
        .fetch_all(self.inner.meta.reader())
        .await?;
        let mut changed = false;
        for r in stale {
            let mut check = check_from(&r)?;
            let (start, end): (i64, i64) = (r.try_get("window_start")?, r.try_get("window_end")?);
            let records = qanat_serving::log::read_between(
                &self.inner.storage,
                pid,
                &w.deployment,
                start,
                end,
            )
            .await?;
            let looked = now_micros();
            let labels = self.labels(w, Some(check.check)).await?;
            let (scores, matched) = tokio::task::spawn_blocking(move || {
                let mut scores = BTreeMap::new();
                let mut matched = Vec::new();
                for (v, recs) in window::by_version(&records) {
                    let (rows, ids) = window::scored(&recs, &labels);
                    matched.extend(ids);
                    scores.insert(v, quality::score(&rows));
                }
                (scores, matched)
            })
            .await
            .map_err(|e| crate::Error::Internal(format!("matching labels stopped: {e}")))?;
            for v in &mut check.versions {
                if let Some(q) = scores.get(&v.version) {
                    if *q != v.quality {
                        v.quality = q.clone();
                        changed = true;
                    }
                }
            }
            let mut tx = self.inner.meta.writer().begin().await?;
            sqlx::query(
                "UPDATE monitor_checks SET result = $1, labels_at = $2 WHERE project_id = $3 AND deployment = $4 AND check_no = $5",
            )
            .bind(to_json(&check.versions)?)
            .bind(looked)
            .bind(pid)
            .bind(&w.deployment)
            .bind(check.check)
            .execute(&mut *tx)
            .await?;
            mark_matched(&mut tx, pid, &w.deployment, check.check, &matched).await?;
            tx.commit().await?;
        }
        Ok(changed)
    }
}

/// The lineage name of a check's drift report.
pub(crate) fn drift_report(deployment: &str, check: i64) -> ObjectRef {
    ObjectRef::version(Kind::DriftReport, deployment, check)
}

async fn mark_matched(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    project_id: &str,
    deployment: &str,
    check: i64,
    ids: &[String],
) -> Result<()> {
    for id in ids {
        sqlx::query(
            "UPDATE monitor_labels SET check_no = $1 WHERE project_id = $2 AND deployment = $3 AND request_id = $4",
        )
        .bind(check)
        .bind(project_id)
        .bind(deployment)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// One holder at a time; the lease passes on when it runs out, not before.
    #[tokio::test]
    async fn a_monitor_is_leased_to_one_server_at_a_time() {
        use qanat_store::testing::TestDb;
        for db in TestDb::all(&[&qanat_governance::MIGRATIONS, &crate::MIGRATIONS]).await {
            let gov = qanat_governance::Governance::new(db.store.clone());
            let [p] = qanat_governance::testing::projects(&gov, ["m"]).await;
            sqlx::query(
                "INSERT INTO monitors (project_id, deployment, spec, next_start, checks, created_at, created_by, updated_at, updated_by) \
                 VALUES ($1, 'web', '{}', 0, 0, 0, 'admin', 0, 'admin')",
            )
            .bind(p.id.as_str())
            .execute(db.store.writer())
            .await
            .expect("monitor row");
            let lease = |holder: &'static str, at: i64| {
                let meta = db.store.clone();
                let pid = p.id.to_string();
                async move {
                    take_lease(&meta, holder, &pid, "web", at)
                        .await
                        .expect("lease")
                }
            };
            assert!(lease("a", 0).await, "a free monitor is taken");
            assert!(!lease("b", 1_000_000).await, "a running lease holds");
            assert!(lease("a", LEASE_US - 1).await, "its holder renews it");
            assert!(!lease("b", LEASE_US + 1).await, "renewed, it holds on");
            assert!(lease("b", 2 * LEASE_US).await, "run out, it passes on");
            assert!(
                !lease("a", 2 * LEASE_US + 1).await,
                "and the old holder waits"
            );
            assert!(
                !take_lease(&db.store, "a", p.id.as_str(), "nope", 0)
                    .await
                    .expect("lease"),
                "no monitor, no lease"
            );
        }
    }

    fn record(i: usize, version: &str, x: f64) -> LogRecord {
        let label = if x > 0.5 { "a" } else { "b" };
        LogRecord {
            time: i as i64,
            request_id: format!("r{i}"),
            ..crate::window::tests::record(
                version,
                json!({"x": [x]}),
                json!({"label": [label], "probability": [[x.min(1.0)]]}),
                1,
            )
        }
    }

    fn reference() -> Arc<TableProfile> {
        let xs: Vec<f64> = (0..500).map(|i| f64::from(i) / 500.0).collect();
        let ys: Vec<Option<String>> = xs
            .iter()
            .map(|x| Some(if *x > 0.5 { "a" } else { "b" }.to_string()))
            .collect();
        let mut r = crate::profile::reference_of(&[
            ("x".into(), crate::profile::Values::Numeric(&xs)),
            ("y".into(), crate::profile::Values::Text(&ys)),
        ]);
        r.target = Some("y".into());
        r.predictions = vec![(
            "label".into(),
            crate::profile::ColumnProfile::Categorical({
                let mut p = crate::profile::CategoricalProfile::default();
                for y in &ys {
                    p.add(y.as_deref());
                }
                p
            }),
        )];
        Arc::new(r)
    }

    #[test]
    fn a_shifted_window_drifts_and_a_quiet_one_has_not_enough_data() {
        let spec: MonitorSpec =
            serde_json::from_value(json!({"window": {"rows": 100}})).expect("spec");
        let refs = HashMap::from([("1".to_string(), Some(reference()))]);
        let same: Vec<LogRecord> = (0..200)
            .map(|i| record(i, "1", (i * 7 % 200) as f64 / 200.0))
            .collect();
        let shifted: Vec<LogRecord> = (0..200)
            .map(|i| record(i, "1", 0.6 + (i % 50) as f64 / 125.0))
            .collect();
        let cx = report::Context::default();
        let labels = HashMap::from([("r3".to_string(), json!("b"))]);
        let t = test_window(&same, &refs, &labels, &spec, &cx, "m");
        assert_eq!(t.versions[0].status, CheckStatus::Ok, "{:?}", t.versions[0]);
        assert_eq!(t.matched, ["r3"]);
        assert_eq!(t.versions[0].quality.labelled, 1);
        assert!(t.html.is_some());
        let t = test_window(&shifted, &refs, &HashMap::new(), &spec, &cx, "m");
        let v = &t.versions[0];
        assert_eq!(v.status, CheckStatus::Drift, "{v:?}");
        assert_eq!(v.prediction_drift(), Some(true));
        // The target is not an input: it is neither tested nor reported missing.
        let cols: Vec<&str> = v
            .drift
            .as_ref()
            .expect("tested")
            .by_column
            .iter()
            .map(|c| c.column.as_str())
            .collect();
        assert_eq!(cols, ["x"]);
        let few = &same[..10];
        let t = test_window(few, &refs, &HashMap::new(), &spec, &cx, "m");
        assert_eq!(t.versions[0].status, CheckStatus::NotEnoughData);
        assert!(t.versions[0]
            .note
            .as_deref()
            .is_some_and(|n| n.contains("not enough data")));
        assert!(t.html.is_none(), "no report for an untested window");
        let t = test_window(&[], &refs, &HashMap::new(), &spec, &cx, "m");
        assert!(t.versions.is_empty(), "no traffic: no version, no alarm");
        let t = test_window(
            &same,
            &HashMap::from([("1".to_string(), None)]),
            &HashMap::new(),
            &spec,
            &cx,
            "m",
        );
        assert_eq!(t.versions[0].status, CheckStatus::NoReference);
    }
}
