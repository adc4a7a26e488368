//! Alert rules and what they do. After each check (and after late labels rescore a
//! window) every rule looks at the newest windows; one that fires records an alert
//! and runs its actions: an event for webhooks and NATS, a rollback, or a retraining
//! job whose registered version then gets a canary share of the traffic, judged on
//! live quality against the primary, and promoted or rolled back.
//!
//! Every action is audited under the `monitor` service actor in the transaction that
//! records it, and the objects it makes are tied into lineage: inference log → drift
//! report → retraining run → model version.

use qanat_core::{Kind, ObjectRef, Selector};
use qanat_governance::{append_audit_in, AuditRecord};
use qanat_serving::{Deployment, DeploymentSpec, Target};
use qanat_store::{format_micros, now_micros};
use serde_json::json;
use sqlx::Row;

use crate::monitors::{alert_from, check_from, to_json};
use crate::spec::{ActionKind, AlertRule, Metric};
use crate::watch::{drift_report, Watched};
use crate::wire::{ActionOutcome, Alert, Check};
use crate::{Error, Monitors, Result};

/// Checks looked at when rules are evaluated.
const HISTORY: i64 = 200;

const ACTIVE: [&str; 3] = ["open", "retraining", "canary"];

/// Optimize jobs followed back from a derived version to the job that trained it.
const MAX_DERIVATIONS: usize = 4;

/// Each pinned dataset input unpinned (`dataset:name`): the newest data.
fn unpin_inputs(spec: &mut qanat_jobs::JobSpec) {
    spec.inputs = spec.inputs.iter().map(ObjectRef::unpinned).collect();
}

fn outcome(
    action: ActionKind,
    outcome: &str,
    message: String,
    object: Option<String>,
) -> ActionOutcome {
    ActionOutcome {
        action,
        at: format_micros(now_micros()),
        outcome: outcome.into(),
        message,
        object,
    }
}

/// Whether `value` is worse than `baseline` by more than `by` in `metric`'s sense.
fn worse(metric: Metric, value: f64, baseline: f64, by: f64) -> bool {
    if metric.higher_is_better() {
        baseline - value > by
    } else {
        value - baseline > by
    }
}

/// The value `rule` compares in `check` and whether it crosses, given the checks
/// before it (newest first) for a `drop` rule's baseline: the last value of the
/// version that answered before.
fn crossing(rule: &AlertRule, check: &Check, earlier: &[Check]) -> Option<(f64, bool)> {
    let primary = check.primary()?;
    let value = primary.value(rule.metric)?;
    match rule.drop {
        None => Some((value, rule.crossed(value))),
        Some(by) => {
            let baseline = earlier.iter().find_map(|c| {
                let p = c.primary()?;
                (p.version != primary.version)
                    .then(|| p.value(rule.metric))
                    .flatten()
            })?;
            Some((value, worse(rule.metric, value, baseline, by)))
        }
    }
}

/// The checks `rule` fires on: its `windows` newest valued checks (newest first),
/// when each crosses. `checks` is newest first.
fn fires<'a>(rule: &AlertRule, checks: &'a [Check]) -> Option<Vec<&'a Check>> {
    let mut streak = Vec::new();
    for (i, c) in checks.iter().enumerate() {
        let Some((_, crossed)) = crossing(rule, c, &checks[i + 1..]) else {
            continue;
        };
        if !crossed {
            return None;
        }
        streak.push(c);
        if streak.len() == rule.windows as usize {
            return Some(streak);
        }
    }
    None
}

/// Whether an alert last updated at `at` (RFC 3339) is over five minutes old.
fn stale(at: &str, now: i64) -> bool {
    qanat_store::parse_micros(at).is_ok_and(|t| now - t > 300_000_000)
}

/// Whether a window after check `fired` and before check `streak_start` had the rule's
/// metric without crossing. `checks` is newest first.
fn rearmed(rule: &AlertRule, checks: &[Check], fired: i64, streak_start: i64) -> bool {
    checks.iter().enumerate().any(|(i, c)| {
        c.check > fired
            && c.check < streak_start
            && crossing(rule, c, &checks[i + 1..]).is_some_and(|(_, crossed)| !crossed)
    })
}

impl Monitors {
    async fn recent_checks(&self, w: &Watched) -> Result<Vec<Check>> {
        let rows = sqlx::query(
            "SELECT * FROM monitor_checks WHERE project_id = $1 AND deployment = $2 ORDER BY check_no DESC LIMIT $3",
        )
        .bind(w.project.id.as_str())
        .bind(&w.deployment)
        .bind(HISTORY)
        .fetch_all(self.inner.meta.reader())
        .await?;
        rows.iter().map(check_from).collect()
    }

