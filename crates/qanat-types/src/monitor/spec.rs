//! What a monitor watches and what it does: the window over a deployment's inference
//! log, the drift tests per column, and the alert rules with their actions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::drift::{Choice, Method};

/// How the inference log is cut into windows (tumbling: each record is in one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Window {
    /// A window every this many seconds of wall time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u64>,
    /// A window every this many logged rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
}

/// The most seconds one time window may span (a week).
const MAX_SECONDS: u64 = 7 * 86_400;
/// The most rows one count window may hold.
const MAX_ROWS: u64 = 10_000_000;

impl Window {
    pub(crate) fn check(&self) -> Result<(), String> {
        match (self.seconds, self.rows) {
            (Some(s), None) if (1..=MAX_SECONDS).contains(&s) => Ok(()),
            (None, Some(r)) if (1..=MAX_ROWS).contains(&r) => Ok(()),
            (Some(s), None) => Err(format!(
                "window.seconds is {s}: give 1 to {MAX_SECONDS} (a week)"
            )),
            (None, Some(r)) => Err(format!(
                "window.rows is {r}: give 1 to {MAX_ROWS}"
            )),
            _ => Err("window: give exactly one of seconds (a window per time span, e.g. {\"seconds\": 3600}) and rows (a window per that many logged rows)".into()),
        }
    }

    /// `every 60 s` or `every 500 rows`.
    pub fn describe(&self) -> String {
        match (self.seconds, self.rows) {
            (Some(s), _) => format!("every {s} s"),
            (_, Some(r)) => format!("every {r} rows"),
            _ => "?".into(),
        }
    }
}

qanat_core::word_enum! {
    /// What a rule watches.
    #[derive(utoipa::ToSchema)]
    pub enum Metric as "alert metric" {
        /// The share of the model's inputs that drifted (0 to 1).
        DriftShare,
        /// Whether the model's outputs drifted: 1 when they did, 0 when not.
        PredictionDrift,
        /// Live accuracy from the labels posted (classification).
        Accuracy,
        /// Live ROC AUC from the labels posted (binary classification).
        Auc,
        /// Live root mean squared error from the labels posted (regression).
        Rmse,
    }
}

impl Metric {
    /// Whether a higher value is better (quality metrics other than RMSE).
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::Accuracy | Metric::Auc)
    }

    fn is_quality(self) -> bool {
        matches!(self, Metric::Accuracy | Metric::Auc | Metric::Rmse)
    }
}

qanat_core::word_enum! {
    /// What an alert does.
    #[derive(utoipa::ToSchema)]
    pub enum ActionKind as "alert action" {
        /// Publish a `monitor_alert.created` event: the project's webhooks subscribed
        /// to it (signed when they have a secret) and NATS, when configured.
        Notify,
        /// Submit the job that trained the serving version again, on the newest
        /// version of each dataset it read; it registers a new version.
        Retrain,
        /// Once the retrained version is registered, send it a canary share of the
        /// traffic (with `retrain`).
        Canary,
        /// Undo the last change of what answers: move the alias the deployment follows
        /// back to the version it named before, or restore the deployment's revision
        /// before the last.
        Rollback,
    }
}

/// One alert rule: when `metric` crosses a bound in `windows` consecutive windows,
/// the actions run (once per firing; the rule re-arms after a window that passes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertRule {
    /// Letters, digits, '.', '_', '-'.
    pub name: String,
    pub metric: Metric,
    /// Fires when the metric is above this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<f64>,
    /// Fires when the metric is below this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<f64>,
    /// Quality metrics: fires when the serving version does this much worse (0.05 = 5
    /// points) than the version that answered before it did in its last labelled
    /// window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop: Option<f64>,
    /// Consecutive windows the bound must be crossed in (default 1).
    #[serde(default = "one")]
    pub windows: u32,
    pub actions: Vec<ActionKind>,
}

fn one() -> u32 {
    1
}

/// How a canary the monitor started is judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CanaryPolicy {
    /// The canary's share of the traffic, in percent.
    pub weight: u32,
    /// The quality metric it is judged on.
    pub metric: Metric,
    /// Labelled windows the canary must not be worse in before it is promoted.
    pub windows: u32,
    /// How much worse than the primary (in the metric's units) counts as worse.
    pub margin: f64,
    /// Fewest labelled rows each arm needs in a window for it to count.
    pub min_labels: u64,
    /// Windows after which a canary not yet judged (too few labels) is taken back.
    pub max_windows: u32,
}

