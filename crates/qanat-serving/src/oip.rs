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
//!
//! An ONNX model made elsewhere is served tensor by tensor, as Triton serves ONNX: its
//! graph's inputs (`[N, …]`, any numeric datatype) and its result tensor (`FP32`).

use qanat_model::prep::Target;
use qanat_model::table::{Column, Table, Values};
use qanat_runtime::onnx::{OnnxGraph, TensorLayout};
use qanat_runtime::package::NativeModel;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tensor::{Elem, Elements, Raw};
pub use qanat_types::serving::{InferResponse, ResponseOutput};

use crate::{Error, Loaded, Model, Result};

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
    /// Row-major, flat or nested; absent when the tensor comes as binary data
    /// (`parameters.binary_data_size`, Triton's binary tensor extension).
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    pub data: Value,
    /// The tensor as raw bytes (the binary extension, gRPC), instead of `data`.
    #[serde(skip)]
    pub raw: Option<Raw>,
}

impl RequestInput {
    /// Its elements in row-major order, from `raw` when it came as bytes.
    pub fn elements(&self) -> Elements<'_> {
        Elements::of(&self.data, self.raw.as_ref())
    }

    /// How many elements it carries.
    pub fn element_count(&self) -> usize {
        match &self.raw {
            Some(r) => r.len(),
            // Counted in place: no list of references made only to be measured.
            None => crate::tensor::json_count(&self.data),
        }
    }
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

/// An ONNX model's inputs: the graph's, `[-1, …]` with its element type.
pub fn onnx_input_metadata(graph: &OnnxGraph, layout: &TensorLayout) -> Vec<TensorMetadata> {
    graph
        .inputs
        .iter()
        .zip(layout.input_dims())
        .map(|(p, dims)| TensorMetadata {
            name: p.name.clone(),
            datatype: onnx_datatype(p.elem_type).into(),
            shape: std::iter::once(-1)
                .chain(dims.iter().map(|d| *d as i64))
                .collect(),
        })
        .collect()
}

/// An ONNX model's output: the graph's result, `[-1, …]`, FP32.
pub fn onnx_output_metadata(graph: &OnnxGraph) -> Vec<TensorMetadata> {
    let r = graph.result();
    vec![TensorMetadata {
        name: r.name.clone(),
        datatype: "FP32".into(),
        shape: std::iter::once(-1)
            .chain(r.dims.iter().skip(1).map(|d| d.map_or(-1, |d| d as i64)))
            .collect(),
    }]
}

/// OIP's name for an ONNX element type the served models take.
fn onnx_datatype(elem_type: i32) -> &'static str {
    match elem_type {
        1 => "FP32",
        11 => "FP64",
        7 => "INT64",
        _ => "BYTES",
    }
}

/// The datatypes a numeric input may come as.
const NUMERIC: [&str; 13] = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
    "BF16", "FP32", "FP64",
];

