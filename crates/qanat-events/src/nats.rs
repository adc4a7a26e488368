//! Publishing events to NATS JetStream: `<prefix>.<project>.<entity>.<action>`, stored
//! in a stream (created when missing) so consumers that start later still see them.
//! A publish counts as delivered only when JetStream acknowledges it.

use std::sync::Arc;

use tokio::sync::Mutex;

use crate::outbox::Outcome;
use crate::NatsSettings;

/// A lazily connected JetStream publisher (a NATS server that is down at start is
/// retried by the outbox, not fatal).
#[derive(Clone)]
pub(crate) struct Publisher {
    settings: Arc<NatsSettings>,
    js: Arc<Mutex<Option<async_nats::jetstream::Context>>>,
}

use qanat_core::subject_token as token;

impl Publisher {
    pub(crate) fn new(settings: NatsSettings) -> Self {
        Publisher {
            settings: Arc::new(settings),
            js: Arc::new(Mutex::new(None)),
        }
    }

    async fn context(&self) -> Result<async_nats::jetstream::Context, String> {
        let mut held = self.js.lock().await;
        if let Some(js) = held.as_ref() {
            return Ok(js.clone());
        }
        let client = async_nats::connect(&self.settings.url)
            .await
            .map_err(|e| format!("connecting to NATS failed: {e}"))?;
        let js = async_nats::jetstream::new(client);
        js.get_or_create_stream(async_nats::jetstream::stream::Config {
            name: self.settings.stream.clone(),
            subjects: vec![format!("{}.>", self.settings.subject_prefix)],
            ..Default::default()
        })
        .await
        .map_err(|e| {
            format!(
                "creating JetStream stream '{}' failed: {e}",
                self.settings.stream
            )
        })?;
        *held = Some(js.clone());
        Ok(js)
    }

    /// The subject of `event` (`model_version.created`) in `project`.
    pub(crate) fn subject(&self, project: &str, event: &str) -> String {
        let (entity, action) = event.split_once('.').unwrap_or((event, ""));
        format!(
            "{}.{}.{}.{}",
            self.settings.subject_prefix,
            token(project),
            token(entity),
            token(action)
        )
    }

    pub(crate) async fn publish(&self, project: &str, event: &str, body: &str) -> Outcome {
        let js = match self.context().await {
            Ok(js) => js,
            Err(e) => return Outcome::Retry(None, e),
        };
        let subject = self.subject(project, event);
        let acked = match js.publish(subject, body.to_string().into()).await {
            Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match acked {
            Ok(()) => Outcome::Delivered(None),
            Err(e) => {
                // Reconnect next time: the connection may be what failed.
                *self.js.lock().await = None;
                Outcome::Retry(None, format!("publishing to NATS failed: {e}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn subjects_are_made_of_safe_tokens() {
        let p = super::Publisher::new(crate::NatsSettings::new("nats://x"));
        assert_eq!(
            p.subject("ml team.*", "model_version.created"),
            "qanat.events.ml_team__.model_version.created"
        );
    }
}
