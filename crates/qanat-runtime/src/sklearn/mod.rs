//! scikit-learn models as `mlflow.sklearn` saves them (a pickle or cloudpickle file),
//! predicted here with no Python: the file is read as data ([`pickle`]), never run, and
//! only the estimators listed below are recognised, from their fitted attributes.
//! Anything else — another class, a custom transformer, an option that changes what
//! `predict` does — is refused with its name, and serving hands the model to its
//! Python runtime instead.
//!
//! Recognised, alone or as the steps of a `Pipeline`:
//! - transformers: `StandardScaler`, `MinMaxScaler`, `MaxAbsScaler`, `RobustScaler`,
//!   `SimpleImputer` (numeric, without indicators), `OneHotEncoder` (numeric
//!   categories, without infrequent grouping);
//! - trees: `DecisionTree*`, `ExtraTree*`, `RandomForest*`, `ExtraTrees*`,
//!   `GradientBoosting*` (classifiers and regressors with one output), as a
//!   [`Forest`] whose splits take an `f32` row as scikit-learn's own (it casts `X` to
//!   `float32` and compares `x <= threshold`);
//! - linear models: `LogisticRegression`, and the regressors that predict
//!   `X·coefᵀ + intercept` (`LinearRegression`, `Ridge`, `Lasso`, `ElasticNet`, …).
//!
//! A classifier answers one probability per class (as `predict_proba`), its labels are
//! `classes_`; a regressor answers its prediction(s). Transforms run in `f64`, as
//! scikit-learn runs them on `float64` input.

pub mod numpy;
pub mod pickle;

use serde_json::Value as Json;

use crate::trees::{
    le_threshold, softmax_f64 as softmax, Forest, ForestSpec, Link, Missing, Split, Sum, TreeNode,
};
use crate::Error;
use numpy::Array;
use pickle::{Id, Pickle};

/// A scikit-learn model ready to predict.
#[derive(Debug)]
pub struct SkModel {
    steps: Vec<Step>,
    last: Last,
    features: usize,
    outputs: usize,
    /// The fitted trees of a tree model (a forest's estimators, a boosting's stages
    /// times its classes), else 0.
    estimators: usize,
    /// A classifier's labels (`classes_`), in the order of its probabilities.
    pub classes: Option<Vec<Json>>,
    /// What was read, for humans: `Pipeline(StandardScaler → LogisticRegression)`.
    pub describe: String,
}

/// A transform of rows of `f64`.
#[derive(Debug)]
enum Step {
    /// `x - sub`, `/ div`, `* mul`, `+ add`, then clipped — in that order, each
    /// when present (the scalers).
    Affine {
        sub: Option<Vec<f64>>,
        div: Option<Vec<f64>>,
        mul: Option<Vec<f64>>,
        add: Option<Vec<f64>>,
        clip: Option<(f64, f64)>,
    },
    /// Missing values (`missing`, NaN when NaN) replaced by the column's statistic;
    /// only the `keep` columns go on.
    Impute {
        missing: f64,
        stats: Vec<f64>,
        keep: Vec<usize>,
    },
    /// One column per category of each input column, but the dropped one.
    OneHot {
        categories: Vec<Vec<f64>>,
        drop: Vec<Option<usize>>,
        ignore_unknown: bool,
    },
}

impl Step {
    fn width_in(&self) -> Option<usize> {
        match self {
            Step::Affine {
                sub, div, mul, add, ..
            } => [sub, div, mul, add]
                .iter()
                .find_map(|v| v.as_ref().map(Vec::len)),
            Step::Impute { stats, .. } => Some(stats.len()),
            Step::OneHot { categories, .. } => Some(categories.len()),
        }
    }

    fn width_out(&self, width_in: usize) -> usize {
        match self {
            Step::Affine { .. } => width_in,
            Step::Impute { keep, .. } => keep.len(),
            Step::OneHot {
                categories, drop, ..
            } => categories
                .iter()
                .zip(drop)
                .map(|(c, d)| c.len() - usize::from(d.is_some()))
                .sum(),
        }
    }

