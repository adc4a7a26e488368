//! Streaming ingestion: every `stream` source reads its NATS JetStream subject through
//! a durable pull consumer; rows are checked against the views that read the source,
//! written online, and only then acknowledged — at-least-once delivery over writes that
//! are idempotent (the online store keeps the newest row), so a crash or a restart
//! loses nothing and duplicates nothing visible.
//!
//! A supervisor ([`Features::run_streams`]) watches the registries: a consumer starts
//! when a stream source is applied, restarts when its definition changes, and stops
//! when it is removed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;
use qanat_core::ProjectId;
use qanat_governance::{append_audit_in, AuditRecord, Governance, Project};
use serde_json::Value;
use sqlx::Row;

use crate::definitions::{SourceDef, SourceType};
use crate::error::{Error, Result};
use crate::wire::{Columns, StreamStatus};
use crate::Features;

/// Messages taken per fetch.
const BATCH: usize = 500;

/// What each consumer reports, by (project id, source).
pub(crate) type Statuses = Arc<Mutex<BTreeMap<(String, String), StreamStatus>>>;

use qanat_core::subject_token as token;

impl Features {
    /// Every stream consumer's state in `project`.
    pub fn streams(&self, project: &Project) -> Vec<StreamStatus> {
        self.all_streams()
            .into_iter()
            .filter(|(p, _)| p == project.id.as_str())
            .map(|(_, mut s)| {
                s.project = project.name.clone();
                s
            })
            .collect()
    }

    /// Every stream consumer's state, by project id.
    pub fn all_streams(&self) -> Vec<(String, StreamStatus)> {
        self.streams
            .lock()
            .map(|m| m.iter().map(|((p, _), s)| (p.clone(), s.clone())).collect())
            .unwrap_or_default()
    }

