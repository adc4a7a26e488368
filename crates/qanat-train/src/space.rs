//! Search spaces and the samplers that walk them: grid, random and TPE (the
//! tree-structured Parzen estimator of Bergstra et al., 2011, as Optuna and Hyperopt
//! use it).
//!
//! A space names parameters, each `uniform`, `loguniform`, `int` (optionally `log`) or
//! `categorical`, and optionally `when` (a condition on categorical parameters: the
//! parameter exists only in trials where they have those values — conditional spaces).
//!
//! TPE: after `startup` random trials, the finished trials are split into the best
//! `γ(n) = min(⌈0.1 n⌉, 25)` and the rest; each parameter gets two densities, `l` from
//! the good trials and `g` from the others (Gaussian kernels in the parameter's
//! (log-)scale with a uniform prior component, or smoothed counts for categories), and
//! of 24 candidates drawn from `l` the one with the largest `l/g` is chosen. `g` is
//! built from at most 200 of the other trials (evenly spaced by rank), so the work per
//! suggestion stops growing once there are a few hundred trials, and nothing is read
//! from a store (measured in docs/benchmarks.md).

use std::collections::BTreeMap;

use qanat_model::prep::Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Error, Result};

/// One parameter's distribution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Dist {
    Uniform {
        low: f64,
        high: f64,
        #[serde(default)]
        #[schema(value_type = Option<Object>)]
        when: Option<BTreeMap<String, Value>>,
    },
    Loguniform {
        low: f64,
        high: f64,
        #[serde(default)]
        #[schema(value_type = Option<Object>)]
        when: Option<BTreeMap<String, Value>>,
    },
    Int {
        low: i64,
        high: i64,
        #[serde(default)]
        log: bool,
        #[serde(default)]
        #[schema(value_type = Option<Object>)]
        when: Option<BTreeMap<String, Value>>,
    },
    Categorical {
        #[schema(value_type = Vec<Object>)]
        values: Vec<Value>,
        #[serde(default)]
        #[schema(value_type = Option<Object>)]
        when: Option<BTreeMap<String, Value>>,
    },
}

impl Dist {
    fn when(&self) -> Option<&BTreeMap<String, Value>> {
        match self {
            Dist::Uniform { when, .. }
            | Dist::Loguniform { when, .. }
            | Dist::Int { when, .. }
            | Dist::Categorical { when, .. } => when.as_ref(),
        }
    }

    /// The (log-)scale bounds of a numeric parameter.
    fn bounds(&self) -> Option<(f64, f64, bool)> {
        match self {
            Dist::Uniform { low, high, .. } => Some((*low, *high, false)),
            Dist::Loguniform { low, high, .. } => Some((low.ln(), high.ln(), true)),
            Dist::Int {
                low, high, log: l, ..
            } => {
                let (a, b) = (*low as f64 - 0.5, *high as f64 + 0.5);
                if *l {
                    Some(((*low as f64 - 0.5).max(0.5).ln(), b.ln(), true))
                } else {
                    Some((a, b, false))
                }
            }
            Dist::Categorical { .. } => None,
        }
    }

    /// A value of this parameter from a point in its internal scale.
    fn value_at(&self, x: f64) -> Value {
        match self {
            Dist::Uniform { low, high, .. } => serde_json::json!(x.clamp(*low, *high)),
            Dist::Loguniform { low, high, .. } => serde_json::json!(x.exp().clamp(*low, *high)),
            Dist::Int {
                low, high, log: l, ..
            } => {
                let v = if *l { x.exp() } else { x };
                serde_json::json!((v.round() as i64).clamp(*low, *high))
            }
            Dist::Categorical { values, .. } => {
                values.get(x as usize).cloned().unwrap_or(Value::Null)
            }
        }
    }

    /// A value's point in the internal scale.
    fn point_of(&self, v: &Value) -> Option<f64> {
        match self {
            Dist::Uniform { .. } => v.as_f64(),
            Dist::Loguniform { .. } => v.as_f64().filter(|x| *x > 0.0).map(f64::ln),
            Dist::Int { log: l, .. } => {
                let x = v.as_f64()?;
                if *l {
                    (x > 0.0).then(|| x.ln())
                } else {
                    Some(x)
                }
            }
            Dist::Categorical { values, .. } => {
                values.iter().position(|c| c == v).map(|i| i as f64)
            }
        }
    }
}