    /// `rows` rows of `x` (`w` wide) transformed.
    fn apply(&self, x: Vec<f64>, rows: usize, w: usize) -> Result<Vec<f64>, Error> {
        Ok(match self {
            Step::Affine {
                sub,
                div,
                mul,
                add,
                clip,
            } => {
                let mut x = x;
                for row in x.chunks_exact_mut(w) {
                    for (j, v) in row.iter_mut().enumerate() {
                        if let Some(s) = sub {
                            *v -= s[j];
                        }
                        if let Some(d) = div {
                            *v /= d[j];
                        }
                        if let Some(m) = mul {
                            *v *= m[j];
                        }
                        if let Some(a) = add {
                            *v += a[j];
                        }
                        if let Some((lo, hi)) = clip {
                            *v = v.clamp(*lo, *hi);
                        }
                    }
                }
                x
            }
            Step::Impute {
                missing,
                stats,
                keep,
            } => {
                let mut out = Vec::with_capacity(rows * keep.len());
                for row in x.chunks_exact(w) {
                    for &j in keep {
                        let v = row[j];
                        let is_missing = if missing.is_nan() {
                            v.is_nan()
                        } else {
                            v == *missing
                        };
                        out.push(if is_missing { stats[j] } else { v });
                    }
                }
                out
            }
            Step::OneHot {
                categories,
                drop,
                ignore_unknown,
            } => {
                let width = self.width_out(w);
                let mut out = vec![0.0; rows * width];
                for (r, row) in x.chunks_exact(w).enumerate() {
                    let mut at = r * width;
                    for (j, (cats, dropped)) in categories.iter().zip(drop).enumerate() {
                        let v = row[j];
                        // Compared exactly, as scikit-learn compares float64 values.
                        let hit = cats
                            .iter()
                            .position(|c| (c.is_nan() && v.is_nan()) || *c == v);
                        match hit {
                            Some(i) if Some(i) != *dropped => {
                                let i = if dropped.is_some_and(|d| i > d) { i - 1 } else { i };
                                out[at + i] = 1.0;
                            }
                            Some(_) => {}
                            None if *ignore_unknown => {}
                            None => {
                                return Err(Error::invalid(format!(
                                    "column {j} holds {v}, a category the model's OneHotEncoder did not see in training"
                                )))
                            }
                        }
                        at += cats.len() - usize::from(dropped.is_some());
                    }
                }
                out
            }
        })
    }
}

/// How a linear model's scores become its outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scores {
    /// A regression: the scores.
    Identity,
    /// A binary classifier's one score: `[1 - σ(s), σ(s)]`.
    Sigmoid,
    /// A binary multinomial classifier's one score: `softmax([-s, s])`.
    SoftmaxPair,
    /// One-vs-rest: each class's `σ(s)`, normalised to sum to 1.
    OneVsRest,
    /// Multinomial: the scores' softmax.
    Softmax,
}

/// The estimator at the end.
#[derive(Debug)]
enum Last {
    /// A tree ensemble; `pair` when its one output is a binary classifier's
    /// probability of the second class.
    Forest { forest: Forest, pair: bool },
    /// `x·coefᵀ + intercept` (`k` rows of `coef`), then `scores`.
    Linear {
        coef: Vec<f64>,
        intercept: Vec<f64>,
        k: usize,
        scores: Scores,
    },
}

/// The final estimator read: what predicts, its input width, a classifier's classes,
/// and the outputs per row.
struct Final {
    last: Last,
    estimators: usize,
    features: usize,
    classes: Option<Vec<Json>>,
    outputs: usize,
}

/// The largest pickle read: reading takes memory a small multiple of it.
pub const MAX_FILE_BYTES: usize = 512 << 20;

impl SkModel {
    /// The model a `mlflow.sklearn` pickle holds; `Err` names what is not recognised.
    pub fn read(bytes: &[u8]) -> Result<SkModel, String> {
        if bytes.len() > MAX_FILE_BYTES {
            return Err(format!(
                "its pickle is {} MiB, over the {} MiB read natively",
                bytes.len() >> 20,
                MAX_FILE_BYTES >> 20
            ));
        }
        let p = Pickle::read(bytes).map_err(|e| e.to_string())?;
        let r = Read { p: &p };
        let (class, _) = r.estimator(p.root)?;
        let mut parts: Vec<Id> = Vec::new();
        r.flatten(p.root, &mut parts, 0)?;
        let last = parts.pop().ok_or("a Pipeline with no estimator")?;
        let mut names = Vec::new();
        let mut steps = Vec::new();
        let mut features = None;
        let mut width: Option<usize> = None;
        for id in parts {
            let (name, _) = r.estimator(id)?;
            let step = r.step(id, name)?;
            let w_in = step
                .width_in()
                .ok_or_else(|| format!("a {name} with no columns"))?;
            if let Some(w) = width {
                if w != w_in {
                    return Err(format!(
                        "a {name} over {w_in} columns after a step giving {w}"
                    ));
                }
            }
            features.get_or_insert(w_in);
            width = Some(step.width_out(w_in));
            names.push(name.to_string());
            steps.push(step);
        }
        let (name, _) = r.estimator(last)?;
        let Final {
            last,
            estimators,
            features: w_in,
            classes,
            outputs,
        } = r.last(last, name)?;
        if let Some(w) = width {
            if w != w_in {
                return Err(format!(
                    "a {name} over {w_in} columns after steps giving {w}"
                ));
            }
        }
        names.push(name.to_string());
        let describe = if class == "Pipeline" {
            format!("Pipeline({})", names.join(" → "))
        } else {
            names.join("")
        };
        Ok(SkModel {
            steps,
            last,
            features: features.unwrap_or(w_in),
            outputs,
            estimators,
            classes,
            describe,
        })
    }

