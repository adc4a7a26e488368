//! `qanat jobs`: submit anyone's training code, follow it, stop it; `qanat gpus`.

use std::io::Write;

use anyhow::{bail, Context, Result};
use qanat_jobs::wire::{
    ExecutorInfo, Job, JobDetail, JobEvent, JobListParams, LogParams, NewSchedule, Quota,
    QuotaUsage, Schedule,
};
use qanat_jobs::JobSpec;
use serde_json::{json, Map, Value};

use super::Ctx;
use crate::cli::{Format, JobFlags, JobsCmd, OptimizeArgs, QuotaCmd, SubmitArgs, TrainArgs};
use crate::output;

pub async fn run(ctx: &Ctx, project: &str, cmd: JobsCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        JobsCmd::Submit(args) => {
            let (wait, quiet) = (args.job.wait, args.job.quiet);
            let spec = spec_of(*args)?;
            submit(ctx, project, &spec, wait, quiet).await
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
        JobsCmd::Cancel { job_id, wait } => {
            let job = c.cancel_job(project, &job_id).await?;
            if !wait || job.is_finished() {
                return output::record(format, &job);
            }
            output::record(format, &wait_for(ctx, project, &job_id).await?)
        }
        JobsCmd::Retry { job_id } => output::record(format, &c.retry_job(project, &job_id).await?),
        JobsCmd::Logs {
            job_id,
            rank,
            attempt,
            follow,
        } => logs(ctx, project, &job_id, rank, attempt, follow).await,
        JobsCmd::Schedule { cron, job } => {
            let (name, quiet) = (job.job.name.clone(), job.job.quiet);
            let spec = spec_of(*job)?;
            let new = NewSchedule {
                name: name.unwrap_or_else(|| spec.name.clone()),
                cron,
                job: spec,
            };
            let s = c.create_schedule(project, &new).await?;
            if quiet {
                println!("{}", s.schedule_id);
                return Ok(());
            }
            output::record(format, &s)
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
async fn submit(ctx: &Ctx, project: &str, spec: &JobSpec, wait: bool, quiet: bool) -> Result<()> {
    let format = ctx.format;
    let job = ctx.client.submit_job(project, spec).await?;
    if quiet {
        // The id first, so a script has it even when waiting ends in a failure.
        println!("{}", job.job_id);
        std::io::stdout().flush()?;
    }
    if !wait {
        return if quiet {
            Ok(())
        } else {
            output::record(format, &job)
        };
    }
    if format != Format::Json && !quiet {
        eprintln!(
            "submitted {} ({}); waiting for it to end",
            job.job_id, job.state
        );
    }
    let done = wait_for(ctx, project, &job.job_id).await?;
    if !quiet {
        output::record(format, &done)?;
    }
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
    put(obj, "target", a.target);
    put(obj, "model", a.model);
    put(obj, "epochs", a.epochs);
    put(obj, "seed", a.seed);
    put(obj, "register", a.register);
    put(obj, "inputs", (!a.inputs.is_empty()).then_some(a.inputs));
    let (wait, quiet) = (a.job.wait, a.job.quiet);
    overlay(a.job, obj, |obj| {
        let target = obj.get("target").and_then(Value::as_str).unwrap_or("model");
        format!("train-{target}")
    })?;
    let spec: JobSpec = serde_json::from_value(v).context("the train config")?;
    submit(ctx, project, &spec, wait, quiet).await
}

pub async fn optimize(ctx: &Ctx, project: &str, a: OptimizeArgs) -> Result<()> {
    let mut obj = serde_json::Map::new();
    obj.insert("kind".into(), json!("optimize"));
    obj.insert("model".into(), json!(a.model));
    obj.insert("inputs".into(), json!([a.holdout]));
    put(&mut obj, "max_accuracy_drop", a.max_accuracy_drop);
    put(&mut obj, "max_error_increase", a.max_error_increase);
    put(&mut obj, "force", a.force.then_some(true));
    put(&mut obj, "register", a.register);
    put(&mut obj, "runtime", a.runtime);
    put(&mut obj, "quantize", a.quantize);
    put(&mut obj, "prune", a.prune);
    put(&mut obj, "sparsity", a.sparsity);
    put(&mut obj, "finetune_epochs", a.finetune_epochs);
    put(&mut obj, "distill", a.distill);
    put(&mut obj, "temperature", a.temperature);
    put(&mut obj, "alpha", a.alpha);
    put(&mut obj, "target", a.target);
    put(&mut obj, "task", a.task);
    put(&mut obj, "features", a.features);
    let (wait, quiet) = (a.job.wait, a.job.quiet);
    overlay(a.job, &mut obj, |_| format!("optimize-{}", a.model))?;
    let spec: JobSpec = serde_json::from_value(Value::Object(obj)).context("the optimize job")?;
    submit(ctx, project, &spec, wait, quiet).await
}

/// Sets `key` to `value` when there is one.
fn put<T: serde::Serialize>(obj: &mut Map<String, Value>, key: &str, value: Option<T>) {
    if let Some(v) = value {
        obj.insert(key.to_string(), json!(v));
    }
}

/// Writes the job flags given over a spec's fields (the resources one by one), and
/// names the job after `default_name` when neither the flags nor the spec did.
fn overlay(
    flags: JobFlags,
    obj: &mut Map<String, Value>,
    default_name: impl FnOnce(&Map<String, Value>) -> String,
) -> Result<()> {
    put(obj, "name", flags.name);
    put(obj, "experiment", flags.experiment);
    let mut given = Map::new();
    put(&mut given, "cpus", flags.cpus);
    put(&mut given, "memory", flags.memory);
    put(&mut given, "gpus", flags.gpus);
    put(&mut given, "gpu_model", flags.gpu_model);
    if !given.is_empty() {
        let r = obj.entry("resources").or_insert_with(|| json!({}));
        let r = r.as_object_mut().context("resources must be a mapping")?;
        r.extend(given);
    }
    if !obj.contains_key("name") {
        let name = job_name(&default_name(obj));
        obj.insert("name".into(), json!(name));
    }
    Ok(())
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
    put(obj, "command", (!a.command.is_empty()).then_some(a.command));
    put(
        obj,
        "working_dir",
        a.workdir.map(|w| std::path::absolute(&w).unwrap_or(w)),
    );
    put(obj, "executor", a.executor);
    put(obj, "ranks", a.ranks);
    put(obj, "priority", a.priority);
    put(obj, "timeout", a.timeout);
    put(obj, "max_retries", a.retries);
    put(obj, "preemptible", a.no_preempt.then_some(false));
    put(obj, "inputs", (!a.inputs.is_empty()).then_some(a.inputs));
    put(obj, "outputs", (!a.outputs.is_empty()).then_some(a.outputs));
    if !a.env.is_empty() {
        let env = obj.entry("env").or_insert_with(|| json!({}));
        let env = env
            .as_object_mut()
            .context("env must be a mapping of KEY: value")?;
        for (k, val) in a.env {
            env.insert(k, json!(val));
        }
    }
    overlay(a.job, obj, |obj| {
        let program = match obj.get("command") {
            Some(Value::Array(a)) => a.first().and_then(Value::as_str).unwrap_or("job"),
            _ => "job",
        };
        std::path::Path::new(program)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("job")
            .to_string()
    })?;
    if !obj.contains_key("command") && obj.get("kind").is_none_or(|k| k == "command") {
        bail!("what should the job run? give the command after `--` (qanat jobs submit -- python train.py) or in -f FILE");
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
