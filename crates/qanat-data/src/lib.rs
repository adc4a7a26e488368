//! Qanat datasets: immutable, content-addressed versions.
//!
//! A file is cut into content-defined chunks ([`chunking`], FastCDC, 256 KiB–4 MiB,
//! ~1 MiB on average) named by their BLAKE3 hash. A chunk is stored once per project and
//! storage location, encrypted through `qanat-store`. A version is a [`Manifest`]: every
//! file's path, size, mode, BLAKE3 and chunk list, itself named by the BLAKE3 of its
//! canonical JSON. Because cut points depend on content, an append or a small edit
//! changes only the chunks around it, and only those are uploaded again.
//!
//! Visibility is the commit: chunks and the manifest are written first, then one
//! transaction inserts the version row after checking that every chunk it names is
//! stored. A push that dies part-way leaves no version, and re-running it uploads only
//! the chunks that are still missing.

pub mod chunking;
pub mod erase;
mod erasures;
mod error;
pub mod protect;
mod store;
mod stored_file;
pub mod tabular;

pub use chunking::{ChunkId, MAX_CHUNK, MIN_CHUNK};
pub use error::Error;
pub use qanat_types::data::{
    diff, pack, table_deltas, wire, AlsoUnreadable, ChunkRef, Classification, ColumnDelta, Dataset,
    DatasetVersion, ErasedFile, Erasure, ErasureMatch, ErasureRequest, FileChange, FileEntry,
    FileSummary, GcReport, InstallationGc, Manifest, ManifestDiff, NewDataset, PackStored,
    TableDelta, UndeclaredPii, UpdateDataset,
};
pub use store::{Datasets, ProtectedTable, Pseudonymized, VersionRef};
pub use tabular::{ColumnSpec, DatasetSchema, FileProfile, SchemaViolation, TableProfile};

/// This domain's tables: datasets, versions, tags, chunks, and the lineage edges (0002).
/// A schema that lists it applies them (see `qanat_store::migrations`).
pub static MIGRATIONS: qanat_store::migrations::DomainMigrations = qanat_store::domain_migrations!(
    "datasets",
    [
        "0002_datasets.sql",
        "0007_dataset_deletion.sql",
        "0019_dataset_pii.sql",
        "0021_dataset_erasures.sql",
        "0023_expired_versions.sql",
    ]
);

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
