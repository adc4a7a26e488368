//! `qanat jobs`: submit anyone's training code, follow it, stop it; `qanat gpus`.

use std::io::Write;

use anyhow::{bail, Context, Result};
use qanat_jobs::wire::{
    ExecutorInfo, Job, JobDetail, JobEvent, JobListParams, LogParams, NewSchedule, Quota,
    QuotaUsage, Schedule,
};
use qanat_jobs::JobSpec;
use serde_json::{json, Value};

use super::Ctx;
use crate::cli::{Format, JobsCmd, OptimizeArgs, QuotaCmd, SubmitArgs, TrainArgs};
use crate::output;

pub async fn run(ctx: &Ctx, project: &str, cmd: JobsCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        JobsCmd::Submit(args) => {
            let wait = args.wait;
            let spec = spec_of(*args)?;
            submit(ctx, project, &spec, wait).await
        }
        JobsCmd::Ls { state, limit } => {
            let list = c
                .jobs(
                    project,
                    &JobListParams {
                        state,
                        limit: Some(limit),
                    },
                )
                .await?;
            output::list(format, &list.jobs)
        }
        JobsCmd::Show { job_id } => {
            let d = c.job(project, &job_id).await?;
            if format == Format::Json {
                return output::json(&d);
            }
            output::record(format, &d)?;
            println!();
            output::list(format, &d.events)
        }
        JobsCmd::Cancel { job_id } => {
            output::record(format, &c.cancel_job(project, &job_id).await?)
        }
        JobsCmd::Retry { job_id } => output::record(format, &c.retry_job(project, &job_id).await?),
        JobsCmd::Logs {
            job_id,
            rank,
            attempt,
            follow,
        } => logs(ctx, project, &job_id, rank, attempt, follow).await,
        JobsCmd::Schedule { cron, job } => {
            let name = job.name.clone();
            let spec = spec_of(*job)?;
            let new = NewSchedule {
                name: name.unwrap_or_else(|| spec.name.clone()),
                cron,
                job: spec,
            };
            output::record(format, &c.create_schedule(project, &new).await?)
        }
        JobsCmd::Schedules => output::list(format, &c.schedules(project).await?.schedules),
        JobsCmd::Unschedule { schedule_id } => {
            c.delete_schedule(project, &schedule_id).await?;
            if format != Format::Json {
                println!("deleted schedule {schedule_id}");
            }
            Ok(())
        }
        JobsCmd::Quota { cmd: None } => output::record(format, &c.quota(project).await?),
        JobsCmd::Quota {
            cmd:
                Some(QuotaCmd::Set {
                    cpus,
                    memory,
                    gpus,
                    running_jobs,
                }),
        } => {
            let q = Quota {
                cpus,
                memory: memory.map(Value::String),
                memory_mb: None,
                gpus,
                running_jobs,
            };
            output::record(format, &c.set_quota(project, &q).await?)
        }
    }
}

/// The spec from `-f FILE` (YAML or JSON), with the flags given beside it on top.
/// Submits `spec`; with `wait`, follows it to its end and fails unless it succeeded.
async fn submit(ctx: &Ctx, project: &str, spec: &JobSpec, wait: bool) -> Result<()> {
    let format = ctx.format;
    let job = ctx.client.submit_job(project, spec).await?;
    if !wait {
        return output::record(format, &job);
    }
    if format != Format::Json {
        eprintln!(
            "submitted {} ({}); waiting for it to end",
            job.job_id, job.state
        );
    }
    let done = wait_for(ctx, project, &job.job_id).await?;
    output::record(format, &done)?;
    if done.state != "succeeded" {
        bail!(
            "job {} {}: {}",
            done.job_id,
            done.state,
            done.reason.as_deref().unwrap_or("no reason recorded")
        );
    }
    Ok(())
}

