//! The Open Inference Protocol's REST messages, and how a request's tensors become the
//! table a model takes and its outputs become response tensors.
//!
//! A Qanat model takes one tensor per feature column, named as the column (as its
//! MLflow signature says): numbers as any numeric datatype (`FP64` in metadata), text as
//! `BYTES`, each of shape `[N]` or `[N, 1]`, `null` for a missing value. Its outputs:
//! - `output` (`FP32`, `[N, k]`): what the trainer computes (logits, or the
//!   standardized target);
//! - classification: `probability` (`[N, 1]`, binary: the second class's) or
//!   `probabilities` (`[N, classes]`), and `label` (`BYTES`, `[N]`, the predicted class);
//! - regression: `prediction` (`[N, 1]`, in the target's units).

use qanat_runtime::package::NativeModel;
use qanat_runtime::Runtime;
use qanat_train::prep::Target;
use qanat_train::table::{Column, Table, Values};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{Error, Loaded, Result};

/// The most rows one request may carry.
pub const MAX_ROWS: usize = 65_536;

/// One input or output in model metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TensorMetadata {
    pub name: String,
    pub datatype: String,
    /// `-1` for a variable dimension (the batch).
    pub shape: Vec<i64>,
}

/// `GET /v2`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ServerMetadata {
    pub name: String,
    pub version: String,
    pub extensions: Vec<String>,
}

/// `GET /v2/models/{name}[/versions/{v}]`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorMetadata>,
    pub outputs: Vec<TensorMetadata>,
}

/// One input tensor of a request.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct RequestInput {
    pub name: String,
    pub shape: Vec<i64>,
    pub datatype: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Map<String, Value>>,
    /// Row-major, flat or nested.
    #[schema(value_type = Vec<Object>)]
    pub data: Value,
}

/// An output a request asks for.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct RequestOutput {
    pub name: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Map<String, Value>>,
}

/// `POST .../infer`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct InferRequest {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Map<String, Value>>,
    pub inputs: Vec<RequestInput>,
    /// Omitted: every output.
    #[serde(default)]
    pub outputs: Option<Vec<RequestOutput>>,
}

/// One output tensor of a response.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ResponseOutput {
    pub name: String,
    pub shape: Vec<usize>,
    pub datatype: String,
    /// Row-major, flat.
    #[schema(value_type = Vec<Object>)]
    pub data: Value,
}

/// The answer to an [`InferRequest`].
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub outputs: Vec<ResponseOutput>,
}

/// The model's inputs: one `[-1, 1]` tensor per feature column.
pub fn input_metadata(model: &NativeModel) -> Vec<TensorMetadata> {
    model
        .spec()
        .inputs
        .iter()
        .map(|i| TensorMetadata {
            name: i.name.clone(),
            datatype: if i.dtype == "string" { "BYTES" } else { "FP64" }.into(),
            shape: vec![-1, 1],
        })
        .collect()
}

/// The model's outputs (see [the module](self)).
pub fn output_metadata(model: &NativeModel) -> Vec<TensorMetadata> {
    let target = &model.spec().preprocessing.target;
    let k = target.outputs() as i64;
    let t = |name: &str, datatype: &str, shape: Vec<i64>| TensorMetadata {
        name: name.into(),
        datatype: datatype.into(),
        shape,
    };
    let mut out = vec![t("output", "FP32", vec![-1, k])];
    match target {
        Target::Classification { classes, .. } if classes.len() == 2 => {
            out.push(t("probability", "FP32", vec![-1, 1]));
            out.push(t("label", "BYTES", vec![-1]));
        }
        Target::Classification { .. } => {
            out.push(t("probabilities", "FP32", vec![-1, k]));
            out.push(t("label", "BYTES", vec![-1]));
        }
        Target::Regression { .. } => out.push(t("prediction", "FP32", vec![-1, 1])),
    }
    out
}

/// The datatypes a numeric input may come as.
const NUMERIC: [&str; 13] = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
    "BF16", "FP32", "FP64",
];

/// Flattens row-major `data` (flat or nested) into `out`.
fn flatten<'a>(data: &'a Value, out: &mut Vec<&'a Value>) {
    match data {
        Value::Array(items) => {
            for v in items {
                flatten(v, out);
            }
        }
        v => out.push(v),
    }
}

