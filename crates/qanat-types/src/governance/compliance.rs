//! The compliance report: where data lives and under which policy, which personal
//! data the installation holds and how it is protected, who read it, and whether the
//! audit trail is whole — for one project or all, over a period.

use serde::{Deserialize, Serialize};

use super::{AuditCheckpoint, AuditEntry, AuditVerification, PiiReader};

/// What to report on.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ReportParams {
    /// One project (by name); default: every project (global admins).
    pub project: Option<String>,
    /// RFC 3339 time; audit entries at or after it (default: 30 days ago).
    pub since: Option<String>,
    /// RFC 3339 time; audit entries before it (default: now).
    pub until: Option<String>,
    /// `json` (default) or `html`.
    pub format: Option<String>,
}

/// The report.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ComplianceReport {
    /// RFC 3339.
    pub generated_at: String,
    pub generated_by: String,
    /// The project reported on, or none for the whole installation.
    pub project: Option<String>,
    pub since: String,
    pub until: String,
    pub locations: Vec<LocationReport>,
    pub projects: Vec<ProjectPolicy>,
    pub personal_data: Vec<PiiHolding>,
    pub residency_refusals: AuditExcerpt,
    pub pii_access: AuditExcerpt,
    pub retention: RetentionReport,
    pub keys: KeysReport,
    pub audit: AuditIntegrity,
}

/// A storage location, its region, and what each project keeps in it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LocationReport {
    pub name: String,
    pub region: String,
    /// `local`, `s3`, …
    pub kind: String,
    pub projects: Vec<StoredBytes>,
    /// Bytes that belong to no one project (installation state), or to projects
    /// outside the report.
    pub other_bytes: u64,
}

/// One project's objects in one location.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StoredBytes {
    pub project: String,
    pub objects: u64,
    /// Plaintext bytes.
    pub bytes: u64,
    /// Bytes as stored (encrypted, with their headers).
    pub stored_bytes: u64,
    /// Whether the location's region is one the project allows (a no here is a
    /// residency breach to explain).
    pub region_allowed: bool,
}

/// A project's personal-data and residency policy.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectPolicy {
    pub name: String,
    pub allowed_regions: Vec<String>,
    pub require_pii_declared: bool,
    /// Days its inference logs are kept (none: until deleted).
    pub inference_log_days: Option<u32>,
    /// Days its dataset versions are kept, but each dataset's latest and tagged ones
    /// (none: until deleted).
    #[serde(default)]
    pub dataset_version_days: Option<u32>,
    /// Who holds the PII permission (global admins hold it too).
    pub pii_readers: Vec<PiiReader>,
}

/// One object that holds personal data: a dataset's latest version, a feature view, a
/// deployment's inference log.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PiiHolding {
    pub project: String,
    /// `dataset`, `feature_view` or `inference_log`.
    pub kind: String,
    pub name: String,
    /// The version looked at (a dataset's latest, a view's current).
    pub version: Option<i64>,
    pub columns: Vec<PiiColumn>,
}

/// One column with personal data.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PiiColumn {
    /// The table it is in (datasets).
    pub file: Option<String>,
    pub column: String,
    /// What it likely holds (`email`, …); empty when declared and found by nothing.
    pub kinds: Vec<String>,
    pub declared: bool,
    /// How readers without the PII permission get it.
    pub protection: String,
}

/// Audit entries of one kind in the period: how many, and the newest of them.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditExcerpt {
    pub count: u64,
    /// The newest entries (at most 500), oldest first.
    pub entries: Vec<AuditEntry>,
}

/// How long things are kept, and what gc removed in the period.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetentionReport {
    /// Deleted datasets, experiments and projects are purged after this many days.
    pub deleted_days: u64,
    /// The gc runs of the period (audited).
    pub gc_runs: AuditExcerpt,
    /// Erasures of data subjects' rows made in the period (`qanat data erase`),
    /// newest first: each request, what it removed and destroyed, never the values.
    #[serde(default)]
    pub erasures: Vec<ProjectErasure>,
}

/// An erasure and the project it was made in.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectErasure {
    pub project: String,
    pub erasure: crate::data::Erasure,
}

/// The master keys: the active one, those kept to read older data, and rotations.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KeysReport {
    pub active_key_id: String,
    pub key_ids: Vec<String>,
    /// `file` (rotatable) or `environment`.
    pub source: String,
    /// Rotations in the period (audited).
    pub rotations: AuditExcerpt,
}

/// Whether the audit trail is whole.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditIntegrity {
    pub verification: AuditVerification,
    /// The chain's head, signed now.
    pub checkpoint: AuditCheckpoint,
    /// The last checkpoint this server's audit sinks shipped outside the database, if
    /// any are configured.
    pub last_shipped_checkpoint: Option<AuditCheckpoint>,
}
