//! Datasets as the API shows them: datasets and versions, manifests (a version's file
//! tree as chunk lists), the profiles and schemas of their tables, diffs, chunk packs,
//! and the request and response bodies (`qanat-data` stores and serves them).

mod chunk;
mod dataset;
pub mod diff;
mod erasure;
mod manifest;
pub mod pack;
pub mod tabular;
pub mod wire;

pub use chunk::{ChunkId, AVG_CHUNK, MAX_CHUNK, MIN_CHUNK};
pub use dataset::{
    Classification, Dataset, DatasetVersion, GcReport, InstallationGc, NewDataset, PackStored,
    UpdateDataset,
};
pub use diff::{
    diff, table_deltas, ColumnDelta, FileChange, FileSummary, ManifestDiff, TableDelta,
};
pub use erasure::{AlsoUnreadable, ErasedFile, Erasure, ErasureMatch, ErasureRequest};
pub use manifest::{ChunkRef, FileEntry, Manifest};
/// Which version of a dataset: a number, `latest`, or a tag.
pub use qanat_core::Selector as VersionRef;
pub use tabular::{
    ColumnSpec, DatasetSchema, FileProfile, SchemaViolation, TableFormat, TableProfile,
    UndeclaredPii,
};
