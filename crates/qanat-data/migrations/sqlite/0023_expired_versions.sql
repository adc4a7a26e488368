-- Dataset versions gc removed because they were older than their project's
-- `dataset_version_days`: a read of one says so instead of "does not exist".
CREATE TABLE dataset_versions_expired (
    dataset_id   TEXT NOT NULL,
    version      BIGINT NOT NULL,
    manifest_id  TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expired_at   BIGINT NOT NULL,
    days         BIGINT NOT NULL,
    PRIMARY KEY (dataset_id, version)
);