    async fn alert_rows(&self, w: &Watched, active: bool) -> Result<Vec<Alert>> {
        let rows = sqlx::query(
            "SELECT * FROM monitor_alerts WHERE project_id = $1 AND deployment = $2 ORDER BY alert_no DESC LIMIT 100",
        )
        .bind(w.project.id.as_str())
        .bind(&w.deployment)
        .fetch_all(self.inner.meta.reader())
        .await?;
        Ok(rows
            .iter()
            .map(alert_from)
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .filter(|a| !active || ACTIVE.contains(&a.state.as_str()))
            .collect())
    }

    /// Runs every rule on the newest checks, then judges a canary in progress.
    pub(crate) async fn evaluate(&self, w: &Watched, model: &str) -> Result<()> {
        let checks = self.recent_checks(w).await?;
        let alerts = self.alert_rows(w, false).await?;
        let now = now_micros();
        for rule in &w.spec.alerts {
            let active = alerts.iter().any(|a| {
                a.rule == rule.name
                    && ACTIVE.contains(&a.state.as_str())
                    // An alert left `open` by a crash mid-action stops blocking.
                    && !(a.state == "open" && stale(&a.updated_at, now))
            });
            if active {
                continue;
            }
            let Some(streak) = fires(rule, &checks) else {
                continue;
            };
            let oldest = streak.last().map_or(0, |c| c.check);
            if let Some(last) = alerts.iter().find(|a| a.rule == rule.name) {
                // Once per episode: after an alert the rule re-arms only when a window
                // after it passes, so a persisting drift (or the windows still holding
                // a rolled-back version's traffic) does not fire it again and again.
                if !rearmed(rule, &checks, last.check, oldest) {
                    continue;
                }
            }
            let newest = streak[0];
            let (value, _) = crossing(rule, newest, &checks[1..]).unwrap_or((f64::NAN, true));
            self.fire(w, model, rule, newest, value).await?;
        }
        for alert in self.alert_rows(w, true).await? {
            if alert.state == "canary" {
                self.judge_canary(w, model, alert, &checks).await?;
            }
        }
        Ok(())
    }

    fn audit(&self, w: &Watched, action: &str, resource: String, detail: String) -> AuditRecord {
        AuditRecord::by_service("monitor", action, resource, Some(&w.project.name)).with_detail(
            format!("{detail} (monitor of {} set by {})", w.deployment, w.set_by),
        )
    }

    /// Records a new alert and runs its first actions.
    async fn fire(
        &self,
        w: &Watched,
        model: &str,
        rule: &AlertRule,
        check: &Check,
        value: f64,
    ) -> Result<()> {
        let version = check.primary().map_or(String::new(), |p| p.version.clone());
        let now = now_micros();
        let mut alert = Alert {
            deployment: w.deployment.clone(),
            alert: 0,
            rule: rule.name.clone(),
            condition: rule.describe(),
            metric: rule.metric,
            value,
            version: version.clone(),
            check: check.check,
            state: "open".into(),
            actions: Vec::new(),
            job: None,
            rederive: Vec::new(),
            candidate: None,
            canary_passed: 0,
            canary_checks: Vec::new(),
            canary_revision: None,
            canary_since: None,
            created_at: format_micros(now),
            updated_at: format_micros(now),
        };
        let pid = w.project.id.as_str();
        let mut tx = self.inner.meta.writer().begin().await?;
        let n: i64 = sqlx::query(
            "SELECT COALESCE(MAX(alert_no), 0) + 1 AS n FROM monitor_alerts WHERE project_id = $1 AND deployment = $2",
        )
        .bind(pid)
        .bind(&w.deployment)
        .fetch_one(&mut *tx)
        .await?
        .try_get("n")?;
        alert.alert = n;
        let has = |a| rule.actions.contains(&a);
        if has(ActionKind::Notify) {
            let data = json!({
                "deployment": w.deployment,
                "alert": n,
                "rule": rule.name,
                "condition": alert.condition,
                "metric": rule.metric,
                "value": value,
                "model": model,
                "version": version,
                "check": check.check,
                "report": check.report.then(|| format!(
                    "/api/v1/projects/{}/monitors/{}/checks/{}/report",
                    w.project.name, w.deployment, check.check
                )),
                "actions": rule.actions,
            });
            let queued = self
                .inner
                .outbox
                .record(
                    &mut tx,
                    &w.project.id,
                    &w.project.name,
                    qanat_events::EventType::MONITOR_ALERT_CREATED,
                    data,
                )
                .await?;
            alert.actions.push(outcome(
                ActionKind::Notify,
                "done",
                format!(
                    "monitor_alert.created queued for {queued} subscriber(s) (webhooks and NATS)"
                ),
                None,
            ));
        }
        let resource = format!(
            "project:{}/monitor:{}/alert:{n}",
            w.project.name, w.deployment
        );
        append_audit_in(
            &mut tx,
            &self.audit(
                w,
                "monitor.alert",
                resource,
                format!(
                    "{} fired on check {} ({} = {value})",
                    rule.name, check.check, rule.metric
                ),
            ),
        )
        .await?;
        insert_alert(&mut tx, pid, &alert).await?;
        tx.commit().await?;
        self.inner.outbox.wake();
        tracing::info!(deployment = %w.deployment, alert = n, rule = %rule.name, value, "alert fired");
        if has(ActionKind::Rollback) {
            let o = self.rollback(w, model, &alert).await;
            alert.actions.push(o);
            alert.state = "done".into();
        }
        if has(ActionKind::Retrain) {
            match self.retrain(w, model, &mut alert).await {
                Ok((job, o)) => {
                    alert.job = Some(job);
                    alert.actions.push(o);
                    alert.state = "retraining".into();
                }
                Err(o) => {
                    alert.actions.push(o);
                    alert.state = "failed".into();
                }
            }
        }
        if alert.state == "open" {
            alert.state = "done".into();
        }
        self.save_alert(w, &alert).await
    }

