-- People who sign in through an OpenID provider: their user names the provider's
-- issuer and subject (one user per pair), the global admin flag their groups map to
-- is kept beside the one an admin set, and the project roles their groups map to are
-- kept apart from the grants an admin made, so the provider's changes and an admin's
-- never overwrite each other and the audit log can say which one decided.

ALTER TABLE users ADD COLUMN issuer TEXT;
ALTER TABLE users ADD COLUMN subject TEXT;
ALTER TABLE users ADD COLUMN mapped_admin INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX users_external ON users(issuer, subject);

CREATE TABLE mapped_members (
    project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role        TEXT NOT NULL,
    groups      TEXT NOT NULL,          -- JSON array: the groups that gave the role
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (project_id, user_id)
);
CREATE INDEX mapped_members_user ON mapped_members(user_id);