    /// Values per input row.
    pub fn features(&self) -> usize {
        self.features
    }

    /// Values per output row: a classifier's probabilities, or a regressor's
    /// predictions.
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// The fitted trees of a tree model, else 0.
    pub fn trees(&self) -> usize {
        self.estimators
    }

    /// The outputs of `rows` rows of `x`, `rows ×` [`SkModel::outputs`].
    pub fn predict(&self, x: &[f32], rows: usize) -> Result<Vec<f32>, Error> {
        let x: Vec<f64> = x.iter().map(|v| f64::from(*v)).collect();
        self.predict_f64(&x, rows)
    }

    /// [`SkModel::predict`] of `f64` rows, as scikit-learn takes a `float64` frame:
    /// transforms and linear models in `f64`, trees on the rows cast to `f32`.
    pub fn predict_f64(&self, x: &[f64], rows: usize) -> Result<Vec<f32>, Error> {
        if x.len() != rows * self.features {
            return Err(Error::invalid(format!(
                "{} values for {rows} rows of {} features",
                x.len(),
                self.features
            )));
        }
        let mut x = x.to_vec();
        let mut w = self.features;
        for s in &self.steps {
            x = s.apply(x, rows, w)?;
            w = s.width_out(w);
        }
        match &self.last {
            Last::Forest { forest, pair } => {
                // scikit-learn casts rows to float32 before its trees.
                let x32: Vec<f32> = x.iter().map(|v| *v as f32).collect();
                Ok(pairs(forest.predict(&x32, rows)?, *pair))
            }
            Last::Linear {
                coef,
                intercept,
                k,
                scores,
            } => {
                let mut out = Vec::with_capacity(rows * self.outputs);
                let mut s = vec![0.0f64; *k];
                for row in x.chunks_exact(w) {
                    for (c, o) in s.iter_mut().enumerate() {
                        let wts = &coef[c * w..(c + 1) * w];
                        *o = row.iter().zip(wts).map(|(a, b)| a * b).sum::<f64>() + intercept[c];
                    }
                    match scores {
                        Scores::Identity => out.extend(s.iter().map(|v| *v as f32)),
                        Scores::Sigmoid => {
                            let p = sigmoid(s[0]);
                            out.extend([(1.0 - p) as f32, p as f32]);
                        }
                        Scores::SoftmaxPair => out.extend(softmax(&[-s[0], s[0]])),
                        Scores::OneVsRest => {
                            let p: Vec<f64> = s.iter().map(|v| sigmoid(*v)).collect();
                            let t: f64 = p.iter().sum();
                            out.extend(p.iter().map(|v| (v / t) as f32));
                        }
                        Scores::Softmax => out.extend(softmax(&s)),
                    }
                }
                Ok(out)
            }
        }
    }
}

fn sigmoid(s: f64) -> f64 {
    1.0 / (1.0 + (-s).exp())
}

/// A binary classifier's one probability as the pair `[1 - p, p]`.
fn pairs(p: Vec<f32>, pair: bool) -> Vec<f32> {
    if pair {
        p.iter().flat_map(|p| [1.0 - p, *p]).collect()
    } else {
        p
    }
}

/// A tree as scikit-learn keeps it (`sklearn.tree._tree.Tree`).
struct SkTree {
    features: usize,
    left: Vec<f64>,
    right: Vec<f64>,
    feature: Vec<f64>,
    threshold: Vec<f64>,
    /// NaN goes left (scikit-learn 1.3 and later); else NaN goes right.
    nan_left: Option<Vec<f64>>,
    /// `nodes × width` values (one output: a value per class, or one).
    values: Vec<f64>,
    width: usize,
}