/// Flattens row-major JSON `data` (flat or nested) into `out`.
pub fn flatten_values<'a>(data: &'a Value, out: &mut Vec<&'a Value>) {
    crate::tensor::flatten(data, out)
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
    count(input, n)?;
    let values = if dtype == "string" {
        if input.datatype != "BYTES" {
            return Err(Error::Invalid(format!(
                "input '{}' is text: send it as BYTES, not {}",
                input.name, input.datatype
            )));
        }
        Values::Text(
            input
                .elements()
                .enumerate()
                .map(|(i, v)| match v {
                    Elem::Text(s) => Ok(Some(s.into_owned())),
                    Elem::Null => Ok(None),
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
        Values::Numeric(numbers(input, |x| x)?)
    };
    Ok(Column {
        name: input.name.clone(),
        values,
    })
}

/// Refuses `input` unless it carries exactly `n` elements.
fn count(input: &RequestInput, n: usize) -> Result<()> {
    let have = input.element_count();
    if have != n {
        return Err(Error::Invalid(format!(
            "input '{}' has shape {:?} ({n} values) but {have} data values",
            input.name, input.shape
        )));
    }
    Ok(())
}

/// A numeric input's elements through `conv`: `null` (and NaN) a missing value,
/// BOOL as 0 and 1; anything else (text, a number in a BOOL tensor) refused.
fn numbers<T>(input: &RequestInput, conv: impl Fn(f64) -> T) -> Result<Vec<T>> {
    let boolean = input.datatype == "BOOL";
    input
        .elements()
        .enumerate()
        .map(|(i, v)| {
            let x = match &v {
                Elem::Bool(b) if boolean => Some(f64::from(u8::from(*b))),
                Elem::Null => Some(f64::NAN),
                e if !boolean => e.number(),
                _ => None,
            };
            x.map(&conv).ok_or_else(|| {
                Error::Invalid(format!(
                    "input '{}' value {i} is {v}, which is not {}",
                    input.name, input.datatype
                ))
            })
        })
        .collect()
}

/// The request's inputs in the order `wanted` names them: each given exactly once,
/// and none the model does not take. `takes` describes the model's inputs for the
/// message on a missing one.
fn in_order<'a>(
    model: &str,
    wanted: &[&str],
    request: &'a InferRequest,
    takes: impl Fn() -> String,
) -> Result<Vec<&'a RequestInput>> {
    if let Some(input) = request
        .inputs
        .iter()
        .find(|i| !wanted.contains(&i.name.as_str()))
    {
        return Err(Error::Invalid(format!(
            "input '{}' is not one of model '{model}''s inputs ({})",
            input.name,
            wanted.join(", ")
        )));
    }
    wanted
        .iter()
        .map(|&want| {
            let mut found = request.inputs.iter().filter(|i| i.name == want);
            match (found.next(), found.next()) {
                (Some(one), None) => Ok(one),
                (None, _) => Err(Error::Invalid(format!(
                    "input '{want}' is missing: model '{model}' takes {}",
                    takes()
                ))),
                (Some(_), Some(_)) => Err(Error::Invalid(format!(
                    "input '{want}' is given more than once"
                ))),
            }
        })
        .collect()
}

/// Records that `input` has `n` rows, refusing a count that differs from the others'.
fn same_rows(rows: &mut Option<usize>, input: &RequestInput, n: usize) -> Result<()> {
    match *rows {
        Some(r) if r != n => Err(Error::Invalid(format!(
            "input '{}' has {n} rows but another input has {r}: every input carries the same rows",
            input.name
        ))),
        _ => {
            *rows = Some(n);
            Ok(())
        }
    }
}

/// The request's inputs as the table the model takes, checked against its signature.
pub fn table(loaded: &Loaded, model: &NativeModel, request: &InferRequest) -> Result<Table> {
    let spec = model.spec();
    let wanted: Vec<&str> = spec.inputs.iter().map(|i| i.name.as_str()).collect();
    let inputs = in_order(&loaded.name, &wanted, request, || {
        format!("{} inputs, one per feature column", spec.inputs.len())
    })?;
    let mut rows = None;
    let mut columns = Vec::with_capacity(spec.inputs.len());
    for (want, input) in spec.inputs.iter().zip(inputs) {
        let n = rows_of(input)?;
        same_rows(&mut rows, input, n)?;
        columns.push(column(input, n, &want.dtype)?);
    }
    Ok(Table { columns })
}

/// A request checked against a model and encoded as the matrix its layers take.
#[derive(Debug)]
pub struct Prepared {
    /// `rows × inputs`, row-major, after the model's preprocessing, as the request
    /// gave them (`f64`).
    pub x: Vec<f64>,
    /// The strings of a Python model's text columns, `rows × text columns`,
    /// row-major (their places in `x` hold NaN); empty for every other model.
    pub text: Vec<Option<String>>,
    pub rows: usize,
    /// The outputs asked for (`None`: all).
    pub wanted: Option<Vec<String>>,
    pub id: Option<String>,
}

/// An ONNX or tree model's request as the matrix its batcher stacks: each input given
/// once, `[N, …]` with the graph's dimensions after the batch, numeric; each row the
/// inputs' rows side by side, in graph order.
/// A request's rows: the values, the text columns' strings (`None` for a missing
/// one), and how many.
type Rows = (Vec<f64>, Vec<Option<String>>, usize);

