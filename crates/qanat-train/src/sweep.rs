//! `kind: sweep`: hyperparameter search as a job. Its process (this binary's
//! `sweep-worker`) submits each trial as a `train` job — so trials run in parallel in
//! the scheduler's slots, with their own resources, retries and checkpoints — as a
//! child run of the sweep's run; it stops unpromising trials early (ASHA), keeps its
//! state in its run's artifacts (`sweep/state.json`) so that a restarted attempt goes
//! on where the last one was, and registers the best trial's model.

use std::collections::BTreeMap;

use qanat_model::prep::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::space::Space;
use crate::{Error, Result, TrainConfig};

/// The variable the worker reads its config from (JSON).
pub const CONFIG_VAR: &str = "QANAT_SWEEP_CONFIG";

/// The metrics a sweep may optimize (each train run logs `best_<metric>`).
pub const METRICS: &[&str] = &[
    "val_loss",
    "val_accuracy",
    "val_f1",
    "val_auc",
    "val_rmse",
    "val_mae",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    Grid,
    Random,
    Tpe,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Min,
    Max,
}

/// Asynchronous successive halving: rungs at `min_epochs × reduction^k` epochs; a
/// trial reaching a rung goes on only if it is in the best `1/reduction` of the trials
/// that reached it (the best one when fewer than `reduction` have).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Asha {
    #[serde(default = "one")]
    pub min_epochs: u32,
    #[serde(default = "three")]
    pub reduction: u32,
}

fn one() -> u32 {
    1
}
fn three() -> u32 {
    3
}

impl Asha {
    /// The rungs (epoch counts) below `max_epochs`.
    pub fn rungs(&self, max_epochs: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut r = u64::from(self.min_epochs.max(1));
        while r < u64::from(max_epochs) {
            out.push(r as u32);
            r *= u64::from(self.reduction.max(2));
        }
        out
    }

    /// Whether a trial whose per-epoch values (lower is better) are `curve` should stop
    /// now, given the curves of every other trial of the sweep.
    pub fn should_stop(&self, curve: &[f64], others: &[&[f64]], max_epochs: u32) -> bool {
        let Some(rung) = self
            .rungs(max_epochs)
            .into_iter()
            .rfind(|r| curve.len() >= *r as usize)
        else {
            return false;
        };
        let at = |c: &[f64]| {
            c.iter()
                .take(rung as usize)
                .copied()
                .fold(f64::INFINITY, f64::min)
        };
        let mine = at(curve);
        let mut rung_values: Vec<f64> = others
            .iter()
            .filter(|c| c.len() >= rung as usize)
            .map(|c| at(c))
            .collect();
        rung_values.push(mine);
        rung_values.sort_by(f64::total_cmp);
        let keep = (rung_values.len() / self.reduction.max(2) as usize).max(1);
        mine > rung_values[keep - 1]
    }
}

/// A `sweep` job's fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepConfig {
    /// The train job every trial starts from (target, model, epochs, …).
    #[schema(value_type = Object)]
    pub trial: Map<String, Value>,
    /// The parameters to search (train fields).
    #[schema(value_type = BTreeMap<String, crate::space::Dist>)]
    pub space: Space,
    #[serde(default = "default_algorithm")]
    pub algorithm: Algorithm,
    /// Trials to run (a grid runs at most its size).
    #[serde(default = "default_trials")]
    pub trials: u32,
    /// Trials running at once.
    #[serde(default = "default_parallel")]
    pub parallel: u32,
    /// What to optimize: the trial run's `best_<metric>`.
    #[serde(default = "default_metric")]
    pub metric: String,
    /// min or max (default: min for losses and errors, max for the rest).
    #[serde(default)]
    pub mode: Option<Mode>,
    #[serde(default)]
    pub asha: Option<Asha>,
    /// Values per numeric parameter in a grid.
    #[serde(default = "default_points")]
    pub grid_points: usize,
    /// Random trials before TPE models the results.
    #[serde(default = "default_startup")]
    pub startup_trials: usize,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Resources of each trial job (`cpus`, `memory`, `gpus`); one CPU by default.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub trial_resources: Option<Value>,
    /// The registered model the best trial's model is added to.
    #[serde(default)]
    pub register: Option<String>,
}

fn default_algorithm() -> Algorithm {
    Algorithm::Tpe
}
fn default_trials() -> u32 {
    20
}
fn default_parallel() -> u32 {
    2
}
fn default_metric() -> String {
    "val_loss".into()
}
fn default_points() -> usize {
    3
}
fn default_startup() -> usize {
    10
}
fn default_seed() -> u64 {
    42
}

