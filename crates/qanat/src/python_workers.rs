//! The Python serving runtime's settings and its workers' sandbox: the job sandbox
//! ([`qanat_jobs::sandbox::worker_plan`]), started through this binary.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use qanat_serving::python::{Settings, Spawner};

use crate::config::Config;

/// Starts workers in the job sandbox, or (where an admin opted out of it) plainly.
#[derive(Debug)]
struct JobSandbox {
    jobs: qanat_jobs::Settings,
    isolation: std::result::Result<String, String>,
    /// Found at the first worker (no cgroup is touched where no Python model is served).
    confiner: std::sync::OnceLock<qanat_jobs::confine::Confiner>,
}

impl JobSandbox {
    fn confiner(&self) -> &qanat_jobs::confine::Confiner {
        self.confiner
            .get_or_init(|| qanat_jobs::confine::Confiner::detect(&self.jobs))
    }
}

/// A worker's limit: its cgroup (or sampled process group), removed when dropped.
#[derive(Debug)]
struct WorkerLimit(qanat_jobs::confine::Confined);

impl qanat_serving::python::Limit for WorkerLimit {
    fn over_limit(&self) -> Option<String> {
        self.0.over_limit()
    }
}

impl Spawner for JobSandbox {
    fn isolation(&self) -> std::result::Result<String, String> {
        self.isolation.clone().map_err(|why| {
            format!("the Python runtime runs a model's code only in a sandbox, and {why}")
        })
    }

    fn command(
        &self,
        program: &Path,
        args: &[String],
        read_only: &[PathBuf],
        tmp_mb: u64,
    ) -> (std::process::Command, bool) {
        if !self.jobs.sandbox.enabled {
            let mut c = std::process::Command::new(program);
            c.args(args).current_dir("/tmp");
            return (c, false);
        }
        let plan = qanat_jobs::sandbox::worker_plan(
            &self.jobs,
            read_only,
            tmp_mb,
            program.to_string_lossy().into_owned(),
            args.to_vec(),
        );
        let mut c = std::process::Command::new(&self.jobs.sandbox.launcher);
        c.arg(qanat_jobs::sandbox::RANK_ENTRY)
            .arg(plan.to_arg())
            .current_dir("/");
        (c, true)
    }

    fn confine(
        &self,
        pid: u32,
        memory_mb: u64,
    ) -> std::result::Result<Box<dyn qanat_serving::python::Limit>, String> {
        // Unique: a pid may come back while a group of its earlier holder is left.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.confiner()
            .confine(&format!("worker-{n}-{pid}"), pid, memory_mb)
            .map(|c| Box::new(WorkerLimit(c)) as Box<dyn qanat_serving::python::Limit>)
    }

    fn memory_enforcement(&self) -> String {
        self.confiner().enforcement().to_string()
    }
}

fn mib(what: &str, v: &str) -> Result<u64> {
    qanat_jobs::spec::parse_memory(&serde_json::Value::String(v.to_string()))
        .map_err(|e| anyhow::anyhow!("serving.python.{what}: {e}"))
}

/// The Python runtime's settings, its sandbox checked once; `None` when it is off.
pub async fn settings(cfg: &Config, jobs: &qanat_jobs::Settings) -> Result<Option<Settings>> {
    let p = &cfg.serving.python;
    if !p.enabled {
        return Ok(None);
    }
    let isolation = qanat_jobs::sandbox::check(jobs).await;
    if let Err(why) = &isolation {
        tracing::warn!(%why, "MLflow pyfunc models are refused: their Python workers cannot be sandboxed");
    }
    let envs_dir = p
        .envs_dir
        .clone()
        .unwrap_or_else(|| cfg.home.join("serving").join("python-envs"));
    let envs_dir = std::path::absolute(&envs_dir).context("serving.python.envs_dir")?;
    Ok(Some(Settings {
        interpreter: p.interpreter.clone(),
        envs_dir,
        models_dir: std::path::absolute(cfg.home.join("serving").join("python-models"))
            .context("the data directory")?,
        index_url: p.index_url.clone(),
        workers: p.workers.max(1),
        predict_timeout: Duration::from_secs(p.predict_timeout_secs.max(1)),
        load_timeout: Duration::from_secs(p.load_timeout_secs.max(1)),
        build_timeout: Duration::from_secs(p.build_timeout_secs.max(1)),
        tmp_mb: mib("tmp_size", &p.tmp_size)?,
        memory_mb: match mib("memory", &p.memory)? {
            m if m < 64 => anyhow::bail!(
                "serving.python.memory = {}: give a worker at least 64MiB",
                p.memory
            ),
            m => m,
        },
        max_model_bytes: mib("max_model_size", &p.max_model_size)?.saturating_mul(1 << 20),
        only: p.only,
        spawner: Arc::new(JobSandbox {
            confiner: std::sync::OnceLock::new(),
            jobs: jobs.clone(),
            isolation,
        }),
    }))
}
