//! Request and response bodies of the storage API (a project's objects, storage
//! locations, master keys), shared by `qanat-api` (which serves them) and
//! `qanat-client` (which sends and reads them). Plain data: no HTTP types here.

use serde::{Deserialize, Serialize};

/// A stored object as the API lists it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ObjectView {
    /// The key inside the project's object area.
    pub key: String,
    pub location: String,
    pub region: String,
    /// Plaintext size in bytes.
    pub size: u64,
    /// RFC 3339; absent in the answer to an upload.
    pub last_modified: Option<String>,
}

/// Which storage location an object request is for.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
pub struct LocationParam {
    /// Storage location name; default: the server's default location.
    pub location: Option<String>,
}

/// Which objects to list.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
pub struct ObjectListParams {
    pub location: Option<String>,
    /// Only keys under this prefix (a directory).
    pub prefix: Option<String>,
}

/// A configured storage location (never its credentials).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LocationView {
    pub name: String,
    pub region: String,
    /// `local`, `s3`, …
    pub kind: String,
    /// The location used when a request names none.
    pub default: bool,
}

/// The master keys, by id (never the keys).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KeyStatus {
    pub active_key_id: String,
    pub key_ids: Vec<String>,
    /// `file` or `env`.
    pub source: String,
}

/// What a master-key rotation did.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RotationView {
    pub new_key_id: String,
    pub retired_key_ids: Vec<String>,
    pub rewrapped_data_keys: u64,
}
