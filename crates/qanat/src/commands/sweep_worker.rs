//! `qanat sweep-worker`: the process a `sweep` job runs (started by the scheduler,
//! never by hand). It submits each trial as a `train` job whose run is a child of the
//! sweep's run, keeps `parallel` of them running, stops unpromising ones (ASHA), and
//! when all are done logs the best trial to the sweep's run and registers its model.
//!
//! Its state is the run artifact `sweep/state.json`, written before each trial is
//! submitted and after each change: a later attempt (the server restarted, the
//! controller was killed) reads it and goes on — trials already submitted are found
//! again (by their job name) and never submitted twice.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use futures::TryStreamExt;
use qanat_client::Client;
use qanat_train::sweep::{State, SweepConfig, Trial, CONFIG_VAR};
use serde_json::{json, Value};

const STATE: &str = "sweep/state.json";

fn var(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| {
        format!("{name} is not set: sweep-worker runs inside a sweep job, started by the scheduler")
    })
}

struct Sweep {
    client: Client,
    project: String,
    run_id: String,
    root: String,
    job_id: String,
    config: SweepConfig,
    inputs: Vec<String>,
    experiment: Option<String>,
    max_epochs: u32,
}

impl Sweep {
    async fn load(&self) -> Result<State> {
        let base = self
            .root
            .trim_start_matches("mlflow-artifacts:")
            .trim_matches('/');
        match self
            .client
            .artifact(&self.project, &format!("{base}/{STATE}"))
            .await
        {
            Ok(s) => {
                let chunks: Vec<bytes::Bytes> = s.try_collect().await?;
                Ok(serde_json::from_slice(&chunks.concat()).context("reading sweep/state.json")?)
            }
            Err(qanat_client::Error::Api { status: 404, .. }) => Ok(State::default()),
            Err(e) => Err(e).context("reading the sweep's state"),
        }
    }

    async fn save(&self, state: &State) -> Result<()> {
        self.client
            .upload_artifact(
                &self.project,
                &self.root,
                STATE,
                serde_json::to_vec_pretty(state)?,
            )
            .await
            .context("storing the sweep's state")
    }

    fn trial_name(&self, number: u32) -> String {
        format!("{}-t{number}", self.job_id)
    }

    /// The job of trial `number` if it was submitted (by an earlier attempt that
    /// stopped before recording it).
    async fn find_submitted(&self, number: u32) -> Result<Option<qanat_jobs::wire::Job>> {
        let name = self.trial_name(number);
        let list = self
            .client
            .jobs(
                &self.project,
                &qanat_jobs::wire::JobListParams {
                    state: None,
                    limit: Some(1000),
                },
            )
            .await?;
        Ok(list.jobs.into_iter().find(|j| j.name == name))
    }

    async fn submit(&self, trial: &Trial) -> Result<qanat_jobs::wire::Job> {
        let mut spec = serde_json::Map::new();
        for (k, v) in &self.config.trial {
            spec.insert(k.clone(), v.clone());
        }
        for (k, v) in &trial.params {
            spec.insert(k.clone(), v.clone());
        }
        spec.insert("name".into(), json!(self.trial_name(trial.number)));
        spec.insert("kind".into(), json!("train"));
        spec.insert("inputs".into(), json!(self.inputs));
        spec.insert("parent_run".into(), json!(self.run_id));
        if let Some(e) = &self.experiment {
            spec.insert("experiment".into(), json!(e));
        }
        if let Some(r) = &self.config.trial_resources {
            spec.insert("resources".into(), r.clone());
        }
        // A trial killed with the server resumes from its checkpoint.
        spec.entry("max_retries").or_insert(json!(1));
        let spec: qanat_jobs::JobSpec =
            serde_json::from_value(Value::Object(spec)).context("a trial's job spec")?;
        Ok(self.client.submit_job(&self.project, &spec).await?)
    }

    /// The metric's per-epoch values of a running trial, lower better.
    async fn curve(&self, run_id: &str) -> Result<Vec<f64>> {
        let mut by_step: BTreeMap<i64, f64> = BTreeMap::new();
        for (step, v) in self
            .client
            .metric_history(&self.project, run_id, &self.config.metric)
            .await?
        {
            by_step.insert(step, v * self.config.sign());
        }
        Ok(by_step.into_values().collect())
    }

