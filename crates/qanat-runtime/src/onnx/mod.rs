//! ONNX models: the signature read from the graph, a table turned into the graph's
//! inputs, and the two runtimes that run any ONNX model — [`tract`] (pure Rust, the
//! default) and [`onnxruntime`] (loaded at run time when a `libonnxruntime.so` is
//! configured or found).
//!
//! A table feeds a model in one of two ways ([`Feed`]):
//! - one `[N, 1]` (or `[N]`) input per column, named as the column: `double`, `float`
//!   or `int64` for numbers, `string` for text (missing text is the empty string) — as
//!   the trainer's export and MLflow's pyfunc do;
//! - one `[N, F]` `float` or `double` matrix of F numeric columns named by the caller,
//!   in that order (missing values as NaN) — how models exported from PyTorch or
//!   scikit-learn take their features, and how MLflow's pyfunc feeds a DataFrame to a
//!   model with one input.
//!
//! The result is the output named `output` when there is one, else the first `float`
//! output (a scikit-learn classifier's `probabilities` rather than its `label`), else
//! the first.

pub mod build;
pub mod load_check;
pub mod onnxruntime;
pub mod quantize;
pub mod tract;

use prost::Message;
use qanat_model::table::Values;
use qanat_model::Table;
use tract_onnx::pb;

use crate::{Error, Result};

/// An element type the table runtimes feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    F32,
    F64,
    I64,
    Str,
}

impl Elem {
    fn of(code: i32) -> Option<Elem> {
        use pb::tensor_proto::DataType as D;
        Some(match D::try_from(code).ok()? {
            D::Float => Elem::F32,
            D::Double => Elem::F64,
            D::Int64 => Elem::I64,
            D::String => Elem::Str,
            _ => return None,
        })
    }
}

/// One input or output of the graph: its name, element type code (ONNX's
/// `TensorProto.DataType`) and dimensions (`None` for a symbolic one such as the batch).
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    pub name: String,
    pub elem_type: i32,
    pub dims: Vec<Option<usize>>,
}

impl Port {
    /// Values a row (the product of the dimensions after the first).
    pub fn width(&self) -> Option<usize> {
        self.dims
            .iter()
            .skip(1)
            .try_fold(1, |w, d| d.map(|d| w * d))
    }

