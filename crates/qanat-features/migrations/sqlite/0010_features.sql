-- The feature registry. Every object of a feature repo (entity, source, feature view,
-- feature service) has a head row, edited in place for its metadata, and immutable
-- versions, one per change of its logic; a version is never rewritten, and removing
-- an object from the repo only marks its head deleted, so training sets keep their
-- lineage to the versions they used.

CREATE TABLE feature_objects (
    project_id     TEXT NOT NULL REFERENCES projects(id),
    kind           TEXT NOT NULL,             -- entity | source | feature_view | feature_service
    name           TEXT NOT NULL,
    latest_version INTEGER NOT NULL,
    definition     TEXT NOT NULL,             -- the current definition, JSON (its metadata is current)
    created_at     INTEGER NOT NULL,          -- micros
    created_by     TEXT NOT NULL,
    updated_at     INTEGER NOT NULL,
    updated_by     TEXT NOT NULL,
    deleted_at     INTEGER,                   -- removed from the repo
    PRIMARY KEY (project_id, kind, name)
);

CREATE TABLE feature_object_versions (
    project_id  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    name        TEXT NOT NULL,
    version     INTEGER NOT NULL,
    definition  TEXT NOT NULL,                -- the definition as applied, JSON
    logic       TEXT NOT NULL,                -- its versioned part, canonical JSON
    fingerprint TEXT NOT NULL,                -- of the logic and of what it depends on
    depends_on  TEXT NOT NULL,                -- JSON [{kind, name, version}] at this version
    created_at  INTEGER NOT NULL,
    created_by  TEXT NOT NULL,
    PRIMARY KEY (project_id, kind, name, version),
    FOREIGN KEY (project_id, kind, name) REFERENCES feature_objects(project_id, kind, name)
);

-- One row per project: the revision every apply moves on by one, so an apply made
-- from a stale plan is refused.
CREATE TABLE feature_registry (
    project_id  TEXT PRIMARY KEY REFERENCES projects(id),
    revision    INTEGER NOT NULL,
    applied_at  INTEGER NOT NULL,
    applied_by  TEXT NOT NULL
);

-- What was materialized into the online store, per view: the window's end (the next
-- incremental run starts there), the newest event time written, and when.
CREATE TABLE feature_materializations (
    project_id      TEXT NOT NULL REFERENCES projects(id),
    view            TEXT NOT NULL,
    view_version    INTEGER NOT NULL,
    window_end      INTEGER NOT NULL,             -- micros
    last_event_at   INTEGER,                      -- newest event time written, micros
    rows_written    INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    updated_by      TEXT NOT NULL,
    PRIMARY KEY (project_id, view)
);
