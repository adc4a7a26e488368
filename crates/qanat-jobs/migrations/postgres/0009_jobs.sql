-- Training jobs. A job row is written (state 'queued') before the submit is
-- acknowledged; the scheduler claims it with a conditional UPDATE, so a job never runs
-- twice at once, and on restart the server finds the local jobs it was running (their
-- processes are in job_processes) and kills what is left of them before requeueing.

CREATE TABLE jobs (
    job_id          TEXT PRIMARY KEY,         -- job-<12 hex>
    project_id      TEXT NOT NULL REFERENCES projects(id),
    name            TEXT NOT NULL,
    kind            TEXT NOT NULL,            -- command | (train, sweep, ... later)
    spec            TEXT NOT NULL,            -- the submitted spec, JSON
    executor        TEXT NOT NULL,            -- local | slurm | kubernetes
    state           TEXT NOT NULL,            -- queued | running | succeeded | failed | cancelled
    priority        BIGINT NOT NULL,
    ranks           BIGINT NOT NULL,
    cpu_millis      BIGINT NOT NULL,         -- per rank
    memory_mb       BIGINT NOT NULL,         -- per rank
    gpus            BIGINT NOT NULL,         -- per rank
    attempt         BIGINT NOT NULL DEFAULT 0,
    failures        BIGINT NOT NULL DEFAULT 0,  -- attempts that failed (retries spent)
    max_retries     BIGINT NOT NULL,
    preemptions     BIGINT NOT NULL DEFAULT 0,
    not_before      BIGINT NOT NULL,         -- not started before (backoff), micros
    submitted_at    BIGINT NOT NULL,
    submitted_by    TEXT NOT NULL,
    started_at      BIGINT,
    finished_at     BIGINT,
    node            TEXT,                     -- which server runs it (local executor)
    external_id     TEXT,                     -- executor's own id (Slurm job id, ...)
    run_id          TEXT,                     -- its MLflow run
    token_id        TEXT,                     -- the attempt's token, revoked at its end
    cancel_requested BIGINT NOT NULL DEFAULT 0,
    exit_code       BIGINT,
    reason          TEXT,                     -- why it is waiting, or how it ended
    enforcement     TEXT,                     -- how limits were enforced
    placement       TEXT,                     -- cores and GPUs it was given
    idle_gpus       TEXT,                     -- set while allocated GPUs sit idle
    schedule_id     TEXT                      -- the cron schedule that made it
);
CREATE INDEX jobs_queue ON jobs(state, priority, submitted_at);
CREATE INDEX jobs_project ON jobs(project_id, submitted_at);

CREATE TABLE job_events (
    job_id   TEXT NOT NULL REFERENCES jobs(job_id),
    seq      BIGINT NOT NULL,
    at       BIGINT NOT NULL,                -- micros
    attempt  BIGINT NOT NULL,
    event    TEXT NOT NULL,                   -- queued, started, retrying, lost, ...
    message  TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
);

CREATE TABLE job_processes (
    job_id      TEXT NOT NULL REFERENCES jobs(job_id),
    attempt     BIGINT NOT NULL,
    rank        BIGINT NOT NULL,
    node        TEXT NOT NULL,
    pid         BIGINT NOT NULL,             -- also the process group
    start_ticks BIGINT NOT NULL,             -- /proc/<pid>/stat starttime: tells a reused pid apart
    PRIMARY KEY (job_id, attempt, rank)
);

CREATE TABLE job_logs (
    job_id     TEXT NOT NULL REFERENCES jobs(job_id),
    attempt    BIGINT NOT NULL,
    rank       BIGINT NOT NULL,
    location   TEXT NOT NULL,                 -- storage location of the stored (encrypted) log
    object_key TEXT NOT NULL,
    bytes      BIGINT NOT NULL,
    PRIMARY KEY (job_id, attempt, rank)
);

CREATE TABLE job_quotas (
    project_id   TEXT PRIMARY KEY REFERENCES projects(id),
    cpu_millis   BIGINT,                     -- NULL: no limit
    memory_mb    BIGINT,
    gpus         BIGINT,
    running_jobs BIGINT,
    updated_at   BIGINT NOT NULL,
    updated_by   TEXT NOT NULL
);

CREATE TABLE job_schedules (
    schedule_id  TEXT PRIMARY KEY,            -- sch-<12 hex>
    project_id   TEXT NOT NULL REFERENCES projects(id),
    name         TEXT NOT NULL,
    cron         TEXT NOT NULL,
    spec         TEXT NOT NULL,               -- the job spec each firing submits
    next_at      BIGINT NOT NULL,            -- micros
    created_at   BIGINT NOT NULL,
    created_by   TEXT NOT NULL,
    paused       BIGINT NOT NULL DEFAULT 0,
    deleted_at   BIGINT
);
CREATE INDEX job_schedules_due ON job_schedules(deleted_at, paused, next_at);
