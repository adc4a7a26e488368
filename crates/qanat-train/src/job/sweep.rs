//! A `sweep` job: each trial is a `train` job whose run is a child of the sweep's run;
//! `parallel` of them run at once, unpromising ones are stopped (ASHA), and when all
//! are done the best trial is logged to the sweep's run.
//!
//! Its state is the run artifact `sweep/state.json`, written before each trial is
//! submitted and after each change: a later attempt (the server restarted, the
//! controller was killed) reads it and goes on — trials already submitted are found
//! again (by their job name) and never submitted twice.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::{context, JobRun};
use crate::sweep::{State, SweepConfig, Trial};
use crate::{Error, Result};

/// The run artifact holding the sweep's state.
pub const STATE: &str = "sweep/state.json";

/// A trial's job as the sweep follows it.
#[derive(Debug, Clone)]
pub struct TrialJob {
    pub job_id: String,
    pub run_id: Option<String>,
    /// The job's state: `queued`, `running`, `succeeded`, `failed`, `cancelled`, …
    pub state: String,
    /// Why it ended, when it failed.
    pub reason: Option<String>,
}

/// What a sweep needs besides its run: its trials' jobs and their runs' metrics.
pub trait Trials {
    /// Submits a `train` job named `name` with `fields` (its train config, resources
    /// and retries), a child of the sweep's run, reading the sweep's inputs.
    fn submit(&self, name: &str, fields: Map<String, Value>) -> Result<TrialJob>;

    /// The job named `name`, if one was submitted (by an earlier attempt that stopped
    /// before recording it).
    fn find(&self, name: &str) -> Result<Option<TrialJob>>;

    /// The job `id` as it is now.
    fn job(&self, id: &str) -> Result<TrialJob>;

    /// Cancels job `id`; false when it had already ended.
    fn cancel(&self, id: &str) -> Result<bool>;

    /// Metric `key` of run `run_id`: its values by step.
    fn history(&self, run_id: &str, key: &str) -> Result<Vec<(i64, f64)>>;

    /// Metric `key` of run `run_id`: its latest value.
    fn metric(&self, run_id: &str, key: &str) -> Result<Option<f64>>;
}

/// One sweep job.
#[derive(Debug, Clone)]
pub struct SweepJob {
    pub config: SweepConfig,
    /// The sweep's job id: its trials are named `<job id>-t<number>`.
    pub job_id: String,
    /// How long to wait between passes over the running trials.
    pub poll: Duration,
}

/// The best trial of a finished sweep.
#[derive(Debug, Clone)]
pub struct Best {
    pub number: u32,
    pub run_id: String,
    pub value: Option<f64>,
    pub params: BTreeMap<String, Value>,
}

/// Runs `job` on `run` until every trial has ended; the best completed trial (an
/// error when none completed). Prints its progress to stdout (the job's log).
pub fn run(job: &SweepJob, run: &dyn JobRun, trials: &dyn Trials) -> Result<Best> {
    let sweep = Sweep::new(job, run, trials)?;
    let mut state = match run.fetch(STATE)? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| Error::internal(format!("reading {STATE}: {e}")))?,
        None => State::default(),
    };
    if state.trials.is_empty() {
        run.log(
            &[],
            &sweep.params()?,
            &[("qanat.sweep".into(), "true".into())],
        )
        .map_err(|e| context("logging the sweep's params", e))?;
    } else {
        println!(
            "resuming the sweep: {} trials recorded ({STATE})",
            state.trials.len()
        );
    }
    // ASHA compares a running trial with every trial that reached its rung.
    let mut curves = BTreeMap::new();
    if job.config.asha.is_some() {
        for t in &state.trials {
            if let Some(r) = &t.run_id {
                curves.insert(t.number, sweep.curve(r)?);
            }
        }
    }
    while !sweep.step(&mut state, &mut curves)? {
        std::thread::sleep(job.poll);
    }
    sweep.finish(&state)
}

struct Sweep<'a> {
    run: &'a dyn JobRun,
    trials: &'a dyn Trials,
    job_id: &'a str,
    config: &'a SweepConfig,
    max_epochs: u32,
}

impl<'a> Sweep<'a> {
    fn new(job: &'a SweepJob, run: &'a dyn JobRun, trials: &'a dyn Trials) -> Result<Sweep<'a>> {
        let first = job.config.suggest(0, &[])?.unwrap_or_default();
        Ok(Sweep {
            run,
            trials,
            job_id: &job.job_id,
            config: &job.config,
            max_epochs: job.config.trial_config(&first)?.epochs,
        })
    }

    /// The sweep's params: its algorithm, budget, metric and space.
    fn params(&self) -> Result<Vec<(String, String)>> {
        let c = self.config;
        let space =
            serde_json::to_value(&c.space).map_err(|e| Error::internal(format!("space: {e}")))?;
        Ok([
            ("algorithm", json!(c.algorithm)),
            ("trials", json!(c.trials)),
            ("parallel", json!(c.parallel)),
            ("metric", json!(c.metric)),
            ("space", space),
            ("asha", json!(c.asha)),
            ("seed", json!(c.seed)),
        ]
        .into_iter()
        .map(|(k, v)| {
            let s = match v {
                Value::String(s) => s,
                other => other.to_string(),
            };
            (k.to_string(), s)
        })
        .collect())
    }

    fn save(&self, state: &State) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(state)
            .map_err(|e| Error::internal(format!("writing {STATE}: {e}")))?;
        self.run
            .store(STATE, bytes)
            .map_err(|e| context("storing the sweep's state", e))
    }

