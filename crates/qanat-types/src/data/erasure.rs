//! Erasure of one data subject's rows from a dataset (the right to erasure): the
//! request, and the record of what it did.

use serde::{Deserialize, Serialize};

/// Rows to erase: every row of a table whose `column` holds one of `values` (compared
/// as text, surrounding spaces ignored).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErasureMatch {
    pub column: String,
    pub values: Vec<String>,
}

/// `POST /api/v1/projects/{project}/datasets/{dataset}/erasures`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErasureRequest {
    /// The data subject request's own reference (a ticket number): what the audit log,
    /// lineage and the compliance report name the erasure by. Letters, digits, `.`,
    /// `_`, `-` and `:`, at most 128.
    pub request_id: String,
    /// A row is erased when any of these matches it.
    #[serde(rename = "match")]
    pub matches: Vec<ErasureMatch>,
    /// Why (free text, kept with the record; no personal data, please).
    #[serde(default)]
    pub reason: String,
}

/// A file of a version that held rows of the subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErasedFile {
    pub version: i64,
    pub path: String,
    /// Rows that matched.
    pub rows: u64,
    /// Chunks of the file that held them, destroyed: the file cannot be read any more.
    pub chunks_shredded: u64,
}

/// Another object that read the same destroyed chunks (a copy of the dataset, a
/// version of another dataset sharing the bytes): now unreadable as well.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AlsoUnreadable {
    pub dataset: String,
    pub version: i64,
    pub path: String,
}

/// The record of an erasure (what `qanat data erase` prints and the report lists).
/// It names the request, never the values erased.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Erasure {
    pub request_id: String,
    pub dataset: String,
    /// The columns the request matched on.
    pub columns: Vec<String>,
    pub reason: String,
    pub requested_by: String,
    pub created_at: String,
    /// When every affected chunk was destroyed; `None` while it is going on (a crash
    /// part-way is finished by sending the same request again).
    pub completed_at: Option<String>,
    /// The version written without the subject's rows (`None` when the latest
    /// version held none).
    pub new_version: Option<i64>,
    /// Rows removed from the latest version.
    pub rows_removed: u64,
    /// Every file of every version that held the subject's rows.
    pub files: Vec<ErasedFile>,
    pub chunks_shredded: u64,
    /// Plaintext bytes of the destroyed chunks.
    pub bytes_shredded: u64,
    #[serde(default)]
    pub also_unreadable: Vec<AlsoUnreadable>,
}