    async fn save_alert(&self, w: &Watched, alert: &Alert) -> Result<()> {
        sqlx::query(
            "UPDATE monitor_alerts SET state = $1, detail = $2, updated_at = $3 WHERE project_id = $4 AND deployment = $5 AND alert_no = $6",
        )
        .bind(&alert.state)
        .bind(to_json(alert)?)
        .bind(now_micros())
        .bind(w.project.id.as_str())
        .bind(&w.deployment)
        .bind(alert.alert)
        .execute(self.inner.meta.writer())
        .await?;
        Ok(())
    }

    async fn deployment(&self, w: &Watched) -> Result<Deployment> {
        Ok(self
            .inner
            .serving
            .deployments()
            .get(&w.project, &w.deployment)
            .await?)
    }

    /// Switches this server's route after a change the monitor made (the change is
    /// committed; other servers follow within their refresh period).
    async fn switch(&self, w: &Watched) {
        if let Err(e) = self.inner.serving.refresh(&w.project, &w.deployment).await {
            tracing::warn!(deployment = %w.deployment, error = %e, "the monitor changed a deployment, but this server's route could not be rebuilt yet");
        }
    }

    /// Undoes the last change of what answers: the alias the primary target follows
    /// moves back, or the deployment's previous revision is restored.
    async fn rollback(&self, w: &Watched, model: &str, alert: &Alert) -> ActionOutcome {
        let result: Result<(String, String)> = async {
            let d = self.deployment(w).await?;
            let why = format!(
                "alert {} ({}) on check {}",
                alert.alert, alert.condition, alert.check
            );
            let alias = d.spec.weighted().next().and_then(|t| t.alias.clone());
            match alias {
                Some(alias) => {
                    let rec = self.audit(
                        w,
                        "model.alias.rollback",
                        format!(
                            "project:{}/{}",
                            w.project.name,
                            ObjectRef::at(Kind::Model, model, &alias)
                        ),
                        why,
                    );
                    let (from, to) = self
                        .inner
                        .tracking
                        .rollback_alias(&w.project, model, &alias, &rec)
                        .await?;
                    self.switch(w).await;
                    Ok((
                        format!(
                            "{} moved back from version {} to {to}",
                            ObjectRef::at(Kind::Model, model, &alias),
                            from.unwrap_or_else(|| "?".into())
                        ),
                        ObjectRef::at(Kind::Model, model, &to).to_string(),
                    ))
                }
                None => {
                    let rec = self.audit(w, "deployment.rollback", String::new(), why);
                    let d = self
                        .inner
                        .serving
                        .deployments()
                        .rollback(&w.project, &w.deployment, None, "monitor", Some(&rec))
                        .await?;
                    self.switch(w).await;
                    Ok((
                        format!(
                            "deployment {} restored to an earlier revision",
                            w.deployment
                        ),
                        format!("deployment:{}@{}", w.deployment, d.revision),
                    ))
                }
            }
        }
        .await;
        match result {
            Ok((message, object)) => outcome(ActionKind::Rollback, "done", message, Some(object)),
            Err(e) => outcome(ActionKind::Rollback, "failed", e.to_string(), None),
        }
    }

