//! Preprocessing learned on the training rows only and saved with the model, so a
//! prediction sees exactly what training saw: numeric features imputed with their
//! training mean (plus a 0/1 "was missing" indicator when any training value was
//! missing) and standardized; text features one-hot encoded over their most frequent
//! categories, with one slot for every other (and missing) value. The target: class
//! labels mapped to indexes (sorted), or a numeric target standardized.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{ClassWeights, Task, TrainConfig};
use crate::table::{Table, Values};
use crate::{Error, Result};

/// How one feature becomes input columns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Feature {
    /// `(x - mean) / std`, missing as the mean; `indicator` adds a 0/1 column.
    Numeric {
        name: String,
        mean: f64,
        std: f64,
        indicator: bool,
    },
    /// One column per category and one for any other or missing value.
    Categorical {
        name: String,
        categories: Vec<String>,
    },
}

impl Feature {
    pub fn name(&self) -> &str {
        match self {
            Feature::Numeric { name, .. } | Feature::Categorical { name, .. } => name,
        }
    }

    /// Input columns it becomes.
    pub fn width(&self) -> usize {
        match self {
            Feature::Numeric { indicator, .. } => 1 + usize::from(*indicator),
            Feature::Categorical { categories, .. } => categories.len() + 1,
        }
    }
}

/// The target's encoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "task", rename_all = "lowercase")]
pub enum Target {
    /// Class `i` is `classes[i]`.
    Classification { name: String, classes: Vec<String> },
    /// The model predicts `(y - mean) / std`.
    Regression { name: String, mean: f64, std: f64 },
}

impl Target {
    pub fn task(&self) -> Task {
        match self {
            Target::Classification { .. } => Task::Classification,
            Target::Regression { .. } => Task::Regression,
        }
    }

    /// Outputs of the model: one logit for two classes, one per class for more, one
    /// value for regression.
    pub fn outputs(&self) -> usize {
        match self {
            Target::Classification { classes, .. } if classes.len() > 2 => classes.len(),
            _ => 1,
        }
    }

    /// Learns the encoding of target column `name` for `task` from the `train` rows:
    /// the classes found there (sorted; numbers in numeric order), or the mean and
    /// standard deviation of a numeric target.
    pub fn fit(table: &Table, name: &str, task: Task, train: &[usize]) -> Result<Target> {
        let target_col = table.column(name)?;
        Ok(match task {
            Task::Classification => {
                let mut classes: Vec<String> = train
                    .iter()
                    .filter_map(|i| label_of(&target_col.values, *i))
                    .collect();
                classes.sort();
                classes.dedup();
                // Numeric labels in numeric order (2 before 10).
                if classes.iter().all(|c| c.parse::<f64>().is_ok()) {
                    classes.sort_by(|a, b| {
                        let (x, y) = (
                            a.parse::<f64>().unwrap_or(0.0),
                            b.parse::<f64>().unwrap_or(0.0),
                        );
                        x.total_cmp(&y)
                    });
                }
                if classes.len() < 2 {
                    return Err(Error::invalid(format!(
                    "target '{}' has one class ({}) in the training rows: a classifier needs at least two",
                    name,
                    classes.first().map_or("none", String::as_str)
                )));
                }
                if classes.len() > 1000 {
                    return Err(Error::invalid(format!(
                    "target '{}' has {} classes: use task: regression for a numeric target, or at most 1000 classes",
                    name,
                    classes.len()
                )));
                }
                Target::Classification {
                    name: name.to_string(),
                    classes,
                }
            }
            Task::Regression => {
                let Values::Numeric(v) = &target_col.values else {
                    return Err(Error::invalid(format!(
                        "target '{}' is not numeric: a regression target must be a number",
                        name
                    )));
                };
                let ys: Vec<f64> = train.iter().map(|i| v[*i]).collect();
                let n = ys.len() as f64;
                let mean = ys.iter().sum::<f64>() / n;
                let var = ys.iter().map(|y| (y - mean) * (y - mean)).sum::<f64>() / n;
                Target::Regression {
                    name: name.to_string(),
                    mean,
                    std: if var.sqrt() > 1e-12 { var.sqrt() } else { 1.0 },
                }
            }
        })
    }
}

