//! The monitoring API's JSON shapes, shared by the server, the typed client and the CLI.

use serde::{Deserialize, Serialize};

use super::drift::{ColumnDrift, DatasetDrift};
use super::quality::LiveQuality;
use super::spec::{ActionKind, Metric, MonitorSpec};

/// A monitor as stored.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Monitor {
    pub project: String,
    pub deployment: String,
    pub spec: MonitorSpec,
    /// Where the next window begins (RFC 3339).
    pub next_window: String,
    /// Windows checked so far.
    pub checks: i64,
    pub created_at: String,
    pub created_by: String,
    pub updated_at: String,
    pub updated_by: String,
}

/// `GET /monitors`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MonitorList {
    pub monitors: Vec<Monitor>,
}

qanat_core::word_enum! {
    /// A window's verdict.
    #[derive(utoipa::ToSchema)]
    pub enum CheckStatus as "check status" {
        /// Tested: no dataset drift.
        Ok,
        /// Tested: the model's inputs drifted.
        Drift,
        /// Too few rows to test (no traffic, or under `min_rows`).
        NotEnoughData,
        /// The serving version has no reference profile to compare with.
        NoReference,
    }
}

/// One version's traffic in a window.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VersionCheck {
    pub version: String,
    /// Logged rows it answered in the window.
    pub rows: u64,
    pub status: CheckStatus,
    /// Its inputs against its reference profile, when tested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub drift: Option<DatasetDrift>,
    /// Its outputs against its outputs on the training rows, when both are known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub predictions: Vec<ColumnDrift>,
    /// Live quality from the labels matched so far.
    pub quality: LiveQuality,
    /// Why it was not tested, or what to know about the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl VersionCheck {
    /// Whether any output drifted.
    pub fn prediction_drift(&self) -> Option<bool> {
        (!self.predictions.is_empty()).then(|| self.predictions.iter().any(|p| p.drifted))
    }

    /// The value of `metric` for this version in this window, when it has one.
    pub fn value(&self, metric: Metric) -> Option<f64> {
        match metric {
            Metric::DriftShare => self.drift.as_ref().map(|d| d.share),
            Metric::PredictionDrift => self.prediction_drift().map(|d| f64::from(u8::from(d))),
            Metric::Accuracy => self.quality.accuracy,
            Metric::Auc => self.quality.auc,
            Metric::Rmse => self.quality.rmse,
        }
    }
}

/// One window's check.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Check {
    pub deployment: String,
    /// 1, 2, … per deployment.
    pub check: i64,
    /// RFC 3339, inclusive.
    pub window_start: String,
    /// RFC 3339, exclusive.
    pub window_end: String,
    /// Logged rows in the window (every version).
    pub rows: u64,
    /// The verdict of the version that answered most of the window.
    pub status: CheckStatus,
    /// Each version that answered, most rows first.
    pub versions: Vec<VersionCheck>,
    /// Whether an HTML report is stored (`GET …/checks/{check}/report`).
    pub report: bool,
    pub created_at: String,
}

impl Check {
    /// The version that answered most of the window.
    pub fn primary(&self) -> Option<&VersionCheck> {
        self.versions.first()
    }
}

/// `GET /monitors/{deployment}/checks`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CheckList {
    pub checks: Vec<Check>,
}

/// What happened when an action ran.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActionOutcome {
    pub action: ActionKind,
    /// RFC 3339.
    pub at: String,
    /// `done`, `waiting`, `failed` or `skipped`.
    pub outcome: String,
    pub message: String,
    /// What it made or moved: a job id, `model:churn@4`, `deployment:web@5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
}

/// An alert a rule raised, and what its actions did.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Alert {
    pub deployment: String,
    pub alert: i64,
    pub rule: String,
    /// The rule as text: `drift_share > 0.3 in 2 consecutive windows`.
    pub condition: String,
    pub metric: Metric,
    /// The metric's value in the check that raised it.
    pub value: f64,
    /// The version it was raised on.
    pub version: String,
    pub check: i64,
    /// `open`, `retraining`, `canary`, `done` or `failed`.
    pub state: String,
    pub actions: Vec<ActionOutcome>,
    /// The retraining job, once submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The optimize jobs still to run after the retraining job when the alert's
    /// version was derived (int8, pruned, distilled) from a trained one: each makes
    /// the same derivation of the version the step before registered, innermost
    /// first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub rederive: Vec<crate::jobs::JobSpec>,
    /// The retrained version, once registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<String>,
    /// Labelled windows the canary has passed.
    #[serde(default)]
    pub canary_passed: u32,
    /// The checks the canary was judged on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canary_checks: Vec<i64>,
    /// The deployment revision that started the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_revision: Option<i64>,
    /// The monitor's check count when the canary started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_since: Option<i64>,
    pub created_at: String,
    pub updated_at: String,
}

/// `GET /monitors/{deployment}/alerts`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AlertList {
    pub alerts: Vec<Alert>,
}

/// The ground truth posted so far.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LabelSummary {
    pub posted: u64,
    /// Matched with a logged request of a checked window.
    pub matched: u64,
    /// Not matched with any request of a window checked since they were posted: their
    /// ids name no logged request of this deployment (or one not logged: sampling).
    pub unmatched: u64,
    /// A few of the unmatched ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmatched_examples: Vec<String>,
    /// Posted, not yet looked for (their window is still open).
    pub pending: u64,
}

/// `GET /monitors/{deployment}`: the monitor, its latest checks and its alerts.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MonitorStatus {
    pub monitor: Monitor,
    /// Newest first.
    pub checks: Vec<Check>,
    /// Newest first.
    pub alerts: Vec<Alert>,
    pub labels: LabelSummary,
}

/// One request's ground truth: one value per row it carried (a single value for a
/// one-row request).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Label {
    /// The request's `x-request-id`, or the `id` the request gave itself.
    pub id: String,
    #[schema(value_type = Object)]
    pub value: serde_json::Value,
}

/// `POST /deployments/{name}/labels`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Labels {
    pub labels: Vec<Label>,
}

/// What a label post stored.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LabelsStored {
    /// New labels.
    pub stored: u64,
    /// Labels that replaced an earlier one for the same id.
    pub replaced: u64,
}