fn tensors(loaded: &Loaded, request: &InferRequest) -> Result<Rows> {
    let wanted: Vec<&str> = loaded.inputs.iter().map(|i| i.name.as_str()).collect();
    let inputs = in_order(&loaded.name, &wanted, request, || {
        loaded
            .inputs
            .iter()
            .map(|i| format!("{} {:?}", i.name, i.shape))
            .collect::<Vec<_>>()
            .join(", ")
    })?;
    let mut rows: Option<usize> = None;
    let mut columns: Vec<(Vec<f64>, usize)> = Vec::with_capacity(loaded.inputs.len());
    let mut texts: Vec<(Vec<Option<String>>, usize)> = Vec::new();
    for (want, input) in loaded.inputs.iter().zip(inputs) {
        let rest: Vec<i64> = want.shape[1..].to_vec();
        let width: usize = rest.iter().map(|d| *d as usize).product();
        let bad_shape = || {
            Error::Invalid(format!(
                "input '{}' has shape {:?}: the model takes [N, {}]",
                input.name,
                input.shape,
                rest.iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        };
        let n = match input.shape.split_first() {
            Some((&n, r)) if r == rest.as_slice() || (r.is_empty() && width == 1) => {
                usize::try_from(n).map_err(|_| bad_shape())?
            }
            _ => return Err(bad_shape()),
        };
        if n > MAX_ROWS {
            return Err(Error::Invalid(format!(
                "input '{}' has {n} rows; a request carries at most {MAX_ROWS}",
                input.name
            )));
        }
        same_rows(&mut rows, input, n)?;
        if want.datatype == "BYTES" {
            // A text column (the Python runtime's): its strings go beside the rows,
            // which hold a placeholder in its place.
            let Values::Text(v) = column(input, n * width, "string")?.values else {
                return Err(Error::Internal("a text column read as numbers".into()));
            };
            texts.push((v, width));
            columns.push((vec![f64::NAN; n * width], width));
            continue;
        }
        if !NUMERIC.contains(&input.datatype.as_str()) {
            return Err(Error::Invalid(format!(
                "input '{}' is numeric: send it as {} or another numeric datatype, not {}",
                input.name, want.datatype, input.datatype
            )));
        }
        count(input, n * width)?;
        let values = numbers(input, |x| x)?;
        columns.push((values, width));
    }
    let rows = rows.unwrap_or_default();
    let total: usize = columns.iter().map(|c| c.1).sum();
    let mut x = Vec::with_capacity(rows * total);
    for r in 0..rows {
        for (values, w) in &columns {
            x.extend_from_slice(&values[r * w..(r + 1) * w]);
        }
    }
    // Row-major too: a row's strings, in the inputs' order.
    let mut text = Vec::with_capacity(rows * texts.iter().map(|t| t.1).sum::<usize>());
    for r in 0..rows {
        for (t, w) in &mut texts {
            text.extend(t[r * *w..(r + 1) * *w].iter_mut().map(std::mem::take));
        }
    }
    Ok((x, text, rows))
}

/// Checks `request` against `loaded` (inputs, requested outputs) and encodes its rows.
pub fn prepare(loaded: &Loaded, request: InferRequest) -> Result<Prepared> {
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
    let (x, text, rows) = match &loaded.model {
        Model::Native(model) => {
            let table = table(loaded, model, &request)?;
            let rows = table.rows();
            let index: Vec<usize> = (0..rows).collect();
            let x = model
                .spec()
                .preprocessing
                .encode_features(&table, &index)
                .map_err(qanat_runtime::Error::from)?;
            (x.into_iter().map(f64::from).collect(), Vec::new(), rows)
        }
        Model::Onnx(_) | Model::Trees(_) | Model::Python(_) => tensors(loaded, &request)?,
    };
    Ok(Prepared {
        x,
        text,
        rows,
        wanted,
        id: request.id,
    })
}

/// Runs `request` on `loaded` in the calling thread (blocking): [`prepare`], the
/// model, [`respond`].
pub fn infer(loaded: &Loaded, request: InferRequest) -> Result<InferResponse> {
    let p = prepare(loaded, request)?;
    let (raw, text) = if p.rows == 0 {
        (Vec::new(), Vec::new())
    } else {
        let mut scratch = qanat_runtime::native::Scratch::default();
        loaded
            .model
            .forward_text(&p.x, &p.text, p.rows, None, &mut scratch)?
    };
    Ok(respond(
        loaded,
        &loaded.name,
        p.rows,
        (&raw, &text),
        p.id,
        p.wanted,
    ))
}

/// The response to a prepared request of `n` rows whose model gave `raw` (its values,
/// and its text outputs' values), answered under model name `name`.
pub fn respond(
    loaded: &Loaded,
    name: &str,
    n: usize,
    raw: (&[f32], &[String]),
    id: Option<String>,
    wanted: Option<Vec<String>>,
) -> InferResponse {
    let mut outputs = output_tensors(loaded, n, raw);
    if let Some(w) = wanted {
        outputs.retain(|o| w.contains(&o.name));
    }
    InferResponse {
        model_name: name.to_string(),
        model_version: loaded.version.clone(),
        id,
        outputs,
    }
}

/// Every output tensor of `n` rows whose model gave `raw`.
fn output_tensors(
    loaded: &Loaded,
    n: usize,
    (raw, text): (&[f32], &[String]),
) -> Vec<ResponseOutput> {
    let k = loaded.model.outputs();
    let floats = |v: Vec<f32>| Value::from(v.into_iter().map(f64::from).collect::<Vec<_>>());
    let model = match &loaded.model {
        Model::Native(model) => model,
        Model::Trees(model) => return crate::flavors::respond(model, n, raw),
        Model::Python(model) => return crate::python::respond(&model.plan, n, raw, text),
        Model::Onnx(_) => {
            // Its result tensor, as the graph gives it.
            let meta = &loaded.outputs[0];
            let shape = std::iter::once(n)
                .chain(meta.shape.iter().skip(1).map(|d| *d as usize))
                .collect();
            return vec![ResponseOutput {
                name: meta.name.clone(),
                shape,
                datatype: "FP32".into(),
                parameters: None,
                data: floats(raw.to_vec()),
            }];
        }
    };
    let target = &model.spec().preprocessing.target;
    let mut outputs = vec![ResponseOutput {
        name: "output".into(),
        shape: vec![n, k],
        datatype: "FP32".into(),
        parameters: None,
        data: floats(raw.to_vec()),
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
                parameters: None,
                data: floats(probs),
            });
            outputs.push(ResponseOutput {
                name: "label".into(),
                shape: vec![n],
                datatype: "BYTES".into(),
                parameters: None,
                data: Value::Array(labels),
            });
        }
        Target::Regression { mean, std, .. } => outputs.push(ResponseOutput {
            name: "prediction".into(),
            shape: vec![n, 1],
            datatype: "FP32".into(),
            parameters: None,
            data: Value::from(
                raw.iter()
                    .map(|z| f64::from((f64::from(*z) * std + mean) as f32))
                    .collect::<Vec<_>>(),
            ),
        }),
    }
    outputs
}

