//! `qanat jobs` and `qanat gpus`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum JobsCmd {
    /// Submit a job: `qanat jobs submit -- python train.py`, or `-f job.yaml` (flags
    /// given beside -f override the file).
    Submit(Box<SubmitArgs>),
    /// The project's jobs, newest first.
    Ls {
        /// Only jobs in this state: queued, running, succeeded, failed, cancelled.
        #[arg(long)]
        state: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// A job: state, reason, resources, placement, enforcement, run, history.
    Show { job_id: String },
    /// Cancel a queued or running job (a running one stops after its grace period).
    Cancel {
        job_id: String,
        /// Wait until it has stopped.
        #[arg(long)]
        wait: bool,
    },
    /// Queue a failed or cancelled job again.
    Retry { job_id: String },
    /// A rank's output; -f follows it while the job runs.
    Logs {
        job_id: String,
        /// Which rank.
        #[arg(long, default_value_t = 0)]
        rank: u32,
        /// Which attempt (default: the latest).
        #[arg(long)]
        attempt: Option<u32>,
        /// Keep printing new output until the attempt ends.
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Submit a job on a cron schedule (five fields, UTC): `qanat jobs schedule
    /// --cron '0 3 * * *' --name nightly -- python retrain.py`.
    Schedule {
        /// Five fields: minute hour day-of-month month day-of-week.
        #[arg(long)]
        cron: String,
        #[command(flatten)]
        job: Box<SubmitArgs>,
    },
    /// The project's schedules.
    Schedules,
    /// Delete a schedule (the jobs it submitted stay).
    Unschedule { schedule_id: String },
    /// The project's job quota and use; `quota set` replaces it (global admins).
    Quota {
        #[command(subcommand)]
        cmd: Option<QuotaCmd>,
    },
}

#[derive(Subcommand)]
pub enum QuotaCmd {
    /// Replace the quota; a limit not given is unlimited.
    Set {
        /// Cores running at once.
        #[arg(long)]
        cpus: Option<f64>,
        /// Memory running at once, e.g. 64GiB.
        #[arg(long)]
        memory: Option<String>,
        /// GPUs running at once.
        #[arg(long)]
        gpus: Option<u32>,
        /// Jobs running at once.
        #[arg(long)]
        running_jobs: Option<u32>,
    },
}

/// What every job the CLI submits may be given (`jobs submit`, `train`, `optimize`):
/// its name, what each rank gets, its MLflow experiment, and whether to wait for it.
/// A flag given overrides the spec file's or the config's field.
#[derive(Args)]
pub struct JobFlags {
    /// The job's name (default: from what it runs: the program, train-<target>,
    /// optimize-<model>).
    #[arg(long)]
    pub name: Option<String>,
    /// Cores per rank, e.g. 2 or 0.5.
    #[arg(long)]
    pub cpus: Option<f64>,
    /// Memory per rank, e.g. 4GiB (enforced).
    #[arg(long)]
    pub memory: Option<String>,
    /// GPUs per rank.
    #[arg(long)]
    pub gpus: Option<u32>,
    /// A GPU model the GPUs must be, e.g. A100.
    #[arg(long)]
    pub gpu_model: Option<String>,
    /// The MLflow experiment of its run.
    #[arg(long)]
    pub experiment: Option<String>,
    /// Wait until it ends; exit non-zero unless it succeeded.
    #[arg(long)]
    pub wait: bool,
    /// Print only its id (for scripts: `JOB=$(qanat jobs submit -q -- …)`).
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(Args)]
pub struct SubmitArgs {
    /// A job spec, YAML or JSON (see docs/jobs.md).
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub job: JobFlags,
    /// Where it runs: local (default), slurm.
    #[arg(long)]
    pub executor: Option<String>,
    /// Processes started together (torchrun-style ranks).
    #[arg(long)]
    pub ranks: Option<u32>,
    /// -1000..1000, higher first.
    #[arg(long, allow_hyphen_values = true)]
    pub priority: Option<i64>,
    /// Longest run per attempt, e.g. 2h.
    #[arg(long)]
    pub timeout: Option<String>,
    /// Retries of a failed attempt.
    #[arg(long)]
    pub retries: Option<u32>,
    /// Never preempt this job for higher-priority work.
    #[arg(long)]
    pub no_preempt: bool,
    /// A dataset version it reads: dataset:NAME@VERSION (repeatable).
    #[arg(long = "input", value_name = "REF")]
    pub inputs: Vec<String>,
    /// A file or directory logged to its run when it succeeds (repeatable).
    #[arg(long = "artifact", value_name = "PATH")]
    pub outputs: Vec<String>,
    /// KEY=VALUE (repeatable).
    #[arg(long = "env", value_parser = super::parse_kv)]
    pub env: Vec<(String, String)>,
    /// Where it starts (an absolute path on the server).
    #[arg(long)]
    pub workdir: Option<PathBuf>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}
