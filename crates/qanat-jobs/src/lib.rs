//! Qanat's training jobs: anyone's training code (a Python script, torchrun, a shell
//! script — and later Qanat's own trainer) run with the same scheduling, tracking and
//! governance, durable across crashes.
//!
//! - A job is written to the metadata store before its submit is acknowledged
//!   ([`Jobs::submit`]); the [`Scheduler`] claims queued jobs with a conditional
//!   UPDATE, so a job never runs twice at once, and on restart finds the local jobs that
//!   were running, kills what is left of their processes and requeues them.
//! - Scheduling ([`policy`]): per-rank requests for cores, memory and GPUs; per-project
//!   quotas; priorities, and fair share (lowest dominant share first) among jobs of one
//!   priority; gangs (all ranks start or none); preemption of lower-priority work.
//! - Kinds ([`kind`]): a kind turns a spec into processes; `command` runs any
//!   executable. The trainer and sweeps plug in as more kinds.
//! - The local executor ([`local`]) runs each rank in its own process group with its
//!   cores pinned, its memory watched and killed at the limit, its GPUs in
//!   `CUDA_VISIBLE_DEVICES`, and an environment that points MLflow-instrumented code at
//!   Qanat (`MLFLOW_TRACKING_URI`, a job token revoked when the attempt ends,
//!   `MLFLOW_RUN_ID`) and torchrun-style code at its peers (`RANK`, `WORLD_SIZE`, …).
//! - Logs are captured per rank, readable while the job runs, and stored encrypted in
//!   the project's storage when an attempt ends.

mod cgroup;
pub mod confine;
mod error;
mod faults;
mod gpu;
pub mod kind;
mod kube_attempt;
mod kubernetes;
mod local;
pub mod policy;
mod procfs;
mod queue;
mod remote;
mod rows;
mod safe_read;
pub mod sandbox;
mod scheduler;
#[cfg(test)]
mod scheduler_tests;
pub mod schedules;
mod slurm;
mod slurm_attempt;
pub mod spec;
mod telemetry;
pub use qanat_types::jobs::wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use qanat_governance::Governance;
use qanat_store::{MetaStore, ObjectStorage};
use tokio::sync::Notify;

pub use error::Error;
pub use kind::{FieldsSchema, JobKind, Kinds, ProcessPlan, WorkerKind};
pub use kubernetes::KubernetesSettings;
pub use procfs::total_memory_mb;
pub use scheduler::Scheduler;
pub use slurm::SlurmSettings;
pub use spec::{JobSpec, Resources};

/// This domain's tables: jobs, their history, processes, stored logs, quotas and
/// schedules (0009).
pub static MIGRATIONS: qanat_store::migrations::DomainMigrations =
    qanat_store::domain_migrations!("jobs", ["0009_jobs.sql",]);

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How jobs are run on this server.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This server's name among servers sharing one metadata store: local jobs are
    /// claimed and recovered by the node that runs them.
    pub node: String,
    /// Where job directories (working directory, checkpoints, inputs, live logs) go.
    pub work_dir: PathBuf,
    /// The URL a job reaches this server at (`QANAT_URL`, `MLFLOW_TRACKING_URI`).
    pub server_url: String,
    /// A CA certificate (PEM file) a job trusts for `server_url`, handed to it as
    /// `QANAT_CA_CERT` and `MLFLOW_TRACKING_SERVER_CERT_PATH` (a server with its own
    /// certificate, e.g. `qanat certs dev`).
    pub ca_cert: Option<PathBuf>,
    /// The region the local executor runs in (residency).
    pub region: String,
    /// Cores the local executor may hand out (default: the cores this process may use).
    pub cpus: Option<f64>,
    /// Memory the local executor may hand out, MiB (default: 90% of physical memory).
    pub memory_mb: Option<u64>,
    /// Timeout of a job that names none.
    pub default_timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL when a job is cancelled, preempted or timed out.
    pub kill_grace: Duration,
    /// The wait before the first retry of a failed attempt; doubles per retry, capped
    /// at an hour.
    pub retry_backoff: Duration,
    /// How often memory use is sampled.
    pub watch_interval: Duration,
    /// How often a running job's CPU, memory and GPUs are sampled into its run.
    pub metrics_interval: Duration,
    /// How long an allocated GPU stays under 10% utilization before the job is flagged.
    pub idle_gpu_after: Duration,
    /// Discover GPUs through NVML (off: no GPUs, as on a machine without a driver).
    pub discover_gpus: bool,
    /// The scheduler runs at all (off: submissions queue, nothing starts).
    pub enabled: bool,
    /// Put each local rank in a cgroup with its limits where the cgroup tree is
    /// writable (off: memory is sampled and enforced by the executor instead).
    pub cgroups: bool,
    /// How local ranks are isolated from the server and from each other.
    pub sandbox: SandboxSettings,
    /// Most bytes of declared outputs one attempt may log to its run.
    pub max_output_bytes: u64,
    /// Most bytes of one rank's log kept (its end, when it wrote more).
    pub max_log_bytes: u64,
}

/// The sandbox of local ranks ([`sandbox`]).
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    /// On unless an admin opts out explicitly: then ranks run with the server's own
    /// identity and files, and every job says `unsandboxed`.
    pub enabled: bool,
    /// The program that builds a rank's sandbox (the `qanat` binary, whose `main`
    /// calls [`sandbox::entry`] first).
    pub launcher: PathBuf,
    /// When the server runs as root, each running attempt gets its own uid (and gid)
    /// from `uid_base .. uid_base + uid_count`.
    pub uid_base: u32,
    pub uid_count: u32,
    /// Paths hidden from ranks besides the jobs' directory (the server's data
    /// directory, its user's home).
    pub hide: Vec<PathBuf>,
    /// Extra paths ranks may read (a shared virtual environment, a dataset cache),
    /// and extra paths they may write; absolute working directories must lie in one.
    pub paths: Vec<PathBuf>,
    pub writable_paths: Vec<PathBuf>,
}

