-- Personal data found in feature views' values as they passed through Qanat
-- (materialization, pushes and streams, training sets), by view and feature: the
-- kinds seen so far (a comma-separated list), what found them last, and when. The
-- compliance report and `features plan` flag the features not marked `pii`.
CREATE TABLE feature_pii_found (
    project_id  TEXT NOT NULL,
    view        TEXT NOT NULL,
    feature     TEXT NOT NULL,
    kinds       TEXT NOT NULL,
    found_by    TEXT NOT NULL,
    found_at    BIGINT NOT NULL,
    PRIMARY KEY (project_id, view, feature)
);
