-- Deployments: an endpoint name that answers with one or more versions of a
-- registered model, split by weight (canary, A/B) with optional shadows. The current
-- spec is the newest revision; every change (create, update, promote, rollback) adds a
-- revision, so a rollback restores an earlier one and the history is kept.

CREATE TABLE deployments (
    project_id  TEXT NOT NULL REFERENCES projects(id),
    name        TEXT NOT NULL,
    model       TEXT NOT NULL,               -- the registered model it serves
    revision    BIGINT NOT NULL,            -- the current revision
    created_at  BIGINT NOT NULL,            -- micros
    created_by  TEXT NOT NULL,
    updated_at  BIGINT NOT NULL,
    updated_by  TEXT NOT NULL,
    PRIMARY KEY (project_id, name)
);

CREATE TABLE deployment_revisions (
    project_id  TEXT NOT NULL,
    name        TEXT NOT NULL,
    revision    BIGINT NOT NULL,
    spec        TEXT NOT NULL,               -- DeploymentSpec, JSON
    action      TEXT NOT NULL,               -- create | update | promote | rollback
    note        TEXT NOT NULL,               -- e.g. "rolled back to revision 2"
    created_at  BIGINT NOT NULL,
    created_by  TEXT NOT NULL,
    PRIMARY KEY (project_id, name, revision),
    FOREIGN KEY (project_id, name) REFERENCES deployments(project_id, name) ON DELETE CASCADE
);