impl SandboxSettings {
    /// The admin's roots a job's absolute `working_dir` may lie in.
    pub fn allowed_roots(&self) -> impl Iterator<Item = &PathBuf> {
        self.paths.iter().chain(&self.writable_paths)
    }
}

impl Settings {
    pub fn new(
        work_dir: PathBuf,
        server_url: impl Into<String>,
        region: impl Into<String>,
    ) -> Self {
        Settings {
            node: hostname(),
            work_dir,
            server_url: server_url.into(),
            ca_cert: None,
            region: region.into(),
            cpus: None,
            memory_mb: None,
            default_timeout: Some(Duration::from_secs(24 * 3600)),
            kill_grace: Duration::from_secs(30),
            retry_backoff: Duration::from_secs(10),
            watch_interval: Duration::from_millis(250),
            metrics_interval: Duration::from_secs(10),
            idle_gpu_after: Duration::from_secs(600),
            discover_gpus: true,
            enabled: true,
            cgroups: true,
            sandbox: SandboxSettings {
                enabled: true,
                launcher: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("qanat")),
                uid_base: 2_000_000_000,
                uid_count: 65_536,
                hide: std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .filter(|h| h.is_absolute() && h != std::path::Path::new("/"))
                    .into_iter()
                    .collect(),
                paths: Vec::new(),
                writable_paths: Vec::new(),
            },
            max_output_bytes: 16 << 30,
            max_log_bytes: 256 << 20,
        }
    }
}

/// This machine's host name (`localhost` when it cannot be read).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The job domain: the durable queue and what runs it.
#[derive(Clone, Debug)]
pub struct Jobs {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) meta: MetaStore,
    pub(crate) gov: Governance,
    pub(crate) tracking: qanat_tracking::Tracking,
    pub(crate) datasets: qanat_data::Datasets,
    pub(crate) storage: ObjectStorage,
    pub(crate) settings: Settings,
    pub(crate) kinds: Kinds,
    pub(crate) local: local::LocalExecutor,
    /// The Slurm cluster, when one is configured.
    pub(crate) slurm: Option<slurm::SlurmExecutor>,
    /// The Kubernetes cluster, when one is configured.
    pub(crate) kube: Option<kubernetes::KubeExecutor>,
    /// Woken on every submit, cancel and finished attempt.
    pub(crate) wake: Notify,
    /// Failures a test planned at the scheduler's durable steps.
    #[cfg(test)]
    pub(crate) faults: faults::Faults,
}

impl Jobs {
    pub fn new(
        meta: MetaStore,
        storage: ObjectStorage,
        tracking: qanat_tracking::Tracking,
        settings: Settings,
        kinds: Kinds,
    ) -> Self {
        let local = local::LocalExecutor::new(&settings);
        Jobs {
            inner: Arc::new(Inner {
                gov: Governance::new(meta.clone()),
                datasets: qanat_data::Datasets::new(meta.clone(), storage.clone()),
                tracking,
                storage,
                meta,
                local,
                slurm: None,
                kube: None,
                settings,
                kinds,
                wake: Notify::new(),
                #[cfg(test)]
                faults: Default::default(),
            }),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// The kinds of job this server runs.
    pub fn kinds(&self) -> &Kinds {
        &self.inner.kinds
    }

    /// The same service with a Slurm cluster as the executor `slurm` (asks `sinfo`
    /// what it has). Before the service is shared: its executors are fixed from then on.
    #[qanat_macros::boxed]
    pub async fn with_slurm(mut self, settings: SlurmSettings) -> Result<Self> {
        let exec = slurm::SlurmExecutor::new(settings).await?;
        self.unshared()?.slurm = Some(exec);
        Ok(self)
    }

    /// The same service with a Kubernetes cluster as the executor `kubernetes`. Before
    /// the service is shared.
    #[qanat_macros::boxed]
    pub async fn with_kubernetes(mut self, settings: KubernetesSettings) -> Result<Self> {
        let mut exec = kubernetes::KubeExecutor::new(settings)?;
        exec.discover_capacity().await;
        self.unshared()?.kube = Some(exec);
        Ok(self)
    }

    fn unshared(&mut self) -> Result<&mut Inner> {
        Arc::get_mut(&mut self.inner).ok_or_else(|| {
            Error::Conflict(
                "the jobs service is shared already: add executors when building it".into(),
            )
        })
    }

    /// What the executors offer now (`qanat gpus`, `GET /api/v1/executors`).
    pub fn executors(&self) -> wire::ExecutorList {
        let mut executors = vec![self.inner.local.info(&self.inner.settings)];
        if let Some(s) = self.inner.slurm.as_ref() {
            executors.push(wire::ExecutorInfo {
                name: "slurm".into(),
                region: s.settings.region.clone(),
                capacity: s.capacity(),
                free: s.capacity(),
                gpus: Vec::new(),
                enforcement: slurm::ENFORCEMENT.into(),
            });
        }
        if let Some(k) = self.inner.kube.as_ref() {
            executors.push(wire::ExecutorInfo {
                name: "kubernetes".into(),
                region: k.settings.region.clone(),
                capacity: k.capacity(),
                free: k.capacity(),
                gpus: Vec::new(),
                enforcement: kubernetes::ENFORCEMENT.into(),
            });
        }
        wire::ExecutorList { executors }
    }
}

/// Microseconds now.
pub(crate) fn now() -> i64 {
    qanat_store::now_micros()
}