    /// One pass: follow running trials, stop losers, start new ones. True when done.
    async fn step(&self, state: &mut State, curves: &mut BTreeMap<u32, Vec<f64>>) -> Result<bool> {
        let mut changed = false;
        for i in 0..state.trials.len() {
            let t = state.trials[i].clone();
            if !matches!(t.state.as_str(), "submitting" | "running") {
                continue;
            }
            let job = match &t.job_id {
                Some(id) => self.client.job(&self.project, id).await?.job,
                None => match self.find_submitted(t.number).await? {
                    Some(j) => j,
                    None => {
                        let j = self.submit(&t).await?;
                        println!(
                            "trial {} submitted as {}: {}",
                            t.number,
                            j.job_id,
                            json!(t.params)
                        );
                        j
                    }
                },
            };
            let tr = &mut state.trials[i];
            if tr.job_id.is_none() || tr.run_id != job.run_id || tr.state == "submitting" {
                tr.job_id = Some(job.job_id.clone());
                tr.run_id.clone_from(&job.run_id);
                tr.state = "running".into();
                changed = true;
            }
            match job.state.as_str() {
                "succeeded" => {
                    let run = self
                        .client
                        .run(&self.project, job.run_id.as_deref().unwrap_or_default())
                        .await?;
                    let key = format!("best_{}", self.config.metric);
                    let v = run
                        .data
                        .metrics
                        .iter()
                        .find(|m| m.key == key)
                        .map(|m| m.value.0);
                    tr.value = v;
                    tr.state = if v.is_some() { "completed" } else { "failed" }.into();
                    if let (Some(_), Some(r)) = (&self.config.asha, &job.run_id) {
                        curves.insert(tr.number, self.curve(r).await?);
                    }
                    println!("trial {} {}: {key} {v:?}", tr.number, tr.state);
                    changed = true;
                }
                "failed" | "cancelled" => {
                    tr.state = "failed".into();
                    println!(
                        "trial {} {}: {}",
                        tr.number,
                        job.state,
                        job.reason.unwrap_or_default()
                    );
                    changed = true;
                }
                "running" => {
                    if let (Some(asha), Some(run_id)) = (&self.config.asha, &job.run_id) {
                        let curve = self.curve(run_id).await?;
                        curves.insert(tr.number, curve.clone());
                        let others: Vec<&[f64]> = curves
                            .iter()
                            .filter(|(n, _)| **n != tr.number)
                            .map(|(_, c)| c.as_slice())
                            .collect();
                        if asha.should_stop(&curve, &others, self.max_epochs) {
                            match self.client.cancel_job(&self.project, &job.job_id).await {
                                Ok(_) => {}
                                // It ended meanwhile: the next pass reads how.
                                Err(qanat_client::Error::Api { status: 409, .. }) => continue,
                                Err(e) => return Err(e.into()),
                            }
                            tr.state = "pruned".into();
                            tr.value = curve
                                .iter()
                                .copied()
                                .fold(None, |b: Option<f64>, v| Some(b.map_or(v, |b| b.min(v))))
                                .map(|v| v * self.config.sign());
                            println!(
                                "trial {} pruned after {} epochs (ASHA): {} {:?}",
                                tr.number,
                                curve.len(),
                                self.config.metric,
                                tr.value
                            );
                            changed = true;
                        }
                    }
                }
                _ => {}
            }
        }
        if changed {
            self.save(state).await?;
        }
        // Start trials while there is room.
        loop {
            let active = state
                .trials
                .iter()
                .filter(|t| matches!(t.state.as_str(), "submitting" | "running"))
                .count();
            if active >= self.config.parallel as usize {
                break;
            }
            let history: Vec<(BTreeMap<String, Value>, f64)> = state
                .trials
                .iter()
                .filter_map(|t| Some((t.params.clone(), t.value? * self.config.sign())))
                .collect();
            let number = state.trials.len() as u32;
            let Some(params) = self.config.suggest(number, &history)? else {
                return Ok(active == 0);
            };
            // Recorded before it is submitted: a crash in between finds it by name.
            state.trials.push(Trial {
                number,
                params,
                job_id: None,
                run_id: None,
                state: "submitting".into(),
                value: None,
            });
            self.save(state).await?;
            let t = state
                .trials
                .last()
                .cloned()
                .ok_or_else(|| anyhow!("no trial"))?;
            let j = self.submit(&t).await?;
            println!(
                "trial {number} submitted as {}: {}",
                j.job_id,
                json!(t.params)
            );
            if let Some(tr) = state.trials.last_mut() {
                tr.job_id = Some(j.job_id);
                tr.state = "running".into();
            }
            self.save(state).await?;
        }
        Ok(false)
    }
}

