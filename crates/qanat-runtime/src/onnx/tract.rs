//! The `tract` runtime: any ONNX model, in pure Rust (sonos/tract), optimized once at
//! load for the batch dimension left symbolic.

use std::sync::Arc;

use qanat_model::Table;
use tract_onnx::prelude::*;

use super::{inputs, Column, Feed, Input, OnnxGraph, TensorLayout};
use crate::{Error, Result, Runtime};

/// An ONNX model loaded and optimized by tract.
pub struct TractModel {
    graph: OnnxGraph,
    feed: Feed,
    plan: Arc<TypedSimplePlan>,
    width: usize,
}

impl std::fmt::Debug for TractModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TractModel")
            .field("inputs", &self.graph.inputs)
            .field("result", self.graph.result())
            .finish()
    }
}

fn refused(what: &str, e: impl std::fmt::Display) -> Error {
    Error::invalid(format!("tract cannot {what} this ONNX model: {e}"))
}

impl TractModel {
    /// Loads the model in `bytes` for table inputs, one per column (see [`super`]),
    /// refusing a corrupt file, an unsupported signature or an operator tract does not
    /// implement.
    pub fn load(bytes: &[u8]) -> Result<TractModel> {
        TractModel::load_fed(bytes, None)
    }

    /// [`load`](Self::load) for a model whose one matrix input is filled with the
    /// named `features` (see [`OnnxGraph::feed`]).
    pub fn load_fed(bytes: &[u8], features: Option<&[String]>) -> Result<TractModel> {
        let graph = OnnxGraph::read(bytes)?;
        let feed = graph.feed(features)?;
        let result = graph.result().name.clone();
        let width = graph.result().width().unwrap_or(1);
        let plan = plan(&graph, &result)?;
        Ok(TractModel {
            graph,
            feed,
            plan,
            width,
        })
    }

    pub fn graph(&self) -> &OnnxGraph {
        &self.graph
    }
}

/// The graph read and optimized for its `output` alone, the batch left symbolic.
fn plan(graph: &OnnxGraph, output: &str) -> Result<Arc<TypedSimplePlan>> {
    let mut model = tract_onnx::onnx()
        .model_for_proto_model(&graph.proto)
        .map_err(|e| refused("read", format!("{e:#}")))?;
    model
        .select_outputs_by_name([output])
        .map_err(|e| refused("select the output of", e))?;
    model
        .into_optimized()
        .and_then(|m| m.into_runnable())
        .map_err(|e| refused("plan", format!("{e:#}")))
}

/// Runs `plan` on `fed`: its one output as floats, row-major.
fn run_plan(plan: &Arc<TypedSimplePlan>, fed: TVec<TValue>) -> Result<Vec<f32>> {
    let out = plan
        .run(fed)
        .map_err(|e| Error::invalid(format!("tract failed to run the model: {e:#}")))?;
    let first = out
        .first()
        .ok_or_else(|| Error::internal("tract returned no output"))?;
    let v = first
        .cast_to::<f32>()
        .map_err(|e| Error::internal(format!("reading the output: {e}")))?;
    let v = v
        .to_plain_array_view::<f32>()
        .map_err(|e| Error::internal(format!("reading the output: {e}")))?;
    Ok(v.iter().copied().collect())
}

fn tensor(input: Input) -> Result<Tensor> {
    let Input { values, shape } = input;
    let shaped = |t: std::result::Result<Tensor, _>| -> Result<Tensor> {
        t.map_err(|e: TractError| Error::internal(format!("building an input {shape:?}: {e}")))
    };
    match values {
        Column::F32(v) => shaped(Tensor::from_shape(&shape, &v)),
        Column::F64(v) => shaped(Tensor::from_shape(&shape, &v)),
        Column::I64(v) => shaped(Tensor::from_shape(&shape, &v)),
        Column::Str(v) => tract_ndarray::ArrayD::from_shape_vec(shape.clone(), v)
            .map(Tensor::from)
            .map_err(|e| Error::internal(format!("building a text input {shape:?}: {e}"))),
    }
}

