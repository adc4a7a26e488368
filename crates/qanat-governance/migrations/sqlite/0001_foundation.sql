-- Foundation schema: identities, projects, memberships, tokens, audit chain, data keys.
-- Times are microseconds since the Unix epoch (UTC). Booleans are 0/1 integers so the
-- same queries read the same on SQLite and PostgreSQL.

CREATE TABLE users (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    kind        TEXT NOT NULL,            -- 'user' | 'service'
    is_admin    INTEGER NOT NULL DEFAULT 0,
    disabled    INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL
);

CREATE TABLE tokens (
    id            TEXT PRIMARY KEY,
    user_id       TEXT NOT NULL REFERENCES users(id),
    name          TEXT NOT NULL,
    secret_hash   TEXT NOT NULL UNIQUE,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER,
    revoked_at    INTEGER,
    last_used_at  INTEGER
);
CREATE INDEX tokens_user ON tokens(user_id);

CREATE TABLE projects (
    id               TEXT PRIMARY KEY,
    name             TEXT NOT NULL UNIQUE,
    description      TEXT NOT NULL DEFAULT '',
    allowed_regions  TEXT NOT NULL,       -- JSON array of region names
    created_at       INTEGER NOT NULL,
    created_by       TEXT NOT NULL
);

CREATE TABLE members (
    project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (project_id, user_id)
);
CREATE INDEX members_user ON members(user_id);

CREATE TABLE audit_log (
    seq         INTEGER PRIMARY KEY,
    ts          INTEGER NOT NULL,
    request_id  TEXT NOT NULL,
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,
    resource    TEXT NOT NULL,
    project     TEXT,
    outcome     TEXT NOT NULL,
    detail      TEXT NOT NULL,
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL
);
CREATE INDEX audit_ts ON audit_log(ts);
CREATE INDEX audit_actor ON audit_log(actor, seq);
CREATE INDEX audit_project ON audit_log(project, seq);

-- The head of the chain: one row, updated in the same transaction as each append. It
-- serialises appenders (a row lock on PostgreSQL, the single writer on SQLite) and lets
-- `audit verify` notice entries deleted from the end of the log.
CREATE TABLE audit_head (
    id    INTEGER PRIMARY KEY,
    seq   INTEGER NOT NULL,
    hash  TEXT NOT NULL
);
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');

CREATE TABLE data_keys (
    key_ref        TEXT PRIMARY KEY,
    master_key_id  TEXT NOT NULL,
    wrapped        BLOB NOT NULL,
    created_at     INTEGER NOT NULL
);
CREATE INDEX data_keys_master ON data_keys(master_key_id);