/// The rows a request carries, checked: every input `[N]` or `[N, 1]` with N values,
/// the same N everywhere.
fn rows_of(input: &RequestInput) -> Result<usize> {
    let bad = || {
        Error::Invalid(format!(
            "input '{}' has shape {:?}: a model input is [N] or [N, 1], one value a row",
            input.name, input.shape
        ))
    };
    let n = match input.shape[..] {
        [n] | [n, 1] => usize::try_from(n).map_err(|_| bad())?,
        _ => return Err(bad()),
    };
    if n > MAX_ROWS {
        return Err(Error::Invalid(format!(
            "input '{}' has {n} rows; a request carries at most {MAX_ROWS}",
            input.name
        )));
    }
    Ok(n)
}

/// `input`'s values as a table column of `n` rows, for a model input of MLflow type
/// `dtype` (`double` or `string`).
fn column(input: &RequestInput, n: usize, dtype: &str) -> Result<Column> {
    let mut flat = Vec::with_capacity(n);
    flatten(&input.data, &mut flat);
    if flat.len() != n {
        return Err(Error::Invalid(format!(
            "input '{}' has shape {:?} ({n} values) but {} data values",
            input.name,
            input.shape,
            flat.len()
        )));
    }
    let values = if dtype == "string" {
        if input.datatype != "BYTES" {
            return Err(Error::Invalid(format!(
                "input '{}' is text: send it as BYTES, not {}",
                input.name, input.datatype
            )));
        }
        Values::Text(
            flat.iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(Some(s.clone())),
                    Value::Null => Ok(None),
                    other => Err(Error::Invalid(format!(
                        "input '{}' value {i} is {other}: BYTES data are strings",
                        input.name
                    ))),
                })
                .collect::<Result<_>>()?,
        )
    } else {
        if !NUMERIC.contains(&input.datatype.as_str()) {
            return Err(Error::Invalid(format!(
                "input '{}' is numeric: send it as FP64, FP32 or another numeric datatype, not {}",
                input.name, input.datatype
            )));
        }
        let boolean = input.datatype == "BOOL";
        Values::Numeric(
            flat.iter()
                .enumerate()
                .map(|(i, v)| {
                    match v {
                        Value::Number(x) if !boolean => x.as_f64().ok_or(()),
                        Value::Bool(b) if boolean => Ok(f64::from(u8::from(*b))),
                        Value::Null => Ok(f64::NAN),
                        _ => Err(()),
                    }
                    .map_err(|()| {
                        Error::Invalid(format!(
                            "input '{}' value {i} is {v}, which is not {}",
                            input.name, input.datatype
                        ))
                    })
                })
                .collect::<Result<_>>()?,
        )
    };
    Ok(Column {
        name: input.name.clone(),
        values,
    })
}