impl Default for CanaryPolicy {
    fn default() -> Self {
        CanaryPolicy {
            weight: 10,
            metric: Metric::Accuracy,
            windows: 2,
            margin: 0.02,
            min_labels: 20,
            max_windows: 50,
        }
    }
}

/// A monitor of one deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MonitorSpec {
    pub window: Window,
    /// Fewest rows a window needs to be tested; fewer give "not enough data".
    #[serde(default = "default_min_rows")]
    pub min_rows: u64,
    /// Drift method per column (`ks`, `chisquare`, `z`, `wasserstein`,
    /// `jensenshannon`, `psi`); Evidently's choice by type and size otherwise.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub methods: BTreeMap<String, Method>,
    /// Threshold per column (a p-value for tests, a distance otherwise).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub thresholds: BTreeMap<String, f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alerts: Vec<AlertRule>,
    #[serde(default)]
    pub canary: CanaryPolicy,
}

fn default_min_rows() -> u64 {
    30
}

impl MonitorSpec {
    /// Checks the spec; the message says what to fix.
    pub fn check(&self) -> Result<(), String> {
        self.window.check()?;
        if self.min_rows == 0 {
            return Err("min_rows is 0: a window needs at least one row to be tested".into());
        }
        for (col, t) in &self.thresholds {
            if !t.is_finite() || *t < 0.0 {
                return Err(format!("thresholds.{col} is {t}: give a number from 0"));
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for r in &self.alerts {
            qanat_core::Name::parse_as("alert name", &r.name).map_err(|e| e.to_string())?;
            if !names.insert(r.name.as_str()) {
                return Err(format!("alert '{}' is named twice", r.name));
            }
            r.check()?;
        }
        let c = &self.canary;
        if !(1..=50).contains(&c.weight) {
            return Err(format!(
                "canary.weight is {}: a canary takes 1 to 50 percent of the traffic",
                c.weight
            ));
        }
        if !c.metric.is_quality() {
            return Err(format!(
                "canary.metric is {}: a canary is judged on accuracy, auc or rmse",
                c.metric
            ));
        }
        if c.windows == 0 || !c.margin.is_finite() || c.margin < 0.0 || c.min_labels == 0 {
            return Err(
                "canary: windows and min_labels are at least 1, margin a number from 0".into(),
            );
        }
        if c.max_windows < c.windows {
            return Err(format!(
                "canary.max_windows is {}: give at least canary.windows ({}), the windows a canary needs to pass",
                c.max_windows, c.windows
            ));
        }
        Ok(())
    }

    /// Per-column method and threshold choices for the drift tests.
    pub fn choices(&self) -> BTreeMap<String, Choice> {
        let mut out: BTreeMap<String, Choice> = BTreeMap::new();
        for (c, m) in &self.methods {
            out.entry(c.clone()).or_default().method = Some(*m);
        }
        for (c, t) in &self.thresholds {
            out.entry(c.clone()).or_default().threshold = Some(*t);
        }
        out
    }
}

impl AlertRule {
    pub(crate) fn check(&self) -> Result<(), String> {
        let name = &self.name;
        let bounds = [self.above, self.below, self.drop];
        if bounds.iter().flatten().count() != 1 {
            return Err(format!(
                "alert '{name}': give exactly one of above, below and drop"
            ));
        }
        if bounds.iter().flatten().any(|b| !b.is_finite()) {
            return Err(format!("alert '{name}': its bound is not a number"));
        }
        if self.drop.is_some() && !self.metric.is_quality() {
            return Err(format!(
                "alert '{name}': drop compares live quality between versions; use it with accuracy, auc or rmse (or above/below with {})",
                self.metric
            ));
        }
        if self.windows == 0 || self.windows > 100 {
            return Err(format!("alert '{name}': windows is 1 to 100"));
        }
        if self.actions.is_empty() {
            return Err(format!(
                "alert '{name}' has no actions: give one or more of notify, retrain, canary, rollback"
            ));
        }
        let has = |a| self.actions.contains(&a);
        if has(ActionKind::Canary) && !has(ActionKind::Retrain) {
            return Err(format!(
                "alert '{name}': canary sends traffic to the retrained version, so it needs retrain too"
            ));
        }
        if has(ActionKind::Retrain) && has(ActionKind::Rollback) {
            return Err(format!(
                "alert '{name}': retrain and rollback pull opposite ways; give them to two rules"
            ));
        }
        Ok(())
    }

    /// Whether `value` crosses the rule's absolute bound (`above`/`below`).
    pub fn crossed(&self, value: f64) -> bool {
        match (self.above, self.below) {
            (Some(a), _) => value > a,
            (_, Some(b)) => value < b,
            _ => false,
        }
    }

    /// `drift_share > 0.3`, `accuracy drops 0.05`.
    pub fn describe(&self) -> String {
        let bound = match (self.above, self.below, self.drop) {
            (Some(a), _, _) => format!("> {a}"),
            (_, Some(b), _) => format!("< {b}"),
            (_, _, Some(d)) => format!("worse by {d} than the version before"),
            _ => "?".into(),
        };
        let windows = if self.windows > 1 {
            format!(" in {} consecutive windows", self.windows)
        } else {
            String::new()
        };
        format!("{} {bound}{windows}", self.metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: serde_json::Value) -> Result<MonitorSpec, String> {
        let s: MonitorSpec = serde_json::from_value(v).map_err(|e| e.to_string())?;
        s.check().map(|()| s)
    }

    #[test]
    fn a_spec_with_rules_reads_and_checks() {
        let s = spec(serde_json::json!({
            "window": {"rows": 200},
            "methods": {"age": "psi"},
            "alerts": [
                {"name": "drift", "metric": "drift_share", "above": 0.3, "windows": 2,
                 "actions": ["notify", "retrain", "canary"]},
                {"name": "worse", "metric": "accuracy", "drop": 0.05, "actions": ["rollback"]}
            ]
        }))
        .expect("valid");
        assert_eq!(s.min_rows, 30);
        assert_eq!(s.canary.weight, 10);
        assert!(s.alerts[0].crossed(0.31) && !s.alerts[0].crossed(0.3));
        assert_eq!(s.choices()["age"].method, Some(Method::Psi));
    }

    #[test]
    fn specs_that_cannot_work_say_what_to_fix() {
        let cases = [
            (serde_json::json!({"window": {}}), "exactly one of seconds"),
            (
                serde_json::json!({"window": {"seconds": 0}}),
                "window.seconds is 0",
            ),
            (
                serde_json::json!({"window": {"rows": 5}, "alerts": [
                    {"name": "a", "metric": "drift_share", "above": 0.3, "below": 0.1, "actions": ["notify"]}]}),
                "exactly one of above, below and drop",
            ),
            (
                serde_json::json!({"window": {"rows": 5}, "alerts": [
                    {"name": "a", "metric": "drift_share", "drop": 0.3, "actions": ["notify"]}]}),
                "drop compares live quality",
            ),
            (
                serde_json::json!({"window": {"rows": 5}, "alerts": [
                    {"name": "a", "metric": "accuracy", "below": 0.8, "actions": ["canary"]}]}),
                "needs retrain too",
            ),
            (
                serde_json::json!({"window": {"rows": 5}, "alerts": [
                    {"name": "a", "metric": "accuracy", "below": 0.8, "actions": []}]}),
                "has no actions",
            ),
            (
                serde_json::json!({"window": {"rows": 5}, "canary": {"weight": 90}}),
                "1 to 50 percent",
            ),
            (
                serde_json::json!({"window": {"rows": 5}, "canary": {"windows": 3, "max_windows": 2}}),
                "canary.max_windows is 2",
            ),
        ];
        for (v, want) in cases {
            let e = spec(v).expect_err(want).to_string();
            assert!(e.contains(want), "{e} (wanted {want})");
        }
        let e = spec(serde_json::json!({"window": {"rows": 5}, "alerts": [
            {"name": "a", "metric": "speed", "above": 1, "actions": ["notify"]}]}))
        .expect_err("unknown metric")
        .to_string();
        assert!(e.contains("speed"), "{e}");
    }
}
