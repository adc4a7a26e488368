//! Optimization with an evaluation gate: a model is made smaller or faster, then both
//! the original and the result are measured on the same holdout — quality, size on
//! disk, latency at batch 1 and 64, throughput — and the result passes only if its
//! quality drop stays inside the budget.
//!
//! The gate's rule: for classification the holdout accuracy may fall by at most
//! `budget.accuracy_points` points (default 1); for regression the RMSE may grow by at
//! most `budget.relative_error` of the original's (default 1%). A result that does not
//! pass is not registered unless forced, and the report says why.

use std::time::{Duration, Instant};

use qanat_model::Table;
use serde::{Deserialize, Serialize};

use crate::evaluate::{quality, table_rows, Quality};
use crate::imported::Imported;
use crate::native::Scratch;
use crate::onnx::quantize::Activations;
use crate::onnx::{onnxruntime::OrtModel, tract::TractModel};
use crate::package::NativeModel;
use crate::prune::{self, FineTune};
use crate::{Error, Result, Runtime, RuntimeKind};

/// What to do to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Post-training dynamic int8 quantization.
    Int8Dynamic,
    /// Post-training static int8 quantization: one activation scale a layer,
    /// calibrated on the job's training rows.
    Int8Static,
    /// Magnitude pruning to `sparsity` (a share of each hidden layer's weights), then
    /// fine-tuning with the pruned weights held at zero.
    PruneMagnitude { sparsity: f64 },
    /// Structured pruning: `fraction` of every hidden layer's units removed, then
    /// fine-tuning of the smaller network.
    PruneStructured { fraction: f64 },
    /// A fresh native MLP with `hidden` layers trained on the teacher's outputs
    /// softened by `temperature` (weight `alpha`) and on the labels (the rest).
    Distill {
        hidden: Vec<usize>,
        temperature: f64,
        alpha: f64,
    },
}

impl Method {
    /// The method of `--quantize SCHEME`.
    pub fn parse_quantize(s: &str) -> Result<Method> {
        match s {
            "int8" | "int8-dynamic" | "dynamic" => Ok(Method::Int8Dynamic),
            "int8-static" | "static" => Ok(Method::Int8Static),
            other => Err(Error::invalid(format!(
                "quantize = '{other}': the native runtime quantizes to int8 (dynamic) or int8-static (calibrated)"
            ))),
        }
    }

    /// The method of `--prune KIND --sparsity SHARE`.
    pub fn parse_prune(kind: &str, share: f64) -> Result<Method> {
        if !(share.is_finite() && share > 0.0 && share < 1.0) {
            return Err(Error::invalid(format!(
                "sparsity = {share}: give a share above 0 and below 1 (0.5 prunes half)"
            )));
        }
        match kind {
            "magnitude" => Ok(Method::PruneMagnitude { sparsity: share }),
            "structured" => Ok(Method::PruneStructured { fraction: share }),
            other => Err(Error::invalid(format!(
                "prune = '{other}': choose magnitude (weights) or structured (hidden units)"
            ))),
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Method::Int8Dynamic => "int8-dynamic",
            Method::Int8Static => "int8-static",
            Method::PruneMagnitude { .. } => "prune-magnitude",
            Method::PruneStructured { .. } => "prune-structured",
            Method::Distill { .. } => "distill",
        }
    }

    /// Whether it trains or calibrates, and so needs rows besides the holdout.
    pub fn needs_training_rows(&self) -> bool {
        !matches!(self, Method::Int8Dynamic)
    }

