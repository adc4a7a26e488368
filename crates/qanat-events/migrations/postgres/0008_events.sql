-- Registry webhooks (MLflow's model, per project) and the outbox of event deliveries.
-- A delivery row is written in the same transaction as the change it reports, so an
-- acknowledged change always has its deliveries queued; the dispatcher sends them
-- (webhooks: signed HTTP POSTs; NATS: JetStream publishes) and retries with backoff.

CREATE TABLE webhooks (
    webhook_id   TEXT PRIMARY KEY,            -- uuid
    project_id   TEXT NOT NULL REFERENCES projects(id),
    name         TEXT NOT NULL,
    description  TEXT,
    url          TEXT NOT NULL,
    secret       TEXT,                        -- sealed (qanat_store::Keyring::seal), never plain
    status       TEXT NOT NULL,               -- ACTIVE | DISABLED
    created_at   BIGINT NOT NULL,             -- epoch ms
    updated_at   BIGINT NOT NULL,
    created_by   TEXT NOT NULL,
    deleted_at   BIGINT
);
CREATE INDEX webhooks_project ON webhooks(project_id, created_at);

CREATE TABLE webhook_events (
    webhook_id  TEXT NOT NULL REFERENCES webhooks(webhook_id),
    event       TEXT NOT NULL,                -- entity.action, e.g. model_version.created
    position    BIGINT NOT NULL,              -- order as subscribed
    PRIMARY KEY (webhook_id, event)
);
CREATE INDEX webhook_events_event ON webhook_events(event);

CREATE TABLE event_deliveries (
    delivery_id      TEXT PRIMARY KEY,        -- uuid, sent as X-MLflow-Delivery-Id
    project_id       TEXT NOT NULL REFERENCES projects(id),
    target           TEXT NOT NULL,           -- webhook | nats
    webhook_id       TEXT,
    event            TEXT NOT NULL,
    body             TEXT NOT NULL,           -- the exact JSON every attempt sends
    status           TEXT NOT NULL,           -- pending | delivered | failed
    attempts         BIGINT NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT NOT NULL,        -- epoch ms
    lease_until      BIGINT,                 -- a dispatcher holds it until then
    response_status  BIGINT,
    last_error       TEXT,
    created_at       BIGINT NOT NULL,
    finished_at      BIGINT
);
CREATE INDEX event_deliveries_due ON event_deliveries(status, next_attempt_at);
CREATE INDEX event_deliveries_webhook ON event_deliveries(webhook_id, created_at);

CREATE TABLE event_delivery_attempts (
    delivery_id      TEXT NOT NULL REFERENCES event_deliveries(delivery_id),
    attempt          BIGINT NOT NULL,
    at               BIGINT NOT NULL,        -- epoch ms
    duration_ms      BIGINT NOT NULL,
    response_status  BIGINT,
    error            TEXT,
    PRIMARY KEY (delivery_id, attempt)
);