impl Runtime for TractModel {
    fn name(&self) -> &'static str {
        "tract"
    }

    fn outputs(&self) -> usize {
        self.width
    }

    fn predict(&self, table: &Table) -> Result<Vec<f32>> {
        let fed = inputs(&self.graph, &self.feed, table)?
            .into_iter()
            .map(|i| tensor(i).map(TValue::from))
            .collect::<Result<TVec<TValue>>>()?;
        run_plan(&self.plan, fed)
    }
}

/// The largest absolute value each of the tensors `names` takes over the rows of
/// `table` (fed as [`TractModel::load_fed`] feeds it): static quantization's
/// calibration. A name may be a graph input or any node's output.
pub fn largest_values(
    bytes: &[u8],
    features: Option<&[String]>,
    table: &Table,
    names: &[String],
) -> Result<std::collections::HashMap<String, f32>> {
    let graph = OnnxGraph::read(bytes)?;
    let feed = graph.feed(features)?;
    let fed = inputs(&graph, &feed, table)?;
    let largest = |v: &mut dyn Iterator<Item = f32>| v.fold(0f32, |m, x| m.max(x.abs()));
    let mut out = std::collections::HashMap::new();
    for (port, input) in graph.inputs.iter().zip(&fed) {
        if names.contains(&port.name) {
            let a = match &input.values {
                Column::F32(v) => largest(&mut v.iter().copied()),
                Column::F64(v) => largest(&mut v.iter().map(|x| *x as f32)),
                _ => continue,
            };
            out.insert(port.name.clone(), a);
        }
    }
    let inner: Vec<&String> = names.iter().filter(|n| !out.contains_key(*n)).collect();
    if inner.is_empty() {
        return Ok(out);
    }
    // The inner tensors become the graph's outputs, their types inferred.
    let mut proto = graph.proto.clone();
    if let Some(g) = proto.graph.as_mut() {
        g.output = inner
            .iter()
            .map(|n| tract_onnx::pb::ValueInfoProto {
                name: n.to_string(),
                ..Default::default()
            })
            .collect();
    }
    let plan = tract_onnx::onnx()
        .model_for_proto_model(&proto)
        .and_then(|m| m.into_optimized())
        .and_then(|m| m.into_runnable())
        .map_err(|e| refused("calibrate", format!("{e:#}")))?;
    let tensors = fed
        .into_iter()
        .map(|i| tensor(i).map(TValue::from))
        .collect::<Result<TVec<TValue>>>()?;
    let values = plan
        .run(tensors)
        .map_err(|e| Error::invalid(format!("tract failed to run the model: {e:#}")))?;
    for (name, v) in inner.into_iter().zip(values.iter()) {
        let v = v
            .cast_to::<f32>()
            .map_err(|e| Error::internal(format!("reading '{name}': {e}")))?;
        let v = v
            .to_plain_array_view::<f32>()
            .map_err(|e| Error::internal(format!("reading '{name}': {e}")))?;
        out.insert(name.clone(), largest(&mut v.iter().copied()));
    }
    Ok(out)
}

/// An ONNX model as a tensor server sees it ([`TensorLayout`]), on tract.
pub struct TensorModel {
    graph: OnnxGraph,
    plan: Arc<TypedSimplePlan>,
    layout: TensorLayout,
}

impl std::fmt::Debug for TensorModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorModel")
            .field("inputs", &self.graph.inputs)
            .field("result", self.graph.result())
            .finish()
    }
}

impl TensorModel {
    /// Loads and plans the model in `bytes`, refusing what a float matrix cannot feed
    /// (text inputs, unknown row widths) with the reason.
    pub fn load(bytes: &[u8]) -> Result<TensorModel> {
        let graph = OnnxGraph::read(bytes)?;
        let layout = TensorLayout::of(&graph)?;
        let plan = plan(&graph, &graph.result().name)?;
        Ok(TensorModel {
            graph,
            plan,
            layout,
        })
    }

    pub fn graph(&self) -> &OnnxGraph {
        &self.graph
    }

    pub fn layout(&self) -> &TensorLayout {
        &self.layout
    }

    /// The result for `rows` rows of `x` (`rows × row_width`, row-major).
    pub fn run(&self, x: &[f32], rows: usize) -> Result<Vec<f32>> {
        let fed = self
            .layout
            .split(x, rows)?
            .into_iter()
            .map(|i| tensor(i).map(TValue::from))
            .collect::<Result<TVec<TValue>>>()?;
        run_plan(&self.plan, fed)
    }
}