    /// Submits the job that trained the alert's version again, each dataset input on
    /// its newest version. A version an `optimize` job derived from a trained one is
    /// retrained from where it came from: the training job runs again, and the
    /// derivations that made the alert's version from its output are queued in
    /// [`Alert::rederive`] to run, in order, on what it registers.
    async fn retrain(
        &self,
        w: &Watched,
        model: &str,
        alert: &mut Alert,
    ) -> std::result::Result<(String, ActionOutcome), ActionOutcome> {
        let failed = |m: String| outcome(ActionKind::Retrain, "failed", m, None);
        let (mut name, mut version) = (model.to_string(), alert.version.clone());
        let mut derivations = Vec::new();
        let (spec, run_id) = loop {
            let v = self
                .inner
                .tracking
                .model_version(&w.project, &name, &version)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let Some(run_id) = v.run_id.clone() else {
                return Err(failed(format!(
                    "{} has no run: it was not trained by a job here, so there is nothing to run again",
                    ObjectRef::at(Kind::Model, name.as_str(), &version)
                )));
            };
            let spec = self
                .inner
                .jobs
                .spec_of_run(&w.project, &run_id)
                .await
                .map_err(|e| failed(e.to_string()))?
                .ok_or_else(|| {
                    failed(format!(
                        "run {run_id} of {} was not made by a job here: there is no job spec to run again",
                        ObjectRef::at(Kind::Model, name.as_str(), &version)
                    ))
                })?;
            if spec.kind != "optimize" {
                break (spec, run_id);
            }
            if derivations.len() >= MAX_DERIVATIONS {
                return Err(failed(format!(
                    "{model} version {} is derived through more than {MAX_DERIVATIONS} optimize jobs: not retrained",
                    alert.version
                )));
            }
            // The exact source the derivation read, as the registry recorded it.
            let source = v
                .tags
                .iter()
                .find(|t| t.key == qanat_tracking::DERIVED_FROM_TAG)
                .and_then(|t| t.value.parse::<ObjectRef>().ok())
                .and_then(|r| match r.selector {
                    Some(Selector::Version(n)) => Some((r.name, n.to_string())),
                    _ => None,
                })
                .ok_or_else(|| {
                    failed(format!(
                        "{} was made by an optimize job but names no source version ({})",
                        ObjectRef::at(Kind::Model, name.as_str(), &version),
                        qanat_tracking::DERIVED_FROM_TAG
                    ))
                })?;
            derivations.push(spec);
            (name, version) = source;
        };
        let mut spec = spec;
        unpin_inputs(&mut spec);
        spec.name = format!("retrain-{}", w.deployment);
        // Innermost first: the derivation of the trained version runs first.
        derivations.reverse();
        for d in &mut derivations {
            unpin_inputs(d);
        }
        let derived = if derivations.is_empty() {
            String::new()
        } else {
            format!(
                ", then {} optimize job(s) to derive the result as version {} was",
                derivations.len(),
                alert.version
            )
        };
        alert.rederive = derivations;
        self.submit(
            w,
            spec,
            format!(
                "retraining {name} (version {version} trained by run {run_id}) for alert {} ({}){derived}",
                alert.alert, alert.condition
            ),
            |job| format!("retraining job {job} submitted (the job of run {run_id}, on the newest data){derived}"),
        )
        .await
        .map_err(|e| failed(format!("the retraining job was refused: {e}")))
    }

    /// Submits a job for an alert, audited with `detail`; the outcome says `message`
    /// of the job's id.
    async fn submit(
        &self,
        w: &Watched,
        spec: qanat_jobs::JobSpec,
        detail: String,
        message: impl FnOnce(&str) -> String,
    ) -> Result<(String, ActionOutcome)> {
        let rec = self.audit(w, "job.submit", String::new(), detail);
        let job = self
            .inner
            .jobs
            .submit(&w.project, spec, "monitor", Some(&rec))
            .await?;
        let o = outcome(
            ActionKind::Retrain,
            "waiting",
            message(&job.job_id),
            Some(format!("job:{}", job.job_id)),
        );
        Ok((job.job_id, o))
    }

