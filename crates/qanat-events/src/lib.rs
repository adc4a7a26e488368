//! Qanat's event triggers. A change that other systems react to — a registered model
//! created, a model version created, a version tag set or deleted, an alias moved —
//! is an *event*. Webhooks (MLflow's model registry webhooks: per project, subscribed
//! to events, optionally signed with a secret) receive them as HTTP POSTs, and when a
//! NATS server is configured every event is also published to JetStream on
//! `<prefix>.<project>.<entity>.<action>`, where the scheduler and the monitor (and
//! anything else) can consume them.
//!
//! Delivery is durable and at least once. A domain records an event with
//! [`Outbox::record`] inside the transaction of the change itself, which queues one
//! delivery row per subscribed webhook (and one for NATS): an acknowledged change
//! always has its deliveries queued, and a crash or restart loses none. The
//! [`Dispatcher`] sends due deliveries, retries failures with exponential backoff, and
//! keeps every attempt as the delivery history. Webhook secrets are sealed at rest
//! (`qanat_store::Keyring::seal`); outgoing requests refuse non-public addresses unless
//! configured otherwise (the address is checked when it is resolved, so a DNS answer
//! cannot point a delivery at an internal service after the webhook was checked).
//!
//! ```no_run
//! # async fn demo(meta: qanat_store::MetaStore, keyring: qanat_store::Keyring) -> Result<(), qanat_events::Error> {
//! use qanat_events::{Events, Settings};
//! let events = Events::new(meta, keyring, Settings::default())?;
//! let _dispatcher = qanat_events::Dispatcher::spawn(events.clone());
//! # Ok(()) }
//! ```

mod dispatch;
mod error;
mod event;
mod nats;
mod outbox;
mod signature;
mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use qanat_store::{Keyring, MetaStore};
use tokio::sync::Notify;

pub use dispatch::Dispatcher;
pub use error::Error;
pub use event::{Action, Entity, EventType};
pub use outbox::Outbox;
pub use qanat_types::events::{wire, Attempt, Delivery, Webhook, WebhookStatus};
pub use signature::{sign, verify, DELIVERY_ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER};
pub use webhooks::{NewWebhook, TestResult, WebhookPage, WebhookUpdate};

/// This domain's tables: webhooks, their events, the delivery outbox and its attempts
/// (0008).
pub static MIGRATIONS: qanat_store::migrations::DomainMigrations =
    qanat_store::domain_migrations!("events", ["0008_events.sql",]);

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How deliveries are made.
#[derive(Debug, Clone)]
pub struct Settings {
    /// URL schemes a webhook may use (`https` only by default, as MLflow).
    pub allowed_schemes: Vec<String>,
    /// Whether a webhook may reach loopback, private, link-local or other non-public
    /// addresses (off by default: a webhook must not become a way into the internal
    /// network).
    pub allow_private_networks: bool,
    /// How long one attempt may take.
    pub timeout: Duration,
    /// Attempts per delivery before it is marked failed.
    pub max_attempts: u32,
    /// The wait before the first retry; it doubles per attempt, capped at a minute.
    pub retry_base: Duration,
    /// Where events are also published, if anywhere.
    pub nats: Option<NatsSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            allowed_schemes: vec!["https".into()],
            allow_private_networks: false,
            timeout: Duration::from_secs(30),
            max_attempts: 4,
            retry_base: Duration::from_secs(1),
            nats: None,
        }
    }
}

/// A NATS server with JetStream to publish every event to.
#[derive(Debug, Clone)]
pub struct NatsSettings {
    /// `nats://host:4222`.
    pub url: String,
    /// The subject prefix (`qanat.events`): events go to
    /// `<prefix>.<project>.<entity>.<action>`.
    pub subject_prefix: String,
    /// The JetStream stream that stores them (created when missing).
    pub stream: String,
}

impl NatsSettings {
    pub fn new(url: impl Into<String>) -> Self {
        NatsSettings {
            url: url.into(),
            subject_prefix: "qanat.events".into(),
            stream: "QANAT_EVENTS".into(),
        }
    }
}

/// The event layer: webhooks, the outbox and the HTTP client deliveries use.
#[derive(Clone, Debug)]
pub struct Events {
    meta: MetaStore,
    keyring: Keyring,
    settings: Arc<Settings>,
    http: reqwest::Client,
    outbox: Outbox,
}

impl Events {
    pub fn new(meta: MetaStore, keyring: Keyring, settings: Settings) -> Result<Self> {
        let http = dispatch::http_client(&settings)?;
        let outbox = Outbox::new(settings.nats.is_some(), Arc::new(Notify::new()));
        Ok(Events {
            meta,
            keyring,
            settings: Arc::new(settings),
            http,
            outbox,
        })
    }

    /// What domains record events with (inside their own transactions).
    pub fn outbox(&self) -> Outbox {
        self.outbox.clone()
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }
}

/// Milliseconds since the epoch (MLflow's timestamps).
pub(crate) fn now_ms() -> i64 {
    qanat_store::now_micros() / 1000
}