impl SkTree {
    /// The tree's nodes with leaves valued by `leaf(node)`.
    fn nodes(&self, leaf: impl Fn(usize) -> f64) -> Result<Vec<TreeNode>, String> {
        let count = |v: f64, what: &str, n: usize| {
            if v >= 0.0 && v.fract() == 0.0 && v < usize::MAX as f64 {
                Ok(v as usize)
            } else {
                Err(format!("node {n} has the {what} {v}"))
            }
        };
        (0..self.left.len())
            .map(|n| {
                if self.left[n] < 0.0 {
                    return Ok(TreeNode::Leaf(leaf(n)));
                }
                Ok(TreeNode::Split(Split {
                    feature: count(self.feature[n], "feature", n)?,
                    threshold: le_threshold(self.threshold[n]),
                    missing: Missing::Nan {
                        left: self.nan_left.as_ref().is_some_and(|m| m[n] != 0.0),
                    },
                    left: count(self.left[n], "left child", n)?,
                    right: count(self.right[n], "right child", n)?,
                }))
            })
            .collect()
    }
}

/// Reading estimators out of a pickle.
struct Read<'p> {
    p: &'p Pickle,
}

/// The regressors whose `predict` is `X·coefᵀ + intercept`.
const LINEAR_REGRESSORS: [&str; 16] = [
    "LinearRegression",
    "Ridge",
    "RidgeCV",
    "Lasso",
    "LassoCV",
    "ElasticNet",
    "ElasticNetCV",
    "Lars",
    "LarsCV",
    "LassoLars",
    "LassoLarsCV",
    "LassoLarsIC",
    "BayesianRidge",
    "ARDRegression",
    "HuberRegressor",
    "SGDRegressor",
];

impl<'p> Read<'p> {
    /// An estimator's class name (a scikit-learn class) and its state dict.
    fn estimator(&self, id: Id) -> Result<(&'p str, Id), String> {
        let p = self.p;
        let Some((Some((module, name)), _, state)) = p.object(id) else {
            return Err("the pickle does not hold an estimator object".into());
        };
        if module != "sklearn" && !module.starts_with("sklearn.") {
            return Err(format!(
                "it holds {module}.{name}, not a scikit-learn estimator"
            ));
        }
        let state = state
            .filter(|s| p.entries(*s).is_some())
            .ok_or_else(|| format!("a {name} with no fitted state"))?;
        Ok((name, state))
    }

    /// The estimators of `id` in order: itself, or a pipeline's steps (pipelines
    /// within it flattened; `passthrough` steps left out).
    fn flatten(&self, id: Id, out: &mut Vec<Id>, depth: usize) -> Result<(), String> {
        let p = self.p;
        let (class, _) = self.estimator(id)?;
        if class != "Pipeline" {
            out.push(id);
            return Ok(());
        }
        if depth > 8 {
            return Err("pipelines nested over 8 deep".into());
        }
        let steps = self.attr(id, "steps")?;
        for step in p
            .items(steps)
            .ok_or("a Pipeline whose steps are not a list")?
        {
            let pair = p.items(*step).ok_or("a Pipeline step that is not a pair")?;
            let est = *pair.get(1).ok_or("a Pipeline step that is not a pair")?;
            if p.is_none(est) || p.str(est) == Some("passthrough") {
                continue;
            }
            self.flatten(est, out, depth + 1)?;
        }
        Ok(())
    }

    /// Attribute `name` of estimator `id`.
    fn attr(&self, id: Id, name: &str) -> Result<Id, String> {
        let (class, state) = self.estimator(id)?;
        self.p
            .lookup(state, name)
            .ok_or_else(|| format!("a {class} with no '{name}' (not fitted?)"))
    }