    fn of(v: &pb::ValueInfoProto) -> Port {
        let tensor = v
            .r#type
            .as_ref()
            .and_then(|t| t.value.as_ref())
            .map(|pb::type_proto::Value::TensorType(t)| t);
        let dims = tensor
            .and_then(|t| t.shape.as_ref())
            .map(|s| {
                s.dim
                    .iter()
                    .map(|d| match d.value {
                        Some(pb::tensor_shape_proto::dimension::Value::DimValue(v)) if v >= 0 => {
                            Some(v as usize)
                        }
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Port {
            name: v.name.clone(),
            elem_type: tensor.map_or(0, |t| t.elem_type),
            dims,
        }
    }
}

/// Most nodes a graph may hold (its subgraphs' included).
pub const MAX_NODES: usize = 50_000;
/// Largest dimension a graph may declare for a tensor.
pub const MAX_DIM: u64 = 1 << 24;
/// Most elements one declared tensor may hold (1 GiB of `float`).
pub const MAX_TENSOR_ELEMENTS: u64 = 1 << 28;
/// Most bytes all of a graph's initializers may declare.
pub const MAX_INITIALIZER_BYTES: u64 = 4 << 30;

/// An uploaded graph is untrusted: before any runtime reads it (and allocates what it
/// declares), its node count, the shapes it declares for inputs, outputs and
/// intermediate values, and its initializers' sizes are checked against the limits
/// above. A graph over one is refused, saying which.
pub fn check_limits(graph: &pb::GraphProto) -> Result<()> {
    let mut nodes = 0usize;
    let mut initializer_bytes = 0u64;
    let mut stack = vec![graph];
    while let Some(g) = stack.pop() {
        nodes = nodes.saturating_add(g.node.len());
        if nodes > MAX_NODES {
            return Err(Error::invalid(format!(
                "the ONNX graph has over {MAX_NODES} nodes: refused as a model this server would not load safely"
            )));
        }
        for v in g.input.iter().chain(&g.output).chain(&g.value_info) {
            let port = Port::of(v);
            check_shape(&v.name, port.dims.iter().flatten().map(|d| *d as u64))?;
        }
        for t in &g.initializer {
            let dims: Vec<u64> = t.dims.iter().map(|d| (*d).max(0) as u64).collect();
            let elements = check_shape(&t.name, dims.iter().copied())?;
            initializer_bytes =
                initializer_bytes.saturating_add(elements.saturating_mul(elem_bytes(t.data_type)));
            if initializer_bytes > MAX_INITIALIZER_BYTES {
                return Err(Error::invalid(format!(
                    "the ONNX graph's initializers declare over {} GiB: refused",
                    MAX_INITIALIZER_BYTES >> 30
                )));
            }
        }
        for n in &g.node {
            for a in &n.attribute {
                stack.extend(a.g.iter());
                stack.extend(a.graphs.iter());
                for t in a.t.iter().chain(&a.tensors) {
                    let dims: Vec<u64> = t.dims.iter().map(|d| (*d).max(0) as u64).collect();
                    let elements = check_shape(
                        &format!("{} (an attribute of {})", a.name, n.name),
                        dims.iter().copied(),
                    )?;
                    initializer_bytes = initializer_bytes
                        .saturating_add(elements.saturating_mul(elem_bytes(t.data_type)));
                }
            }
        }
    }
    Ok(())
}

/// The elements of a tensor of `dims`, refused past [`MAX_DIM`] or
/// [`MAX_TENSOR_ELEMENTS`].
fn check_shape(name: &str, dims: impl Iterator<Item = u64>) -> Result<u64> {
    let mut elements = 1u64;
    for d in dims {
        if d > MAX_DIM {
            return Err(Error::invalid(format!(
                "the ONNX graph declares a dimension of {d} for '{name}', over the limit of {MAX_DIM}: refused"
            )));
        }
        elements = elements.saturating_mul(d);
        if elements > MAX_TENSOR_ELEMENTS {
            return Err(Error::invalid(format!(
                "the ONNX graph declares '{name}' with over {MAX_TENSOR_ELEMENTS} elements: refused"
            )));
        }
    }
    Ok(elements)
}

/// Bytes per element of ONNX data type `code` (8 when unknown: the larger guess).
fn elem_bytes(code: i32) -> u64 {
    use pb::tensor_proto::DataType as D;
    match D::try_from(code) {
        Ok(D::Uint8 | D::Int8 | D::Bool) => 1,
        Ok(D::Uint16 | D::Int16 | D::Float16 | D::Bfloat16) => 2,
        Ok(D::Float | D::Int32 | D::Uint32) => 4,
        _ => 8,
    }
}

/// A decoded ONNX model and its signature.
#[derive(Debug, Clone)]
pub struct OnnxGraph {
    pub proto: pb::ModelProto,
    /// The inputs a caller feeds (graph inputs that are not initializers).
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
}

impl OnnxGraph {
    /// Decodes `bytes`, refusing what is not an ONNX model with a graph, inputs and
    /// outputs.
    pub fn read(bytes: &[u8]) -> Result<OnnxGraph> {
        let proto = pb::ModelProto::decode(bytes)
            .map_err(|e| Error::invalid(format!("not an ONNX model (protobuf: {e})")))?;
        let Some(graph) = proto.graph.as_ref() else {
            return Err(Error::invalid("the ONNX model has no graph"));
        };
        if proto.ir_version <= 0 || proto.opset_import.is_empty() {
            return Err(Error::invalid(
                "not an ONNX model: no IR version or opset (is this an ONNX file?)",
            ));
        }
        check_limits(graph)?;
        let initializers: std::collections::HashSet<&str> =
            graph.initializer.iter().map(|t| t.name.as_str()).collect();
        let inputs: Vec<Port> = graph
            .input
            .iter()
            .filter(|v| !initializers.contains(v.name.as_str()))
            .map(Port::of)
            .collect();
        let outputs: Vec<Port> = graph.output.iter().map(Port::of).collect();
        if inputs.is_empty() || outputs.is_empty() {
            return Err(Error::invalid(format!(
                "the ONNX graph has {} inputs and {} outputs; a model needs both",
                inputs.len(),
                outputs.len()
            )));
        }
        Ok(OnnxGraph {
            proto,
            inputs,
            outputs,
        })
    }

    /// The model's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.proto.encode_to_vec()
    }

    /// The output a table runtime returns: `output`, else the first `float` one, else
    /// the first.
    pub fn result(&self) -> &Port {
        self.outputs
            .iter()
            .find(|p| p.name == "output")
            .or_else(|| {
                self.outputs
                    .iter()
                    .find(|p| Elem::of(p.elem_type) == Some(Elem::F32))
            })
            .unwrap_or(&self.outputs[0])
    }

    /// How a table feeds this graph, checked: one input per column, or, for a graph
    /// with a single `[N, F]` numeric input, the `features` named (F of them); and the
    /// result a float tensor of a known width. The reason otherwise.
    pub fn feed(&self, features: Option<&[String]>) -> Result<Feed> {
        let r = self.result();
        if Elem::of(r.elem_type) != Some(Elem::F32) || r.width().is_none() {
            return Err(Error::invalid(format!(
                "output '{}' is not a float tensor of a known width (type {}, shape {:?})",
                r.name, r.elem_type, r.dims
            )));
        }
        if let [p] = &self.inputs[..] {
            let numeric = matches!(Elem::of(p.elem_type), Some(Elem::F32 | Elem::F64));
            if let (true, [_, Some(width)]) = (numeric, &p.dims[..]) {
                if *width > 1 || features.is_some() {
                    return matrix(p, *width, features);
                }
            }
        }
        for p in &self.inputs {
            if Elem::of(p.elem_type).is_none() {
                return Err(Error::invalid(format!(
                    "input '{}' has ONNX element type {}: a table feeds double, float, int64 or string",
                    p.name, p.elem_type
                )));
            }
            if !(p.dims.len() == 1 || (p.dims.len() == 2 && p.dims[1] == Some(1))) {
                return Err(Error::invalid(format!(
                    "input '{}' has shape {:?}: a table feeds one [N, 1] column per input, \
                     or one [N, F] float matrix of named columns",
                    p.name, p.dims
                )));
            }
        }
        Ok(Feed::Columns)
    }
}

fn matrix(p: &Port, width: usize, features: Option<&[String]>) -> Result<Feed> {
    let Some(features) = features else {
        return Err(Error::invalid(format!(
            "the model takes one [N, {width}] matrix '{}': name the {width} feature columns \
             that fill it, in order",
            p.name
        )));
    };
    if features.len() != width {
        return Err(Error::invalid(format!(
            "the model's input '{}' is [N, {width}] but {} feature columns were named ({})",
            p.name,
            features.len(),
            features.join(", ")
        )));
    }
    Ok(Feed::Matrix {
        features: features.to_vec(),
    })
}

/// The files an ONNX model keeps tensors in beside itself (external data, as
/// `onnx.save(..., save_as_external_data=True)` and `mlflow.onnx.log_model` write
/// them), by their paths relative to the model; refused when a path leaves the model's
/// directory.
pub fn external_files(bytes: &[u8]) -> Result<Vec<String>> {
    let proto = pb::ModelProto::decode(bytes)
        .map_err(|e| Error::invalid(format!("not an ONNX model (protobuf: {e})")))?;
    let mut files: Vec<String> = Vec::new();
    for t in proto.graph.iter().flat_map(|g| &g.initializer) {
        if let Some(place) = external(t)? {
            if !files.contains(&place.file) {
                files.push(place.file);
            }
        }
    }
    Ok(files)
}

/// The model with its external tensors read in from `files` (contents by relative
/// path), so it stands alone.
pub fn with_external(
    bytes: &[u8],
    files: &std::collections::HashMap<String, Vec<u8>>,
) -> Result<Vec<u8>> {
    let mut proto = pb::ModelProto::decode(bytes)
        .map_err(|e| Error::invalid(format!("not an ONNX model (protobuf: {e})")))?;
    for t in proto.graph.iter_mut().flat_map(|g| &mut g.initializer) {
        let Some(place) = external(t)? else { continue };
        let data = files.get(&place.file).ok_or_else(|| {
            Error::invalid(format!(
                "tensor '{}' is stored in '{}', which is not beside the model",
                t.name, place.file
            ))
        })?;
        let end = place
            .length
            .map_or(Some(data.len()), |l| place.offset.checked_add(l));
        let raw = end
            .and_then(|end| data.get(place.offset..end))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "tensor '{}' is at offset {} (length {}) of '{}', which has {} bytes",
                    t.name,
                    place.offset,
                    place.length.map_or("to its end".into(), |l| l.to_string()),
                    place.file,
                    data.len()
                ))
            })?;
        t.raw_data = raw.to_vec();
        t.data_location = None;
        t.external_data.clear();
    }
    Ok(proto.encode_to_vec())
}