    /// Runs the consumers of every stream source, following the registries, until the
    /// task is dropped. `nats_url`: the NATS server the subjects are on; without one,
    /// each stream source is listed as not connected, saying what to configure.
    #[qanat_macros::boxed]
    pub async fn run_streams(self, nats_url: Option<String>) {
        let mut running: BTreeMap<(String, String), (i64, tokio::task::JoinHandle<()>)> =
            BTreeMap::new();
        loop {
            match self.stream_sources().await {
                Ok(sources) => {
                    let wanted: BTreeMap<(String, String), (i64, SourceDef)> = sources
                        .into_iter()
                        .map(|(p, v, d)| ((p, d.name.to_string()), (v, d)))
                        .collect();
                    running.retain(|k, (v, h)| {
                        let keep = wanted.get(k).is_some_and(|w| w.0 == *v) && !h.is_finished();
                        if !keep {
                            h.abort();
                            if let Ok(mut m) = self.streams.lock() {
                                m.remove(k);
                            }
                        }
                        keep
                    });
                    if let Ok(mut m) = self.streams.lock() {
                        m.retain(|k, _| wanted.contains_key(k));
                    }
                    for (k, (v, def)) in wanted {
                        if running.contains_key(&k) {
                            continue;
                        }
                        let Some(url) = nats_url.clone() else {
                            let subject = def.subject.clone().unwrap_or_default();
                            self.set_status(&k.0, &k.1, |s| {
                                s.subject = subject;
                                s.last_error = Some(
                                    "no NATS server is configured: set features.nats_url (QANAT_FEATURES_NATS_URL)".into(),
                                );
                            });
                            continue;
                        };
                        let f = self.clone();
                        let project_id = k.0.clone();
                        let h = tokio::spawn(async move { f.consume(url, project_id, def).await });
                        running.insert(k, (v, h));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "feature streams: reading the registries failed")
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// (project id, version, definition) of every live stream source.
    async fn stream_sources(&self) -> Result<Vec<(String, i64, SourceDef)>> {
        let rows = sqlx::query(
            "SELECT project_id, latest_version, definition FROM feature_objects WHERE kind = 'source' AND deleted_at IS NULL",
        )
        .fetch_all(self.meta.reader())
        .await?;
        let mut out = Vec::new();
        for r in rows {
            let def: SourceDef = match serde_json::from_str(&r.try_get::<String, _>("definition")?)
            {
                Ok(d) => d,
                Err(_) => continue,
            };
            if def.source_type == SourceType::Stream {
                out.push((r.try_get("project_id")?, r.try_get("latest_version")?, def));
            }
        }
        Ok(out)
    }

    fn set_status(&self, project_id: &str, source: &str, f: impl FnOnce(&mut StreamStatus)) {
        if let Ok(mut m) = self.streams.lock() {
            let s = m
                .entry((project_id.to_string(), source.to_string()))
                .or_insert_with(|| StreamStatus {
                    source: source.to_string(),
                    ..StreamStatus::default()
                });
            f(s);
        }
    }

    /// One source's consumer, retrying with a pause after any failure.
    async fn consume(self, url: String, project_id: String, def: SourceDef) {
        let subject = def.subject.clone().unwrap_or_default();
        self.set_status(&project_id, def.name.as_str(), |s| {
            s.subject = subject.clone()
        });
        loop {
            if let Err(e) = self.consume_once(&url, &project_id, &def).await {
                tracing::warn!(source = %def.name, error = %e, "feature stream consumer failed; retrying");
                self.set_status(&project_id, def.name.as_str(), |s| {
                    s.last_error = Some(e.to_string())
                });
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    async fn consume_once(&self, url: &str, project_id: &str, def: &SourceDef) -> Result<()> {
        let unavailable = |what: &str, e: &dyn std::fmt::Display| {
            Error::Unavailable(format!("NATS: {what}: {e}"))
        };
        let subject = def.subject.clone().unwrap_or_default();
        let project = Governance::new(self.meta.clone())
            .project_by_id(&ProjectId::new(project_id))
            .await?;
        let client = async_nats::connect(url)
            .await
            .map_err(|e| unavailable("connecting", &e))?;
        let js = jetstream::new(client);
        // The subject's stream: the one that already holds it, or one made for it.
        let stream = match js.stream_by_subject(subject.clone()).await {
            Ok(name) => js
                .get_stream(name)
                .await
                .map_err(|e| unavailable("the stream", &e))?,
            Err(_) => js
                .get_or_create_stream(stream::Config {
                    name: format!(
                        "QANAT_FEATURES_{}_{}",
                        token(project_id),
                        token(def.name.as_str())
                    ),
                    subjects: vec![subject.clone()],
                    ..Default::default()
                })
                .await
                .map_err(|e| unavailable("creating the stream", &e))?,
        };
        let durable = format!(
            "qanat_features_{}_{}",
            token(project_id),
            token(def.name.as_str())
        );
        let mut consumer: jetstream::consumer::Consumer<pull::Config> = stream
            .get_or_create_consumer(
                &durable,
                pull::Config {
                    durable_name: Some(durable.clone()),
                    filter_subject: subject.clone(),
                    ack_policy: jetstream::consumer::AckPolicy::Explicit,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| unavailable("the consumer", &e))?;
        self.set_status(project_id, def.name.as_str(), |s| {
            s.project = project.name.clone();
            s.connected = true;
            s.last_error = None;
        });
        loop {
            let mut batch = consumer
                .fetch()
                .max_messages(BATCH)
                .expires(Duration::from_secs(1))
                .messages()
                .await
                .map_err(|e| unavailable("fetching", &e))?;
            let mut messages = Vec::new();
            while let Some(m) = batch.next().await {
                messages.push(m.map_err(|e| unavailable("a message", &e))?);
            }
            if !messages.is_empty() {
                let mut rows: Vec<serde_json::Map<String, Value>> = Vec::new();
                let mut unreadable = 0u64;
                for m in &messages {
                    match serde_json::from_slice::<Value>(&m.payload) {
                        Ok(Value::Object(o)) => rows.push(o),
                        Ok(Value::Array(a)) => {
                            for v in a {
                                match v {
                                    Value::Object(o) => rows.push(o),
                                    _ => unreadable += 1,
                                }
                            }
                        }
                        _ => unreadable += 1,
                    }
                }
                let (accepted, rejected, last_reason) = if rows.is_empty() {
                    (0, 0, None)
                } else {
                    let registry = self.registry(&project).await?;
                    let df = columns(&rows);
                    let to = crate::wire::PushMode::OnlineAndOffline;
                    match self
                        .ingest(&project, &registry, def, &df, to, "service:features-stream")
                        .await
                    {
                        Ok(r) => (
                            r.accepted,
                            r.rejected.len() as u64,
                            r.rejected.first().map(|x| x.reasons.join("; ")),
                        ),
                        // Every row refused: their reasons, and nothing to retry.
                        Err(Error::Invalid(e)) => (0, rows.len() as u64, Some(e)),
                        Err(e) => return Err(e),
                    }
                };
                self.audit_batch(&project, def, accepted, rejected + unreadable)
                    .await?;
                // Written (or refused for good): acknowledged. A failure above left them
                // unacknowledged, and JetStream delivers them again.
                for m in &messages {
                    m.ack()
                        .await
                        .map_err(|e| unavailable("acknowledging", &e))?;
                }
                self.set_status(project_id, def.name.as_str(), |s| {
                    s.ingested += accepted;
                    s.rejected += rejected + unreadable;
                    if let Some(r) = last_reason {
                        s.last_rejection = Some(r);
                    } else if unreadable > 0 {
                        s.last_rejection =
                            Some("a message that is not a JSON object (or a list of them)".into());
                    }
                });
            }
            if let Ok(info) = consumer.info().await {
                let pending = info.num_pending;
                self.set_status(project_id, def.name.as_str(), |s| s.pending = pending);
            }
        }
    }

    /// One audit entry per ingested batch, by the stream service.
    async fn audit_batch(
        &self,
        project: &Project,
        def: &SourceDef,
        accepted: u64,
        rejected: u64,
    ) -> Result<()> {
        let mut rec = AuditRecord::by_service(
            "features-stream",
            "feature.stream.ingest",
            format!("project:{}/source:{}", project.name, def.name),
            Some(project.name.as_str()),
        );
        rec.detail = format!("{accepted} rows written, {rejected} rejected");
        let mut tx = self.meta.writer().begin().await?;
        append_audit_in(&mut tx, &rec).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Rows (JSON objects) as columns, in the order columns first appear; a row without a
/// column gets null there.
fn columns(rows: &[serde_json::Map<String, Value>]) -> Columns {
    let mut names: Vec<String> = Vec::new();
    for r in rows {
        for k in r.keys() {
            if !names.contains(k) {
                names.push(k.clone());
            }
        }
    }
    Columns(
        names
            .into_iter()
            .map(|n| {
                let values = rows
                    .iter()
                    .map(|r| r.get(&n).cloned().unwrap_or(Value::Null))
                    .collect();
                (n, values)
            })
            .collect(),
    )
}
