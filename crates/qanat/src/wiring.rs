//! Qanat's services, built once and in the order they depend on each other, each with
//! its final settings, and beside them the metadata migrations of every domain. The
//! server (`qanat server`), the data plane (`qanat serve`) and the tests build their
//! state here; nothing is rebuilt or set late.
//!
//! The order: governance and datasets (the store's), events (the outbox), tracking
//! (recording into the outbox), jobs (on tracking, with the job kinds and any remote
//! executors), the feature store (with its online store), serving (reading online
//! features through [`FeatureStore`]), monitoring (on serving and jobs), then the HTTP
//! layer's state.

use std::path::PathBuf;
use std::sync::Arc;

use qanat_api::{AppState, Domains, Http};
use qanat_features::online::OnlineStore;
use qanat_governance::{Governance, Oidc};
use qanat_jobs::{KubernetesSettings, SlurmSettings};
use qanat_store::migrations::{DomainMigrations, Schema};
use qanat_store::{MetaStore, ObjectStorage};

use crate::enrichment::FeatureStore;

/// The tables of every domain, in the order their migrations were written: adding a
/// domain adds its line here.
pub static SCHEMA: &[&DomainMigrations] = &[
    &qanat_governance::MIGRATIONS,
    &qanat_data::MIGRATIONS,
    &qanat_tracking::MIGRATIONS,
    &qanat_events::MIGRATIONS,
    &qanat_jobs::MIGRATIONS,
    &qanat_features::MIGRATIONS,
    &qanat_serving::MIGRATIONS,
    &qanat_monitor::MIGRATIONS,
];

/// [`SCHEMA`], checked: what the server opens its metadata store with.
pub fn schema() -> Result<Schema, qanat_store::Error> {
    Schema::new(SCHEMA)
}

/// What the services are built with.
#[derive(Debug)]
pub struct Settings {
    pub http: Http,
    /// Webhook deliveries and NATS.
    pub events: qanat_events::Settings,
    pub runs: qanat_tracking::RunLimits,
    pub jobs: qanat_jobs::Settings,
    pub kinds: qanat_jobs::Kinds,
    pub slurm: Option<SlurmSettings>,
    pub kubernetes: Option<KubernetesSettings>,
    /// The online feature store; without one, deployments that read features answer
    /// 503.
    pub online: Option<OnlineStore>,
    /// The online store's region (the default storage location's when `None`).
    pub online_region: Option<qanat_store::Region>,
    /// The memory a point-in-time join may hold (bytes); the feature store's default
    /// when `None`.
    pub join_memory: Option<u64>,
    /// The program that first loads an uploaded ONNX graph in a child process under a
    /// budget (this binary); without one, graphs load in the server only.
    pub load_check: Option<PathBuf>,
    /// The Python runtime for MLflow `pyfunc` models; without one they are refused.
    pub python: Option<qanat_serving::python::Settings>,
    /// Where ONNX models are served.
    pub onnx_device: qanat_serving::OnnxDevice,
    /// The OpenID provider whose access tokens are accepted, if any.
    pub oidc: Option<qanat_governance::OidcConfig>,
}

impl Settings {
    /// Everything at its default, the standard job kinds only, no online store: what a
    /// test that needs no particular setting builds.
    pub fn defaults(storage: &ObjectStorage) -> Settings {
        let region = storage
            .location(storage.default_location())
            .map(|l| l.region.to_string())
            .unwrap_or_default();
        Settings {
            http: Http::default(),
            events: qanat_events::Settings::default(),
            runs: qanat_tracking::RunLimits::default(),
            jobs: qanat_jobs::Settings::new(
                std::env::temp_dir().join("qanat-jobs"),
                "http://127.0.0.1:8080",
                region,
            ),
            kinds: qanat_jobs::Kinds::standard(),
            slurm: None,
            kubernetes: None,
            online: None,
            online_region: None,
            join_memory: None,
            load_check: None,
            python: None,
            onnx_device: qanat_serving::OnnxDevice::default(),
            oidc: None,
        }
    }
}