/// The request's inputs as the table the model takes, checked against its signature.
pub fn table(loaded: &Loaded, request: &InferRequest) -> Result<Table> {
    let spec = loaded.model.spec();
    for input in &request.inputs {
        if !spec.inputs.iter().any(|i| i.name == input.name) {
            return Err(Error::Invalid(format!(
                "input '{}' is not one of model '{}''s inputs ({})",
                input.name,
                loaded.name,
                spec.inputs
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    let mut rows = None;
    let mut columns = Vec::with_capacity(spec.inputs.len());
    for want in &spec.inputs {
        let found: Vec<&RequestInput> = request
            .inputs
            .iter()
            .filter(|i| i.name == want.name)
            .collect();
        let input = match found[..] {
            [one] => one,
            [] => {
                return Err(Error::Invalid(format!(
                    "input '{}' is missing: model '{}' takes {} inputs, one per feature column",
                    want.name,
                    loaded.name,
                    spec.inputs.len()
                )))
            }
            _ => {
                return Err(Error::Invalid(format!(
                    "input '{}' is given more than once",
                    want.name
                )))
            }
        };
        let n = rows_of(input)?;
        match rows {
            Some(r) if r != n => {
                return Err(Error::Invalid(format!(
                    "input '{}' has {n} rows but another input has {r}: every input carries the same rows",
                    input.name
                )))
            }
            _ => rows = Some(n),
        }
        columns.push(column(input, n, &want.dtype)?);
    }
    Ok(Table { columns })
}

/// Runs `request` on `loaded` (blocking: call off the async runtime).
pub fn infer(loaded: &Loaded, request: InferRequest) -> Result<InferResponse> {
    let wanted: Option<Vec<String>> = request
        .outputs
        .as_ref()
        .map(|o| o.iter().map(|o| o.name.clone()).collect());
    if let Some(w) = &wanted {
        if let Some(bad) = w
            .iter()
            .find(|n| !loaded.outputs.iter().any(|o| o.name == **n))
        {
            return Err(Error::Invalid(format!(
                "output '{bad}' is not one of model '{}''s outputs ({})",
                loaded.name,
                loaded
                    .outputs
                    .iter()
                    .map(|o| o.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    let table = table(loaded, &request)?;
    let n = table.rows();
    let raw = if n == 0 {
        Vec::new()
    } else {
        loaded.model.predict(&table)?
    };
    let k = loaded.model.outputs();
    let target = &loaded.model.spec().preprocessing.target;
    let floats = |v: Vec<f32>| Value::from(v.into_iter().map(f64::from).collect::<Vec<_>>());
    let mut outputs = vec![ResponseOutput {
        name: "output".into(),
        shape: vec![n, k],
        datatype: "FP32".into(),
        data: floats(raw.clone()),
    }];
    match target {
        Target::Classification { classes, .. } => {
            let (probs, width): (Vec<f32>, usize) = if classes.len() == 2 {
                (raw.iter().map(|z| 1.0 / (1.0 + (-z).exp())).collect(), 1)
            } else {
                (raw.chunks(k.max(1)).flat_map(softmax).collect(), k)
            };
            let labels: Vec<Value> = probs
                .chunks(width.max(1))
                .map(|p| {
                    let class = if width == 1 {
                        usize::from(p[0] > 0.5)
                    } else {
                        qanat_runtime::evaluate::argmax(p)
                    };
                    Value::from(classes[class].clone())
                })
                .collect();
            outputs.push(ResponseOutput {
                name: if width == 1 {
                    "probability"
                } else {
                    "probabilities"
                }
                .into(),
                shape: vec![n, width],
                datatype: "FP32".into(),
                data: floats(probs),
            });
            outputs.push(ResponseOutput {
                name: "label".into(),
                shape: vec![n],
                datatype: "BYTES".into(),
                data: Value::Array(labels),
            });
        }
        Target::Regression { mean, std, .. } => outputs.push(ResponseOutput {
            name: "prediction".into(),
            shape: vec![n, 1],
            datatype: "FP32".into(),
            data: Value::from(
                raw.iter()
                    .map(|z| f64::from((f64::from(*z) * std + mean) as f32))
                    .collect::<Vec<_>>(),
            ),
        }),
    }
    if let Some(w) = wanted {
        outputs.retain(|o| w.contains(&o.name));
    }
    Ok(InferResponse {
        model_name: loaded.name.clone(),
        model_version: loaded.version.clone(),
        id: request.id,
        outputs,
    })
}

fn softmax(z: &[f32]) -> Vec<f32> {
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = z.iter().map(|v| (v - m).exp()).collect();
    let s: f32 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(v: Value) -> RequestInput {
        serde_json::from_value(v).expect("input")
    }

    #[test]
    fn nested_and_flat_data_give_the_same_column() {
        let flat =
            input(json!({"name": "a", "shape": [2, 1], "datatype": "FP32", "data": [1.5, null]}));
        let nested = input(
            json!({"name": "a", "shape": [2, 1], "datatype": "FP32", "data": [[1.5], [null]]}),
        );
        for i in [flat, nested] {
            let c = column(&i, rows_of(&i).expect("rows"), "double").expect("column");
            let Values::Numeric(v) = c.values else {
                panic!("numbers")
            };
            assert_eq!(v[0], 1.5);
            assert!(v[1].is_nan());
        }
    }

    #[test]
    fn bad_tensors_say_what_to_fix() {
        let i = input(
            json!({"name": "a", "shape": [2, 3], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6]}),
        );
        assert!(rows_of(&i)
            .expect_err("2x3")
            .to_string()
            .contains("[N] or [N, 1]"));
        let i = input(json!({"name": "a", "shape": [3], "datatype": "FP32", "data": [1, 2]}));
        let e = column(&i, 3, "double").expect_err("short");
        assert!(e.to_string().contains("2 data values"), "{e}");
        let i = input(json!({"name": "a", "shape": [1], "datatype": "BYTES", "data": ["x"]}));
        let e = column(&i, 1, "double").expect_err("text for a number");
        assert!(e.to_string().contains("numeric"), "{e}");
        let i = input(json!({"name": "a", "shape": [1], "datatype": "FP32", "data": ["x"]}));
        let e = column(&i, 1, "double").expect_err("a string as FP32");
        assert!(e.to_string().contains("not FP32"), "{e}");
        let i = input(json!({"name": "a", "shape": [-1], "datatype": "FP32", "data": []}));
        assert!(rows_of(&i).is_err());
    }
}
