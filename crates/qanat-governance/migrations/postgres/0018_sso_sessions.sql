-- Sessions opened by a single sign-on login (the web UI's): the provider's refresh
-- token, sealed like other secrets in rows (a data key of its own, wrapped by the
-- master key), and when the session is next checked at the provider. A refresh the
-- provider refuses (the person was disabled or removed there) ends the session.

CREATE TABLE sso_sessions (
    token_id        TEXT PRIMARY KEY REFERENCES tokens(id) ON DELETE CASCADE,
    user_id         TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    refresh_sealed  TEXT,
    check_at        BIGINT NOT NULL,
    created_at      BIGINT NOT NULL
);