    fn array(&self, id: Id, name: &str) -> Result<Array<'p>, String> {
        let v = self.attr(id, name)?;
        Array::read(self.p, v)
            .ok_or_else(|| format!("'{name}' is not an array"))?
            .map_err(|e| format!("'{name}': {e}"))
    }

    fn f64s(&self, id: Id, name: &str) -> Result<Vec<f64>, String> {
        self.array(id, name)?
            .f64s()
            .map_err(|e| format!("'{name}': {e}"))
    }

    /// A number: a Python one or a numpy scalar.
    fn number(&self, id: Id, name: &str) -> Result<f64, String> {
        let v = self.attr(id, name)?;
        if let Some(f) = self.p.float(v) {
            return Ok(f);
        }
        match Array::read(self.p, v) {
            Some(Ok(a)) if a.len() == 1 => Ok(a.f64s()?[0]),
            _ => Err(format!("'{name}' is not a number")),
        }
    }

    fn string(&self, id: Id, name: &str) -> Option<&'p str> {
        self.attr(id, name).ok().and_then(|v| self.p.str(v))
    }

    fn flag(&self, id: Id, name: &str) -> bool {
        self.attr(id, name)
            .ok()
            .and_then(|v| self.p.int(v))
            .is_some_and(|v| v != 0)
    }

    fn count(&self, id: Id, name: &str) -> Result<usize, String> {
        let v = self.number(id, name)?;
        if v >= 0.0 && v.fract() == 0.0 && v < (1u64 << 32) as f64 {
            Ok(v as usize)
        } else {
            Err(format!("'{name}' is {v}, not a count"))
        }
    }

    /// A transformer step.
    fn step(&self, id: Id, name: &str) -> Result<Step, String> {
        // An attribute its flag switches on.
        let opt = |attr: &str, on: &str| -> Result<Option<Vec<f64>>, String> {
            if self.flag(id, on) {
                self.f64s(id, attr).map(Some)
            } else {
                Ok(None)
            }
        };
        Ok(match name {
            "StandardScaler" => Step::Affine {
                sub: opt("mean_", "with_mean")?,
                div: opt("scale_", "with_std")?,
                mul: None,
                add: None,
                clip: None,
            },
            "RobustScaler" => Step::Affine {
                sub: opt("center_", "with_centering")?,
                div: opt("scale_", "with_scaling")?,
                mul: None,
                add: None,
                clip: None,
            },
            "MaxAbsScaler" => Step::Affine {
                sub: None,
                div: Some(self.f64s(id, "scale_")?),
                mul: None,
                add: None,
                clip: None,
            },
            "MinMaxScaler" => {
                let clip = if self.flag(id, "clip") {
                    let range = self.attr(id, "feature_range")?;
                    let r = self.p.items(range).ok_or("'feature_range' is not a pair")?;
                    match r {
                        [lo, hi] => Some((
                            self.p.float(*lo).ok_or("'feature_range' is not numbers")?,
                            self.p.float(*hi).ok_or("'feature_range' is not numbers")?,
                        )),
                        _ => return Err("'feature_range' is not a pair".into()),
                    }
                } else {
                    None
                };
                Step::Affine {
                    sub: None,
                    div: None,
                    mul: Some(self.f64s(id, "scale_")?),
                    add: Some(self.f64s(id, "min_")?),
                    clip,
                }
            }
            "SimpleImputer" => {
                if self.flag(id, "add_indicator") {
                    return Err("a SimpleImputer with add_indicator".into());
                }
                let missing = self.attr(id, "missing_values")?;
                let missing = self
                    .p
                    .float(missing)
                    .ok_or("a SimpleImputer whose missing_values is not a number")?;
                let stats = self.f64s(id, "statistics_")?;
                let keep = if self.flag(id, "keep_empty_features") {
                    (0..stats.len()).collect()
                } else {
                    (0..stats.len()).filter(|j| !stats[*j].is_nan()).collect()
                };
                Step::Impute {
                    missing,
                    stats,
                    keep,
                }
            }
            "OneHotEncoder" => {
                if self.flag(id, "_infrequent_enabled") {
                    return Err("a OneHotEncoder grouping infrequent categories".into());
                }
                let ignore_unknown = match self.string(id, "handle_unknown") {
                    Some("error") | None => false,
                    Some("ignore" | "infrequent_if_exist") => true,
                    Some(other) => {
                        return Err(format!("a OneHotEncoder with handle_unknown='{other}'"))
                    }
                };
                let cats = self.attr(id, "categories_")?;
                let categories = self
                    .p
                    .items(cats)
                    .ok_or("'categories_' is not a list")?
                    .iter()
                    .map(|c| {
                        Array::read(self.p, *c)
                            .ok_or_else(|| {
                                "'categories_' holds something not an array".to_string()
                            })?
                            .and_then(|a| a.f64s())
                            .map_err(|e| {
                                format!("a OneHotEncoder whose categories are not numbers ({e})")
                            })
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                let drop = match self
                    .attr(id, "drop_idx_")
                    .ok()
                    .filter(|v| !self.p.is_none(*v))
                {
                    None => vec![None; categories.len()],
                    Some(v) => {
                        let a = Array::read(self.p, v)
                            .ok_or("'drop_idx_' is not an array")?
                            .map_err(|e| format!("'drop_idx_': {e}"))?;
                        let raw: Vec<Option<f64>> = match a.f64s() {
                            Ok(n) => n.into_iter().map(Some).collect(),
                            Err(_) => a.objects()?.into_iter().map(|o| self.p.float(o)).collect(),
                        };
                        raw.into_iter().map(|d| d.map(|d| d as usize)).collect()
                    }
                };
                if drop.len() != categories.len()
                    || drop
                        .iter()
                        .zip(&categories)
                        .any(|(d, c)| d.is_some_and(|d| d >= c.len()))
                {
                    return Err(
                        "a OneHotEncoder whose drop_idx_ does not match its categories".into(),
                    );
                }
                Step::OneHot {
                    categories,
                    drop,
                    ignore_unknown,
                }
            }
            other => return Err(format!("the step {other}, which is not read natively")),
        })
    }

    fn classes(&self, id: Id) -> Result<Vec<Json>, String> {
        let a = self.array(id, "classes_")?;
        if a.shape.len() != 1 {
            return Err("a classifier with more than one output".into());
        }
        Ok(match a.dtype.kind {
            'i' | 'u' => a
                .f64s()?
                .into_iter()
                .map(|v| Json::from(v as i64))
                .collect(),
            'b' => a
                .f64s()?
                .into_iter()
                .map(|v| Json::from(v != 0.0))
                .collect(),
            'f' => a.f64s()?.into_iter().map(Json::from).collect(),
            'U' => a.strings()?.into_iter().map(Json::from).collect(),
            'O' => a
                .objects()?
                .into_iter()
                .map(|o| match self.p.get(o) {
                    pickle::Value::Str(s) => Ok(Json::from(s.clone())),
                    pickle::Value::Int(i) => Ok(Json::from(*i)),
                    pickle::Value::Bool(b) => Ok(Json::from(*b)),
                    _ => Err("a class label that is not a string or a number".to_string()),
                })
                .collect::<Result<_, _>>()?,
            k => return Err(format!("class labels of dtype {k}")),
        })
    }

    /// A fitted decision tree estimator's `tree_`.
    fn tree(&self, est: Id) -> Result<SkTree, String> {
        let tree = self.attr(est, "tree_")?;
        let p = self.p;
        let Some((Some((module, "Tree")), args, Some(state))) = p.object(tree) else {
            return Err("a 'tree_' that is not a scikit-learn Tree".into());
        };
        if !module.starts_with("sklearn.") {
            return Err("a 'tree_' that is not a scikit-learn Tree".into());
        }
        let args = p.items(args).ok_or("a Tree with no arguments")?;
        let features = args
            .first()
            .and_then(|f| p.int(*f))
            .and_then(|f| usize::try_from(f).ok())
            .ok_or("a Tree with no feature count")?;
        if args.get(2).and_then(|o| p.int(*o)) != Some(1) {
            return Err("a tree with more than one output".into());
        }
        let arr = |name: &str| {
            let v = p
                .lookup(state, name)
                .ok_or_else(|| format!("a Tree with no '{name}'"))?;
            Array::read(p, v)
                .ok_or_else(|| format!("a Tree whose '{name}' is not an array"))?
                .map_err(|e| format!("a Tree's '{name}': {e}"))
        };
        let nodes = arr("nodes")?;
        let values = arr("values")?;
        let n = nodes.len();
        let [vn, 1, width] = values.shape[..] else {
            return Err(format!(
                "a Tree whose values have the shape {:?}",
                values.shape
            ));
        };
        if vn != n || width == 0 {
            return Err("a Tree whose values do not match its nodes".into());
        }
        let field = |name: &str| {
            nodes
                .field_f64s(name)
                .map_err(|e| format!("a Tree's nodes: {e}"))
        };
        Ok(SkTree {
            features,
            left: field("left_child")?,
            right: field("right_child")?,
            feature: field("feature")?,
            threshold: field("threshold")?,
            nan_left: if nodes.has_field("missing_go_to_left") {
                Some(field("missing_go_to_left")?)
            } else {
                None
            },
            values: values.f64s()?,
            width,
        })
    }

    /// The final estimator: what predicts, its input width, its classes and its
    /// outputs per row.
    fn last(&self, id: Id, name: &str) -> Result<Final, String> {
        let forest = |trees: Vec<(Vec<TreeNode>, usize)>, features, groups, base, divisor, link| {
            Forest::new(
                ForestSpec {
                    features,
                    groups,
                    base,
                    divisor,
                    sum: Sum::F64,
                    link,
                },
                trees,
            )
            .map_err(|e| e.to_string())
        };
        let n_outputs = self.count(id, "n_outputs_").unwrap_or(1);
        let tree_model = matches!(
            name,
            "DecisionTreeClassifier"
                | "ExtraTreeClassifier"
                | "RandomForestClassifier"
                | "ExtraTreesClassifier"
                | "DecisionTreeRegressor"
                | "ExtraTreeRegressor"
                | "RandomForestRegressor"
                | "ExtraTreesRegressor"
        );
        if tree_model {
            if n_outputs != 1 {
                return Err(format!("a {name} with {n_outputs} outputs"));
            }
            let classifier = name.ends_with("Classifier");
            let members: Vec<Id> = if name.starts_with("DecisionTree")
                || name.starts_with("ExtraTreeC")
                || name.starts_with("ExtraTreeR")
            {
                vec![id]
            } else {
                let e = self.attr(id, "estimators_")?;
                self.p
                    .items(e)
                    .ok_or("'estimators_' is not a list")?
                    .to_vec()
            };
            if members.is_empty() {
                return Err(format!("a {name} with no trees"));
            }
            let classes = if classifier {
                Some(self.classes(id)?)
            } else {
                None
            };
            let c = classes.as_ref().map_or(1, Vec::len);
            let mut trees = Vec::with_capacity(members.len() * c);
            let mut features = None;
            for m in &members {
                let t = self.tree(*m)?;
                if *features.get_or_insert(t.features) != t.features {
                    return Err(format!("a {name} whose trees take different features"));
                }
                if classifier {
                    if t.width < c {
                        return Err(format!("a tree of {} classes in a {name} of {c}", t.width));
                    }
                    for k in 0..c {
                        let nodes = t.nodes(|n| {
                            let v = &t.values[n * t.width..n * t.width + c];
                            let total: f64 = v.iter().sum();
                            v[k] / if total == 0.0 { 1.0 } else { total }
                        })?;
                        trees.push((nodes, k));
                    }
                } else {
                    trees.push((t.nodes(|n| t.values[n * t.width])?, 0));
                }
            }
            let features = features.unwrap_or(0);
            let f = forest(
                trees,
                features,
                c,
                vec![0.0; c],
                members.len() as f64,
                Link::Identity,
            )?;
            return Ok(Final {
                estimators: members.len(),
                last: Last::Forest {
                    forest: f,
                    pair: false,
                },
                features,
                classes,
                outputs: c,
            });
        }
        if name == "GradientBoostingClassifier" || name == "GradientBoostingRegressor" {
            return self.boosting(id, name);
        }
        if name == "LogisticRegression" || name == "LogisticRegressionCV" {
            let classes = self.classes(id)?;
            let c = classes.len();
            let coef = self.array(id, "coef_")?;
            let [k, f] = coef.shape[..] else {
                return Err("a LogisticRegression whose coef_ is not a matrix".into());
            };
            let intercept = self.f64s(id, "intercept_")?;
            if intercept.len() != k || !(k == 1 && c == 2 || k == c && c > 2) {
                return Err(format!(
                    "a LogisticRegression with {k} score rows for {c} classes"
                ));
            }
            let multi = self.string(id, "multi_class").unwrap_or("deprecated");
            let solver = self.string(id, "solver").unwrap_or("lbfgs");
            let ovr = multi == "ovr"
                || multi == "warn"
                || (matches!(multi, "auto" | "deprecated") && (c <= 2 || solver == "liblinear"));
            let scores = match (ovr, k) {
                (true, 1) => Scores::Sigmoid,
                (true, _) => Scores::OneVsRest,
                (false, 1) => Scores::SoftmaxPair,
                (false, _) => Scores::Softmax,
            };
            return Ok(Final {
                estimators: 0,
                last: Last::Linear {
                    coef: coef.f64s()?,
                    intercept,
                    k,
                    scores,
                },
                features: f,
                classes: Some(classes),
                outputs: c,
            });
        }
        if LINEAR_REGRESSORS.contains(&name) {
            let coef = self.array(id, "coef_")?;
            let (k, f) = match coef.shape[..] {
                [f] => (1, f),
                [k, f] => (k, f),
                _ => {
                    return Err(format!(
                        "a {name} whose coef_ has the shape {:?}",
                        coef.shape
                    ))
                }
            };
            let intercept = match self.number(id, "intercept_") {
                Ok(v) => vec![v],
                Err(_) => self.f64s(id, "intercept_")?,
            };
            if intercept.len() != k {
                return Err(format!(
                    "a {name} with {k} targets and {} intercepts",
                    intercept.len()
                ));
            }
            return Ok(Final {
                estimators: 0,
                last: Last::Linear {
                    coef: coef.f64s()?,
                    intercept,
                    k,
                    scores: Scores::Identity,
                },
                features: f,
                classes: None,
                outputs: k,
            });
        }
        Err(format!("the estimator {name}, which is not read natively"))
    }

    /// A `GradientBoosting*`: its stages' trees scaled by the learning rate, from the
    /// initial estimator's raw prediction.
    fn boosting(&self, id: Id, name: &str) -> Result<Final, String> {
        let p = self.p;
        let classifier = name.ends_with("Classifier");
        let classes = if classifier {
            Some(self.classes(id)?)
        } else {
            None
        };
        let c = classes.as_ref().map_or(1, Vec::len);
        let loss = self.string(id, "loss").unwrap_or_default();
        let lr = self.number(id, "learning_rate")?;
        let stages = self.array(id, "estimators_")?;
        let [n, k] = stages.shape[..] else {
            return Err(format!("a {name} whose estimators_ is not a matrix"));
        };
        let groups = if classifier && c > 2 { c } else { 1 };
        if k != groups || n == 0 {
            return Err(format!("a {name} of {n}×{k} trees for {c} classes"));
        }
        // The initial raw prediction.
        let init = self.attr(id, "init_")?;
        let base: Vec<f64> = if p.str(init) == Some("zero") {
            vec![0.0; groups]
        } else {
            let (init_name, _) = self.estimator(init)?;
            match (classifier, init_name) {
                (true, "DummyClassifier") => {
                    if self.string(init, "strategy").is_some_and(|s| s != "prior") {
                        return Err(format!(
                            "a {name} whose initial DummyClassifier is not 'prior'"
                        ));
                    }
                    let eps = f64::from(f32::EPSILON);
                    let prior: Vec<f64> = self
                        .f64s(init, "class_prior_")?
                        .into_iter()
                        .map(|q| q.clamp(eps, 1.0 - eps))
                        .collect();
                    if prior.len() != c {
                        return Err(format!("a {name} whose prior has {} classes", prior.len()));
                    }
                    if groups == 1 {
                        let q = prior[1];
                        let logit = (q / (1.0 - q)).ln();
                        vec![if loss == "exponential" {
                            logit / 2.0
                        } else {
                            logit
                        }]
                    } else {
                        let logs: Vec<f64> = prior.iter().map(|q| q.ln()).collect();
                        let mean = logs.iter().sum::<f64>() / c as f64;
                        logs.iter().map(|l| l - mean).collect()
                    }
                }
                (false, "DummyRegressor") => {
                    let constant = self.f64s(init, "constant_")?;
                    if constant.len() != 1 {
                        return Err(format!("a {name} with {} outputs", constant.len()));
                    }
                    constant
                }
                _ => return Err(format!("a {name} whose initial estimator is a {init_name}")),
            }
        };
        let link = match (classifier, loss, groups) {
            (false, "squared_error" | "absolute_error" | "huber" | "quantile", _) => Link::Identity,
            (true, "log_loss" | "deviance", 1) => Link::Sigmoid { scale: 1.0 },
            (true, "exponential", 1) => Link::Sigmoid { scale: 2.0 },
            (true, "log_loss" | "deviance", _) => Link::Softmax,
            _ => return Err(format!("a {name} with the loss '{loss}'")),
        };
        let members = stages.objects()?;
        let mut trees = Vec::with_capacity(members.len());
        let mut features = None;
        for (i, m) in members.iter().enumerate() {
            let t = self.tree(*m)?;
            if *features.get_or_insert(t.features) != t.features {
                return Err(format!("a {name} whose trees take different features"));
            }
            trees.push((t.nodes(|node| lr * t.values[node * t.width])?, i % k));
        }
        let features = features.unwrap_or(0);
        let f = Forest::new(
            ForestSpec {
                features,
                groups,
                base,
                divisor: 1.0,
                sum: Sum::F64,
                link,
            },
            trees,
        )
        .map_err(|e| e.to_string())?;
        Ok(Final {
            estimators: members.len(),
            last: Last::Forest {
                forest: f,
                // A binary classifier's one probability, as the pair of classes.
                pair: classifier && groups == 1,
            },
            features,
            classes,
            outputs: if classifier { c } else { 1 },
        })
    }
}