/// What building the services can fail at, naming the part.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("setting up webhook deliveries: {0}")]
    Events(#[from] qanat_events::Error),
    #[error("setting up single sign-on: {0}")]
    Oidc(#[from] qanat_governance::Error),
    #[error("jobs.slurm.enabled is set, but the Slurm cluster does not answer: {0}")]
    Slurm(#[source] qanat_jobs::Error),
    #[error("setting up the Kubernetes executor: {0}")]
    Kubernetes(#[source] qanat_jobs::Error),
}

/// The services on `meta` and `storage`, built once in dependency order.
pub async fn build(
    meta: MetaStore,
    storage: ObjectStorage,
    s: Settings,
) -> Result<AppState, Error> {
    let gov = match s.oidc {
        Some(c) => {
            Governance::new(meta.clone()).with_oidc(Oidc::new(c)?, storage.keyring().clone())
        }
        None => Governance::new(meta.clone()),
    };
    let events = qanat_events::Events::new(meta.clone(), storage.keyring().clone(), s.events)?;
    let datasets =
        qanat_data::Datasets::new(meta.clone(), storage.clone()).with_outbox(events.outbox());
    let tracking = qanat_tracking::Tracking::new(meta.clone())
        .with_outbox(events.outbox())
        .with_limits(s.runs);
    let mut jobs = qanat_jobs::Jobs::new(
        meta.clone(),
        storage.clone(),
        tracking.clone(),
        s.jobs,
        s.kinds,
    );
    if let Some(slurm) = s.slurm {
        jobs = jobs.with_slurm(slurm).await.map_err(Error::Slurm)?;
    }
    if let Some(k) = s.kubernetes {
        jobs = jobs.with_kubernetes(k).await.map_err(Error::Kubernetes)?;
    }
    let mut features =
        qanat_features::Features::new(meta.clone(), storage.clone(), datasets.clone());
    if let Some(bytes) = s.join_memory {
        features = features.with_join_memory(bytes);
    }
    if let Some(region) = s.online_region {
        features = features.with_online_region(region);
    }
    let mut serving = qanat_serving::Serving::new(meta.clone(), storage.clone(), tracking.clone())
        .with_onnx_device(s.onnx_device);
    if let Some(online) = s.online {
        features = features.with_online(online);
        // Deployments with feature enrichment read the online store in this process.
        serving = serving.with_features(Arc::new(FeatureStore(features.clone())));
    }
    if let Some(program) = &s.load_check {
        serving = serving.with_load_check(program);
    }
    if let Some(python) = s.python {
        serving = serving.with_python(python);
    }
    let monitor = qanat_monitor::Monitors::new(
        meta.clone(),
        storage.clone(),
        gov.clone(),
        tracking.clone(),
        serving.clone(),
        jobs.clone(),
        events.outbox(),
        datasets.clone(),
    );
    Ok(AppState::new(
        Domains {
            meta,
            gov,
            storage,
            datasets,
            tracking,
            events,
            jobs,
            features,
            serving,
            monitor,
        },
        s.http,
    ))
}

#[cfg(test)]
mod tests {
    /// The server's schema holds every domain's migrations, each version once, and the
    /// releases' migrations keep their numbers (databases record them by number).
    #[test]
    fn the_schema_applies_every_domain_in_version_order() {
        let versions = super::schema().expect("no clashes").versions();
        assert_eq!(
            &versions[..4],
            [
                (1, "governance"),
                (2, "datasets"),
                (3, "tracking"),
                (4, "tracking")
            ]
        );
        for d in super::SCHEMA {
            assert!(
                versions.iter().any(|(_, owner)| *owner == d.domain),
                "{} has no migrations",
                d.domain
            );
        }
    }

    /// Every migration file in a domain's folders is named in its list (a file the list
    /// forgot would never run).
    #[test]
    fn every_migration_file_is_listed() {
        for d in super::SCHEMA {
            assert_eq!(
                d.unlisted(),
                Vec::<String>::new(),
                "{}: add them to its domain_migrations!",
                d.domain
            );
        }
    }
}