    fn trial_name(&self, number: u32) -> String {
        format!("{}-t{number}", self.job_id)
    }

    fn submit(&self, trial: &Trial) -> Result<TrialJob> {
        let mut fields = Map::new();
        for (k, v) in self.config.trial.iter().chain(&trial.params) {
            fields.insert(k.clone(), v.clone());
        }
        if let Some(r) = &self.config.trial_resources {
            fields.insert("resources".into(), r.clone());
        }
        // A trial killed with the server resumes from its checkpoint.
        fields.entry("max_retries").or_insert(json!(1));
        let job = self.trials.submit(&self.trial_name(trial.number), fields)?;
        println!(
            "trial {} submitted as {}: {}",
            trial.number,
            job.job_id,
            json!(trial.params)
        );
        Ok(job)
    }

    /// The metric's per-epoch values of a trial's run, lower better.
    fn curve(&self, run_id: &str) -> Result<Vec<f64>> {
        let mut by_step: BTreeMap<i64, f64> = BTreeMap::new();
        for (step, v) in self.trials.history(run_id, &self.config.metric)? {
            by_step.insert(step, v * self.config.sign());
        }
        Ok(by_step.into_values().collect())
    }

    /// One pass: follow running trials, stop losers, start new ones. True when done.
    fn step(&self, state: &mut State, curves: &mut BTreeMap<u32, Vec<f64>>) -> Result<bool> {
        let mut changed = false;
        for i in 0..state.trials.len() {
            if matches!(state.trials[i].state.as_str(), "submitting" | "running") {
                changed |= self.follow(&mut state.trials[i], curves)?;
            }
        }
        if changed {
            self.save(state)?;
        }
        // Start trials while there is room.
        loop {
            let active = state
                .trials
                .iter()
                .filter(|t| matches!(t.state.as_str(), "submitting" | "running"))
                .count();
            if active >= self.config.parallel as usize {
                return Ok(false);
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
            let mut trial = Trial {
                number,
                params,
                job_id: None,
                run_id: None,
                state: "submitting".into(),
                value: None,
            };
            state.trials.push(trial.clone());
            self.save(state)?;
            trial.job_id = Some(self.submit(&trial)?.job_id);
            trial.state = "running".into();
            if let Some(last) = state.trials.last_mut() {
                *last = trial;
            }
            self.save(state)?;
        }
    }

    /// Follows one submitted or running trial; true when its record changed.
    fn follow(&self, tr: &mut Trial, curves: &mut BTreeMap<u32, Vec<f64>>) -> Result<bool> {
        let job = match &tr.job_id {
            Some(id) => self.trials.job(id)?,
            None => match self.trials.find(&self.trial_name(tr.number))? {
                Some(j) => j,
                None => self.submit(tr)?,
            },
        };
        let mut changed = false;
        if tr.job_id.is_none() || tr.run_id != job.run_id || tr.state == "submitting" {
            tr.job_id = Some(job.job_id.clone());
            tr.run_id.clone_from(&job.run_id);
            tr.state = "running".into();
            changed = true;
        }
        match job.state.as_str() {
            "succeeded" => {
                let key = format!("best_{}", self.config.metric);
                let run_id = job.run_id.as_deref().unwrap_or_default();
                let v = self.trials.metric(run_id, &key)?;
                tr.value = v;
                tr.state = if v.is_some() { "completed" } else { "failed" }.into();
                if let (Some(_), Some(r)) = (&self.config.asha, &job.run_id) {
                    curves.insert(tr.number, self.curve(r)?);
                }
                println!("trial {} {}: {key} {v:?}", tr.number, tr.state);
                Ok(true)
            }
            "failed" | "cancelled" => {
                tr.state = "failed".into();
                println!(
                    "trial {} {}: {}",
                    tr.number,
                    job.state,
                    job.reason.unwrap_or_default()
                );
                Ok(true)
            }
            "running" => match (&self.config.asha, &job.run_id) {
                (Some(asha), Some(run_id)) => {
                    let curve = self.curve(run_id)?;
                    curves.insert(tr.number, curve.clone());
                    let others: Vec<&[f64]> = curves
                        .iter()
                        .filter(|(n, _)| **n != tr.number)
                        .map(|(_, c)| c.as_slice())
                        .collect();
                    if !asha.should_stop(&curve, &others, self.max_epochs) {
                        return Ok(changed);
                    }
                    // Ended meanwhile: the next pass reads how.
                    if !self.trials.cancel(&job.job_id)? {
                        return Ok(changed);
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
                    Ok(true)
                }
                _ => Ok(changed),
            },
            _ => Ok(changed),
        }
    }

    /// Logs the counts and the best trial to the sweep's run.
    fn finish(&self, state: &State) -> Result<Best> {
        let sign = self.config.sign();
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
            self.run.log(&metrics, &[], &[])?;
            return Err(Error::invalid(format!(
                "no trial completed ({} failed, {} pruned): see the trials' logs",
                count("failed"),
                count("pruned")
            )));
        };
        let run_id = best.run_id.clone().unwrap_or_default();
        let metric = &self.config.metric;
        metrics.push((format!("best_{metric}"), best.value.unwrap_or(f64::NAN), 0));
        let mut tags = vec![
            ("qanat.sweep.best_run".to_string(), run_id.clone()),
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
        self.run.log(&metrics, &[], &tags)?;
        println!(
            "best trial {}: {metric} {:?} with {} (run {run_id})",
            best.number,
            best.value,
            json!(best.params)
        );
        Ok(Best {
            number: best.number,
            run_id,
            value: best.value,
            params: best.params,
        })
    }
}
