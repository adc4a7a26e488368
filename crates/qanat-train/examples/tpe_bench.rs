//! Qanat's TPE on the 10-D Rosenbrock function (x_i in [-2.048, 2.048], minimum 0 at
//! all ones): the best value after TRIALS trials for seeds 0..SEEDS (and their median),
//! then one run of LONG trials timing each suggestion, reported per window of 100
//! trials: `cargo run --release -p qanat-train --example tpe_bench -- 200 5 1000`.
//! scripts/bench/tpe_optuna.py does the same with Optuna's TPESampler.

use std::collections::BTreeMap;
use std::time::Instant;

use qanat_model::prep::Rng;
use qanat_train::space::Space;
use serde_json::{json, Value};

fn rosenbrock(p: &BTreeMap<String, Value>) -> f64 {
    let x: Vec<f64> = (0..10)
        .map(|i| p[&format!("x{i}")].as_f64().unwrap_or(0.0))
        .collect();
    x.windows(2)
        .map(|w| 100.0 * (w[1] - w[0] * w[0]).powi(2) + (1.0 - w[0]).powi(2))
        .sum()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (trials, seeds, long) = (num(1, 200), num(2, 5), num(3, 1000));
    let mut space = serde_json::Map::new();
    for i in 0..10 {
        space.insert(
            format!("x{i}"),
            json!({"type": "uniform", "low": -2.048, "high": 2.048}),
        );
    }
    let space: Space = serde_json::from_value(Value::Object(space)).expect("space");
    let mut bests = Vec::new();
    for seed in 0..seeds as u64 {
        let mut rng = Rng::new(seed);
        let mut h: Vec<(BTreeMap<String, Value>, f64)> = Vec::new();
        for _ in 0..trials {
            let p = space.tpe(&h, 10, &mut rng);
            let v = rosenbrock(&p);
            h.push((p, v));
        }
        bests.push(h.iter().map(|(_, v)| *v).fold(f64::INFINITY, f64::min));
    }
    let mut sorted = bests.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let mut rng = Rng::new(99);
    let mut h: Vec<(BTreeMap<String, Value>, f64)> = Vec::new();
    let mut windows = Vec::new();
    let mut spent = 0.0;
    for t in 0..long {
        let start = Instant::now();
        let p = space.tpe(&h, 10, &mut rng);
        spent += start.elapsed().as_secs_f64();
        let v = rosenbrock(&p);
        h.push((p, v));
        if (t + 1) % 100 == 0 {
            windows.push(spent / 100.0 * 1e3);
            spent = 0.0;
        }
    }
    println!(
        "{}",
        json!({
            "impl": "qanat tpe",
            "trials": trials,
            "best_per_seed": bests,
            "median_best": median,
            "ms_per_suggestion_per_100_trials": windows,
        })
    );
}
