//! Qanat's storage foundation: the metadata store and the encrypted object storage layer.
//!
//! * [`MetaStore`] holds every piece of metadata (identities, projects, audit chain, data
//!   keys, and later runs, models, features and jobs). It speaks SQLite by default
//!   (`sqlite://…`, WAL, one writer connection so concurrent writers queue instead of
//!   failing with "database is locked") and PostgreSQL when the URL says `postgres://`.
//!   The same SQL runs on both. Each domain crate ships its own migrations for both; the
//!   store applies the [`migrations::Schema`] it is given on connect.
//! * [`ObjectStorage`] puts bytes into named storage locations (a local directory, or any
//!   S3-compatible bucket through `object_store`), each tagged with a [`Region`]. Every
//!   byte written through it is encrypted with AES-256-GCM under a fresh per-object data
//!   key, streamed in fixed-size chunks so memory stays bounded, and verified on read.
//! * [`Keyring`] holds the master keys that wrap the data keys; rotating it re-wraps the
//!   data keys without touching the objects.
//!
//! ```no_run
//! # async fn demo() -> Result<(), qanat_store::Error> {
//! use qanat_store::{Keyring, LocationConfig, MetaStore, ObjectKey, ObjectStorage};
//! use qanat_store::migrations::Schema;
//! // The tables of governance (identities, projects, audit, data keys).
//! let schema = Schema::new(&[&qanat_governance::MIGRATIONS])?;
//! let meta = MetaStore::connect("sqlite:///tmp/qanat.db", &schema).await?;
//! let keyring = Keyring::load_or_create(std::path::Path::new("/tmp/master.key"))?;
//! let storage = ObjectStorage::open(
//!     &[LocationConfig::local("local", "/tmp/objects", "uae-north")?],
//!     "local",
//!     keyring,
//!     meta,
//! )
//! .await?;
//! let key: ObjectKey = "projects/demo/hello.txt".parse()?;
//! storage.put_bytes("local", &key, "hello".into()).await?;
//! assert_eq!(&storage.get_bytes("local", &key).await?[..], b"hello");
//! # Ok(()) }
//! ```

mod envelope;
mod error;
mod keyring;
mod localfs;
mod metadata;
pub mod migrations;
mod objects;
mod sealed;
mod time;

#[cfg(feature = "testing")]
pub mod testing;

pub use error::Error;
pub use keyring::write_secret_file;
pub use keyring::{Keyring, KeyringSource, RotationReport};
pub use localfs::DirectWriter;
pub use metadata::{redact_url, Backend, MetaStore};
pub use objects::{
    LocationConfig, LocationInfo, ObjectInfo, ObjectKey, ObjectStorage, PlainStream, Region,
};
pub use time::{format_micros, now_micros, parse_micros, Micros};

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