    /// The method applied to `model`; a pruning method fine-tunes on `train` rows,
    /// choosing its best epoch on `valid` rows.
    pub fn apply(
        &self,
        model: &NativeModel,
        table: &Table,
        train: &[usize],
        valid: &[usize],
        tune: FineTune,
    ) -> Result<NativeModel> {
        match self {
            Method::Int8Dynamic => model.quantize_dynamic(),
            Method::Int8Static => {
                let prep = &model.spec().preprocessing;
                let x = prep.encode_features(table, train)?;
                model.with_mlp(model.mlp().quantize_static(&x, train.len())?)
            }
            Method::PruneMagnitude { sparsity } => {
                let (pruned, masks) = prune::magnitude(model.mlp(), *sparsity)?;
                prune::fine_tuned(model, &pruned, Some(masks), table, train, valid, tune)
            }
            Method::PruneStructured { fraction } => {
                let smaller = prune::structured(model.mlp(), *fraction)?;
                prune::fine_tuned(model, &smaller, None, table, train, valid, tune)
            }
            Method::Distill {
                hidden,
                temperature,
                alpha,
            } => crate::distill::distill(
                model,
                &model.spec().preprocessing,
                hidden,
                *temperature,
                *alpha,
                table,
                train,
                valid,
                tune,
            ),
        }
    }
}

/// The job's rows for a method that trains or calibrates: shuffled by `seed`, 30% held
/// out for the gate, 10% to choose the fine-tuning epoch, 60% to train or calibrate on.
pub fn split(rows: &[usize], seed: u64) -> Result<(Vec<usize>, Vec<usize>, Vec<usize>)> {
    if rows.len() < 20 {
        return Err(Error::invalid(format!(
            "a method that trains or calibrates splits the job's input (60% train or \
             calibrate, 10% choose the epoch, 30% holdout) and needs at least 20 rows with \
             the target, not {}",
            rows.len()
        )));
    }
    let mut order = rows.to_vec();
    qanat_model::prep::Rng::new(seed ^ 0x5e1f_0a11).shuffle(&mut order);
    let holdout = order.len() * 3 / 10;
    let valid = order.len() / 10;
    let (h, rest) = order.split_at(holdout);
    let (v, t) = rest.split_at(valid);
    Ok((h.to_vec(), t.to_vec(), v.to_vec()))
}

/// The holdout, training and validation rows of `method` from the job's `rows`: all
/// of them the holdout, or for a method that trains, the [`split`] (a method that trains
/// is measured on rows it did not train on).
fn rows_for(
    method: &Method,
    rows: &[usize],
    seed: u64,
) -> Result<(Vec<usize>, Vec<usize>, Vec<usize>)> {
    if rows.is_empty() {
        return Err(Error::invalid(
            "the holdout has no rows with the target: name a dataset version that has the target column filled",
        ));
    }
    if method.needs_training_rows() {
        split(rows, seed)
    } else {
        Ok((rows.to_vec(), Vec::new(), Vec::new()))
    }
}

/// How much quality an optimization may cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Points of holdout accuracy (classification).
    pub accuracy_points: f64,
    /// Share of the holdout RMSE (regression): 0.01 is 1%.
    pub relative_error: f64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            accuracy_points: 1.0,
            relative_error: 0.01,
        }
    }
}

/// Latency and throughput of a model's forward pass on one thread, on holdout rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Speed {
    pub p50_us_batch1: f64,
    pub p99_us_batch1: f64,
    pub p50_us_batch64: f64,
    pub p99_us_batch64: f64,
    /// Rows a second at batch 64.
    pub rows_per_s: f64,
}

/// One side of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    pub precision: String,
    /// The runtime it was measured on.
    pub runtime: RuntimeKind,
    /// Widths from the encoded input to the output.
    pub layers: Vec<usize>,
    /// The share of zero weights in the hidden layers (what magnitude pruning sets).
    pub sparsity: f64,
    pub quality: Quality,
    /// `weights.safetensors` as written (`model.onnx` for the ONNX runtimes).
    pub size_bytes: u64,
    pub speed: Speed,
}

