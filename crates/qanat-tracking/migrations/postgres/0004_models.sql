-- Logged models, run inputs/outputs and the model registry (the MLflow 3 model), plus
-- one metric point per (run, key, step, timestamp, value): logging the same point
-- again is a no-op, as on MLflow (log_model re-logs a run's metrics for its model).

DELETE FROM metrics a USING metrics b
 WHERE a.ctid > b.ctid AND a.run_id = b.run_id AND a.key = b.key AND a.step = b.step
   AND a.timestamp = b.timestamp AND a.value = b.value AND a.is_nan = b.is_nan;
DROP INDEX metrics_history;
CREATE UNIQUE INDEX metrics_point ON metrics(run_id, key, step, timestamp, value, is_nan);

CREATE TABLE logged_models (
    model_id          TEXT PRIMARY KEY,   -- m-<32 hex>
    project_id        TEXT NOT NULL REFERENCES projects(id),
    experiment_id     BIGINT NOT NULL,
    name              TEXT NOT NULL,
    artifact_location TEXT NOT NULL,
    status            TEXT NOT NULL,      -- LOGGED_MODEL_PENDING | LOGGED_MODEL_READY | LOGGED_MODEL_UPLOAD_FAILED
    status_message    TEXT,
    lifecycle_stage   TEXT NOT NULL,      -- active | deleted
    model_type        TEXT,
    source_run_id     TEXT,
    creator           TEXT NOT NULL,
    creation_time     BIGINT NOT NULL,
    last_update_time  BIGINT NOT NULL
);
CREATE INDEX logged_models_experiment ON logged_models(project_id, experiment_id, creation_time);
CREATE INDEX logged_models_run ON logged_models(source_run_id);

CREATE TABLE logged_model_tags (
    model_id  TEXT NOT NULL REFERENCES logged_models(model_id),
    key       TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (model_id, key)
);

CREATE TABLE logged_model_params (
    model_id  TEXT NOT NULL REFERENCES logged_models(model_id),
    key       TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (model_id, key)
);

-- Metrics logged for a model (through log-batch with a model_id), with the run and
-- dataset they were measured in.
CREATE TABLE logged_model_metrics (
    model_id        TEXT NOT NULL REFERENCES logged_models(model_id),
    key             TEXT NOT NULL,
    value           DOUBLE PRECISION NOT NULL,
    is_nan          BIGINT NOT NULL,
    timestamp       BIGINT NOT NULL,
    step            BIGINT NOT NULL,
    run_id          TEXT NOT NULL,
    dataset_name    TEXT NOT NULL,
    dataset_digest  TEXT NOT NULL,
    PRIMARY KEY (model_id, key, step, timestamp, run_id, dataset_name, dataset_digest)
);

-- runs/outputs: models a run produced.
CREATE TABLE run_model_outputs (
    run_id    TEXT NOT NULL REFERENCES runs(run_id),
    model_id  TEXT NOT NULL,
    step      BIGINT NOT NULL,
    PRIMARY KEY (run_id, model_id)
);

-- runs/log-inputs: datasets a run read (with the Qanat dataset version when the source
-- is one) and models it used.
CREATE TABLE run_dataset_inputs (
    run_id          TEXT NOT NULL REFERENCES runs(run_id),
    name            TEXT NOT NULL,
    digest          TEXT NOT NULL,
    source_type     TEXT NOT NULL,
    source          TEXT NOT NULL,
    schema_json     TEXT,
    profile         TEXT,
    tags_json       TEXT NOT NULL,        -- [{"key":..,"value":..}] (e.g. mlflow.data.context)
    qanat_dataset   TEXT,                 -- dataset id, when the source is a Qanat dataset
    qanat_version   TEXT,                 -- its version id
    created_time    BIGINT NOT NULL,
    PRIMARY KEY (run_id, name, digest)
);

CREATE TABLE run_model_inputs (
    run_id    TEXT NOT NULL REFERENCES runs(run_id),
    model_id  TEXT NOT NULL,
    PRIMARY KEY (run_id, model_id)
);

CREATE TABLE registered_models (
    id                TEXT PRIMARY KEY,
    project_id        TEXT NOT NULL REFERENCES projects(id),
    name              TEXT NOT NULL,
    description       TEXT NOT NULL,
    creation_time     BIGINT NOT NULL,
    last_update_time  BIGINT NOT NULL,
    UNIQUE (project_id, name)
);

CREATE TABLE registered_model_tags (
    registered_model_id  TEXT NOT NULL REFERENCES registered_models(id),
    key                  TEXT NOT NULL,
    value                TEXT NOT NULL,
    PRIMARY KEY (registered_model_id, key)
);

-- Deleted versions stay as 'Deleted_Internal' so their numbers are never reused.
CREATE TABLE model_versions (
    registered_model_id  TEXT NOT NULL REFERENCES registered_models(id),
    version              BIGINT NOT NULL,
    creation_time        BIGINT NOT NULL,
    last_update_time     BIGINT NOT NULL,
    description          TEXT NOT NULL,
    user_id              TEXT NOT NULL,
    current_stage        TEXT NOT NULL,   -- None | Staging | Production | Archived | Deleted_Internal
    source               TEXT NOT NULL,
    run_id               TEXT,
    run_link             TEXT,
    status               TEXT NOT NULL,   -- READY
    status_message       TEXT,
    storage_location     TEXT NOT NULL,
    model_id             TEXT,            -- the logged model it registers
    PRIMARY KEY (registered_model_id, version)
);
CREATE INDEX model_versions_run ON model_versions(run_id);

CREATE TABLE model_version_tags (
    registered_model_id  TEXT NOT NULL,
    version              BIGINT NOT NULL,
    key                  TEXT NOT NULL,
    value                TEXT NOT NULL,
    PRIMARY KEY (registered_model_id, version, key)
);

CREATE TABLE registered_model_aliases (
    registered_model_id  TEXT NOT NULL REFERENCES registered_models(id),
    alias                TEXT NOT NULL,
    version              BIGINT NOT NULL,
    PRIMARY KEY (registered_model_id, alias)
);

-- Every move of an alias (set, promote, rollback, delete), newest last: what
-- `qanat models rollback` walks back along.
CREATE TABLE model_alias_history (
    registered_model_id  TEXT NOT NULL,
    alias                TEXT NOT NULL,
    seq                  BIGINT NOT NULL,
    version              BIGINT,         -- NULL when the alias was deleted
    previous_version     BIGINT,
    changed_by           TEXT NOT NULL,
    changed_time         BIGINT NOT NULL,
    reason               TEXT NOT NULL,   -- set | promote | rollback | delete
    PRIMARY KEY (registered_model_id, alias, seq)
);