/// Everything between a table and the model's input, fitted on training rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preprocessing {
    pub features: Vec<Feature>,
    pub target: Target,
}

/// Rows ready for the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// Row-major, `rows × width`.
    pub x: Vec<f32>,
    pub width: usize,
    /// Class indexes (classification) or the standardized target (regression).
    pub y: Vec<f32>,
    /// Per-row loss weights (class weights; 1 otherwise).
    pub weight: Vec<f32>,
}

impl Encoded {
    pub fn rows(&self) -> usize {
        self.y.len()
    }
}

/// The rows whose target is present, and the task.
pub fn usable_rows(table: &Table, config: &TrainConfig) -> Result<(Vec<usize>, Task)> {
    let target = table.column(&config.target)?;
    let rows: Vec<usize> = match &target.values {
        Values::Numeric(v) => (0..v.len()).filter(|i| !v[*i].is_nan()).collect(),
        Values::Text(v) => (0..v.len()).filter(|i| v[*i].is_some()).collect(),
        Values::Unsupported(t, _) => {
            return Err(Error::invalid(format!(
            "target '{}' is of type {t}, which cannot be predicted: use a number or text column",
            config.target
        )))
        }
    };
    if rows.is_empty() {
        return Err(Error::invalid(format!(
            "target '{}' has no values",
            config.target
        )));
    }
    let task = match (config.task, &target.values) {
        (Some(Task::Regression), Values::Text(_)) => {
            return Err(Error::invalid(format!(
                "target '{}' is text, so it cannot be a regression target: use task: classification, or a numeric column",
                config.target
            )))
        }
        (Some(t), _) => t,
        (None, Values::Text(_)) => Task::Classification,
        (None, Values::Numeric(v)) => {
            let mut distinct: Vec<f64> = Vec::new();
            let whole = rows.iter().all(|i| v[*i].fract() == 0.0);
            for i in &rows {
                if !distinct.contains(&v[*i]) {
                    distinct.push(v[*i]);
                    if distinct.len() > 10 {
                        break;
                    }
                }
            }
            if whole && distinct.len() <= 10 {
                Task::Classification
            } else {
                Task::Regression
            }
        }
        (None, Values::Unsupported(..)) => Task::Regression,
    };
    Ok((rows, task))
}

fn label_of(values: &Values, i: usize) -> Option<String> {
    match values {
        Values::Numeric(v) => (!v[i].is_nan()).then(|| format_number(v[i])),
        Values::Text(v) => v[i].clone(),
        Values::Unsupported(..) => None,
    }
}

/// `1` for 1.0, `2.5` for 2.5.
fn format_number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        x.to_string()
    }
}

impl Preprocessing {
    /// Learns the encoding of `config`'s features and target from the `train` rows.
    pub fn fit(table: &Table, config: &TrainConfig, task: Task, train: &[usize]) -> Result<Self> {
        let names: Vec<String> = match &config.features {
            Some(f) => f.clone(),
            None => table
                .names()
                .into_iter()
                .filter(|n| *n != config.target && !config.exclude.iter().any(|e| e == n))
                .map(str::to_string)
                .collect(),
        };
        if names.is_empty() {
            return Err(Error::invalid(
                "no feature columns: the data has only the target (and excluded columns)",
            ));
        }
        let mut features = Vec::new();
        for name in &names {
            let col = table.column(name)?;
            features.push(match &col.values {
                Values::Numeric(v) => {
                    let present: Vec<f64> =
                        train.iter().map(|i| v[*i]).filter(|x| !x.is_nan()).collect();
                    if present.is_empty() {
                        return Err(Error::invalid(format!(
                            "feature '{name}' has no values in the training rows (all missing): drop it with exclude: [{name}]"
                        )));
                    }
                    let n = present.len() as f64;
                    let mean = present.iter().sum::<f64>() / n;
                    let var = present.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
                    let std = if var.sqrt() > 1e-12 { var.sqrt() } else { 1.0 };
                    Feature::Numeric {
                        name: name.clone(),
                        mean,
                        std,
                        indicator: present.len() < train.len(),
                    }
                }
                Values::Text(v) => {
                    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
                    for i in train {
                        if let Some(s) = &v[*i] {
                            *counts.entry(s.as_str()).or_default() += 1;
                        }
                    }
                    if counts.is_empty() {
                        return Err(Error::invalid(format!(
                            "feature '{name}' has no values in the training rows (all missing): drop it with exclude: [{name}]"
                        )));
                    }
                    // Most frequent first; ties by name, so the order is stable.
                    let mut by_count: Vec<(&str, usize)> = counts.into_iter().collect();
                    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
                    let mut categories: Vec<String> = by_count
                        .into_iter()
                        .take(config.max_categories)
                        .map(|(s, _)| s.to_string())
                        .collect();
                    categories.sort();
                    Feature::Categorical {
                        name: name.clone(),
                        categories,
                    }
                }
                Values::Unsupported(t, _) => {
                    return Err(Error::invalid(format!(
                        "feature '{name}' is of type {t}, which the trainer cannot use: exclude it, or cast it to a number or text"
                    )))
                }
            });
        }
        let target = Target::fit(table, &config.target, task, train)?;
        Ok(Preprocessing { features, target })
    }