/// Fields of the trial that the sweep sets itself.
const SWEEP_OWNS: &[&str] = &["register", "name", "kind", "inputs", "parent_run"];

impl SweepConfig {
    pub fn from_value(v: Value) -> Result<SweepConfig> {
        let c: SweepConfig =
            serde_json::from_value(v).map_err(|e| Error::invalid(format!("sweep: {e}")))?;
        c.check()?;
        Ok(c)
    }

    /// Lower is better: the sign a metric's value is multiplied by.
    pub fn sign(&self) -> f64 {
        let mode = self.mode.unwrap_or(
            if ["val_loss", "val_rmse", "val_mae"].contains(&self.metric.as_str()) {
                Mode::Min
            } else {
                Mode::Max
            },
        );
        match mode {
            Mode::Min => 1.0,
            Mode::Max => -1.0,
        }
    }

    /// The train config of a trial with `params`.
    pub fn trial_config(&self, params: &BTreeMap<String, Value>) -> Result<TrainConfig> {
        let mut fields = self.trial.clone();
        for (k, v) in params {
            fields.insert(k.clone(), v.clone());
        }
        TrainConfig::from_value(Value::Object(fields)).map_err(|e| {
            Error::invalid(format!(
                "a trial with {}: {e}",
                serde_json::to_string(params).unwrap_or_default()
            ))
        })
    }

    /// Everything that can be checked before running: the space, the metric, the
    /// numbers, and that trials from across the space are valid train configs.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::invalid(format!("sweep: {m}")));
        self.space.check()?;
        if !METRICS.contains(&self.metric.as_str()) {
            return bad(format!(
                "metric = '{}': use one of {}",
                self.metric,
                METRICS.join(", ")
            ));
        }
        if self.trials == 0 || self.trials > 10_000 {
            return bad(format!("trials = {}: use 1 to 10000", self.trials));
        }
        if self.parallel == 0 || self.parallel > 64 {
            return bad(format!("parallel = {}: use 1 to 64", self.parallel));
        }
        if self.grid_points < 2 || self.grid_points > 100 {
            return bad(format!("grid_points = {}: use 2 to 100", self.grid_points));
        }
        if let Some(a) = &self.asha {
            if a.min_epochs == 0 || a.reduction < 2 {
                return bad("asha: min_epochs >= 1 and reduction >= 2".into());
            }
        }
        for k in SWEEP_OWNS {
            if self.trial.contains_key(*k) || self.space.0.contains_key(*k) {
                return bad(format!(
                    "{k} is set by the sweep for each trial: remove it from trial/space"
                ));
            }
        }
        if let Some(r) = &self.register {
            if r.trim().is_empty() {
                return bad("register: name the registered model".into());
            }
        }
        if let Some(r) = &self.trial_resources {
            if !r.is_object() {
                return bad("trial_resources: a mapping like {cpus: 1, memory: 2GiB}".into());
            }
        }
        for p in &self.probe_points() {
            self.trial_config(p)?;
        }
        if self.algorithm == Algorithm::Grid {
            self.space.grid(self.grid_points)?;
        }
        Ok(())
    }

    /// Trials from across the space, to check before running: every corner of the
    /// grid (or 64 random points when it has more).
    pub fn probe_points(&self) -> Vec<BTreeMap<String, Value>> {
        match self.space.grid(2) {
            Ok(g) if g.len() <= 64 => g,
            _ => {
                let mut rng = Rng::new(self.seed);
                (0..64).map(|_| self.space.random(&mut rng)).collect()
            }
        }
    }

    /// The params of trial `number` given the finished trials so far (params and
    /// values, lower better).
    pub fn suggest(
        &self,
        number: u32,
        history: &[(BTreeMap<String, Value>, f64)],
    ) -> Result<Option<BTreeMap<String, Value>>> {
        if number >= self.trials {
            return Ok(None);
        }
        let mut rng = Rng::new(self.seed ^ (u64::from(number) + 1).wrapping_mul(0x9e37_79b9));
        Ok(match self.algorithm {
            Algorithm::Grid => self
                .space
                .grid(self.grid_points)?
                .get(number as usize)
                .cloned(),
            Algorithm::Random => Some(self.space.random(&mut rng)),
            Algorithm::Tpe => Some(self.space.tpe(history, self.startup_trials, &mut rng)),
        })
    }
}