fn softmax(z: &[f32]) -> Vec<f32> {
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = z.iter().map(|v| (v - m).exp()).collect();
    let s: f32 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

/// Reads a request body: JSON, or — with Triton's binary tensor extension, when
/// `json_length` (the `Inference-Header-Content-Length` header) is given — that many
/// bytes of JSON followed by the raw tensors of the inputs that name a
/// `binary_data_size`, in order (little-endian; BOOL one byte; BYTES each element a
/// 4-byte length then its bytes).
pub fn decode(body: &[u8], json_length: Option<usize>) -> Result<InferRequest> {
    let (head, mut tail) = match json_length {
        None => (body, &[][..]),
        Some(n) if n <= body.len() => body.split_at(n),
        Some(n) => {
            return Err(Error::Invalid(format!(
                "Inference-Header-Content-Length is {n} but the body has {} bytes",
                body.len()
            )))
        }
    };
    let mut req: InferRequest = serde_json::from_slice(head)
        .map_err(|e| Error::Invalid(format!("the body is not an inference request: {e}")))?;
    for input in &mut req.inputs {
        let Some(size) = input
            .parameters
            .as_ref()
            .and_then(|p| p.get("binary_data_size"))
        else {
            continue;
        };
        let size = size
            .as_u64()
            .and_then(|s| usize::try_from(s).ok())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "input '{}': binary_data_size {size} is not a size",
                    input.name
                ))
            })?;
        if size > tail.len() {
            return Err(Error::Invalid(format!(
                "input '{}' has binary_data_size {size} but only {} bytes of binary data remain \
                 (a truncated body?)",
                input.name,
                tail.len()
            )));
        }
        let (raw, rest) = tail.split_at(size);
        tail = rest;
        input.raw = Some(Raw::new(&input.name, &input.datatype, raw.to_vec())?);
        input.data = Value::Null;
    }
    if !tail.is_empty() {
        return Err(Error::Invalid(format!(
            "{} bytes of binary data follow the inputs that named theirs",
            tail.len()
        )));
    }
    Ok(req)
}