    /// Input columns per row.
    pub fn width(&self) -> usize {
        self.features.iter().map(Feature::width).sum()
    }

    /// Encodes `rows` of `table` (whose target is present) with class weights from
    /// `config`.
    pub fn encode(&self, table: &Table, rows: &[usize], weights: &[f32]) -> Result<Encoded> {
        let width = self.width();
        let x = self.encode_features(table, rows)?;
        let target = table.column(self.target_name())?;
        let mut y = Vec::with_capacity(rows.len());
        let mut weight = Vec::with_capacity(rows.len());
        for i in rows {
            match &self.target {
                Target::Classification { classes, .. } => {
                    let label = label_of(&target.values, *i).unwrap_or_default();
                    // A class only in validation rows has no output: it counts as
                    // wrong, never as a crash.
                    let k = classes.iter().position(|c| *c == label);
                    y.push(k.map_or(-1.0, |k| k as f32));
                    weight.push(k.map_or(0.0, |k| weights.get(k).copied().unwrap_or(1.0)));
                }
                Target::Regression { mean, std, .. } => {
                    let Values::Numeric(v) = &target.values else {
                        return Err(Error::invalid("the regression target is not numeric"));
                    };
                    y.push(((v[*i] - mean) / std) as f32);
                    weight.push(1.0);
                }
            }
        }
        Ok(Encoded {
            x,
            width,
            y,
            weight,
        })
    }

    /// The model's input for `rows` of `table` (`rows × width`, row-major): what
    /// training fed the model, and what a runtime feeds it at prediction time. The
    /// target column need not be present.
    pub fn encode_features(&self, table: &Table, rows: &[usize]) -> Result<Vec<f32>> {
        let width = self.width();
        let mut x = vec![0f32; rows.len() * width];
        let mut offset = 0;
        for f in &self.features {
            let col = table.column(f.name())?;
            match (f, &col.values) {
                (
                    Feature::Numeric {
                        mean,
                        std,
                        indicator,
                        ..
                    },
                    Values::Numeric(v),
                ) => {
                    for (r, i) in rows.iter().enumerate() {
                        let raw = v[*i];
                        let row = &mut x[r * width..(r + 1) * width];
                        row[offset] = if raw.is_nan() {
                            0.0
                        } else {
                            ((raw - mean) / std) as f32
                        };
                        if *indicator {
                            row[offset + 1] = if raw.is_nan() { 1.0 } else { 0.0 };
                        }
                    }
                }
                (Feature::Categorical { categories, .. }, Values::Text(v)) => {
                    for (r, i) in rows.iter().enumerate() {
                        let slot = v[*i]
                            .as_deref()
                            .and_then(|s| categories.binary_search_by(|c| c.as_str().cmp(s)).ok())
                            .unwrap_or(categories.len());
                        x[r * width + offset + slot] = 1.0;
                    }
                }
                (f, v) => {
                    return Err(Error::invalid(format!(
                        "feature '{}' was {} when the model was trained and is {} now",
                        f.name(),
                        match f {
                            Feature::Numeric { .. } => "numeric",
                            Feature::Categorical { .. } => "text",
                        },
                        v.kind()
                    )))
                }
            }
            offset += f.width();
        }
        Ok(x)
    }

