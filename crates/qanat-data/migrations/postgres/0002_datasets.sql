-- Datasets: immutable, content-addressed versions (manifests of chunk lists), tags,
-- and the registry of chunks stored per project and storage location.

CREATE TABLE datasets (
    id               TEXT PRIMARY KEY,
    project_id       TEXT NOT NULL REFERENCES projects(id),
    name             TEXT NOT NULL,
    description      TEXT NOT NULL DEFAULT '',
    owner            TEXT NOT NULL,
    classification   TEXT NOT NULL,
    allowed_regions  TEXT,                -- JSON array; NULL = the project's policy
    tags             TEXT NOT NULL,       -- JSON object
    location         TEXT NOT NULL,       -- storage location its chunks live in
    schema           TEXT,                -- JSON DatasetSchema; NULL = none declared
    created_at       BIGINT NOT NULL,
    created_by       TEXT NOT NULL,
    UNIQUE (project_id, name)
);

CREATE TABLE dataset_versions (
    dataset_id   TEXT NOT NULL REFERENCES datasets(id),
    version      BIGINT NOT NULL,
    manifest_id  TEXT NOT NULL,           -- BLAKE3 of the canonical manifest
    parent       BIGINT,                 -- the version this one was pushed on top of
    message      TEXT NOT NULL,
    author       TEXT NOT NULL,
    producer     TEXT NOT NULL,           -- user:<name>, later job:<id> / run:<id>
    file_count   BIGINT NOT NULL,
    total_size   BIGINT NOT NULL,
    new_bytes    BIGINT NOT NULL,        -- bytes of chunks this version stored first
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (dataset_id, version)
);
CREATE INDEX dataset_versions_manifest ON dataset_versions(manifest_id);

CREATE TABLE dataset_tags (
    dataset_id  TEXT NOT NULL REFERENCES datasets(id),
    tag         TEXT NOT NULL,
    version     BIGINT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (dataset_id, tag)
);

-- A chunk row exists once its object is stored. Every push touches last_used_at of the
-- chunks it relies on; gc claims (deleting = 1) only rows unused for its grace period,
-- deletes the object, then the row. Claimed rows count as missing to pushes.
CREATE TABLE dataset_chunks (
    project_id    TEXT NOT NULL,
    location      TEXT NOT NULL,
    chunk_id      TEXT NOT NULL,          -- BLAKE3 of the plaintext chunk
    size          BIGINT NOT NULL,
    stored_at     BIGINT NOT NULL,
    last_used_at  BIGINT NOT NULL,
    deleting      BIGINT NOT NULL DEFAULT 0,   -- claimed by a running gc
    PRIMARY KEY (project_id, location, chunk_id)
);

-- Lineage: directed edges from a child object to what it came from. References read
-- kind:name@version (dataset:tx@3, later run:<id>, model:fraud@2) or user:<name>.
CREATE TABLE lineage_edges (
    project_id  TEXT NOT NULL,
    child       TEXT NOT NULL,
    parent      TEXT NOT NULL,
    relation    TEXT NOT NULL,          -- previous_version | derived_from | produced_by
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (project_id, child, parent, relation)
);
CREATE INDEX lineage_parent ON lineage_edges(project_id, parent);