/// The outcome of an optimization: both sides, the drop, and the verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub method: Method,
    pub holdout_rows: usize,
    /// How closely the result follows the original on the holdout: the share of rows
    /// with the same predicted class, or R² of its predictions against the
    /// original's (regression).
    pub fidelity: f64,
    pub original: Measured,
    pub optimized: Measured,
    /// Accuracy points lost, or the relative RMSE growth (negative: it improved).
    pub quality_drop: f64,
    /// The drop allowed, in the same unit.
    pub allowed_drop: f64,
    pub passed: bool,
    /// Why it passed or not, in one sentence.
    pub verdict: String,
    /// Products of an imported model left in float by int8's accuracy-aware fallback.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept_float: Vec<String>,
}

impl Report {
    /// Size of the optimized weights as a share of the original's.
    pub fn size_ratio(&self) -> f64 {
        self.optimized.size_bytes as f64 / self.original.size_bytes.max(1) as f64
    }

    /// Throughput of the optimized model over the original's, at batch 64.
    pub fn speedup(&self) -> f64 {
        self.optimized.speed.rows_per_s / self.original.speed.rows_per_s.max(f64::MIN_POSITIVE)
    }
}

/// How [`optimize`] measures and judges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub budget: Budget,
    /// Time spent timing each side at each batch size.
    pub seconds: f64,
    /// The runtime both sides are measured on.
    pub runtime: RuntimeKind,
    /// Fine-tuning, for the methods that train.
    pub tune: FineTune,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            budget: Budget::default(),
            seconds: 1.0,
            runtime: RuntimeKind::Native,
            tune: FineTune::default(),
        }
    }
}

/// Applies `method` to `model`, measures both on `rows` of `table` (rows whose target
/// is known) and judges the result against the budget. A method that fine-tunes
/// ([`Method::needs_training_rows`]) trains on part of `rows` ([`split`]) and is measured on
/// the rest.
pub fn optimize(
    model: &NativeModel,
    method: Method,
    table: &Table,
    rows: &[usize],
    settings: &Settings,
) -> Result<(NativeModel, Report)> {
    let (budget, seconds, runtime) = (settings.budget, settings.seconds, settings.runtime);
    let (holdout, train, valid) = rows_for(&method, rows, settings.tune.seed)?;
    let rows = &holdout[..];
    let optimized = method.apply(model, table, &train, &valid, settings.tune)?;
    let original = measure(model, table, rows, seconds, runtime)?;
    let after = measure(&optimized, table, rows, seconds, runtime)?;
    let fidelity = crate::distill::fidelity(
        model,
        &optimized,
        &model.spec().preprocessing.target,
        table,
        rows,
    )?;
    let report = judge(
        method,
        rows.len(),
        fidelity,
        original,
        after,
        budget,
        Vec::new(),
    );
    Ok((optimized, report))
}

/// The report of `after` against `original`: the quality drop, the drop allowed,
/// whether it passes and why, in one sentence.
fn judge(
    method: Method,
    holdout_rows: usize,
    fidelity: f64,
    original: Measured,
    after: Measured,
    budget: Budget,
    kept_float: Vec<String>,
) -> Report {
    let (drop, allowed, unit) = drop_of(&original.quality, &after.quality, budget);
    // NaN (a model that outputs NaN) never passes.
    let passed = drop <= allowed;
    let verdict = if passed {
        format!(
            "passed: {} {:.4} → {:.4}, a drop of {drop:.4} {unit} within the budget of {allowed}",
            original.quality.metric, original.quality.value, after.quality.value
        )
    } else {
        format!(
            "refused: {} {:.4} → {:.4}, a drop of {drop:.4} {unit} exceeds the budget of {allowed}; \
             raise the budget or force the registration",
            original.quality.metric, original.quality.value, after.quality.value
        )
    };
    Report {
        method,
        holdout_rows,
        fidelity,
        original,
        optimized: after,
        quality_drop: drop,
        allowed_drop: allowed,
        passed,
        verdict,
        kept_float,
    }
}

