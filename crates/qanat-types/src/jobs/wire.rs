//! The job API's JSON shapes, shared by the server, the typed client and the CLI.

use serde::{Deserialize, Serialize};

use super::{JobSpec, Resources};

/// A job as listed and shown.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Job {
    pub job_id: String,
    pub project: String,
    pub name: String,
    pub kind: String,
    pub executor: String,
    /// queued | running | succeeded | failed | cancelled
    pub state: String,
    pub priority: i64,
    pub ranks: u32,
    /// Per rank.
    pub resources: Resources,
    /// Attempts started so far (1 while the first runs).
    pub attempt: u32,
    /// Failed attempts (retries spent).
    pub failures: u32,
    pub max_retries: u32,
    pub preemptions: u32,
    pub submitted_at: String,
    pub submitted_by: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// Why it waits (queued), or how it ended.
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    /// The MLflow run it logs to.
    pub run_id: Option<String>,
    /// How its limits are enforced on the node that runs it.
    pub enforcement: Option<String>,
    /// The cores and GPUs it was given.
    pub placement: Option<String>,
    /// Whether a cancel was asked for and is being carried out.
    pub cancel_requested: bool,
    /// The cron schedule that submitted it.
    pub schedule_id: Option<String>,
    /// Set while GPUs it holds sit idle (under 10% utilization for
    /// `jobs.idle_gpu_secs`).
    pub idle_gpus: Option<String>,
}

impl Job {
    pub fn is_finished(&self) -> bool {
        matches!(self.state.as_str(), "succeeded" | "failed" | "cancelled")
    }
}

/// One step of a job's history.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobEvent {
    pub at: String,
    pub attempt: u32,
    /// queued, started, rank-exited, retrying, lost, preempted, cancelled, succeeded, …
    pub event: String,
    pub message: String,
}

/// A job with its spec and history (`jobs show`).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobDetail {
    #[serde(flatten)]
    pub job: Job,
    pub spec: JobSpec,
    pub events: Vec<JobEvent>,
}

/// `GET /jobs`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobList {
    pub jobs: Vec<Job>,
}

/// Filters for `GET /jobs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct JobListParams {
    /// Only jobs in this state.
    pub state: Option<String>,
    /// At most this many, newest first (default 100, at most 1000).
    pub limit: Option<u32>,
}

/// What `GET /jobs/{id}/logs` answers: bytes from `offset` of one rank's log.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogChunk {
    pub rank: u32,
    pub attempt: u32,
    pub offset: u64,
    /// The log text from `offset` (UTF-8, invalid bytes replaced).
    pub data: String,
    /// Where the next read starts.
    pub next_offset: u64,
    /// True when the attempt has ended and nothing more will be written.
    pub complete: bool,
}

/// Which log to read.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogParams {
    /// Rank (default 0).
    pub rank: Option<u32>,
    /// Attempt (default: the latest).
    pub attempt: Option<u32>,
    /// Byte offset to read from (default 0).
    pub offset: Option<u64>,
    /// Wait up to this many seconds for new bytes when there are none yet and the
    /// attempt is still running (long poll, at most 30; default 0).
    pub wait_secs: Option<u64>,
}

/// A project's limits on running jobs; absent fields are unlimited.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema, PartialEq)]
pub struct Quota {
    /// CPU cores running at once.
    pub cpus: Option<f64>,
    /// Memory running at once, e.g. `64GiB` (answered in MiB as `memory_mb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub memory: Option<serde_json::Value>,
    pub memory_mb: Option<u64>,
    /// GPUs running at once.
    pub gpus: Option<u32>,
    /// Jobs running at once.
    pub running_jobs: Option<u32>,
}

/// A project's quota and what it uses now.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuotaUsage {
    pub project: String,
    pub quota: Quota,
    pub used: Resources,
    pub running_jobs: u32,
    pub queued_jobs: u32,
}

/// A GPU as discovered on a node: the unit jobs are given.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Gpu {
    /// Its number among this node's schedulable GPUs.
    pub index: u32,
    pub name: String,
    /// What `CUDA_VISIBLE_DEVICES` names it by (`GPU-…`).
    pub uuid: String,
    pub memory_mb: u64,
    /// Whether it is a MIG instance (or a GPU in MIG mode whose instances could not
    /// be listed, handed out whole).
    pub mig: bool,
    /// For a MIG instance, the UUID of the GPU it is part of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_uuid: Option<String>,
    /// The job using it, if any.
    pub job_id: Option<String>,
}

/// What an executor offers.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExecutorInfo {
    pub name: String,
    pub region: String,
    pub capacity: Resources,
    pub free: Resources,
    pub gpus: Vec<Gpu>,
    /// How limits are enforced there.
    pub enforcement: String,
}

/// `GET /api/v1/executors`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExecutorList {
    pub executors: Vec<ExecutorInfo>,
}

/// A cron schedule that submits a job at every firing.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Schedule {
    pub schedule_id: String,
    pub project: String,
    pub name: String,
    /// Five fields, UTC: minute hour day-of-month month day-of-week.
    pub cron: String,
    pub job: JobSpec,
    /// The next firing (RFC 3339).
    pub next_at: String,
    pub created_at: String,
    pub created_by: String,
}

/// `POST /schedules`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSchedule {
    pub name: String,
    pub cron: String,
    pub job: JobSpec,
}

/// `GET /schedules`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScheduleList {
    pub schedules: Vec<Schedule>,
}
