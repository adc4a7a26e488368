//! A job as submitted (JSON on the wire, YAML in `job.yaml`) and the job API's shapes
//! (`qanat-jobs` checks, queues and runs them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod wire;

/// Priorities run from -1000 (background) to 1000 (urgent); 0 is normal.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i64> = -1000..=1000;

/// Most processes one job may start.
pub const MAX_RANKS: u32 = 1024;

/// Most retries a job may ask for.
pub const MAX_RETRIES: u32 = 100;

/// A job as submitted.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobSpec {
    /// A name to recognise it by (not unique): letters, digits, '.', '_', '-'.
    pub name: String,
    /// What runs: `command` (any executable). Defaults to `command`.
    #[serde(default = "default_kind")]
    pub kind: String,
    /// Per-rank resources.
    #[serde(default)]
    pub resources: ResourceRequest,
    /// Processes started together (a gang: all start or none); each gets `RANK`,
    /// `WORLD_SIZE`, … Defaults to 1.
    #[serde(default)]
    pub ranks: Option<u32>,
    /// -1000..=1000, higher first; 0 by default.
    #[serde(default)]
    pub priority: Option<i64>,
    /// Whether a higher-priority job may preempt it (default true).
    #[serde(default)]
    pub preemptible: Option<bool>,
    /// Longest run per attempt, e.g. `2h`, `90m` (the server's default otherwise).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Times a failed attempt is retried (with backoff); 0 by default.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// Where it runs: `local` (default), `slurm`, `kubernetes`.
    #[serde(default)]
    pub executor: Option<String>,
    /// Dataset versions it reads, e.g. `dataset:transactions@3`; materialized as files
    /// under `$QANAT_INPUTS/<name>/` before it starts.
    #[serde(default)]
    #[schema(value_type = Vec<String>)]
    pub inputs: Vec<qanat_core::ObjectRef>,
    /// Files or directories (relative to the working directory) logged to its run as
    /// artifacts when it succeeds.
    #[serde(default)]
    pub outputs: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The MLflow experiment its run goes to (created when missing); `Default` by
    /// default.
    #[serde(default)]
    pub experiment: Option<String>,
    /// A run this job's run is nested under (MLflow's `mlflow.parentRunId` tag): a
    /// sweep's trials are children of the sweep's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run: Option<String>,
    /// The fields of its kind (a command's `command`, `working_dir`).
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub params: serde_json::Map<String, Value>,
}

fn default_kind() -> String {
    "command".into()
}

/// Resources one rank asks for.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceRequest {
    /// CPU cores, e.g. 1 or 0.5 (default 1).
    #[serde(default)]
    pub cpus: Option<f64>,
    /// Memory, e.g. `512MiB`, `4GiB`, `2G` (default 1GiB). Enforced: a rank over it is
    /// killed and the job fails with that reason.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub memory: Option<Value>,
    /// GPUs (default 0).
    #[serde(default)]
    pub gpus: Option<u32>,
    /// A GPU model the GPUs must be, matched as a substring of the name NVML reports
    /// (e.g. `A100`, `H100`).
    #[serde(default)]
    pub gpu_model: Option<String>,
}

/// Per-rank resources, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Resources {
    /// Thousandths of a core.
    pub cpu_millis: u64,
    pub memory_mb: u64,
    pub gpus: u32,
}

impl Resources {
    pub fn times(self, n: u32) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis * u64::from(n),
            memory_mb: self.memory_mb * u64::from(n),
            gpus: self.gpus * n,
        }
    }

    pub fn plus(self, o: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis + o.cpu_millis,
            memory_mb: self.memory_mb + o.memory_mb,
            gpus: self.gpus + o.gpus,
        }
    }

    pub fn minus(self, o: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_sub(o.cpu_millis),
            memory_mb: self.memory_mb.saturating_sub(o.memory_mb),
            gpus: self.gpus.saturating_sub(o.gpus),
        }
    }

    /// Whether `self` fits in `room`.
    pub fn fits(self, room: Resources) -> bool {
        self.cpu_millis <= room.cpu_millis
            && self.memory_mb <= room.memory_mb
            && self.gpus <= room.gpus
    }

    /// "2 cpus, 4096 MiB, 1 gpu".
    pub fn describe(self) -> String {
        let cpus = self.cpu_millis as f64 / 1000.0;
        let mut s = format!("{cpus} cpus, {} MiB", self.memory_mb);
        if self.gpus > 0 {
            s.push_str(&format!(", {} gpus", self.gpus));
        }
        s
    }
}
