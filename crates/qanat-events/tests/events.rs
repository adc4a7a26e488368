//! The event layer on every metadata backend: deliveries are queued inside the
//! change's transaction (a rolled-back change queues nothing), sent signed, retried
//! after failures, kept as history; non-public addresses are refused by default; and,
//! where `QANAT_TEST_NATS_URL` names a server, events land in JetStream.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use qanat_events::{
    Dispatcher, EventType, Events, NatsSettings, NewWebhook, Settings, DELIVERY_ID_HEADER,
    SIGNATURE_HEADER, TIMESTAMP_HEADER,
};
use qanat_governance::{testing, Governance, Project};
use qanat_store::testing::{local_storage, service_var, TestDb};
use serde_json::json;

static SCHEMA: &[&qanat_store::migrations::DomainMigrations] =
    &[&qanat_governance::MIGRATIONS, &qanat_events::MIGRATIONS];

/// Settings for a receiver on 127.0.0.1 with quick retries.
fn local_settings() -> Settings {
    Settings {
        allowed_schemes: vec!["http".into()],
        allow_private_networks: true,
        timeout: Duration::from_secs(5),
        max_attempts: 3,
        retry_base: Duration::from_millis(200),
        nats: None,
    }
}

type Got = Arc<Mutex<Vec<(HeaderMap, String)>>>;

/// A receiver that answers `status` to everything and keeps what it got.
async fn receiver(status: u16) -> (String, Got) {
    let got: Got = Arc::default();
    let keep = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let keep = keep.clone();
            async move {
                keep.lock().expect("lock").push((headers, body));
                axum::http::StatusCode::from_u16(status).expect("status")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got)
}

async fn setup(db: &TestDb, settings: Settings) -> (Events, Project, tempfile::TempDir) {
    let (storage, dir) = local_storage(db).await;
    let gov = Governance::new(db.store.clone());
    let [p] = testing::projects(&gov, ["events"]).await;
    let events =
        Events::new(db.store.clone(), storage.keyring().clone(), settings).expect("events");
    (events, p, dir)
}

fn hook(url: &str, events: Vec<EventType>, secret: Option<&str>) -> NewWebhook {
    NewWebhook {
        name: "hook".into(),
        url: url.into(),
        events,
        description: None,
        secret: secret.map(str::to_string),
        status: None,
        creator: "test".into(),
    }
}

/// Records `event` in a transaction that commits or rolls back.
async fn record(
    db: &TestDb,
    events: &Events,
    p: &Project,
    event: EventType,
    commit: bool,
) -> usize {
    let mut tx = db.store.writer().begin().await.expect("tx");
    let n = events
        .outbox()
        .record(&mut tx, &p.id, &p.name, event, json!({"name": "m"}))
        .await
        .expect("recorded");
    if commit {
        tx.commit().await.expect("commit");
        events.outbox().wake();
    } else {
        tx.rollback().await.expect("rollback");
    }
    n
}

async fn wait_for<F: Fn() -> bool>(what: &str, f: F) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn deliveries_are_queued_with_the_change_sent_signed_and_kept_as_history() {
    for db in TestDb::all(SCHEMA).await {
        let (events, p, _dir) = setup(&db, local_settings()).await;
        let (url, got) = receiver(200).await;
        let w = events
            .create_webhook(
                &p.id,
                hook(&url, vec![EventType::MODEL_VERSION_CREATED], Some("k3y")),
            )
            .await
            .expect("created");
        // Not subscribed, and rolled back: nothing is queued.
        assert_eq!(
            record(&db, &events, &p, EventType::REGISTERED_MODEL_CREATED, true).await,
            0
        );
        assert_eq!(
            record(&db, &events, &p, EventType::MODEL_VERSION_CREATED, false).await,
            1
        );
        assert!(events
            .deliveries(&p.id, None, 10)
            .await
            .expect("list")
            .is_empty());
        // Queued before any dispatcher runs (as after a restart), sent once one does.
        assert_eq!(
            record(&db, &events, &p, EventType::MODEL_VERSION_CREATED, true).await,
            1
        );
        let dispatcher = Dispatcher::spawn(events.clone());
        wait_for("the delivery", || !got.lock().expect("lock").is_empty()).await;
        let (headers, body) = got.lock().expect("lock")[0].clone();
        let h = |n: &str| {
            headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        assert!(qanat_events::verify(
            b"k3y",
            &h(DELIVERY_ID_HEADER),
            &h(TIMESTAMP_HEADER),
            &body,
            &h(SIGNATURE_HEADER)
        ));
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(v["entity"], "model_version");
        assert_eq!(v["action"], "created");
        assert_eq!(v["data"]["name"], "m");
        assert_eq!(v["workspace"], "events");
        let mut history = Vec::new();
        for _ in 0..100 {
            history = events
                .deliveries(&p.id, Some(&w.webhook_id), 10)
                .await
                .expect("history");
            if history.first().is_some_and(|d| d.status == "delivered") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].status, "delivered");
        assert_eq!(history[0].delivery_id, h(DELIVERY_ID_HEADER));
        assert_eq!(history[0].attempt_log.len(), 1);
        assert_eq!(history[0].attempt_log[0].response_status, Some(200));
        dispatcher.abort();
        // gc forgets finished deliveries past retention; a pending one stays.
        record(&db, &events, &p, EventType::MODEL_VERSION_CREATED, true).await;
        let gone = events.purge_history(&p.id, i64::MAX).await.expect("purged");
        assert_eq!(gone, 1);
        let left = events.deliveries(&p.id, None, 10).await.expect("list");
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].status, "pending");
    }
}