    pub fn target_name(&self) -> &str {
        match &self.target {
            Target::Classification { name, .. } | Target::Regression { name, .. } => name,
        }
    }

    /// The loss weight of each class (1 without `class_weights`).
    pub fn class_weights(
        &self,
        config: &TrainConfig,
        table: &Table,
        train: &[usize],
    ) -> Result<Vec<f32>> {
        let Target::Classification { classes, .. } = &self.target else {
            return Ok(Vec::new());
        };
        let target = table.column(self.target_name())?;
        match &config.class_weights {
            None => Ok(vec![1.0; classes.len()]),
            Some(ClassWeights::Named(_)) => {
                let mut counts = vec![0usize; classes.len()];
                for i in train {
                    if let Some(k) = label_of(&target.values, *i)
                        .and_then(|l| classes.iter().position(|c| *c == l))
                    {
                        counts[k] += 1;
                    }
                }
                let n = train.len() as f64;
                Ok(counts
                    .iter()
                    .map(|c| (n / (classes.len() as f64 * (*c).max(1) as f64)) as f32)
                    .collect())
            }
            Some(ClassWeights::Given(m)) => {
                if let Some(unknown) = m.keys().find(|k| !classes.contains(k)) {
                    return Err(Error::invalid(format!(
                        "class_weights names class '{unknown}', which is not in the target; its classes: {}",
                        classes.join(", ")
                    )));
                }
                Ok(classes
                    .iter()
                    .map(|c| m.get(c).copied().unwrap_or(1.0) as f32)
                    .collect())
            }
        }
    }
}