/// One trial as the sweep tracks it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub number: u32,
    pub params: BTreeMap<String, Value>,
    pub job_id: Option<String>,
    pub run_id: Option<String>,
    /// submitting, running, completed, pruned, failed
    pub state: String,
    /// The metric (as logged, not sign-adjusted).
    pub value: Option<f64>,
}

/// The sweep's state, kept as its run's `sweep/state.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub trials: Vec<Trial>,
}

/// A sweep's fields checked at submit, and its trials from across the space checked
/// against the inputs' profiles: a sweep's data fields (target, features) come from
/// the trial, and a space may vary them too.
pub fn check_inputs(
    params: &Map<String, Value>,
    inputs: &[crate::inputs::InputFacts],
) -> std::result::Result<(), String> {
    let config =
        SweepConfig::from_value(Value::Object(params.clone())).map_err(|e| e.to_string())?;
    for p in &config.probe_points() {
        let trial = config.trial_config(p).map_err(|e| e.to_string())?;
        crate::inputs::check_profiles(&trial, inputs).map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(v: Value) -> Result<SweepConfig> {
        SweepConfig::from_value(v)
    }

    #[test]
    fn bad_sweeps_say_what_to_fix() {
        let space = json!({"learning_rate": {"type": "loguniform", "low": 0.001, "high": 0.1}});
        for (v, says) in [
            (
                json!({"trial": {"target": "y"}, "space": space, "metric": "speed"}),
                "metric",
            ),
            (
                json!({"trial": {"target": "y"}, "space": space, "trials": 0}),
                "trials",
            ),
            (
                json!({"trial": {"target": "y"}, "space": space, "parallel": 0}),
                "parallel",
            ),
            (
                json!({"trial": {"target": "y", "register": "m"}, "space": space}),
                "set by the sweep",
            ),
            (
                json!({"trial": {"target": "y"}, "space": {"colour": {"type": "categorical", "values": [1]}}}),
                "unknown field",
            ),
            (
                json!({"trial": {"target": "y"}, "space": {"epochs": {"type": "int", "low": 0, "high": 5}}}),
                "epochs = 0",
            ),
            (json!({"trial": {}, "space": space}), "target"),
            (
                json!({"trial": {"target": "y"}, "space": space, "algorithm": "bayes"}),
                "unknown variant",
            ),
            (
                json!({"trial": {"target": "y"}, "space": space, "asha": {"reduction": 1}}),
                "reduction",
            ),
        ] {
            let e = config(v.clone()).expect_err("refused").to_string();
            assert!(e.contains(says), "{v}: {e}");
        }
    }

    #[test]
    fn asha_keeps_the_best_share_at_each_rung() {
        let a = Asha {
            min_epochs: 1,
            reduction: 2,
        };
        assert_eq!(a.rungs(10), vec![1, 2, 4, 8]);
        let good = [0.1, 0.05];
        let bad = [0.9, 0.8];
        let mid = [0.5, 0.4];
        // Alone at a rung: it goes on.
        assert!(!a.should_stop(&good[..1], &[], 10));
        // Two at the rung, keep one: the worse stops.
        assert!(a.should_stop(&bad[..1], &[&good[..1]], 10));
        assert!(!a.should_stop(&good[..1], &[&bad[..1]], 10));
        // Four at rung 2 (best values 0.05, 0.2, 0.4, 0.8): the best two go on.
        let others: [&[f64]; 3] = [&good, &bad, &[0.3, 0.2]];
        assert!(a.should_stop(&mid, &others, 10));
        assert!(a.should_stop(&bad, &[&good, &mid, &[0.3, 0.2]], 10));
        assert!(!a.should_stop(&good, &[&bad, &mid, &[0.3, 0.2]], 10));
    }

    #[test]
    fn grids_run_in_order_and_end() {
        let c = config(json!({
            "trial": {"target": "y", "epochs": 5}, "algorithm": "grid", "trials": 100,
            "space": {"model": {"type": "categorical", "values": ["logistic", "mlp"]}},
        }))
        .expect("config");
        assert_eq!(
            c.suggest(0, &[]).expect("ok").expect("first")["model"],
            "logistic"
        );
        assert_eq!(
            c.suggest(1, &[]).expect("ok").expect("second")["model"],
            "mlp"
        );
        assert_eq!(c.suggest(2, &[]).expect("ok"), None);
        assert_eq!(c.sign(), 1.0);
    }
}
