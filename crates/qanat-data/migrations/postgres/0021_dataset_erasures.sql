-- Erasures of one data subject's rows from a dataset (the right to erasure). A record
-- names the request (the ticket a data subject's request came with) and the columns
-- matched on, never the values erased. `files` is the JSON list of the version files
-- that held the rows; `also_unreadable` the other files that shared their chunks.
CREATE TABLE dataset_erasures (
    project_id       TEXT NOT NULL,
    dataset_id       TEXT NOT NULL,
    request_id       TEXT NOT NULL,
    dataset          TEXT NOT NULL,
    columns          TEXT NOT NULL,
    reason           TEXT NOT NULL,
    requested_by     TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    completed_at     BIGINT,
    new_version      BIGINT,
    rows_removed     BIGINT NOT NULL,
    files            TEXT NOT NULL,
    chunks_shredded  BIGINT NOT NULL,
    bytes_shredded   BIGINT NOT NULL,
    also_unreadable  TEXT NOT NULL,
    PRIMARY KEY (project_id, dataset_id, request_id)
);

-- Chunks destroyed by an erasure (their data keys deleted, then their objects): a read
-- that finds one missing says which request erased it instead of "not found".
CREATE TABLE erased_chunks (
    project_id   TEXT NOT NULL,
    location     TEXT NOT NULL,
    chunk_id     TEXT NOT NULL,
    request_id   TEXT NOT NULL,
    size         BIGINT NOT NULL,
    erased_at    BIGINT NOT NULL,
    PRIMARY KEY (project_id, location, chunk_id)
);
