//! Datasets and their versions as the API shows them, and what a garbage collection
//! reports (`qanat-data` stores them).

use std::collections::BTreeMap;

use qanat_core::ProjectId;
use serde::{Deserialize, Serialize};

use super::DatasetSchema;

qanat_core::word_enum! {
    /// How sensitive a dataset is.
    #[derive(utoipa::ToSchema)]
    pub enum Classification as "classification" {
        Public,
        Internal,
        Confidential,
        Restricted,
    }
}

/// What to create.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewDataset {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Default: the creator.
    pub owner: Option<String>,
    /// Default: internal.
    pub classification: Option<Classification>,
    /// Narrower than the project's policy; default: the project's.
    pub allowed_regions: Option<Vec<String>>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Storage location of its chunks; default: the server's default location.
    pub location: Option<String>,
    /// Columns every CSV/Parquet file must have; pushes that break it are refused.
    pub schema: Option<DatasetSchema>,
    /// Columns declared to hold personal data (besides the schema's `pii: true` ones):
    /// pseudonymized for readers without the project's PII permission.
    #[serde(default)]
    pub pii_columns: Vec<String>,
}

/// Changes to a dataset; absent fields stay as they are.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateDataset {
    /// The columns declared to hold personal data (the whole list: it replaces the
    /// current one).
    pub pii_columns: Option<Vec<String>>,
}

/// A dataset.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Dataset {
    pub id: String,
    /// Not sent: clients name a dataset's project by name.
    #[serde(skip)]
    pub project_id: ProjectId,
    pub name: String,
    pub description: String,
    pub owner: String,
    pub classification: Classification,
    pub allowed_regions: Option<Vec<String>>,
    pub tags: BTreeMap<String, String>,
    pub location: String,
    pub schema: Option<DatasetSchema>,
    /// Columns declared to hold personal data besides the schema's `pii: true` ones.
    #[serde(default)]
    pub pii_columns: Vec<String>,
    pub created_at: String,
    pub created_by: String,
    pub latest_version: Option<i64>,
    /// When it was deleted (deleted datasets are listed only on request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<String>,
}

/// One immutable version.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatasetVersion {
    pub dataset: String,
    pub version: i64,
    /// BLAKE3 of the canonical manifest: the version's content address.
    pub manifest_id: String,
    pub parent: Option<i64>,
    pub message: String,
    pub author: String,
    pub producer: String,
    pub file_count: i64,
    pub total_size: i64,
    /// Bytes of chunks the parent version did not have.
    pub new_bytes: i64,
    pub created_at: String,
    pub tags: Vec<String>,
    /// Personal data found in the version's tables in columns the dataset does not
    /// declare (filled when a version is pushed or shown).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undeclared_pii: Vec<super::UndeclaredPii>,
}

/// What storing a pack of chunks did.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PackStored {
    /// Chunks in the pack.
    pub chunks: usize,
    /// Chunks this pack stored for the first time.
    pub new_chunks: usize,
    /// Plaintext bytes of those.
    pub new_bytes: u64,
}

/// What a project's gc did. The dataset part is filled by [`Datasets::gc`]; the
/// tracking part by the project gc that also purges experiments and runs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GcReport {
    /// Deleted datasets removed for good (their retention period was over).
    pub datasets_purged: u64,
    /// Dataset versions removed because they were older than the project's
    /// `dataset_version_days` (neither their dataset's latest nor tagged).
    #[serde(default)]
    pub dataset_versions_expired: u64,
    pub versions_scanned: u64,
    pub chunks_referenced: u64,
    pub chunks_deleted: u64,
    /// Plaintext bytes of the deleted chunks.
    pub bytes_freed: u64,
    /// Deleted experiments removed with their runs, logged models and artifacts.
    #[serde(default)]
    pub experiments_purged: u64,
    /// Runs removed (those of purged experiments included).
    #[serde(default)]
    pub runs_purged: u64,
    /// Deleted experiments or runs past retention kept because a registered model
    /// version comes from them (delete the version to let them go).
    #[serde(default)]
    pub kept_for_registry: u64,
    /// Artifact objects deleted with the purged experiments and runs.
    #[serde(default)]
    pub artifacts_deleted: u64,
    /// Finished webhook and NATS deliveries forgotten (their history is kept for the
    /// retention period).
    #[serde(default)]
    pub deliveries_purged: u64,
    /// Inference log files deleted because their day is past the project's
    /// `inference_log_days`, and their bytes.
    #[serde(default)]
    pub inference_log_files_deleted: u64,
    #[serde(default)]
    pub inference_log_bytes_deleted: u64,
}

/// What an installation-wide gc did.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InstallationGc {
    /// Deleted projects removed for good, with everything they held.
    pub projects_purged: Vec<String>,
    /// Each remaining project's gc.
    pub projects: BTreeMap<String, GcReport>,
}