/// An output's data as raw bytes: FP32 little-endian, BYTES length-prefixed.
pub fn raw_output(out: &ResponseOutput) -> Vec<u8> {
    let mut raw = Vec::new();
    let values = out.data.as_array().map(Vec::as_slice).unwrap_or_default();
    for v in values {
        if out.datatype == "BYTES" {
            let s = v.as_str().unwrap_or_default().as_bytes();
            raw.extend_from_slice(&(s.len() as u32).to_le_bytes());
            raw.extend_from_slice(s);
        } else {
            let x = v.as_f64().unwrap_or(f64::NAN);
            // Integers as the JSON holds them (an i64 beyond f64's 53 bits exact).
            let i = v.as_i64().unwrap_or(x as i64);
            match out.datatype.as_str() {
                "FP64" => raw.extend_from_slice(&x.to_le_bytes()),
                "INT64" => raw.extend_from_slice(&i.to_le_bytes()),
                "UINT64" => raw.extend_from_slice(&(i as u64).to_le_bytes()),
                "INT32" => raw.extend_from_slice(&(i as i32).to_le_bytes()),
                "UINT32" => raw.extend_from_slice(&(i as u32).to_le_bytes()),
                "INT16" => raw.extend_from_slice(&(i as i16).to_le_bytes()),
                "UINT16" => raw.extend_from_slice(&(i as u16).to_le_bytes()),
                "INT8" => raw.extend_from_slice(&(i as i8).to_le_bytes()),
                "UINT8" => raw.push(i as u8),
                "BOOL" => raw.push(u8::from(v.as_bool().unwrap_or(x != 0.0))),
                _ => raw.extend_from_slice(&(x as f32).to_le_bytes()),
            }
        }
    }
    raw
}