#[tokio::test]
async fn failures_are_retried_with_backoff_then_given_up() {
    for db in TestDb::all(SCHEMA).await {
        let (events, p, _dir) = setup(&db, local_settings()).await;
        let (url, got) = receiver(503).await;
        let w = events
            .create_webhook(
                &p.id,
                hook(&url, vec![EventType::REGISTERED_MODEL_CREATED], None),
            )
            .await
            .expect("created");
        record(&db, &events, &p, EventType::REGISTERED_MODEL_CREATED, true).await;
        let dispatcher = Dispatcher::spawn(events.clone());
        let mut d = None;
        for _ in 0..200 {
            let h = events
                .deliveries(&p.id, Some(&w.webhook_id), 1)
                .await
                .expect("h");
            if h.first().is_some_and(|d| d.status == "failed") {
                d = h.into_iter().next();
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let d = d.expect("given up after max_attempts");
        assert_eq!(d.attempts, 3);
        assert_eq!(d.attempt_log.len(), 3);
        assert!(d.attempt_log.iter().all(|a| a.response_status == Some(503)));
        // Backoff: the retries came later and later (200 ms, then 400 ms base).
        let gaps: Vec<i64> = d
            .attempt_log
            .windows(2)
            .map(|w| w[1].at - w[0].at)
            .collect();
        assert!(gaps[0] >= 200 && gaps[1] >= 400, "{gaps:?}");
        assert_eq!(got.lock().expect("lock").len(), 3);
        // Every attempt carried the same delivery id.
        let ids: Vec<String> = got
            .lock()
            .expect("lock")
            .iter()
            .map(|(h, _)| h[DELIVERY_ID_HEADER].to_str().expect("id").to_string())
            .collect();
        assert!(ids.iter().all(|i| *i == d.delivery_id));
        dispatcher.abort();
    }
}

#[tokio::test]
async fn internal_addresses_and_other_schemes_are_refused_by_default() {
    let db = TestDb::sqlite(SCHEMA).await;
    let (events, p, _dir) = setup(&db, Settings::default()).await;
    let err = events
        .create_webhook(
            &p.id,
            hook(
                "http://example.com/h",
                vec![EventType::MODEL_VERSION_CREATED],
                None,
            ),
        )
        .await
        .expect_err("http is not allowed by default");
    assert!(
        err.to_string().contains("Invalid webhook URL scheme"),
        "{err}"
    );
    for url in [
        "https://127.0.0.1:9/h",
        "https://169.254.169.254/latest",
        "https://localhost:9/h",
    ] {
        let w = events
            .create_webhook(
                &p.id,
                hook(url, vec![EventType::MODEL_VERSION_CREATED], None),
            )
            .await
            .expect("syntax is fine; the address is checked when sending");
        let r = events
            .test_webhook(&p.id, &p.name, &w.webhook_id, None)
            .await
            .expect("tested");
        assert!(!r.success);
        let msg = r.error_message.unwrap_or_default();
        assert!(
            msg.contains("non-public") || msg.contains("not public"),
            "{url}: {msg}"
        );
    }
}

#[tokio::test]
async fn events_are_published_to_jetstream() {
    let Some(url) = service_var("QANAT_TEST_NATS_URL") else {
        return;
    };
    let db = TestDb::sqlite(SCHEMA).await;
    let prefix = format!("qanat-test-{}", uuid::Uuid::new_v4().simple());
    let stream = prefix.replace('-', "_").to_uppercase();
    let mut settings = local_settings();
    settings.nats = Some(NatsSettings {
        url: url.clone(),
        subject_prefix: prefix.clone(),
        stream: stream.clone(),
    });
    let (events, p, _dir) = setup(&db, settings).await;
    // No webhook: NATS alone gets a delivery.
    assert_eq!(
        record(
            &db,
            &events,
            &p,
            EventType::MODEL_VERSION_ALIAS_CREATED,
            true
        )
        .await,
        1
    );
    let dispatcher = Dispatcher::spawn(events.clone());
    let mut delivered = false;
    for _ in 0..200 {
        let d = events.deliveries(&p.id, None, 1).await.expect("list");
        if d.first().is_some_and(|d| d.status == "delivered") {
            delivered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(delivered, "the NATS delivery was not acknowledged");
    let client = async_nats::connect(&url).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let msg = js
        .get_stream(&stream)
        .await
        .expect("stream exists")
        .get_last_raw_message_by_subject(&format!("{prefix}.events.model_version_alias.created"))
        .await
        .expect("the event is stored");
    let v: serde_json::Value = serde_json::from_slice(&msg.payload).expect("json");
    assert_eq!(v["action"], "created");
    assert_eq!(v["workspace"], "events");
    js.delete_stream(&stream).await.expect("cleanup");
    dispatcher.abort();
}