/// The quality drop from `original` to `after`, the drop allowed and its unit.
fn drop_of(original: &Quality, after: &Quality, budget: Budget) -> (f64, f64, &'static str) {
    if original.higher_is_better() {
        (
            (original.value - after.value) * 100.0,
            budget.accuracy_points,
            "accuracy points",
        )
    } else {
        let base = original.value.max(f64::MIN_POSITIVE);
        (
            (after.value - original.value) / base,
            budget.relative_error,
            "relative RMSE",
        )
    }
}

/// int8 for an imported model (dynamic, or static with calibrated scales), with
/// accuracy-aware fallback (as Intel Neural
/// Compressor tunes): every product quantized; if that loses more than the budget on
/// `rows`, the products whose quantization costs most — each measured alone — go back
/// to float one by one until the budget holds (at least one stays int8). The best
/// attempt is returned when none holds; the gate then refuses it. Also: the products
/// left in float.
fn int8_with_fallback(
    model: &Imported,
    activations: Activations<'_>,
    runtime: RuntimeKind,
    table: &Table,
    rows: &[usize],
    original: &Quality,
    budget: Budget,
) -> Result<(Imported, Vec<String>)> {
    use crate::onnx::quantize::rewrite_products;
    let prep = model.preprocessing();
    let attempt = |keep: &[String]| -> Result<(Imported, f64)> {
        let q = rewrite_products(model.graph(), keep, activations)?;
        let m = model.with_bytes(q.graph.to_bytes())?;
        let (drop, _, _) = drop_of(
            original,
            &quality(&m.on(runtime)?, prep, table, rows)?,
            budget,
        );
        // NaN (a model that outputs NaN) is the worst drop.
        Ok((m, if drop.is_nan() { f64::INFINITY } else { drop }))
    };
    let all = rewrite_products(model.graph(), &[], activations)?;
    if !all.skipped.is_empty() {
        println!(
            "left in float (not quantizable): {}",
            all.skipped.join("; ")
        );
    }
    let (mut best, mut best_drop) = attempt(&[])?;
    let allowed = drop_of(original, original, budget).1;
    if best_drop <= allowed || all.products.len() < 2 {
        return Ok((best, Vec::new()));
    }
    let mut costs = Vec::new();
    for p in &all.products {
        let (_, drop) = attempt(std::slice::from_ref(p))?;
        costs.push((p.clone(), drop));
    }
    costs.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut keep: Vec<String> = Vec::new();
    let mut best_keep = Vec::new();
    for (p, _) in costs.into_iter().take(all.products.len() - 1) {
        keep.push(p);
        let (m, drop) = attempt(&keep)?;
        println!(
            "int8 fallback: {} in float, a drop of {drop:.4} (budget {allowed})",
            keep.join(", ")
        );
        if drop < best_drop {
            (best, best_drop, best_keep) = (m, drop, keep.clone());
        }
        if drop <= allowed {
            break;
        }
    }
    Ok((best, best_keep))
}

/// What optimizing an imported model gives: a rewritten ONNX model, or a native student.
#[derive(Debug, Clone)]
pub enum Optimized {
    Onnx(Box<Imported>),
    Native(Box<NativeModel>),
}