struct Place {
    file: String,
    offset: usize,
    length: Option<usize>,
}

/// Where a tensor's data is kept outside the model, if it is.
fn external(t: &pb::TensorProto) -> Result<Option<Place>> {
    if t.data_location != Some(1) && t.external_data.is_empty() {
        return Ok(None);
    }
    let get = |k: &str| {
        t.external_data
            .iter()
            .find(|e| e.key == k)
            .map(|e| e.value.as_str())
    };
    let number = |k: &str| -> Result<Option<usize>> {
        get(k)
            .map(|v| {
                v.parse::<usize>().map_err(|_| {
                    Error::invalid(format!("tensor '{}' has external data {k} '{v}'", t.name))
                })
            })
            .transpose()
    };
    let file = get("location").unwrap_or_default().to_string();
    let path = std::path::Path::new(&file);
    let inside = !file.is_empty()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !inside {
        return Err(Error::invalid(format!(
            "tensor '{}' names external data '{file}': it must be a file beside the model",
            t.name
        )));
    }
    Ok(Some(Place {
        offset: number("offset")?.unwrap_or(0),
        length: number("length")?,
        file,
    }))
}

/// How a table feeds a graph (see [the module](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Feed {
    /// One input per column, named as the column.
    Columns,
    /// The graph's one input is a matrix of these numeric columns, in order.
    Matrix { features: Vec<String> },
}