/// The response as bytes: JSON, or JSON followed by the raw data of the outputs that
/// are binary — those whose request output says `binary_data: true`, or every other
/// one when the request says `binary_data_output: true`. Returns the body and, when
/// binary data follow, the JSON's length (`Inference-Header-Content-Length`).
pub fn encode(
    mut response: InferResponse,
    request_parameters: Option<&Map<String, Value>>,
    requested: Option<&[RequestOutput]>,
) -> Result<(Vec<u8>, Option<usize>)> {
    let all = request_parameters
        .and_then(|p| p.get("binary_data_output"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let binary = |name: &str| {
        requested
            .and_then(|r| r.iter().find(|o| o.name == name))
            .and_then(|o| o.parameters.as_ref())
            .and_then(|p| p.get("binary_data"))
            .and_then(Value::as_bool)
            .unwrap_or(all)
    };
    let mut tail = Vec::new();
    for out in &mut response.outputs {
        if !binary(&out.name) {
            continue;
        }
        let start = tail.len();
        tail.extend_from_slice(&raw_output(out));
        let mut p = out.parameters.take().unwrap_or_default();
        p.insert("binary_data_size".into(), Value::from(tail.len() - start));
        out.parameters = Some(p);
        out.data = Value::Null;
    }
    let mut body = serde_json::to_vec(&response)
        .map_err(|e| Error::Internal(format!("writing the response: {e}")))?;
    if tail.is_empty() {
        return Ok((body, None));
    }
    let json = body.len();
    body.extend_from_slice(&tail);
    Ok((body, Some(json)))
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

    #[test]
    fn binary_outputs_take_their_datatype_s_width() {
        let out = |datatype: &str, data: Value| ResponseOutput {
            name: "o".into(),
            shape: vec![2],
            datatype: datatype.into(),
            parameters: None,
            data,
        };
        let f64s: Vec<u8> = [0.1f64, -2.5]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(raw_output(&out("FP64", json!([0.1, -2.5]))), f64s);
        let f32s: Vec<u8> = [0.1f32, -2.5]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(raw_output(&out("FP32", json!([0.1, -2.5]))), f32s);
        let i64s: Vec<u8> = [i64::MAX, -3]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(raw_output(&out("INT64", json!([i64::MAX, -3]))), i64s);
        assert_eq!(
            raw_output(&out("INT32", json!([1, -1]))),
            [1, 0, 0, 0, 255, 255, 255, 255]
        );
        assert_eq!(raw_output(&out("BOOL", json!([true, false]))), [1, 0]);
    }

    #[test]
    fn binary_inputs_decode_and_binary_outputs_encode() {
        let head = json!({"inputs": [
            {"name": "a", "shape": [2, 1], "datatype": "FP32", "parameters": {"binary_data_size": 8}},
            {"name": "b", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 6}},
            {"name": "c", "shape": [1], "datatype": "INT64", "data": [3]}
        ]})
        .to_string();
        let mut body = head.clone().into_bytes();
        body.extend_from_slice(&1.5f32.to_le_bytes());
        body.extend_from_slice(&(-2f32).to_le_bytes());
        body.extend_from_slice(&2u32.to_le_bytes());
        body.extend_from_slice(b"hi");
        let req = decode(&body, Some(head.len())).expect("decoded");
        let values =
            |i: &RequestInput| -> Vec<Value> { i.elements().map(|e| e.to_json()).collect() };
        assert_eq!(values(&req.inputs[0]), vec![json!(1.5), json!(-2.0)]);
        assert_eq!(values(&req.inputs[1]), vec![json!("hi")]);
        assert_eq!(values(&req.inputs[2]), vec![json!(3)]);
        assert!(req.inputs[0].data.is_null(), "kept as bytes");
        // Truncated: the last 3 bytes missing.
        let e = decode(&body[..body.len() - 3], Some(head.len())).expect_err("cut");
        assert!(
            e.to_string().contains("cut short") || e.to_string().contains("truncated"),
            "{e}"
        );
        let e = decode(&body, Some(body.len() + 1)).expect_err("too long a header");
        assert!(
            e.to_string().contains("Inference-Header-Content-Length"),
            "{e}"
        );

        let resp = InferResponse {
            model_name: "m".into(),
            model_version: "1".into(),
            id: None,
            outputs: vec![
                ResponseOutput {
                    name: "x".into(),
                    shape: vec![2],
                    datatype: "FP32".into(),
                    parameters: None,
                    data: json!([0.5, 2.0]),
                },
                ResponseOutput {
                    name: "y".into(),
                    shape: vec![1],
                    datatype: "BYTES".into(),
                    parameters: None,
                    data: json!(["ok"]),
                },
            ],
        };
        let wanted: Vec<RequestOutput> = serde_json::from_value(json!([
            {"name": "x", "parameters": {"binary_data": true}}, {"name": "y"}
        ]))
        .expect("outputs");
        let (body, json_len) = encode(resp, None, Some(&wanted)).expect("encoded");
        let n = json_len.expect("binary follows");
        let head: Value = serde_json::from_slice(&body[..n]).expect("json");
        assert_eq!(head["outputs"][0]["parameters"]["binary_data_size"], 8);
        assert!(head["outputs"][0].get("data").is_none());
        assert_eq!(head["outputs"][1]["data"], json!(["ok"]));
        assert_eq!(&body[n..n + 4], &0.5f32.to_le_bytes());
    }
}