/// [`optimize`] for an ONNX model made elsewhere ([`crate::imported`]): `int8-dynamic`
/// rewrites its matrix products ([`crate::onnx::quantize`]), `int8-static` too, with
/// each product's input scale calibrated on the training rows; `distill` trains a native
/// student on its outputs, with preprocessing fitted on the training rows. The source
/// is measured on `settings.runtime` (tract or onnxruntime), as is its int8 rewrite; a
/// student on the native runtime, where it runs (each side's report names its
/// runtime). The other methods need a native model.
pub fn optimize_imported(
    model: &Imported,
    method: Method,
    table: &Table,
    rows: &[usize],
    settings: &Settings,
) -> Result<(Optimized, Report)> {
    let (budget, seconds, runtime) = (settings.budget, settings.seconds, settings.runtime);
    if runtime == RuntimeKind::Native {
        return Err(Error::invalid(
            "an ONNX model made elsewhere is measured on tract or onnxruntime (--runtime)",
        ));
    }
    let (holdout, train, valid) = rows_for(&method, rows, settings.tune.seed)?;
    let rows = &holdout[..];
    let mut kept_float = Vec::new();
    let teacher = model.on(runtime)?;
    let prep = model.preprocessing();
    let original = measure_on(
        &teacher,
        runtime,
        prep,
        table,
        rows,
        seconds,
        model.bytes().len() as u64,
        ("f32".into(), Vec::new(), 0.0),
    )?;
    let (optimized, after) = match &method {
        Method::Int8Dynamic | Method::Int8Static => {
            let calibrated = match method {
                Method::Int8Static => model.calibrate(table, &train)?,
                _ => Default::default(),
            };
            let activations = match method {
                Method::Int8Static => Activations::Static(&calibrated),
                _ => Activations::Dynamic,
            };
            let (quantized, float) = int8_with_fallback(
                model,
                activations,
                runtime,
                table,
                rows,
                &original.quality,
                budget,
            )?;
            kept_float = float;
            let after = measure_on(
                &quantized.on(runtime)?,
                runtime,
                prep,
                table,
                rows,
                seconds,
                quantized.bytes().len() as u64,
                ("int8".into(), Vec::new(), 0.0),
            )?;
            (Optimized::Onnx(Box::new(quantized)), after)
        }
        Method::Distill {
            hidden,
            temperature,
            alpha,
        } => {
            // The student's features are fitted on its own training rows.
            let described = crate::imported::Described {
                target: prep.target_name().to_string(),
                task: Some(prep.target.task()),
                features: Some(model.features()),
            };
            let fitted = crate::imported::Imported::new(
                model.bytes().to_vec(),
                &described,
                None,
                table,
                &train,
                runtime,
            )?;
            let student = crate::distill::distill(
                &fitted.on(runtime)?,
                fitted.preprocessing(),
                hidden,
                *temperature,
                *alpha,
                table,
                &train,
                &valid,
                settings.tune,
            )?;
            // The student is a native model: measured where it will run.
            let after = measure(&student, table, rows, seconds, RuntimeKind::Native)?;
            (Optimized::Native(Box::new(student)), after)
        }
        other => {
            return Err(Error::invalid(format!(
                "{}: an ONNX model made elsewhere can be quantized (int8, int8-static) or \
                 distilled; pruning needs a model trained by qanat train",
                other.as_str()
            )))
        }
    };
    let fidelity = match &optimized {
        Optimized::Onnx(q) => {
            crate::distill::fidelity(&teacher, &q.on(runtime)?, &prep.target, table, rows)?
        }
        Optimized::Native(student) => {
            crate::distill::fidelity(&teacher, student.as_ref(), &prep.target, table, rows)?
        }
    };
    let report = judge(
        method,
        rows.len(),
        fidelity,
        original,
        after,
        budget,
        kept_float,
    );
    Ok((optimized, report))
}

