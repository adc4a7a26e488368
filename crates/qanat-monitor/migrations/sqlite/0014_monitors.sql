-- Monitors: a deployment's live traffic checked window by window against what its
-- model was trained on; the checks, the ground truth posted for past requests, and the
-- alerts their rules raised with what each action did.

CREATE TABLE monitors (
    project_id  TEXT NOT NULL REFERENCES projects(id),
    deployment  TEXT NOT NULL,
    spec        TEXT NOT NULL,               -- MonitorSpec, JSON
    next_start  INTEGER NOT NULL,            -- micros: where the next window begins
    checks      INTEGER NOT NULL,            -- windows checked so far (the last check's number)
    created_at  INTEGER NOT NULL,
    created_by  TEXT NOT NULL,
    updated_at  INTEGER NOT NULL,
    updated_by  TEXT NOT NULL,
    PRIMARY KEY (project_id, deployment)
);

CREATE TABLE monitor_checks (
    project_id   TEXT NOT NULL,
    deployment   TEXT NOT NULL,
    check_no     INTEGER NOT NULL,           -- 1, 2, ... per deployment
    window_start INTEGER NOT NULL,           -- micros, inclusive
    window_end   INTEGER NOT NULL,           -- micros, exclusive
    rows_seen    INTEGER NOT NULL,
    status       TEXT NOT NULL,              -- ok | drift | not_enough_data | no_reference
    result       TEXT NOT NULL,              -- CheckResult, JSON
    report_key   TEXT,                       -- the HTML report's object key
    labels_at    INTEGER NOT NULL,           -- micros: labels up to here are in the result
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (project_id, deployment, check_no),
    FOREIGN KEY (project_id, deployment) REFERENCES monitors(project_id, deployment) ON DELETE CASCADE
);

CREATE TABLE monitor_labels (
    project_id  TEXT NOT NULL REFERENCES projects(id),
    deployment  TEXT NOT NULL,
    request_id  TEXT NOT NULL,               -- a logged request's id or its own `id`
    label       TEXT NOT NULL,               -- JSON: one value per row of the request
    check_no    INTEGER,                     -- the window it was matched in, once it is
    created_at  INTEGER NOT NULL,
    created_by  TEXT NOT NULL,
    PRIMARY KEY (project_id, deployment, request_id)
);

CREATE INDEX monitor_labels_new ON monitor_labels (project_id, deployment, created_at);

CREATE TABLE monitor_alerts (
    project_id  TEXT NOT NULL,
    deployment  TEXT NOT NULL,
    alert_no    INTEGER NOT NULL,
    rule        TEXT NOT NULL,               -- the rule's name
    check_no    INTEGER NOT NULL,            -- the check that raised it
    state       TEXT NOT NULL,               -- open | retraining | canary | done | failed
    detail      TEXT NOT NULL,               -- Alert, JSON (what fired, each action's outcome)
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (project_id, deployment, alert_no),
    FOREIGN KEY (project_id, deployment) REFERENCES monitors(project_id, deployment) ON DELETE CASCADE
);

-- One alert per rule and window: two servers evaluating the same check cannot both
-- fire it.
CREATE UNIQUE INDEX monitor_alerts_once ON monitor_alerts (project_id, deployment, rule, check_no);
