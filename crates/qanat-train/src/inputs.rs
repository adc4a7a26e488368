//! The data checks a `train` (or `sweep`) job gets at submit, from the profiles Qanat
//! stored with each input version when it was pushed (columns, Arrow types, nulls,
//! distinct counts): unknown columns, a target with no values or a single value, a
//! text target for regression, a feature with no values. The same checks run again on
//! the rows themselves when the job starts; this answers the submitter at once (400).
//! Inputs with no stored profile (no CSV or Parquet files) are checked at start only.

use std::collections::BTreeMap;

use qanat_model::config::Task;

use crate::{Error, Result, TrainConfig};

/// One column of one file of an input, as the profile stored with the input's version
/// describes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ColumnFacts {
    pub name: String,
    /// Arrow's type name (`Float64`, `Utf8`, …).
    pub data_type: String,
    /// The file's rows.
    pub rows: u64,
    pub nulls: u64,
    pub distinct: u64,
}

/// An input (`dataset:name@v`) and the columns of every file of it that has a profile
/// (none when no file has one).
pub type InputFacts = (String, Vec<ColumnFacts>);

#[derive(Default)]
struct Col {
    data_type: String,
    rows: u64,
    nulls: u64,
    distinct: u64,
}

fn is_text(t: &str) -> bool {
    t.contains("Utf8")
}

/// Checks `config` against the profiles of its inputs (`dataset:name@v`, files).
pub fn check_profiles(config: &TrainConfig, inputs: &[InputFacts]) -> Result<()> {
    let mut cols: BTreeMap<String, Col> = BTreeMap::new();
    let mut names = Vec::new();
    for (name, columns) in inputs {
        if !columns.is_empty() {
            names.push(name.as_str());
        }
        for c in columns {
            let e = cols.entry(c.name.clone()).or_default();
            e.data_type.clone_from(&c.data_type);
            e.rows += c.rows;
            e.nulls += c.nulls;
            e.distinct = e.distinct.max(c.distinct);
        }
    }
    if cols.is_empty() {
        return Ok(());
    }
    names.dedup();
    let from = names.join(", ");
    let known = || cols.keys().cloned().collect::<Vec<_>>().join(", ");
    let bad = |m: String| Err(Error::invalid(m));
    let Some(target) = cols.get(&config.target) else {
        return bad(format!(
            "target '{}' is not a column of {from}; its columns are: {}",
            config.target,
            known()
        ));
    };
    if target.nulls >= target.rows {
        return bad(format!(
            "target '{}' has no values in {from}",
            config.target
        ));
    }
    if target.distinct <= 1 {
        return bad(format!(
            "target '{}' has a single value in {from}: there is nothing to learn (a classifier needs two classes)",
            config.target
        ));
    }
    if config.task == Some(Task::Regression) && is_text(&target.data_type) {
        return bad(format!(
            "target '{}' is text ({}), so it cannot be a regression target: use task: classification, or a numeric column",
            config.target, target.data_type
        ));
    }
    let features: Vec<String> = match &config.features {
        Some(f) => {
            for n in f {
                if !cols.contains_key(n) {
                    return bad(format!(
                        "feature '{n}' is not a column of {from}; its columns are: {}",
                        known()
                    ));
                }
            }
            f.clone()
        }
        None => cols
            .keys()
            .filter(|n| **n != config.target && !config.exclude.contains(n))
            .cloned()
            .collect(),
    };
    for n in &features {
        if let Some(c) = cols.get(n) {
            if c.nulls >= c.rows {
                return bad(format!(
                    "feature '{n}' has no values in {from}: leave it out (exclude: [{n}]) or fill it"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn col(name: &str, t: &str, nulls: u64, distinct: u64) -> ColumnFacts {
        ColumnFacts {
            name: name.into(),
            data_type: t.into(),
            rows: 10,
            nulls,
            distinct,
        }
    }

    fn inputs(cols: Vec<ColumnFacts>) -> Vec<InputFacts> {
        vec![("dataset:d@1".into(), cols)]
    }

    #[test]
    fn data_problems_are_found_in_the_profiles() {
        let ok = || {
            vec![
                col("x", "Float64", 0, 10),
                col("empty", "Float64", 10, 0),
                col("label", "Utf8", 0, 2),
            ]
        };
        let cfg = |v: serde_json::Value| TrainConfig::from_value(v).expect("config");
        let check = |c: &TrainConfig, cols| check_profiles(c, &inputs(cols));
        let c = cfg(json!({"target": "label", "exclude": ["empty"]}));
        check(&c, ok()).expect("fine");
        for (c, cols, says) in [
            (
                cfg(json!({"target": "nope"})),
                ok(),
                "target 'nope' is not a column of dataset:d@1",
            ),
            (
                cfg(json!({"target": "label", "features": ["x", "z"]})),
                ok(),
                "feature 'z'",
            ),
            (
                cfg(json!({"target": "label"})),
                ok(),
                "feature 'empty' has no values",
            ),
            (
                cfg(json!({"target": "label", "exclude": ["empty"], "task": "regression"})),
                ok(),
                "cannot be a regression target",
            ),
            (
                cfg(json!({"target": "label", "features": ["x"]})),
                vec![col("x", "Float64", 0, 10), col("label", "Utf8", 0, 1)],
                "single value",
            ),
            (
                cfg(json!({"target": "label", "features": ["x"]})),
                vec![col("x", "Float64", 0, 10), col("label", "Utf8", 10, 0)],
                "no values",
            ),
        ] {
            let e = check(&c, cols).expect_err(says).to_string();
            assert!(e.contains(says), "{e}");
        }
        // No profile (not a table): nothing to check here.
        check_profiles(&c, &[("dataset:d@1".into(), vec![])]).expect("no profile");
    }
}