impl Feed {
    /// The table columns it reads.
    pub fn columns<'a>(&'a self, graph: &'a OnnxGraph) -> Vec<&'a str> {
        match self {
            Feed::Columns => graph.inputs.iter().map(|p| p.name.as_str()).collect(),
            Feed::Matrix { features } => features.iter().map(String::as_str).collect(),
        }
    }
}

/// One input's values for every row of a table.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
    Str(Vec<String>),
}

/// One input of the graph, filled: its values, row-major, and its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub values: Column,
    pub shape: Vec<usize>,
}

/// How a tensor server's rows map to a graph (the Open Inference Protocol's view, as
/// Triton serves ONNX): each graph input a numeric tensor whose first dimension is the
/// batch and whose other dimensions are known, the result a float tensor of a known
/// width. Rows come as one `f32` matrix, each row the concatenation of the inputs'
/// rows in graph order, so a batcher can stack requests; [`TensorLayout::split`]
/// splits it back into the graph's tensors (as `float`, `double` or `int64`).
#[derive(Debug, Clone)]
pub struct TensorLayout {
    /// Per input: element type, row width, dimensions after the batch.
    inputs: Vec<(Elem, usize, Vec<usize>)>,
    width: usize,
}

impl TensorLayout {
    /// The layout of `graph`, refusing what a float matrix cannot feed (text inputs,
    /// unknown row widths) with the reason.
    pub fn of(graph: &OnnxGraph) -> Result<TensorLayout> {
        let r = graph.result();
        let width = match (Elem::of(r.elem_type), r.width()) {
            (Some(Elem::F32), Some(w)) => w,
            _ => {
                return Err(Error::invalid(format!(
                    "output '{}' is not a float tensor of a known width (type {}, shape {:?})",
                    r.name, r.elem_type, r.dims
                )))
            }
        };
        let mut inputs = Vec::with_capacity(graph.inputs.len());
        for p in &graph.inputs {
            let elem = match Elem::of(p.elem_type) {
                Some(e @ (Elem::F32 | Elem::F64 | Elem::I64)) => e,
                _ => {
                    return Err(Error::invalid(format!(
                        "input '{}' has ONNX element type {}: served models take float, double or int64 tensors",
                        p.name, p.elem_type
                    )))
                }
            };
            let rest: Option<Vec<usize>> = p.dims.iter().skip(1).copied().collect();
            let (Some(rest), false) = (rest, p.dims.is_empty()) else {
                return Err(Error::invalid(format!(
                    "input '{}' has shape {:?}: a served model's inputs are [N, ...] with every dimension after the batch known",
                    p.name, p.dims
                )));
            };
            inputs.push((elem, rest.iter().product(), rest));
        }
        Ok(TensorLayout { inputs, width })
    }