fn measure(
    model: &NativeModel,
    table: &Table,
    rows: &[usize],
    seconds: f64,
    runtime: RuntimeKind,
) -> Result<Measured> {
    let prep = &model.spec().preprocessing;
    let about = (
        model.mlp().precision().to_string(),
        model.spec().layers.clone(),
        prune::sparsity(model.mlp()),
    );
    if runtime != RuntimeKind::Native {
        // The ONNX graph holds the preprocessing: its calls take raw rows.
        let bytes = model.to_onnx()?;
        let rt: Box<dyn Runtime> = match runtime {
            RuntimeKind::Tract => Box::new(TractModel::load(&bytes)?),
            _ => Box::new(OrtModel::load(&bytes, 1)?),
        };
        let size = bytes.len() as u64;
        return measure_on(
            rt.as_ref(),
            runtime,
            prep,
            table,
            rows,
            seconds,
            size,
            about,
        );
    }
    // Timing inputs: holdout rows, repeated to fill a batch of 64.
    let batch: Vec<usize> = rows.iter().cycle().take(64).copied().collect();
    let x = prep.encode_features(table, &batch)?;
    let (p50_1, p99_1, _) = time_native(model, &x[..prep.width()], 1, seconds)?;
    let (p50_64, p99_64, total) = time_native(model, &x, 64, seconds)?;
    let (precision, layers, sparsity) = about;
    Ok(Measured {
        precision,
        runtime,
        layers,
        sparsity,
        quality: quality(model, prep, table, rows)?,
        size_bytes: model.mlp().to_safetensors()?.len() as u64,
        speed: Speed {
            p50_us_batch1: p50_1,
            p99_us_batch1: p99_1,
            p50_us_batch64: p50_64,
            p99_us_batch64: p99_64,
            rows_per_s: total,
        },
    })
}

/// Quality, latency and throughput of `rt` (which takes raw rows) on `rows`;
/// `about` is the precision, layer widths and sparsity reported for it.
#[allow(clippy::too_many_arguments)]
fn measure_on(
    rt: &dyn Runtime,
    runtime: RuntimeKind,
    prep: &qanat_model::prep::Preprocessing,
    table: &Table,
    rows: &[usize],
    seconds: f64,
    size_bytes: u64,
    about: (String, Vec<usize>, f64),
) -> Result<Measured> {
    let batch: Vec<usize> = rows.iter().cycle().take(64).copied().collect();
    let (one, many) = (table_rows(table, &batch[..1]), table_rows(table, &batch));
    let (p50_1, p99_1, _) = time(|| rt.predict(&one).map(drop), 1, seconds)?;
    let (p50_64, p99_64, total) = time(|| rt.predict(&many).map(drop), 64, seconds)?;
    let (precision, layers, sparsity) = about;
    Ok(Measured {
        precision,
        runtime,
        layers,
        sparsity,
        quality: quality(rt, prep, table, rows)?,
        size_bytes,
        speed: Speed {
            p50_us_batch1: p50_1,
            p99_us_batch1: p99_1,
            p50_us_batch64: p50_64,
            p99_us_batch64: p99_64,
            rows_per_s: total,
        },
    })
}

/// [`time`] for the native kernels alone, with a warm scratch.
fn time_native(
    model: &NativeModel,
    x: &[f32],
    rows: usize,
    seconds: f64,
) -> Result<(f64, f64, f64)> {
    let mut scratch = Scratch::default();
    time(
        || {
            std::hint::black_box(model.mlp().forward(
                std::hint::black_box(x),
                rows,
                &mut scratch,
            )?);
            Ok(())
        },
        rows,
        seconds,
    )
}

/// p50 and p99 in µs and rows a second of `rows`-row calls of `call` for about
/// `seconds` (after 10 warm-up calls; at least 100 timed).
fn time(
    mut call: impl FnMut() -> Result<()>,
    rows: usize,
    seconds: f64,
) -> Result<(f64, f64, f64)> {
    for _ in 0..10 {
        call()?;
    }
    let budget = Duration::from_secs_f64(seconds.max(0.01));
    let start = Instant::now();
    let mut times = Vec::new();
    while start.elapsed() < budget || times.len() < 100 {
        let t = Instant::now();
        call()?;
        times.push(t.elapsed().as_secs_f64());
        if times.len() >= 1_000_000 {
            break;
        }
    }
    let total: f64 = times.iter().sum();
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize] * 1e6;
    Ok((at(0.5), at(0.99), (times.len() * rows) as f64 / total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_methods_parse_from_their_cli_words() {
        assert_eq!(
            Method::parse_quantize("int8").ok(),
            Some(Method::Int8Dynamic)
        );
        let err = Method::parse_quantize("int4").expect_err("int4");
        assert!(err.to_string().contains("int8"), "{err}");
    }
}
