//! Qanat's feature store: the same feature definitions give leak-free training sets
//! offline and fresh values online.
//!
//! - Definitions ([`definitions`]): a feature repo is a folder of YAML documents —
//!   entities, sources, feature views, feature services — checked as a whole.
//! - The registry ([`Features::plan`], [`Features::apply`]): every object has immutable
//!   versions, one per change of its logic; metadata (owner, tags, PII flags) is edited
//!   in place. Consumers pin `view@3` or follow the newest version.
//! - Point-in-time joins ([`point_in_time`]): for each entity row, the newest feature
//!   row at or before its timestamp and within the view's ttl, ties broken by the
//!   newest write — never a row from the future.

pub mod definitions;
mod error;
mod offline;
pub mod online;
mod pii_found;
pub mod point_in_time;
mod progress;
mod registry;
mod serving;
mod sources;
mod sql;
mod staging;
mod streaming;
mod training_output;
mod training_set;
mod values;
pub use qanat_types::features::wire;

use std::sync::Arc;
use std::time::Duration;

use qanat_core::cache::{Cache, Generation};
use qanat_core::ProjectId;
use qanat_store::{MetaStore, ObjectStorage};

pub use definitions::{FeatureRef, FeatureRepo, ObjectKind, RepoFiles, Ttl, ValueType};
pub use error::{Error, Result};
pub use pii_found::Found as PiiFound;
pub use registry::Applier;

/// This domain's tables: the feature registry's objects and their versions (0010).
pub static MIGRATIONS: qanat_store::migrations::DomainMigrations = qanat_store::domain_migrations!(
    "features",
    ["0010_features.sql", "0024_feature_pii_found.sql",]
);

/// The feature store of one server.
#[derive(Clone, Debug)]
pub struct Features {
    meta: MetaStore,
    /// The project files `file` sources read; its keyring keys the pseudonyms of PII
    /// features.
    storage: ObjectStorage,
    datasets: qanat_data::Datasets,
    /// Where online features live (none: online serving answers 503).
    online: Option<online::OnlineStore>,
    /// The region the online store's bytes are in; the default storage location's
    /// when unset. Writes of a project that does not allow it are refused.
    online_region: Option<qanat_store::Region>,
    /// The stream consumers' states.
    streams: streaming::Statuses,
    /// Bytes a training set's join may hold in memory; larger inputs are joined
    /// partition by partition on disk.
    join_memory: u64,
    /// Live views and feature services as online reads look them up.
    cache: Arc<RegistryCache>,
    /// Recent materialization runs, with their progress.
    runs: progress::Runs,
    /// Entities materialization writes in its first chunk (one online-store
    /// transaction, then a checkpoint of how far the view is done), and the most in
    /// any chunk: each chunk is twice the one before, up to the most.
    materialize_chunk: (usize, usize),
    /// What this process knows scans found in each view's values (so a push records
    /// only what is new).
    pii_seen: Arc<std::sync::Mutex<PiiSeen>>,
}

/// Kinds found by feature, by project and view.
type PiiSeen = std::collections::HashMap<
    (ProjectId, String),
    std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
>;

/// What every online read looks up in the registry — each view's newest definition
/// with its join keys, each feature service's features — held until an apply in this
/// process changes the registry, or for [`REGISTRY_CACHE_TTL`] at most (an apply by
/// another server sharing the metadata store).
#[derive(Debug)]
struct RegistryCache {
    views: Cache<(ProjectId, String), Arc<serving::LiveView>>,
    services: Cache<(ProjectId, String), Arc<[FeatureRef]>>,
}

/// How long a cached registry object is trusted without an apply seen by this process.
pub const REGISTRY_CACHE_TTL: Duration = Duration::from_secs(1);

static REGISTRY: Generation = Generation::new();

/// Marks every cached registry object of this process as stale (after an apply).
fn registry_changed() {
    REGISTRY.bump();
}

impl Default for RegistryCache {
    fn default() -> Self {
        RegistryCache {
            views: Cache::new(&REGISTRY, REGISTRY_CACHE_TTL),
            services: Cache::new(&REGISTRY, REGISTRY_CACHE_TTL),
        }
    }
}

impl Features {
    pub fn new(meta: MetaStore, storage: ObjectStorage, datasets: qanat_data::Datasets) -> Self {
        Features {
            meta,
            storage,
            datasets,
            online: None,
            online_region: None,
            streams: Default::default(),
            join_memory: 2 << 30,
            cache: Default::default(),
            runs: Default::default(),
            materialize_chunk: (10_000, 1_000_000),
            pii_seen: Default::default(),
        }
    }

    /// The same feature store with another memory budget for training-set joins.
    pub fn with_join_memory(mut self, bytes: u64) -> Self {
        self.join_memory = bytes.max(1 << 20);
        self
    }

    /// The same feature store writing `first` entities in its first materialization
    /// chunk and each next chunk twice the one before, up to `most`. By default
    /// 10,000 up to 1,000,000: a run checkpoints often while it is young and commits
    /// (each commit rewrites the pages it touched, and waits for an fsync) only a few
    /// times in all.
    pub fn with_materialize_chunks(mut self, first: usize, most: usize) -> Self {
        let first = first.max(1);
        self.materialize_chunk = (first, most.max(first));
        self
    }

    /// The same feature store with an online store.
    pub fn with_online(mut self, store: online::OnlineStore) -> Self {
        self.online = Some(store);
        self
    }

    /// The same feature store, its online store's bytes kept in `region` (a Redis in
    /// another data centre, say): a project that does not allow the region cannot
    /// write online features.
    pub fn with_online_region(mut self, region: qanat_store::Region) -> Self {
        self.online_region = Some(region);
        self
    }
}