    /// Per graph input, its dimensions after the batch.
    pub fn input_dims(&self) -> impl Iterator<Item = &[usize]> {
        self.inputs.iter().map(|i| i.2.as_slice())
    }

    /// Values per row in: the sum of the inputs' row widths.
    pub fn row_width(&self) -> usize {
        self.inputs.iter().map(|i| i.1).sum()
    }

    /// Values per row out.
    pub fn outputs(&self) -> usize {
        self.width
    }

    /// The graph's inputs for `rows` rows of `x` (`rows × row_width`, row-major).
    pub fn split(&self, x: &[f32], rows: usize) -> Result<Vec<Input>> {
        let total = self.row_width();
        if x.len() != rows * total {
            return Err(Error::internal(format!(
                "{} values for {rows} rows of {total}",
                x.len()
            )));
        }
        let mut out = Vec::with_capacity(self.inputs.len());
        let mut offset = 0;
        for (elem, w, rest) in &self.inputs {
            let mut shape = Vec::with_capacity(rest.len() + 1);
            shape.push(rows);
            shape.extend_from_slice(rest);
            let column = |r: usize| &x[r * total + offset..r * total + offset + w];
            let values = match elem {
                Elem::F32 => Column::F32((0..rows).flat_map(column).copied().collect()),
                Elem::F64 => {
                    Column::F64((0..rows).flat_map(column).map(|v| f64::from(*v)).collect())
                }
                _ => Column::I64(
                    (0..rows)
                        .flat_map(column)
                        .map(|v| v.round() as i64)
                        .collect(),
                ),
            };
            out.push(Input { values, shape });
            offset += w;
        }
        Ok(out)
    }
}

