//! The request and response bodies of the datasets API, shared by the server
//! (`qanat-api`) and the client (`qanat-client`), so both sides read and write the same
//! types.

use serde::{Deserialize, Serialize};

use crate::{ChunkId, DatasetVersion, FileProfile, Manifest};

/// Which of these chunks does the server lack? (part of a push)
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChunkIds {
    #[schema(value_type = Vec<String>)]
    pub ids: Vec<ChunkId>,
}

/// The chunks of a [`ChunkIds`] question still to upload.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MissingChunks {
    #[schema(value_type = Vec<String>)]
    pub missing: Vec<ChunkId>,
}

/// A new version from chunks already uploaded.
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

/// One version with its file tree and the profiles of its tabular files.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VersionWithManifest {
    #[serde(flatten)]
    pub version: DatasetVersion,
    pub manifest: Manifest,
    /// Schema, row count and column profile of each CSV/Parquet file.
    pub profiles: Vec<FileProfile>,
}
