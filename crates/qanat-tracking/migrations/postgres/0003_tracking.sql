-- Experiment tracking (the MLflow model): experiments per project, runs, their params,
-- tags and metric history. Times are epoch milliseconds, as MLflow sends them.

CREATE TABLE experiments (
    project_id        TEXT NOT NULL REFERENCES projects(id),
    experiment_id     BIGINT NOT NULL,   -- per project; 0 is "Default"
    name              TEXT NOT NULL,
    artifact_location TEXT NOT NULL,
    lifecycle_stage   TEXT NOT NULL,      -- active | deleted
    creation_time     BIGINT NOT NULL,
    last_update_time  BIGINT NOT NULL,
    PRIMARY KEY (project_id, experiment_id),
    UNIQUE (project_id, name)
);

CREATE TABLE experiment_tags (
    project_id     TEXT NOT NULL,
    experiment_id  BIGINT NOT NULL,
    key            TEXT NOT NULL,
    value          TEXT NOT NULL,
    PRIMARY KEY (project_id, experiment_id, key)
);

CREATE TABLE runs (
    run_id           TEXT PRIMARY KEY,    -- 32 hex characters
    project_id       TEXT NOT NULL REFERENCES projects(id),
    experiment_id    BIGINT NOT NULL,
    run_name         TEXT NOT NULL,
    user_id          TEXT NOT NULL,
    status           TEXT NOT NULL,       -- RUNNING | SCHEDULED | FINISHED | FAILED | KILLED
    start_time       BIGINT,
    end_time         BIGINT,
    lifecycle_stage  TEXT NOT NULL,       -- active | deleted
    artifact_uri     TEXT NOT NULL,
    deleted_time     BIGINT
);
CREATE INDEX runs_experiment ON runs(project_id, experiment_id, start_time);

CREATE TABLE run_params (
    run_id  TEXT NOT NULL REFERENCES runs(run_id),
    key     TEXT NOT NULL,
    value   TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
);

CREATE TABLE run_tags (
    run_id  TEXT NOT NULL REFERENCES runs(run_id),
    key     TEXT NOT NULL,
    value   TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
);

-- Every logged point. NaN is stored as is_nan = 1, as on SQLite (same code for both).
CREATE TABLE metrics (
    run_id     TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      DOUBLE PRECISION NOT NULL,
    is_nan     BIGINT NOT NULL,
    timestamp  BIGINT NOT NULL,
    step       BIGINT NOT NULL
);
CREATE INDEX metrics_history ON metrics(run_id, key, step, timestamp);

-- The point shown for each metric of a run (highest step, then latest timestamp), kept
-- up to date on every write so run reads and metric filters never scan the history.
CREATE TABLE latest_metrics (
    run_id     TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      DOUBLE PRECISION NOT NULL,
    is_nan     BIGINT NOT NULL,
    timestamp  BIGINT NOT NULL,
    step       BIGINT NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX latest_metrics_key ON latest_metrics(key, value);