    /// Submits the next derivation of an alert's retraining: `spec` run on `source`
    /// (`name@version`, what the step before registered).
    async fn rederive(
        &self,
        w: &Watched,
        alert: &Alert,
        mut spec: qanat_jobs::JobSpec,
        source: &str,
    ) -> Result<(String, ActionOutcome)> {
        spec.params.insert("model".into(), json!(source));
        spec.name = format!("rederive-{}", w.deployment);
        let method = ["quantize", "prune", "distill"]
            .iter()
            .find_map(|k| {
                spec.params.get(*k).map(|v| match v.as_str() {
                    Some(s) => format!("{k} {s}"),
                    None => format!("{k} {v}"),
                })
            })
            .unwrap_or_else(|| "optimize".into());
        self.submit(
            w,
            spec,
            format!(
                "deriving from {} ({method}) as version {} was derived, for alert {}",
                ObjectRef::parse_of(Kind::Model, source)
                    .map_or_else(|_| source.to_string(), |r| r.to_string()),
                alert.version,
                alert.alert
            ),
            |job| {
                format!(
                    "optimize job {job} submitted: {method} of {}, as version {} was made",
                    ObjectRef::parse_of(Kind::Model, source)
                        .map_or_else(|_| source.to_string(), |r| r.to_string()),
                    alert.version
                )
            },
        )
        .await
    }

    /// Moves alerts waiting on a retraining job along.
    pub(crate) async fn progress(&self, w: &Watched, model: &str) -> Result<()> {
        for alert in self.alert_rows(w, true).await? {
            if alert.state != "retraining" {
                continue;
            }
            let n = alert.alert;
            // One alert's trouble (a job purged meanwhile) does not hold the others.
            if let Err(e) = self.progress_one(w, model, alert).await {
                tracing::warn!(deployment = %w.deployment, alert = n, error = %e, "moving an alert along failed; the next pass retries");
            }
        }
        Ok(())
    }

