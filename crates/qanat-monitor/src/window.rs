//! One window of the inference log as the monitor sees it: the answers each version
//! gave, their inputs and outputs profiled on the version's reference bins, and the
//! rows scored against the labels posted for them.

use std::collections::{BTreeMap, HashMap};

use qanat_serving::log::LogRecord;
use serde_json::{Map, Value};

use crate::profile::TableProfile;
use crate::profile::{CategoricalProfile, ColumnProfile, NumericProfile};
use crate::quality::{class_of, Scored};

/// The answers (not shadows' copies) of each version, most rows first.
pub(crate) fn by_version(records: &[LogRecord]) -> Vec<(String, Vec<&LogRecord>)> {
    let mut groups: BTreeMap<&str, Vec<&LogRecord>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.role == "answer") {
        groups.entry(r.version.as_str()).or_default().push(r);
    }
    let mut out: Vec<(String, Vec<&LogRecord>)> = groups
        .into_iter()
        .map(|(v, rs)| (v.to_string(), rs))
        .collect();
    out.sort_by_key(|(v, rs)| (std::cmp::Reverse(rows(rs)), v.clone()));
    out
}

/// Rows the records carried.
pub(crate) fn rows(records: &[&LogRecord]) -> u64 {
    records.iter().map(|r| u64::from(r.rows)).sum()
}

fn parse(text: &str) -> Map<String, Value> {
    serde_json::from_str(text).unwrap_or_default()
}

/// A column's values in one record, row-major flattened.
fn flat(v: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    qanat_serving::oip::flatten_values(v, &mut out);
    out
}

fn empty_like(p: &ColumnProfile) -> ColumnProfile {
    match p {
        ColumnProfile::Numeric(n) => ColumnProfile::Numeric(NumericProfile::new(n.bins)),
        ColumnProfile::Categorical(_) => ColumnProfile::Categorical(CategoricalProfile::default()),
    }
}

fn add(profile: &mut ColumnProfile, v: &Value) {
    match profile {
        ColumnProfile::Numeric(p) => p.add(match v {
            Value::Number(n) => n.as_f64(),
            // A number sent as text still counts; anything else (a pseudonym) is null.
            Value::String(s) => s.trim().parse().ok(),
            Value::Bool(b) => Some(f64::from(u8::from(*b))),
            _ => None,
        }),
        ColumnProfile::Categorical(p) => p.add(class_of(v).as_deref()),
    }
}

/// Profiles the `field` JSON of `records` (inputs or outputs) on the columns and bins
/// of `reference`. A column no record carries is left out, so the comparison reports
/// it missing rather than drifted; a record's values count only when it gives one
/// per row.
fn profile(
    records: &[&LogRecord],
    reference: &[(String, ColumnProfile)],
    field: fn(&LogRecord) -> &str,
) -> TableProfile {
    let mut columns: Vec<(String, ColumnProfile, bool)> = reference
        .iter()
        .map(|(n, p)| (n.clone(), empty_like(p), false))
        .collect();
    for r in records {
        let values = parse(field(r));
        for (name, profile, seen) in &mut columns {
            let Some(v) = values.get(name.as_str()) else {
                continue;
            };
            let flat = flat(v);
            if flat.len() != r.rows as usize {
                continue;
            }
            *seen = true;
            for x in flat {
                add(profile, x);
            }
        }
    }
    TableProfile {
        rows: rows(records),
        columns: columns
            .into_iter()
            .filter(|(_, _, seen)| *seen)
            .map(|(n, p, _)| (n, p))
            .collect(),
        target: None,
        predictions: Vec::new(),
    }
}

/// The records' inputs on the reference's feature columns (the target left out: it
/// is not an input).
pub(crate) fn inputs(records: &[&LogRecord], reference: &TableProfile) -> TableProfile {
    let features: Vec<(String, ColumnProfile)> = reference
        .columns
        .iter()
        .filter(|(n, _)| Some(n) != reference.target.as_ref())
        .cloned()
        .collect();
    profile(records, &features, |r| &r.inputs)
}

/// The records' outputs on the reference's prediction columns.
pub(crate) fn outputs(records: &[&LogRecord], reference: &TableProfile) -> TableProfile {
    profile(records, &reference.predictions, |r| &r.outputs)
}

/// The reference's feature columns alone, as the inputs are compared with them.
pub(crate) fn features(reference: &TableProfile) -> TableProfile {
    TableProfile {
        rows: reference.rows,
        columns: reference
            .columns
            .iter()
            .filter(|(n, _)| Some(n) != reference.target.as_ref())
            .cloned()
            .collect(),
        target: None,
        predictions: Vec::new(),
    }
}

/// The reference's outputs as a table of their own.
pub(crate) fn predictions(reference: &TableProfile) -> TableProfile {
    TableProfile {
        rows: reference.rows,
        columns: reference.predictions.clone(),
        target: None,
        predictions: Vec::new(),
    }
}

