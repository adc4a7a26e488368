-- A project's personal-data policy: whether a push must declare the personal data it
-- holds, who may read it in clear (the PII permission, granted explicitly by a
-- project admin; every grant, revocation and clear read is audited), and how many days
-- its inference logs are kept (NULL: until deleted by hand; gc enforces it).
ALTER TABLE projects ADD COLUMN require_pii_declared BIGINT NOT NULL DEFAULT 0;
ALTER TABLE projects ADD COLUMN inference_log_days BIGINT;

CREATE TABLE pii_readers (
    project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    granted_by  TEXT NOT NULL,
    granted_at  BIGINT NOT NULL,
    PRIMARY KEY (project_id, user_id)
);