    async fn progress_one(&self, w: &Watched, model: &str, mut alert: Alert) -> Result<()> {
        let Some(job_id) = alert.job.clone() else {
            return Ok(());
        };
        let detail = self.inner.jobs.get(&w.project, &job_id).await?;
        let job = detail.job.clone();
        if !job.is_finished() {
            return Ok(());
        }
        if job.state != "succeeded" {
            alert.actions.push(outcome(
                ActionKind::Retrain,
                "failed",
                format!(
                    "retraining job {job_id} {}: {}",
                    job.state,
                    job.reason.unwrap_or_default()
                ),
                Some(format!("job:{job_id}")),
            ));
            alert.state = "failed".into();
            return self.save_alert(w, &alert).await;
        }
        let run_id = job.run_id.clone().unwrap_or_default();
        // Where the step registers: a training job's `register`; an optimize job's
        // `register`, else its source's model.
        let param = |k: &str| {
            detail
                .spec
                .params
                .get(k)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let into = param("register")
            .or_else(|| {
                (detail.spec.kind == "optimize")
                    .then(|| param("model"))
                    .flatten()
                    .and_then(|m| ObjectRef::parse_of(qanat_core::Kind::Model, &m).ok())
                    .map(|r| r.name)
            })
            .unwrap_or_else(|| model.to_string());
        let versions = self.inner.tracking.versions(&w.project, &into).await?;
        let Some(v) = versions
            .iter()
            .find(|v| v.run_id.as_deref() == Some(run_id.as_str()))
        else {
            alert.actions.push(outcome(
                    ActionKind::Retrain,
                    "failed",
                    format!("retraining job {job_id} succeeded but registered no version of {into} (its spec has no `register: {into}`)"),
                    Some(ObjectRef::run(run_id.as_str()).to_string()),
                ));
            alert.state = "failed".into();
            return self.save_alert(w, &alert).await;
        };
        let candidate = v.version.clone();
        let registered = ObjectRef::at(Kind::Model, into.as_str(), &candidate);
        let mut tx = self.inner.meta.writer().begin().await?;
        qanat_governance::lineage::record_edges(
            &mut tx,
            &w.project.id,
            &ObjectRef::run(run_id.as_str()),
            &[(drift_report(&w.deployment, alert.check), "triggered_by")],
        )
        .await?;
        tx.commit().await?;
        if !alert.rederive.is_empty() {
            let next = alert.rederive.remove(0);
            alert.actions.push(outcome(
                ActionKind::Retrain,
                "done",
                format!("job {job_id} (run {run_id}) registered {registered}"),
                Some(registered.to_string()),
            ));
            match self
                .rederive(w, &alert, next, &format!("{into}@{candidate}"))
                .await
            {
                Ok((job, o)) => {
                    alert.job = Some(job);
                    alert.actions.push(o);
                }
                Err(e) => {
                    alert.actions.push(outcome(
                        ActionKind::Retrain,
                        "failed",
                        format!("the optimize job was refused: {e}"),
                        None,
                    ));
                    alert.state = "failed".into();
                }
            }
            return self.save_alert(w, &alert).await;
        }
        if into != model {
            alert.actions.push(outcome(
                ActionKind::Retrain,
                "failed",
                format!(
                    "retraining registered {registered}, not a version of {}, which the deployment serves",
                    ObjectRef::unversioned(Kind::Model, model)
                ),
                Some(registered.to_string()),
            ));
            alert.state = "failed".into();
            return self.save_alert(w, &alert).await;
        }
        alert.candidate = Some(candidate.clone());
        alert.actions.push(outcome(
            ActionKind::Retrain,
            "done",
            format!("job {job_id} (run {run_id}) registered {registered}"),
            Some(registered.to_string()),
        ));
        let rule = w.spec.alerts.iter().find(|r| r.name == alert.rule);
        if rule.is_some_and(|r| r.actions.contains(&ActionKind::Canary)) {
            match self.start_canary(w, model, &candidate, &alert).await {
                Ok((revision, o)) => {
                    alert.canary_revision = Some(revision);
                    alert.canary_since = Some(w.checks);
                    alert.actions.push(o);
                    alert.state = "canary".into();
                }
                Err(e) => {
                    alert
                        .actions
                        .push(outcome(ActionKind::Canary, "failed", e.to_string(), None));
                    alert.state = "failed".into();
                }
            }
        } else {
            alert.state = "done".into();
        }
        self.save_alert(w, &alert).await
    }

    async fn start_canary(
        &self,
        w: &Watched,
        model: &str,
        candidate: &str,
        alert: &Alert,
    ) -> Result<(i64, ActionOutcome)> {
        let d = self.deployment(w).await?;
        let weight = w.spec.canary.weight;
        let primary = d
            .spec
            .weighted()
            .next()
            .cloned()
            .ok_or_else(|| Error::Invalid("the deployment has no primary target".into()))?;
        let spec = DeploymentSpec {
            targets: vec![
                Target {
                    weight: 100 - weight,
                    ..primary.clone()
                },
                Target::version(candidate, weight),
            ],
            ..d.spec.clone()
        };
        let rec = self.audit(
            w,
            "deployment.update",
            String::new(),
            format!(
                "canary of {model} version {candidate} at {weight}% for alert {}",
                alert.alert
            ),
        );
        let d = self
            .inner
            .serving
            .deployments()
            .update(&w.project, &w.deployment, spec, "monitor", Some(&rec))
            .await?;
        self.switch(w).await;
        Ok((
            d.revision,
            outcome(
                ActionKind::Canary,
                "waiting",
                format!(
                    "version {candidate} takes {weight}% of {} beside {} ({}); it is promoted after {} labelled windows no worse on {}",
                    w.deployment,
                    primary.label(),
                    100 - weight,
                    w.spec.canary.windows,
                    w.spec.canary.metric
                ),
                Some(format!("deployment:{}@{}", w.deployment, d.revision)),
            ),
        ))
    }

    /// Compares the canary with the primary in each new labelled window: worse by
    /// the margin once rolls it back; no worse in enough windows promotes it.
    async fn judge_canary(
        &self,
        w: &Watched,
        model: &str,
        mut alert: Alert,
        checks: &[Check],
    ) -> Result<()> {
        let (Some(candidate), Some(revision)) = (alert.candidate.clone(), alert.canary_revision)
        else {
            return Ok(());
        };
        let d = self.deployment(w).await?;
        if d.revision != revision {
            alert.actions.push(outcome(
                ActionKind::Canary,
                "skipped",
                format!(
                    "deployment {} changed (revision {} after the canary's {revision}): the canary is no longer the monitor's to judge",
                    w.deployment, d.revision
                ),
                None,
            ));
            alert.state = "done".into();
            return self.save_alert(w, &alert).await;
        }
        let policy = &w.spec.canary;
        let mut verdict = None;
        for c in checks.iter().rev() {
            if alert.canary_checks.contains(&c.check) || c.check <= alert.check {
                continue;
            }
            let arm = |v: &str| {
                c.versions
                    .iter()
                    .find(|x| x.version == v)
                    .filter(|x| x.quality.labelled >= policy.min_labels)
                    .and_then(|x| x.value(policy.metric))
            };
            let Some(primary) = c
                .versions
                .iter()
                .filter(|x| x.version != candidate)
                .find_map(|x| {
                    (x.quality.labelled >= policy.min_labels)
                        .then(|| x.value(policy.metric))
                        .flatten()
                })
            else {
                continue;
            };
            let Some(canary) = arm(&candidate) else {
                continue;
            };
            alert.canary_checks.push(c.check);
            if worse(policy.metric, canary, primary, policy.margin) {
                verdict = Some((false, c.check, canary, primary));
                break;
            }
            alert.canary_passed += 1;
            if alert.canary_passed >= policy.windows {
                verdict = Some((true, c.check, canary, primary));
                break;
            }
        }
        let newest = checks.first().map_or(0, |c| c.check);
        let expired = verdict.is_none()
            && alert
                .canary_since
                .is_some_and(|since| newest - since >= i64::from(policy.max_windows));
        if expired {
            let why = format!(
                "not judged in {} windows: the arms never both had {} labels; the canary is taken back",
                policy.max_windows, policy.min_labels
            );
            let o = self
                .take_back_canary(
                    w,
                    revision,
                    format!("canary {model} version {candidate} {why}"),
                    format!("rolled back: {why}"),
                )
                .await?;
            alert.actions.push(o);
            alert.state = "done".into();
            return self.save_alert(w, &alert).await;
        }
        match verdict {
            None => {}
            Some((false, check, canary, primary)) => {
                let o = self
                    .take_back_canary(
                        w,
                        revision,
                        format!(
                            "canary {model} version {candidate} worse on check {check}: {} {canary:.4} vs {primary:.4}",
                            policy.metric
                        ),
                        format!(
                            "rolled back: version {candidate} had {} {canary:.4} against the primary's {primary:.4} on check {check}",
                            policy.metric
                        ),
                    )
                    .await?;
                alert.actions.push(o);
                alert.state = "done".into();
            }
            Some((true, check, canary, primary)) => {
                let object = self.promote(w, model, &candidate, &d, &alert).await?;
                alert.actions.push(outcome(
                    ActionKind::Canary,
                    "done",
                    format!(
                        "promoted: version {candidate} was no worse in {} labelled windows (last, check {check}: {} {canary:.4} vs {primary:.4})",
                        alert.canary_passed, policy.metric
                    ),
                    Some(object),
                ));
                alert.state = "done".into();
            }
        }
        self.save_alert(w, &alert).await
    }

    /// Restores the deployment's revision before the canary's (`revision`), audited
    /// with `detail`; the outcome says `message`.
    async fn take_back_canary(
        &self,
        w: &Watched,
        revision: i64,
        detail: String,
        message: String,
    ) -> Result<ActionOutcome> {
        let rec = self.audit(w, "deployment.rollback", String::new(), detail);
        let d = self
            .inner
            .serving
            .deployments()
            .rollback(
                &w.project,
                &w.deployment,
                Some(revision - 1),
                "monitor",
                Some(&rec),
            )
            .await?;
        self.switch(w).await;
        Ok(outcome(
            ActionKind::Canary,
            "done",
            message,
            Some(format!("deployment:{}@{}", w.deployment, d.revision)),
        ))
    }

    /// Makes the candidate the primary: the alias the deployment follows moves to it
    /// (and the deployment follows the alias alone again), or the deployment's canary
    /// takes all the traffic.
    async fn promote(
        &self,
        w: &Watched,
        model: &str,
        candidate: &str,
        d: &Deployment,
        alert: &Alert,
    ) -> Result<String> {
        let why = format!("canary of alert {} passed", alert.alert);
        match d.spec.weighted().next().and_then(|t| t.alias.clone()) {
            Some(alias) => {
                let rec = self.audit(
                    w,
                    "model.alias.set",
                    format!(
                        "project:{}/{}",
                        w.project.name,
                        ObjectRef::at(Kind::Model, model, &alias)
                    ),
                    why.clone(),
                );
                self.inner
                    .tracking
                    .set_alias(
                        &w.project,
                        model,
                        &alias,
                        candidate,
                        "monitor promotion",
                        &rec,
                    )
                    .await?;
                let spec = DeploymentSpec {
                    targets: vec![Target::alias(alias.clone(), 100)],
                    ..d.spec.clone()
                };
                let rec = self.audit(w, "deployment.update", String::new(), why);
                self.inner
                    .serving
                    .deployments()
                    .update(&w.project, &w.deployment, spec, "monitor", Some(&rec))
                    .await?;
                self.switch(w).await;
                Ok(ObjectRef::at(Kind::Model, model, &alias).to_string())
            }
            None => {
                let rec = self.audit(w, "deployment.promote", String::new(), why);
                let d = self
                    .inner
                    .serving
                    .deployments()
                    .promote(
                        &w.project,
                        &w.deployment,
                        Some(candidate),
                        "monitor",
                        Some(&rec),
                    )
                    .await?;
                self.switch(w).await;
                Ok(format!("deployment:{}@{}", w.deployment, d.revision))
            }
        }
    }
}

async fn insert_alert(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    project_id: &str,
    alert: &Alert,
) -> Result<()> {
    let now = now_micros();
    sqlx::query(
        "INSERT INTO monitor_alerts (project_id, deployment, alert_no, rule, check_no, state, detail, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)",
    )
    .bind(project_id)
    .bind(&alert.deployment)
    .bind(alert.alert)
    .bind(&alert.rule)
    .bind(alert.check)
    .bind(&alert.state)
    .bind(to_json(alert)?)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quality::LiveQuality;
    use crate::wire::{CheckStatus, VersionCheck};

    fn check(n: i64, version: &str, share: Option<f64>, accuracy: Option<f64>) -> Check {
        Check {
            deployment: "web".into(),
            check: n,
            window_start: String::new(),
            window_end: String::new(),
            rows: 100,
            status: CheckStatus::Ok,
            versions: vec![VersionCheck {
                version: version.into(),
                rows: 100,
                status: CheckStatus::Ok,
                drift: share.map(|s| crate::drift::DatasetDrift {
                    columns: 10,
                    drifted_columns: (s * 10.0) as usize,
                    share: s,
                    threshold: 0.5,
                    drifted: s >= 0.5,
                    by_column: Vec::new(),
                }),
                predictions: Vec::new(),
                quality: LiveQuality {
                    labelled: 50,
                    accuracy,
                    ..LiveQuality::default()
                },
                note: None,
            }],
            report: false,
            created_at: String::new(),
        }
    }

    fn rule(v: serde_json::Value) -> AlertRule {
        serde_json::from_value(v).expect("rule")
    }

    #[test]
    fn a_rule_fires_on_consecutive_crossing_windows_only() {
        let r = rule(
            serde_json::json!({"name": "d", "metric": "drift_share", "above": 0.3, "windows": 2, "actions": ["notify"]}),
        );
        // Newest first.
        let once = [
            check(3, "1", Some(0.6), None),
            check(2, "1", Some(0.1), None),
        ];
        assert!(fires(&r, &once).is_none());
        let twice = [
            check(4, "1", Some(0.6), None),
            // A window with no drift result (not enough data) does not break a streak.
            check(3, "1", None, None),
            check(2, "1", Some(0.4), None),
            check(1, "1", Some(0.0), None),
        ];
        let streak = fires(&r, &twice).expect("fires");
        assert_eq!(streak.iter().map(|c| c.check).collect::<Vec<_>>(), [4, 2]);
    }

    #[test]
    fn a_rule_re_arms_only_after_a_window_that_passes() {
        let r = rule(
            serde_json::json!({"name": "d", "metric": "drift_share", "above": 0.3, "actions": ["rollback"]}),
        );
        // Newest first: fired on check 2; 3 and 4 still drift; 5 passes; 6 drifts.
        let checks = [
            check(6, "1", Some(0.6), None),
            check(5, "1", Some(0.1), None),
            check(4, "1", Some(0.6), None),
            check(3, "1", Some(0.6), None),
            check(2, "1", Some(0.6), None),
        ];
        assert!(
            !rearmed(&r, &checks[2..], 2, 4),
            "drift persisted since check 2"
        );
        assert!(rearmed(&r, &checks, 2, 6), "check 5 passed");
        assert!(stale("2020-01-01T00:00:00Z", now_micros()));
    }

    #[test]
    fn a_drop_rule_compares_with_the_version_before() {
        let r = rule(
            serde_json::json!({"name": "q", "metric": "accuracy", "drop": 0.05, "actions": ["rollback"]}),
        );
        let worse = [
            check(5, "2", None, Some(0.80)),
            check(4, "1", None, Some(0.95)),
        ];
        assert!(fires(&r, &worse).is_some());
        let fine = [
            check(5, "2", None, Some(0.93)),
            check(4, "1", None, Some(0.95)),
        ];
        assert!(fires(&r, &fine).is_none());
        // No earlier version: nothing to compare with, no alarm.
        assert!(fires(&r, &[check(1, "1", None, Some(0.2))]).is_none());
    }
}