/// A label's key: the request's id, or the id it gave itself.
pub(crate) fn ids(r: &LogRecord) -> impl Iterator<Item = &str> {
    std::iter::once(r.request_id.as_str()).chain(r.inference_id.as_deref())
}

/// The rows of `records` that have a label in `labels` (by either id), scored: one
/// per row, the label a single value for a one-row request or one value per row.
/// Returns them and the ids matched.
pub(crate) fn scored(
    records: &[&LogRecord],
    labels: &HashMap<String, Value>,
) -> (Vec<Scored>, Vec<String>) {
    let mut out = Vec::new();
    let mut matched = Vec::new();
    for r in records {
        let Some((id, truth)) = ids(r).find_map(|id| Some((id, labels.get(id)?))) else {
            continue;
        };
        matched.push(id.to_string());
        let truths: Vec<&Value> = match truth {
            Value::Array(_) => flat(truth),
            one => vec![one],
        };
        if truths.len() != r.rows as usize {
            continue;
        }
        let outputs = parse(&r.outputs);
        let column =
            |name: &str| -> Vec<&Value> { outputs.get(name).map(flat).unwrap_or_default() };
        let (labels_out, probs, preds) =
            (column("label"), column("probability"), column("prediction"));
        let at = |v: &[&Value], i: usize| -> Option<f64> {
            (v.len() == r.rows as usize)
                .then(|| v[i].as_f64())
                .flatten()
        };
        for (i, t) in truths.into_iter().enumerate() {
            if t.is_null() {
                continue;
            }
            out.push(Scored {
                label: (labels_out.len() == r.rows as usize)
                    .then(|| class_of(labels_out[i]))
                    .flatten(),
                probability: at(&probs, i),
                prediction: at(&preds, i),
                truth: t.clone(),
            });
        }
    }
    (out, matched)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A logged answer of `version` (the watcher's tests use it too).
    pub(crate) fn record(version: &str, inputs: Value, outputs: Value, rows: u32) -> LogRecord {
        LogRecord {
            time: 1,
            request_id: format!("r-{inputs}"),
            inference_id: None,
            actor: "a".into(),
            deployment: "web".into(),
            model: "m".into(),
            version: version.into(),
            role: "answer".into(),
            rows,
            latency_us: 1,
            queue_us: 0,
            inputs: inputs.to_string(),
            outputs: outputs.to_string(),
            pii_found: Default::default(),
        }
    }

    #[test]
    fn inputs_are_profiled_per_version_and_absent_columns_are_left_out() {
        let reference = crate::profile::reference_of(&[
            (
                "x".into(),
                crate::profile::Values::Numeric(&[1.0, 2.0, 3.0]),
            ),
            (
                "k".into(),
                crate::profile::Values::Text(&[Some("a".into()), None, Some("b".into())]),
            ),
            (
                "y".into(),
                crate::profile::Values::Numeric(&[0.0, 1.0, 0.0]),
            ),
        ]);
        let reference = TableProfile {
            target: Some("y".into()),
            ..reference
        };
        let records = [
            record(
                "1",
                json!({"x": [[1.5], [2.5]], "k": ["a", null]}),
                json!({}),
                2,
            ),
            record("2", json!({"x": [9]}), json!({}), 1),
            record("1", json!({"x": [2], "k": ["a", "b"]}), json!({}), 1),
        ];
        let groups = by_version(&records);
        assert_eq!(groups[0].0, "1");
        assert_eq!(rows(&groups[0].1), 3);
        let p = inputs(&groups[0].1, &reference);
        let names: Vec<&str> = p.columns.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["x", "k"]);
        let ColumnProfile::Numeric(x) = &p.columns[0].1 else {
            panic!("x is numeric");
        };
        assert_eq!(x.count, 3);
        let ColumnProfile::Categorical(k) = &p.columns[1].1 else {
            panic!("k is categorical");
        };
        // The third record gave two values for one row: not counted.
        assert_eq!(k.count + k.nulls, 2);
        let p2 = inputs(&groups[1].1, &reference);
        assert_eq!(p2.columns.len(), 1, "k is absent from version 2's traffic");
    }

    #[test]
    fn labels_match_by_either_id_and_score_each_row() {
        let mut r = record(
            "1",
            json!({"x": [1, 2]}),
            json!({"label": ["M", "B"], "probability": [[0.8], [0.3]]}),
            2,
        );
        r.inference_id = Some("mine-1".into());
        let labels = HashMap::from([("mine-1".to_string(), json!(["M", "M"]))]);
        let (rows, matched) = scored(&[&r], &labels);
        assert_eq!(matched, ["mine-1"]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].label.as_deref(), Some("B"));
        assert_eq!(rows[1].probability, Some(0.3));
        let wrong = HashMap::from([(r.request_id.clone(), json!("M"))]);
        let (rows, matched) = scored(&[&r], &wrong);
        assert_eq!(
            (rows.len(), matched.len()),
            (0, 1),
            "one value for two rows"
        );
    }
}
