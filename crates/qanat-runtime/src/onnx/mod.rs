//! ONNX models: the signature read from the graph, a table turned into the graph's
//! inputs, and the two runtimes that run any ONNX model — [`tract`] (pure Rust, the
//! default) and [`onnxruntime`] (loaded at run time when a `libonnxruntime.so` is
//! configured or found).
//!
//! A model fed from a table takes one `[N, 1]` (or `[N]`) input per column, named as
//! the column: `double`, `float` or `int64` for numbers, `string` for text (missing
//! text is the empty string) — as the trainer's export and MLflow's pyfunc do. Its
//! result is the output named `output` when there is one, else the first output.

pub mod onnxruntime;
pub mod tract;

use prost::Message;
use qanat_train::table::Values;
use qanat_train::Table;
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

    /// The output a table runtime returns: `output`, else the first.
    pub fn result(&self) -> &Port {
        self.outputs
            .iter()
            .find(|p| p.name == "output")
            .unwrap_or(&self.outputs[0])
    }

    /// Checks that every input is a column a table can feed, and the result a float
    /// matrix; the reason otherwise.
    pub fn check_table_signature(&self) -> Result<()> {
        for p in &self.inputs {
            if Elem::of(p.elem_type).is_none() {
                return Err(Error::invalid(format!(
                    "input '{}' has ONNX element type {}: a table feeds double, float, int64 or string",
                    p.name, p.elem_type
                )));
            }
            if !(p.dims.len() == 1 || (p.dims.len() == 2 && p.dims[1] == Some(1))) {
                return Err(Error::invalid(format!(
                    "input '{}' has shape {:?}: a table feeds one [N, 1] column per input",
                    p.name, p.dims
                )));
            }
        }
        let r = self.result();
        if Elem::of(r.elem_type) != Some(Elem::F32) || r.width().is_none() {
            return Err(Error::invalid(format!(
                "output '{}' is not a float tensor of a known width (type {}, shape {:?})",
                r.name, r.elem_type, r.dims
            )));
        }
        Ok(())
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

/// The table's columns as the graph's inputs, in the graph's order.
pub fn columns(graph: &OnnxGraph, table: &Table) -> Result<Vec<Column>> {
    graph
        .inputs
        .iter()
        .map(|p| {
            let col = table.column(&p.name)?;
            let elem = Elem::of(p.elem_type).ok_or_else(|| {
                Error::invalid(format!("input '{}' has an unsupported element type", p.name))
            })?;
            Ok(match (&col.values, elem) {
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
            })
        })
        .collect()
}