/// A YAML or JSON file of job fields, or an empty mapping.
fn read_spec_file(file: Option<&std::path::Path>) -> Result<Value> {
    let Some(path) = file else {
        return Ok(json!({}));
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: Value = serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{} is not YAML or JSON", path.display()))?;
    if !v.is_object() {
        bail!(
            "{} must hold a mapping of fields (name, resources, …)",
            path.display()
        );
    }
    Ok(v)
}

/// `qanat train`: a `train` job from a config file and flags.
pub async fn train(ctx: &Ctx, project: &str, a: TrainArgs) -> Result<()> {
    let mut v = read_spec_file(a.config.as_deref())?;
    let obj = v.as_object_mut().context("a train config is a mapping")?;
    if let Some(k) = obj.get("kind").and_then(Value::as_str) {
        if k != "train" {
            bail!("kind = '{k}' in the config: qanat train submits train jobs (use qanat jobs submit for others)");
        }
    }
    obj.insert("kind".into(), json!("train"));
    let mut set = |k: &str, val: Option<Value>| {
        if let Some(val) = val {
            obj.insert(k.to_string(), val);
        }
    };
    set("target", a.target.map(|t| json!(t)));
    set("model", a.model.map(|m| json!(m)));
    set("epochs", a.epochs.map(|e| json!(e)));
    set("seed", a.seed.map(|s| json!(s)));
    set("register", a.register.map(|r| json!(r)));
    set("name", a.name.map(|n| json!(n)));
    set("experiment", a.experiment.map(|e| json!(e)));
    if !a.inputs.is_empty() {
        set("inputs", Some(json!(a.inputs)));
    }
    if a.cpus.is_some() || a.memory.is_some() {
        let r = obj.entry("resources").or_insert_with(|| json!({}));
        if let Some(c) = a.cpus {
            r["cpus"] = json!(c);
        }
        if let Some(m) = a.memory {
            r["memory"] = json!(m);
        }
    }
    if !obj.contains_key("name") {
        let target = obj.get("target").and_then(Value::as_str).unwrap_or("model");
        obj.insert("name".into(), json!(job_name(&format!("train-{target}"))));
    }
    let spec: JobSpec = serde_json::from_value(v).context("the train config")?;
    submit(ctx, project, &spec, a.wait).await
}

pub async fn optimize(ctx: &Ctx, project: &str, a: OptimizeArgs) -> Result<()> {
    let mut obj = serde_json::Map::new();
    obj.insert("kind".into(), json!("optimize"));
    obj.insert("model".into(), json!(a.model));
    obj.insert("inputs".into(), json!([a.holdout]));
    let mut set = |k: &str, val: Option<Value>| {
        if let Some(val) = val {
            obj.insert(k.to_string(), val);
        }
    };
    set("max_accuracy_drop", a.max_accuracy_drop.map(|v| json!(v)));
    set("max_error_increase", a.max_error_increase.map(|v| json!(v)));
    set("force", a.force.then_some(json!(true)));
    set("register", a.register.map(|r| json!(r)));
    set("experiment", a.experiment.map(|e| json!(e)));
    set("runtime", a.runtime.map(|r| json!(r)));
    set("quantize", a.quantize.map(|q| json!(q)));
    set("prune", a.prune.map(|p| json!(p)));
    set("sparsity", a.sparsity.map(|s| json!(s)));
    set("finetune_epochs", a.finetune_epochs.map(|e| json!(e)));
    set("distill", a.distill.map(|h| json!(h)));
    set("temperature", a.temperature.map(|t| json!(t)));
    set("alpha", a.alpha.map(|x| json!(x)));
    set("target", a.target.map(|t| json!(t)));
    set("task", a.task.map(|t| json!(t)));
    set("features", a.features.map(|f| json!(f)));
    let name = a
        .name
        .unwrap_or_else(|| job_name(&format!("optimize-{}", a.model)));
    obj.insert("name".into(), json!(name));
    let spec: JobSpec = serde_json::from_value(Value::Object(obj)).context("the optimize job")?;
    submit(ctx, project, &spec, a.wait).await
}

/// A default job name from `raw`: characters a job name may not hold become `-`.
fn job_name(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect()
}

fn spec_of(a: SubmitArgs) -> Result<JobSpec> {
    let mut v: Value = read_spec_file(a.file.as_deref())?;
    let obj = v.as_object_mut().context("a job spec is a mapping")?;
    let mut set = |k: &str, val: Value| {
        obj.insert(k.to_string(), val);
    };
    if !a.command.is_empty() {
        set("command", json!(a.command));
    }
    if let Some(n) = a.name {
        set("name", json!(n));
    }
    if let Some(w) = a.workdir {
        let w = std::path::absolute(&w).unwrap_or(w);
        set("working_dir", json!(w));
    }
    if let Some(e) = a.executor {
        set("executor", json!(e));
    }
    if let Some(r) = a.ranks {
        set("ranks", json!(r));
    }
    if let Some(p) = a.priority {
        set("priority", json!(p));
    }
    if let Some(t) = a.timeout {
        set("timeout", json!(t));
    }
    if let Some(r) = a.retries {
        set("max_retries", json!(r));
    }
    if a.no_preempt {
        set("preemptible", json!(false));
    }
    if let Some(e) = a.experiment {
        set("experiment", json!(e));
    }
    if !a.inputs.is_empty() {
        set("inputs", json!(a.inputs));
    }
    if !a.outputs.is_empty() {
        set("outputs", json!(a.outputs));
    }
    let obj = v.as_object_mut().context("a job spec is a mapping")?;
    if !a.env.is_empty() {
        let env = obj.entry("env").or_insert_with(|| json!({}));
        let env = env
            .as_object_mut()
            .context("env must be a mapping of KEY: value")?;
        for (k, val) in a.env {
            env.insert(k, json!(val));
        }
    }
    if a.cpus.is_some() || a.memory.is_some() || a.gpus.is_some() || a.gpu_model.is_some() {
        let r = obj.entry("resources").or_insert_with(|| json!({}));
        let r = r.as_object_mut().context("resources must be a mapping")?;
        if let Some(c) = a.cpus {
            r.insert("cpus".into(), json!(c));
        }
        if let Some(m) = a.memory {
            r.insert("memory".into(), json!(m));
        }
        if let Some(g) = a.gpus {
            r.insert("gpus".into(), json!(g));
        }
        if let Some(m) = a.gpu_model {
            r.insert("gpu_model".into(), json!(m));
        }
    }
    if !obj.contains_key("command") && obj.get("kind").is_none_or(|k| k == "command") {
        bail!("what should the job run? give the command after `--` (qanat jobs submit -- python train.py) or in -f FILE");
    }
    if !obj.contains_key("name") {
        let program = match obj.get("command") {
            Some(Value::Array(a)) => a.first().and_then(Value::as_str).unwrap_or("job"),
            _ => "job",
        };
        let base = std::path::Path::new(program)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("job");
        let name: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        obj.insert("name".into(), json!(name));
    }
    serde_json::from_value(v).context("the job spec")
}

async fn wait_for(ctx: &Ctx, project: &str, job_id: &str) -> Result<Job> {
    loop {
        let d = ctx.client.job(project, job_id).await?;
        if d.job.is_finished() {
            return Ok(d.job);
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

async fn logs(
    ctx: &Ctx,
    project: &str,
    job_id: &str,
    rank: u32,
    attempt: Option<u32>,
    follow: bool,
) -> Result<()> {
    let mut offset = 0;
    let mut out = std::io::stdout().lock();
    loop {
        let chunk = ctx
            .client
            .job_logs(
                project,
                job_id,
                &LogParams {
                    rank: Some(rank),
                    attempt,
                    offset: Some(offset),
                    wait_secs: follow.then_some(10),
                },
            )
            .await?;
        out.write_all(chunk.data.as_bytes())?;
        out.flush()?;
        offset = chunk.next_offset;
        // Without -f, read until nothing is left now; with -f, until the attempt has
        // ended and everything it wrote was read.
        if chunk.data.is_empty() && (chunk.complete || !follow) {
            return Ok(());
        }
    }
}

pub async fn gpus(ctx: &Ctx) -> Result<()> {
    let list = ctx.client.executors().await?;
    if ctx.format == Format::Json {
        return output::json(&list);
    }
    output::list(ctx.format, &list.executors)?;
    let gpus: Vec<_> = list.executors.iter().flat_map(|e| e.gpus.clone()).collect();
    if gpus.is_empty() {
        println!("\nno GPUs found (NVML reports none, or is not installed)");
    } else {
        println!();
        output::list(ctx.format, &gpus)?;
    }
    Ok(())
}

fn cpus(millis: u64) -> String {
    format!("{}", millis as f64 / 1000.0)
}

fn resources(r: &qanat_jobs::Resources) -> String {
    r.describe()
}

output::columns!(Job, |x| {
    "id" => x.job_id.clone(),
    "name" => x.name.clone(),
    "state" => x.state.clone(),
    "priority" => x.priority.to_string(),
    "ranks" => x.ranks.to_string(),
    "per rank" => resources(&x.resources),
    "attempt" => x.attempt.to_string(),
    "submitted" => x.submitted_at.clone(),
    "reason" => output::opt(x.reason.as_ref()),
});

output::fields!(Job, |x| {
    "run" => output::opt(x.run_id.as_ref()),
    "placement" => output::opt(x.placement.as_ref()),
    "enforcement" => output::opt(x.enforcement.as_ref()),
    "idle gpus" => output::opt(x.idle_gpus.as_ref()),
} + Row + {
    "failed attempts" => format!("{} (retries allowed: {})", x.failures, x.max_retries),
    "preemptions" => x.preemptions.to_string(),
    "exit code" => output::opt(x.exit_code),
    "started" => output::opt(x.started_at.as_ref()),
    "finished" => output::opt(x.finished_at.as_ref()),
});

output::fields!(JobDetail, |x| {
    "command" => x.spec.params.get("command").map(|c| c.to_string()).unwrap_or_default(),
} + Row + {});

impl output::Row for JobDetail {
    const HEADERS: &'static [&'static str] = <Job as output::Row>::HEADERS;
    fn cells(&self) -> Vec<String> {
        output::Row::cells(&self.job)
    }
}

output::columns!(JobEvent, |x| {
    "at" => x.at.clone(),
    "attempt" => x.attempt.to_string(),
    "event" => x.event.clone(),
    "message" => x.message.clone(),
});

output::columns!(ExecutorInfo, |x| {
    "executor" => x.name.clone(),
    "region" => x.region.clone(),
    "cpus" => format!("{} free of {}", cpus(x.free.cpu_millis), cpus(x.capacity.cpu_millis)),
    "memory" => format!("{} MiB free of {}", x.free.memory_mb, x.capacity.memory_mb),
    "gpus" => format!("{} free of {}", x.free.gpus, x.capacity.gpus),
    "enforcement" => x.enforcement.clone(),
});

output::columns!(qanat_jobs::wire::Gpu, |x| {
    "index" => x.index.to_string(),
    "name" => x.name.clone(),
    "memory" => format!("{} MiB", x.memory_mb),
    "uuid" => x.uuid.clone(),
    "job" => output::opt(x.job_id.as_ref()),
});

output::fields!(QuotaUsage, |x| {
    "project" => x.project.clone(),
    "cpus" => format!("{} in use of {}", cpus(x.used.cpu_millis), output::opt(x.quota.cpus)),
    "memory" => format!("{} MiB in use of {}", x.used.memory_mb, output::opt(x.quota.memory_mb.map(|m| format!("{m} MiB")))),
    "gpus" => format!("{} in use of {}", x.used.gpus, output::opt(x.quota.gpus)),
    "running jobs" => format!("{} of {}", x.running_jobs, output::opt(x.quota.running_jobs)),
    "queued jobs" => x.queued_jobs.to_string(),
});

output::columns!(Schedule, |x| {
    "id" => x.schedule_id.clone(),
    "name" => x.name.clone(),
    "cron" => x.cron.clone(),
    "next" => x.next_at.clone(),
    "command" => x.job.params.get("command").map(|c| c.to_string()).unwrap_or_default(),
    "created by" => x.created_by.clone(),
});

output::fields!(Schedule = Row);