pub async fn run() -> Result<()> {
    let config = SweepConfig::from_value(
        serde_json::from_str(&var(CONFIG_VAR)?).context("reading the sweep config")?,
    )
    .map_err(|e| anyhow!(e))?;
    let project = var("QANAT_PROJECT")?;
    let run_id = var("MLFLOW_RUN_ID")?;
    let job_id = var("QANAT_JOB_ID")?;
    let client = super::train_worker::job_client(var)?;
    let me = client.job(&project, &job_id).await?;
    let run = client.run(&project, &run_id).await?;
    let max_epochs = config
        .trial_config(&config.suggest(0, &[])?.unwrap_or_default())
        .map(|c| c.epochs)
        .map_err(|e| anyhow!(e))?;
    let sweep = Sweep {
        client: client.clone(),
        project: project.clone(),
        run_id: run_id.clone(),
        root: run.info.artifact_uri.clone(),
        job_id,
        inputs: me.spec.inputs.clone(),
        experiment: me.spec.experiment.clone(),
        config,
        max_epochs,
    };
    let params: Vec<(String, String)> = [
        ("algorithm", json!(sweep.config.algorithm)),
        ("trials", json!(sweep.config.trials)),
        ("parallel", json!(sweep.config.parallel)),
        ("metric", json!(sweep.config.metric)),
        ("space", serde_json::to_value(&sweep.config.space)?),
        ("asha", json!(sweep.config.asha)),
        ("seed", json!(sweep.config.seed)),
    ]
    .into_iter()
    .map(|(k, v)| {
        let s = match v {
            Value::String(s) => s,
            other => other.to_string(),
        };
        (k.to_string(), s)
    })
    .collect();
    let mut state = sweep.load().await?;
    if state.trials.is_empty() {
        client
            .log_batch(
                &project,
                &run_id,
                &[],
                &params,
                &[("qanat.sweep".into(), "true".into())],
            )
            .await
            .context("logging the sweep's params")?;
    } else {
        println!(
            "resuming the sweep: {} trials recorded ({STATE})",
            state.trials.len()
        );
    }
    // ASHA compares a running trial with every trial that reached its rung.
    let mut curves = BTreeMap::new();
    if sweep.config.asha.is_some() {
        for t in &state.trials {
            if let Some(r) = &t.run_id {
                curves.insert(t.number, sweep.curve(r).await?);
            }
        }
    }
    while !sweep.step(&mut state, &mut curves).await? {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let sign = sweep.config.sign();
    let best = state
        .trials
        .iter()
        .filter(|t| t.state == "completed")
        .filter_map(|t| Some((t, t.value? * sign)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(t, _)| t.clone());
    let count = |s: &str| state.trials.iter().filter(|t| t.state == s).count() as f64;
    let mut metrics = vec![
        ("trials_completed".to_string(), count("completed"), 0),
        ("trials_pruned".to_string(), count("pruned"), 0),
        ("trials_failed".to_string(), count("failed"), 0),
    ];
    let Some(best) = best else {
        client
            .log_batch(&project, &run_id, &metrics, &[], &[])
            .await?;
        return Err(anyhow!(
            "no trial completed ({} failed, {} pruned): see the trials' logs",
            count("failed"),
            count("pruned")
        ));
    };
    let best_run = best.run_id.clone().unwrap_or_default();
    metrics.push((
        format!("best_{}", sweep.config.metric),
        best.value.unwrap_or(f64::NAN),
        0,
    ));
    let mut tags = vec![
        ("qanat.sweep.best_run".to_string(), best_run.clone()),
        (
            "qanat.sweep.best_trial".to_string(),
            best.number.to_string(),
        ),
    ];
    tags.extend(
        best.params
            .iter()
            .map(|(k, v)| (format!("qanat.sweep.best.{k}"), v.to_string())),
    );
    client
        .log_batch(&project, &run_id, &metrics, &[], &tags)
        .await?;
    println!(
        "best trial {}: {} {:?} with {} (run {best_run})",
        best.number,
        sweep.config.metric,
        best.value,
        json!(best.params)
    );
    if let Some(name) = &sweep.config.register {
        let v = client
            .register_run_model(&project, name, &best_run, &[])
            .await
            .with_context(|| format!("registering the best trial's model as '{name}'"))?;
        println!("registered model:{name}@{v} (trial {})", best.number);
    }
    Ok(())
}