/// A small, fast, seedable generator (SplitMix64): the same seed gives the same split
/// and batch order on every machine and every version.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Fisher–Yates.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// Splits `rows` into (train, validation): per class for classification (each class
/// keeps its share in both), at random for regression.
pub fn split(
    table: &Table,
    config: &TrainConfig,
    task: Task,
    rows: &[usize],
    rng: &mut Rng,
) -> Result<(Vec<usize>, Vec<usize>)> {
    let target = table.column(&config.target)?;
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    match task {
        Task::Classification => {
            for i in rows {
                groups
                    .entry(label_of(&target.values, *i).unwrap_or_default())
                    .or_default()
                    .push(*i);
            }
        }
        Task::Regression => {
            groups.insert(String::new(), rows.to_vec());
        }
    }
    let mut train = Vec::new();
    let mut valid = Vec::new();
    for (_, mut g) in groups {
        rng.shuffle(&mut g);
        let mut n_valid = (g.len() as f64 * config.validation_fraction).round() as usize;
        if g.len() >= 2 {
            n_valid = n_valid.clamp(1, g.len() - 1);
        } else {
            n_valid = 0;
        }
        valid.extend_from_slice(&g[..n_valid]);
        train.extend_from_slice(&g[n_valid..]);
    }
    if train.is_empty() || valid.is_empty() {
        return Err(Error::invalid(format!(
            "{} rows are too few to hold out a validation split: push more data",
            rows.len()
        )));
    }
    train.sort_unstable();
    valid.sort_unstable();
    Ok((train, valid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Column;
    use serde_json::json;

    fn table() -> Table {
        Table {
            columns: vec![
                Column {
                    name: "a".into(),
                    values: Values::Numeric(vec![1.0, 2.0, f64::NAN, 3.0, 4.0, 5.0]),
                },
                Column {
                    name: "c".into(),
                    values: Values::Text(vec![
                        Some("x".into()),
                        Some("y".into()),
                        None,
                        Some("x".into()),
                        Some("z".into()),
                        Some("x".into()),
                    ]),
                },
                Column {
                    name: "t".into(),
                    values: Values::Text(
                        ["p", "n", "p", "n", "p", "n"]
                            .iter()
                            .map(|s| Some(s.to_string()))
                            .collect(),
                    ),
                },
            ],
        }
    }

    #[test]
    fn features_are_learned_on_training_rows_and_encoded() {
        let t = table();
        let c =
            TrainConfig::from_value(json!({"target": "t", "max_categories": 2})).expect("config");
        let (rows, task) = usable_rows(&t, &c).expect("rows");
        assert_eq!(task, Task::Classification);
        let p = Preprocessing::fit(&t, &c, task, &rows).expect("fit");
        assert_eq!(
            p.features[0],
            Feature::Numeric {
                name: "a".into(),
                mean: 3.0,
                std: 2f64.sqrt(),
                indicator: true
            }
        );
        // x is the most frequent; y and z tie and y wins by name.
        assert_eq!(
            p.features[1],
            Feature::Categorical {
                name: "c".into(),
                categories: vec!["x".into(), "y".into()]
            }
        );
        assert_eq!(p.width(), 5);
        let e = p.encode(&t, &[2, 4], &[1.0, 1.0]).expect("encode");
        // Row 2: a missing (0, indicator 1), c missing (other slot).
        assert_eq!(&e.x[..5], &[0.0, 1.0, 0.0, 0.0, 1.0]);
        assert_eq!(e.x[5], (1.0 / 2f64.sqrt()) as f32);
        assert_eq!(&e.x[7..], &[0.0, 0.0, 1.0]);
        assert_eq!(e.y, vec![1.0, 1.0], "classes sorted: n=0, p=1");
    }

    #[test]
    fn bad_targets_and_features_are_refused() {
        let mut t = table();
        let one = TrainConfig::from_value(json!({"target": "t"})).expect("config");
        t.columns[2].values = Values::Text(vec![Some("p".into()); 6]);
        let e =
            Preprocessing::fit(&t, &one, Task::Classification, &[0, 1, 2]).expect_err("one class");
        assert!(e.to_string().contains("one class"), "{e}");
        let reg =
            TrainConfig::from_value(json!({"target": "c", "task": "regression"})).expect("config");
        let e = usable_rows(&table(), &reg).expect_err("text target");
        assert!(
            e.to_string().contains("cannot be a regression target"),
            "{e}"
        );
        let mut t = table();
        t.columns[0].values = Values::Numeric(vec![f64::NAN; 6]);
        let e = Preprocessing::fit(&t, &one, Task::Classification, &[0, 1, 3])
            .expect_err("all missing");
        assert!(e.to_string().contains("feature 'a' has no values"), "{e}");
        let unknown =
            TrainConfig::from_value(json!({"target": "t", "features": ["nope"]})).expect("config");
        let e = Preprocessing::fit(&table(), &unknown, Task::Classification, &[0, 1])
            .expect_err("unknown");
        assert!(
            e.to_string().contains("column 'nope' is not in the data"),
            "{e}"
        );
    }

    #[test]
    fn splits_are_stratified_and_reproducible() {
        let n = 100;
        let t = Table {
            columns: vec![Column {
                name: "y".into(),
                values: Values::Numeric((0..n).map(|i| if i < 80 { 0.0 } else { 1.0 }).collect()),
            }],
        };
        let c = TrainConfig::from_value(json!({"target": "y", "validation_fraction": 0.25}))
            .expect("config");
        let rows: Vec<usize> = (0..n).collect();
        let (tr, va) = split(&t, &c, Task::Classification, &rows, &mut Rng::new(7)).expect("split");
        assert_eq!((tr.len(), va.len()), (75, 25));
        assert_eq!(
            va.iter().filter(|i| **i >= 80).count(),
            5,
            "the minority keeps its share"
        );
        let again = split(&t, &c, Task::Classification, &rows, &mut Rng::new(7)).expect("split");
        assert_eq!((tr, va), again);
        let mut r = Rng::new(1);
        let mut v: Vec<usize> = (0..10).collect();
        r.shuffle(&mut v);
        let mut s = v.clone();
        s.sort_unstable();
        assert_eq!(s, (0..10).collect::<Vec<_>>());
    }
}
