//! The quality of a model's outputs on rows whose target is known, computed as the
//! trainer computes its validation metrics (one implementation: `qanat_train::metrics`),
//! so a report compares like with like.

use qanat_model::prep::{Preprocessing, Target};
use qanat_model::Table;

use crate::{Result, Runtime};

/// The headline metric of a model on a holdout and all its task metrics.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Quality {
    /// `accuracy` for classification, `rmse` for regression.
    pub metric: &'static str,
    pub value: f64,
    /// Every task metric (accuracy, f1, auc; or rmse, mae).
    pub metrics: Vec<(String, f64)>,
}

impl Quality {
    /// True when higher values are better (accuracy), false for errors (RMSE).
    pub fn higher_is_better(&self) -> bool {
        self.metric == "accuracy"
    }
}

/// Runs `runtime` on `rows` of `table` and scores it against the target.
pub fn quality(
    runtime: &dyn Runtime,
    prep: &Preprocessing,
    table: &Table,
    rows: &[usize],
) -> Result<Quality> {
    let subset = table_rows(table, rows);
    let out = runtime.predict(&subset)?;
    let all: Vec<usize> = (0..subset.rows()).collect();
    let y = prep.encode(&subset, &all, &[])?.y;
    let metrics = qanat_train::metrics::of_outputs(&prep.target, &out, &y, "");
    let metric = match prep.target {
        Target::Classification { .. } => "accuracy",
        Target::Regression { .. } => "rmse",
    };
    let value = metrics
        .iter()
        .find(|(n, _)| n == metric)
        .map_or(f64::NAN, |(_, v)| *v);
    Ok(Quality {
        metric,
        value,
        metrics,
    })
}

/// The given rows of `table`, in that order.
pub fn table_rows(table: &Table, rows: &[usize]) -> Table {
    use qanat_model::table::{Column, Values};
    Table {
        columns: table
            .columns
            .iter()
            .map(|c| Column {
                name: c.name.clone(),
                values: match &c.values {
                    Values::Numeric(v) => Values::Numeric(rows.iter().map(|i| v[*i]).collect()),
                    Values::Text(v) => Values::Text(rows.iter().map(|i| v[*i].clone()).collect()),
                    Values::Unsupported(t, _) => Values::Unsupported(t.clone(), rows.len()),
                },
            })
            .collect(),
    }
}

/// The rows of `table` whose target is present: what a holdout can score.
pub fn labelled_rows(table: &Table, prep: &Preprocessing) -> Result<Vec<usize>> {
    use qanat_model::table::Values;
    let target = table.column(prep.target_name())?;
    Ok(match &target.values {
        Values::Numeric(v) => (0..v.len()).filter(|i| !v[*i].is_nan()).collect(),
        Values::Text(v) => (0..v.len()).filter(|i| v[*i].is_some()).collect(),
        Values::Unsupported(..) => Vec::new(),
    })
}

/// The index of the largest value (the first of equals; 0 for none): a row's class.
pub fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, x)| {
            if *x > bv {
                (i, *x)
            } else {
                (bi, bv)
            }
        })
        .0
}
