//! Request and response bodies of the datasets API, shared by `qanat-api` (which serves
//! them) and `qanat-client` (which sends and reads them), so the two cannot drift.
//! Plain data: no HTTP types here.

use serde::{Deserialize, Serialize};

use super::{ChunkId, DatasetVersion, FileProfile, Manifest, ManifestDiff, TableDelta};

/// Which of these chunks does the server still need? (part of a push)
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChunkIds {
    #[schema(value_type = Vec<String>)]
    pub ids: Vec<ChunkId>,
}

/// The chunks of a [`ChunkIds`] question that are not stored yet.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MissingChunks {
    #[schema(value_type = Vec<String>)]
    pub missing: Vec<ChunkId>,
}

/// One uploaded chunk.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChunkStored {
    pub id: String,
    /// False when the chunk was already stored (nothing written).
    pub new: bool,
}

/// A version to commit from uploaded chunks.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitVersion {
    pub manifest: Manifest,
    #[serde(default)]
    pub message: String,
    /// Versions this one was derived from, e.g. `dataset:raw@3`.
    #[serde(default)]
    pub derived_from: Vec<String>,
}

/// One version with its manifest and the profiles of its tabular files.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VersionWithManifest {
    #[serde(flatten)]
    pub version: DatasetVersion,
    pub manifest: Manifest,
    /// Schema, row count and column profile of each CSV/Parquet file (without the
    /// values of personal-data columns for a reader without the PII permission).
    pub profiles: Vec<FileProfile>,
    /// Files this reader gets with personal-data columns pseudonymized (no PII
    /// permission): their bytes differ from the manifest's, and their download says
    /// its own size and BLAKE3 (`X-Qanat-Blake3`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pseudonymized: Vec<PseudonymizedFile>,
}

/// A file whose personal-data columns a reader gets as keyed pseudonyms.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PseudonymizedFile {
    /// Its position in the manifest.
    pub index: usize,
    pub path: String,
    pub columns: Vec<String>,
}

/// Names a version with a tag.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TagBody {
    /// Version number, v<number>, another tag, or latest.
    pub version: String,
}

/// Options of a chunk garbage collection.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GcBody {
    /// Keep chunks a push used within this many seconds (default 3600).
    pub grace_seconds: Option<u64>,
}

/// Which datasets a listing shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
pub struct ListDatasets {
    /// `true`: the deleted datasets `gc` has not purged yet (restorable) instead.
    #[serde(default)]
    pub deleted: bool,
}

/// The two versions a diff compares.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::IntoParams)]
pub struct DiffParams {
    /// The older version (number, v<number>, tag or latest).
    pub from: String,
    /// The newer version.
    pub to: String,
}

/// What changed between two versions: files, and the tables in both.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DiffView {
    pub from: i64,
    pub to: i64,
    #[serde(flatten)]
    pub diff: ManifestDiff,
    /// Schema and profile changes of tabular files present in both versions.
    pub tables: Vec<TableDelta>,
}

/// A version to copy into another dataset.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CopyBody {
    /// The dataset (same project) that receives the new version.
    pub to: String,
    /// Version of the source to copy (number, v<number>, tag or latest; default latest).
    pub version: Option<String>,
    #[serde(default)]
    pub message: String,
}