/// The most trials TPE's "other" density is built from.
const MAX_BAD: usize = 200;

/// A search space: parameter names (train-config fields) to distributions.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Space(pub BTreeMap<String, Dist>);

/// The most values a grid may have.
pub const MAX_GRID: usize = 10_000;

impl Space {
    /// Checks bounds and conditions; the message says what to fix.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::invalid(format!("space: {m}")));
        if self.0.is_empty() {
            return bad("name at least one parameter to search, e.g. learning_rate: {type: loguniform, low: 0.0001, high: 0.1}".into());
        }
        for (name, d) in &self.0 {
            match d {
                Dist::Uniform { low, high, .. }
                    if !(low.is_finite() && high.is_finite() && low < high) =>
                {
                    return bad(format!(
                        "{name}: uniform needs finite low < high (got {low}, {high})"
                    ));
                }
                Dist::Loguniform { low, high, .. }
                    if !(low.is_finite() && high.is_finite() && *low > 0.0 && low < high) =>
                {
                    return bad(format!(
                        "{name}: loguniform needs 0 < low < high (got {low}, {high})"
                    ));
                }
                Dist::Int { low, high, log, .. } if low > high || (*log && *low < 1) => {
                    return bad(format!(
                        "{name}: int needs low <= high{} (got {low}, {high})",
                        if *log { " and low >= 1 with log" } else { "" }
                    ));
                }
                Dist::Categorical { values, .. } if values.is_empty() => {
                    return bad(format!("{name}: categorical needs at least one value"));
                }
                _ => {}
            }
            if let Some(when) = d.when() {
                for (other, v) in when {
                    match self.0.get(other) {
                        Some(Dist::Categorical { values, when: None }) if values.contains(v) => {}
                        Some(Dist::Categorical { when: None, .. }) => {
                            return bad(format!("{name}: when {other} = {v}: {other} has no such value"))
                        }
                        _ => {
                            return bad(format!(
                                "{name}: when may only name categorical parameters that have no `when` themselves ({other} is not one)"
                            ))
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn active(&self, name: &str, chosen: &BTreeMap<String, Value>) -> bool {
        self.0
            .get(name)
            .and_then(Dist::when)
            .is_none_or(|w| w.iter().all(|(k, v)| chosen.get(k) == Some(v)))
    }

    /// Parameters without a condition first, so conditions can be evaluated.
    fn order(&self) -> Vec<&String> {
        let mut names: Vec<&String> = self.0.keys().collect();
        names.sort_by_key(|n| self.0[*n].when().is_some());
        names
    }

    /// Every combination of a grid (numbers: `points` evenly spaced values in their
    /// scale; ints: every value when there are at most `points`), in a fixed order.
    pub fn grid(&self, points: usize) -> Result<Vec<BTreeMap<String, Value>>> {
        let points = points.max(2);
        let mut out: Vec<BTreeMap<String, Value>> = vec![BTreeMap::new()];
        for name in self.order() {
            let d = &self.0[name];
            let values: Vec<Value> = match d {
                Dist::Categorical { values, .. } => values.clone(),
                Dist::Int { low, high, .. } if ((high - low) as usize) < points => {
                    (*low..=*high).map(Value::from).collect()
                }
                _ => {
                    let (a, b, _) = d.bounds().unwrap_or((0.0, 1.0, false));
                    let (a, b) = match d {
                        Dist::Int {
                            log: true,
                            low,
                            high,
                            ..
                        } => ((*low as f64).ln(), (*high as f64).ln()),
                        Dist::Int { low, high, .. } => (*low as f64, *high as f64),
                        _ => (a, b),
                    };
                    let mut v: Vec<Value> = (0..points)
                        .map(|i| d.value_at(a + (b - a) * i as f64 / (points - 1) as f64))
                        .collect();
                    v.dedup();
                    v
                }
            };
            let mut next = Vec::new();
            for base in &out {
                if self.active(name, base) {
                    for v in &values {
                        let mut c = base.clone();
                        c.insert(name.clone(), v.clone());
                        next.push(c);
                    }
                } else {
                    next.push(base.clone());
                }
            }
            if next.len() > MAX_GRID {
                return Err(Error::invalid(format!(
                    "space: the grid has more than {MAX_GRID} points: use random or tpe, or fewer values"
                )));
            }
            out = next;
        }
        Ok(out)
    }

    /// A uniformly random point.
    pub fn random(&self, rng: &mut Rng) -> BTreeMap<String, Value> {
        let mut chosen = BTreeMap::new();
        for name in self.order() {
            if !self.active(name, &chosen) {
                continue;
            }
            let d = &self.0[name];
            let v = match d {
                Dist::Categorical { values, .. } => values[rng.below(values.len())].clone(),
                _ => {
                    let (a, b, _) = d.bounds().unwrap_or((0.0, 1.0, false));
                    d.value_at(a + (b - a) * unit(rng))
                }
            };
            chosen.insert(name.clone(), v);
        }
        chosen
    }

    /// TPE's suggestion given finished trials (their params and values; lower is
    /// better), or a random point while there are fewer than `startup`.
    pub fn tpe(
        &self,
        history: &[(BTreeMap<String, Value>, f64)],
        startup: usize,
        rng: &mut Rng,
    ) -> BTreeMap<String, Value> {
        let done: Vec<&(BTreeMap<String, Value>, f64)> =
            history.iter().filter(|(_, v)| v.is_finite()).collect();
        if done.len() < startup.max(2) {
            return self.random(rng);
        }
        let mut sorted = done.clone();
        sorted.sort_by(|a, b| a.1.total_cmp(&b.1));
        let n_good = (done.len() as f64 * 0.1).ceil().clamp(1.0, 25.0) as usize;
        let (good, rest) = sorted.split_at(n_good);
        // The other density from at most MAX_BAD of the rest, evenly spaced by rank (so
        // its shape is kept): the work per suggestion stops growing with the trials.
        let bad: Vec<&(BTreeMap<String, Value>, f64)> = if rest.len() > MAX_BAD {
            (0..MAX_BAD)
                .map(|i| rest[i * rest.len() / MAX_BAD])
                .collect()
        } else {
            rest.to_vec()
        };
        let mut chosen = BTreeMap::new();
        for name in self.order() {
            if !self.active(name, &chosen) {
                continue;
            }
            let d = &self.0[name];
            let pts = |set: &[&(BTreeMap<String, Value>, f64)]| -> Vec<f64> {
                set.iter()
                    .filter_map(|(p, _)| p.get(name).and_then(|v| d.point_of(v)))
                    .collect()
            };
            let (l, g) = (pts(good), pts(&bad));
            let x = match d {
                Dist::Categorical { values, .. } => {
                    let k = values.len();
                    let weights = |obs: &[f64]| {
                        let mut w = vec![1.0; k];
                        for o in obs {
                            if let Some(c) = w.get_mut(*o as usize) {
                                *c += 1.0;
                            }
                        }
                        let s: f64 = w.iter().sum();
                        w.into_iter().map(|c| c / s).collect::<Vec<f64>>()
                    };
                    let (wl, wg) = (weights(&l), weights(&g));
                    let mut best = (0usize, f64::NEG_INFINITY);
                    for _ in 0..24 {
                        let mut u = unit(rng);
                        let mut c = 0;
                        while c + 1 < k && u >= wl[c] {
                            u -= wl[c];
                            c += 1;
                        }
                        let score = wl[c].ln() - wg[c].ln();
                        if score > best.1 {
                            best = (c, score);
                        }
                    }
                    best.0 as f64
                }
                _ => {
                    let (a, b, _) = d.bounds().unwrap_or((0.0, 1.0, false));
                    let pl = Parzen::new(&l, a, b);
                    let pg = Parzen::new(&g, a, b);
                    let mut best = (a, f64::NEG_INFINITY);
                    for _ in 0..24 {
                        let x = pl.sample(rng);
                        let score = pl.log_pdf(x) - pg.log_pdf(x);
                        if score > best.1 {
                            best = (x, score);
                        }
                    }
                    best.0
                }
            };
            chosen.insert(name.clone(), d.value_at(x));
        }
        chosen
    }
}

/// Uniform in [0, 1).
fn unit(rng: &mut Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal draw (Box–Muller).
fn normal(rng: &mut Rng) -> f64 {
    let u = unit(rng).max(1e-300);
    let v = unit(rng);
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// A mixture of Gaussians at the observations plus a prior (a wide Gaussian at the
/// middle of the range), truncated to [low, high]; bandwidths from the distance to the
/// neighbours, clipped to [(high-low)/min(100, n+2), high-low].
struct Parzen {
    mus: Vec<f64>,
    sigmas: Vec<f64>,
    /// Each kernel's density factor: 1 / (σ √(2π) × its mass inside [low, high]).
    norms: Vec<f64>,
    low: f64,
    high: f64,
}

impl Parzen {
    fn new(obs: &[f64], low: f64, high: f64) -> Parzen {
        let span = (high - low).max(1e-12);
        let mut mus: Vec<f64> = obs.iter().map(|x| x.clamp(low, high)).collect();
        mus.push((low + high) / 2.0);
        let mut order: Vec<usize> = (0..mus.len()).collect();
        order.sort_by(|a, b| mus[*a].total_cmp(&mus[*b]));
        let mut sigmas = vec![span; mus.len()];
        let min_bw = span / (100f64).min(mus.len() as f64 + 1.0);
        for (rank, &i) in order.iter().enumerate() {
            if i == mus.len() - 1 {
                continue; // the prior keeps the whole span
            }
            let left = if rank > 0 {
                mus[i] - mus[order[rank - 1]]
            } else {
                mus[i] - low
            };
            let right = if rank + 1 < order.len() {
                mus[order[rank + 1]] - mus[i]
            } else {
                high - mus[i]
            };
            sigmas[i] = left.max(right).clamp(min_bw, span);
        }
        let norms = mus
            .iter()
            .zip(&sigmas)
            .map(|(m, s)| {
                let mass = phi((high - m) / s) - phi((low - m) / s);
                1.0 / (s * std::f64::consts::TAU.sqrt() * mass.max(1e-12))
            })
            .collect();
        Parzen {
            mus,
            sigmas,
            norms,
            low,
            high,
        }
    }

    fn sample(&self, rng: &mut Rng) -> f64 {
        let k = rng.below(self.mus.len());
        for _ in 0..100 {
            let x = self.mus[k] + self.sigmas[k] * normal(rng);
            if (self.low..=self.high).contains(&x) {
                return x;
            }
        }
        self.mus[k]
    }

    fn log_pdf(&self, x: f64) -> f64 {
        let n = self.mus.len() as f64;
        let p: f64 = self
            .mus
            .iter()
            .zip(&self.sigmas)
            .zip(&self.norms)
            .map(|((m, s), k)| {
                let z = (x - m) / s;
                (-0.5 * z * z).exp() * k
            })
            .sum::<f64>()
            / n;
        p.max(1e-300).ln()
    }
}

/// The standard normal CDF (Abramowitz–Stegun 7.1.26 for erf).
fn phi(z: f64) -> f64 {
    let x = z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-x * x).exp();
    0.5 * (1.0 + if x >= 0.0 { y } else { -y })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn space(v: Value) -> Space {
        let s: Space = serde_json::from_value(v).expect("space");
        s.check().expect("valid");
        s
    }

    #[test]
    fn bad_spaces_say_what_to_fix() {
        for (v, says) in [
            (
                json!({"lr": {"type": "loguniform", "low": 0, "high": 1}}),
                "0 < low < high",
            ),
            (
                json!({"lr": {"type": "uniform", "low": 2, "high": 1}}),
                "low < high",
            ),
            (
                json!({"n": {"type": "int", "low": 5, "high": 1}}),
                "low <= high",
            ),
            (
                json!({"c": {"type": "categorical", "values": []}}),
                "at least one value",
            ),
            (
                json!({"h": {"type": "int", "low": 1, "high": 4, "when": {"model": "mlp"}}}),
                "only name categorical",
            ),
            (
                json!({"model": {"type": "categorical", "values": ["mlp"]},
                       "h": {"type": "int", "low": 1, "high": 4, "when": {"model": "svm"}}}),
                "no such value",
            ),
            (json!({}), "at least one parameter"),
        ] {
            let s: Space = serde_json::from_value(v.clone()).expect("parses");
            let e = s.check().expect_err("refused").to_string();
            assert!(e.contains(says), "{v}: {e}");
        }
        let e = serde_json::from_value::<Space>(json!({"x": {"type": "normal"}}))
            .expect_err("unknown type");
        assert!(e.to_string().contains("unknown variant"), "{e}");
    }

    #[test]
    fn grids_cover_every_combination_and_respect_conditions() {
        let s = space(json!({
            "model": {"type": "categorical", "values": ["logistic", "mlp"]},
            "hidden": {"type": "categorical", "values": [[8], [16, 16]], "when": {"model": "mlp"}},
            "learning_rate": {"type": "loguniform", "low": 0.001, "high": 0.1},
        }));
        let g = s.grid(3).expect("grid");
        // logistic × 3 rates + mlp × 2 hidden × 3 rates.
        assert_eq!(g.len(), 9);
        assert!(g
            .iter()
            .filter(|p| p["model"] == "logistic")
            .all(|p| !p.contains_key("hidden")));
        let rates: Vec<f64> = g
            .iter()
            .filter(|p| p["model"] == "logistic")
            .map(|p| p["learning_rate"].as_f64().expect("f"))
            .collect();
        assert!(
            (rates[0] - 0.001).abs() < 1e-12
                && (rates[1] - 0.01).abs() < 1e-9
                && (rates[2] - 0.1).abs() < 1e-9,
            "{rates:?}"
        );
    }

    #[test]
    fn random_points_stay_in_bounds_and_a_seed_repeats_them() {
        let s = space(json!({
            "lr": {"type": "loguniform", "low": 0.0001, "high": 0.1},
            "batch": {"type": "int", "low": 16, "high": 256, "log": true},
            "wd": {"type": "uniform", "low": 0, "high": 0.5},
        }));
        let mut a = Rng::new(3);
        let mut b = Rng::new(3);
        for _ in 0..500 {
            let p = s.random(&mut a);
            assert_eq!(p, s.random(&mut b));
            let lr = p["lr"].as_f64().expect("lr");
            let batch = p["batch"].as_i64().expect("batch");
            assert!(
                (0.0001..=0.1).contains(&lr) && (16..=256).contains(&batch),
                "{p:?}"
            );
        }
    }

    /// TPE finds a far better point of a quadratic than random search with the same
    /// budget (over seeds: a statistical claim with a wide margin, not a lucky draw).
    #[test]
    fn tpe_beats_random_search_on_a_quadratic() {
        let s = space(json!({
            "x": {"type": "uniform", "low": -10, "high": 10},
            "y": {"type": "uniform", "low": -10, "high": 10},
            "c": {"type": "categorical", "values": ["a", "b", "c", "d"]},
        }));
        let f = |p: &BTreeMap<String, Value>| {
            let x = p["x"].as_f64().expect("x") - 3.0;
            let y = p["y"].as_f64().expect("y") + 1.0;
            x * x + y * y + if p["c"] == "c" { 0.0 } else { 5.0 }
        };
        let (mut tpe_wins, mut tpe_sum, mut rnd_sum) = (0, 0.0, 0.0);
        for seed in 0..10 {
            let mut rng = Rng::new(seed);
            let mut h: Vec<(BTreeMap<String, Value>, f64)> = Vec::new();
            for _ in 0..60 {
                let p = s.tpe(&h, 10, &mut rng);
                let v = f(&p);
                h.push((p, v));
            }
            let tpe_best = h.iter().map(|(_, v)| *v).fold(f64::INFINITY, f64::min);
            let mut rng = Rng::new(seed + 100);
            let rnd_best = (0..60)
                .map(|_| f(&s.random(&mut rng)))
                .fold(f64::INFINITY, f64::min);
            tpe_wins += usize::from(tpe_best < rnd_best);
            tpe_sum += tpe_best;
            rnd_sum += rnd_best;
        }
        // Seeded, so deterministic; the margin is wide enough to hold across changes
        // that keep TPE working (today: 7 of 10 seeds, 30 vs 51 summed).
        assert!(
            tpe_wins >= 6 && tpe_sum < rnd_sum * 0.75,
            "tpe won {tpe_wins}/10: {tpe_sum} vs {rnd_sum}"
        );
    }
}
