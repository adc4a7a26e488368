//! A model's outputs on its training rows, computed the way serving computes them
//! (through [`oip::infer`]) and profiled: the reference that monitoring's prediction
//! drift compares live outputs with. The train job stores it in the model's package.

use std::collections::BTreeMap;

use qanat_model::profile::{reference_of, ColumnProfile, Values};
use qanat_model::table::{Table, Values as V};
use qanat_runtime::package::NativeModel;
use serde_json::Value;

use crate::oip::{self, InferRequest, RequestInput};
use crate::{Loaded, Model, Result};

/// Training rows the outputs are profiled on, at most (evenly spread).
const ROWS: usize = 50_000;

/// The outputs of the model in `spec` and `weights` on `rows` of `table` — `label`,
/// `probability` (binary) or `prediction` (regression) — profiled.
pub fn profile(
    spec: &[u8],
    weights: &[u8],
    table: &Table,
    rows: &[usize],
) -> Result<Vec<(String, ColumnProfile)>> {
    let model = NativeModel::from_bytes(spec, weights)?;
    let loaded = Loaded {
        name: "reference".into(),
        version: "1".into(),
        inputs: oip::input_metadata(&model),
        outputs: oip::output_metadata(&model),
        model: Model::Native(model),
    };
    let step = rows.len().div_ceil(ROWS).max(1);
    let picked: Vec<usize> = rows.iter().step_by(step).copied().collect();
    let mut outputs: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for chunk in picked.chunks(oip::MAX_ROWS) {
        let mut inputs = Vec::with_capacity(loaded.inputs.len());
        for m in &loaded.inputs {
            let col = table.column(&m.name).map_err(qanat_runtime::Error::from)?;
            let data = chunk.iter().map(|&r| cell(&col.values, r)).collect();
            inputs.push(RequestInput {
                name: m.name.clone(),
                shape: vec![chunk.len() as i64, 1],
                datatype: m.datatype.clone(),
                parameters: None,
                data: Value::Array(data),
                raw: None,
            });
        }
        let request = InferRequest {
            id: None,
            parameters: None,
            inputs,
            outputs: None,
        };
        for o in oip::infer(&loaded, request)?.outputs {
            if !["label", "probability", "prediction"].contains(&o.name.as_str()) {
                continue;
            }
            let mut flat = Vec::new();
            oip::flatten_values(&o.data, &mut flat);
            outputs
                .entry(o.name)
                .or_default()
                .extend(flat.into_iter().cloned());
        }
    }
    let numbers: Vec<(String, Vec<f64>)> = outputs
        .iter()
        .filter(|(n, _)| n.as_str() != "label")
        .map(|(n, v)| {
            let xs = v.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect();
            (n.clone(), xs)
        })
        .collect();
    let labels: Vec<(String, Vec<Option<String>>)> = outputs
        .iter()
        .filter(|(n, _)| n.as_str() == "label")
        .map(|(n, v)| {
            let xs = v.iter().map(|x| x.as_str().map(str::to_string)).collect();
            (n.clone(), xs)
        })
        .collect();
    let mut columns: Vec<(String, Values<'_>)> = numbers
        .iter()
        .map(|(n, v)| (n.clone(), Values::Numeric(v)))
        .collect();
    columns.extend(labels.iter().map(|(n, v)| (n.clone(), Values::Text(v))));
    Ok(reference_of(&columns).columns)
}

/// Row `r` of a column as a request carries it (`null` when missing).
fn cell(values: &V, r: usize) -> Value {
    match values {
        V::Numeric(v) => v
            .get(r)
            .filter(|x| !x.is_nan())
            .map_or(Value::Null, |x| serde_json::json!(x)),
        V::Text(v) => v
            .get(r)
            .cloned()
            .flatten()
            .map_or(Value::Null, Value::String),
        V::Unsupported(..) => Value::Null,
    }
}