/// The table as the graph's inputs, in the graph's order.
pub fn inputs(graph: &OnnxGraph, feed: &Feed, table: &Table) -> Result<Vec<Input>> {
    let n = table.rows();
    if let Feed::Matrix { features } = feed {
        let p = &graph.inputs[0];
        let width = features.len();
        let mut x = vec![0f64; n * width];
        for (j, name) in features.iter().enumerate() {
            let Values::Numeric(v) = &table.column(name)?.values else {
                return Err(Error::invalid(format!(
                    "column '{name}' is not numeric: the model's input '{}' is a matrix of numbers",
                    p.name
                )));
            };
            for (r, value) in v.iter().enumerate() {
                x[r * width + j] = *value;
            }
        }
        let values = match Elem::of(p.elem_type) {
            Some(Elem::F64) => Column::F64(x),
            _ => Column::F32(x.into_iter().map(|v| v as f32).collect()),
        };
        return Ok(vec![Input {
            values,
            shape: vec![n, width],
        }]);
    }
    graph
        .inputs
        .iter()
        .map(|p| {
            let col = table.column(&p.name)?;
            let elem = Elem::of(p.elem_type).ok_or_else(|| {
                Error::invalid(format!("input '{}' has an unsupported element type", p.name))
            })?;
            let values = match (&col.values, elem) {
                (Values::Numeric(v), Elem::F64) => Column::F64(v.clone()),
                (Values::Numeric(v), Elem::F32) => Column::F32(v.iter().map(|x| *x as f32).collect()),
                (Values::Numeric(v), Elem::I64) => Column::I64(
                    v.iter()
                        .enumerate()
                        .map(|(i, x)| {
                            if x.fract() == 0.0 && x.is_finite() {
                                Ok(*x as i64)
                            } else {
                                Err(Error::invalid(format!(
                                    "column '{}' row {i} is {x}: the model takes whole numbers (int64)",
                                    p.name
                                )))
                            }
                        })
                        .collect::<Result<_>>()?,
                ),
                (Values::Text(v), Elem::Str) => Column::Str(
                    v.iter().map(|s| s.clone().unwrap_or_default()).collect(),
                ),
                (values, _) => {
                    return Err(Error::invalid(format!(
                        "column '{}' holds {} but the model's input of that name takes {:?}",
                        p.name,
                        match values {
                            Values::Numeric(_) => "numbers",
                            Values::Text(_) => "text",
                            Values::Unsupported(..) => "a type the runtimes cannot read",
                        },
                        elem
                    )))
                }
            };
            let shape = if p.dims.len() == 1 { vec![n] } else { vec![n, 1] };
            Ok(Input { values, shape })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::build::{model as file, pb, relu_chain, value};
    use super::*;

    /// A Relu chain of `nodes` from `x` of `dims` to `y`.
    fn model(dims: &[i64], nodes: usize) -> Vec<u8> {
        file(pb::GraphProto {
            node: relu_chain(nodes),
            input: vec![value("x", dims)],
            output: vec![value("y", dims)],
            ..pb::GraphProto::default()
        })
    }

    /// A graph `y = x + w` whose initializer `w` (4 floats) is kept outside it, with
    /// these `external_data` entries.
    fn with_weights_outside(entries: &[(&str, &str)]) -> Vec<u8> {
        let w = pb::TensorProto {
            name: "w".into(),
            dims: vec![4],
            data_type: 1,
            data_location: Some(1),
            external_data: entries
                .iter()
                .map(|(k, v)| pb::StringStringEntryProto {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            ..pb::TensorProto::default()
        };
        file(pb::GraphProto {
            node: vec![super::build::node("Add", &["x", "w"], "y")],
            initializer: vec![w],
            input: vec![value("x", &[1, 4])],
            output: vec![value("y", &[1, 4])],
            ..pb::GraphProto::default()
        })
    }

    #[test]
    fn external_data_is_read_in_from_beside_the_model_and_nowhere_else() {
        let weights: Vec<u8> = [9.0f32, 1.0, 2.0, 3.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let files = std::collections::HashMap::from([("w.bin".to_string(), weights.clone())]);
        let bytes =
            with_weights_outside(&[("location", "w.bin"), ("offset", "4"), ("length", "16")]);
        assert_eq!(
            external_files(&bytes).expect("inside"),
            vec!["w.bin".to_string()]
        );
        let whole = with_external(&bytes, &files).expect("read in");
        assert!(
            external_files(&whole).expect("a model").is_empty(),
            "it stands alone"
        );
        let proto = pb::ModelProto::decode(whole.as_slice()).expect("protobuf");
        let w = &proto.graph.as_ref().expect("a graph").initializer[0];
        assert_eq!(w.raw_data, weights[4..20]);
        assert!(w.external_data.is_empty() && w.data_location.is_none());
        OnnxGraph::read(&whole).expect("the whole model reads");

        // Without a length, the tensor runs to the file's end.
        let to_end = with_weights_outside(&[("location", "w.bin"), ("offset", "4")]);
        let proto = pb::ModelProto::decode(
            with_external(&to_end, &files)
                .expect("to the end")
                .as_slice(),
        );
        assert_eq!(
            proto.expect("protobuf").graph.expect("a graph").initializer[0].raw_data,
            weights[4..]
        );

        // Paths that leave the model's directory are refused by name, before any read.
        for place in ["../w.bin", "/etc/passwd", "a/../../w.bin", ""] {
            let bytes = with_weights_outside(&[("location", place)]);
            let e = external_files(&bytes).expect_err(place).to_string();
            assert!(
                e.contains("must be a file beside the model"),
                "{place}: {e}"
            );
        }
        // A file that is not there, ranges past its end (or past any end), bad numbers.
        let max = usize::MAX.to_string();
        for (entries, says) in [
            (vec![("location", "other.bin")], "not beside the model"),
            (
                vec![("location", "w.bin"), ("offset", "8"), ("length", "16")],
                "which has 20 bytes",
            ),
            (
                vec![("location", "w.bin"), ("offset", "21")],
                "which has 20 bytes",
            ),
            (
                vec![
                    ("location", "w.bin"),
                    ("offset", "1"),
                    ("length", max.as_str()),
                ],
                "which has 20 bytes",
            ),
            (vec![("location", "w.bin"), ("offset", "-1")], "offset '-1'"),
        ] {
            let bytes = with_weights_outside(&entries);
            let e = with_external(&bytes, &files).expect_err(says).to_string();
            assert!(e.contains(says), "{entries:?}: {e}");
        }
    }

    #[test]
    fn a_graph_past_the_limits_is_refused_before_any_runtime_reads_it() {
        assert!(OnnxGraph::read(&model(&[1, 4], 3)).is_ok());
        for (bytes, says) in [
            (model(&[1, 1 << 40], 1), "a dimension of 1099511627776"),
            (model(&[1 << 20, 1 << 20], 1), "elements"),
            (model(&[1, 4], MAX_NODES + 1), "nodes"),
        ] {
            let e = OnnxGraph::read(&bytes).expect_err(says).to_string();
            assert!(e.contains(says) && e.contains("refused"), "{e}");
        }
    }
}
