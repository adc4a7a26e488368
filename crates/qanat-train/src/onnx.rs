//! The model as ONNX (`model.onnx`): the preprocessing and the network in one graph,
//! so a runtime such as onnxruntime predicts from raw columns as the trainer does.
//!
//! Inputs, one per feature, `[N, 1]`: numeric features as `double` (NaN for missing),
//! text features as `string` (any unseen or empty value is the "other" category).
//! In the graph: numeric values are imputed with the training mean, standardized in
//! double precision (as the trainer does) and cast to float, with a 0/1 indicator
//! column where the trainer added one; text values go through `ai.onnx.ml`'s
//! `CategoryMapper` to a category index and a one-hot row. Then `Gemm` and `Relu` per
//! layer (an int8 layer: `DynamicQuantizeLinear`, `MatMulInteger` and its scales). Outputs: `output` (the raw model output the trainer computes), and
//! `probability` (binary: sigmoid of the logit), `probabilities` (softmax over the
//! classes) or `prediction` (regression: de-standardized).
//!
//! Written with a small protobuf encoder of our own for the few ONNX messages used
//! (field numbers from onnx.proto): IR version 8, opset 13 and `ai.onnx.ml` 2.
//!
//! `qanat_model::package::mlmodel` writes the `MLmodel` file beside it, so that the
//! `mlflow` client loads the directory with its `onnx` and `python_function` flavors.

use burn::tensor::backend::Backend;
use qanat_model::prep::{Feature, Preprocessing, Target};

use crate::fit::Mlp;
use crate::{Error, Result};

/// ONNX's tensor element types (TensorProto.DataType).
const FLOAT: i64 = 1;
const UINT8: i64 = 2;
const INT64: i64 = 7;
const STRING: i64 = 8;
const DOUBLE: i64 = 11;

/// A protobuf message being written.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire));
    }

    fn int(&mut self, field: u32, v: i64) -> &mut Self {
        self.key(field, 0);
        self.varint(v as u64);
        self
    }

    fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    fn str(&mut self, field: u32, s: &str) -> &mut Self {
        self.bytes(field, s.as_bytes())
    }

    fn msg(&mut self, field: u32, m: &Msg) -> &mut Self {
        self.bytes(field, &m.0)
    }
}

/// A node attribute (AttributeProto).
enum Attr<'a> {
    Int(&'a str, i64),
    Ints(&'a str, Vec<i64>),
    Strings(&'a str, Vec<String>),
}

impl Attr<'_> {
    fn encode(&self) -> Msg {
        let mut m = Msg::default();
        match self {
            Attr::Int(n, v) => {
                m.str(1, n).int(3, *v).int(20, 2);
            }
            Attr::Ints(n, vs) => {
                m.str(1, n);
                for v in vs {
                    m.int(8, *v);
                }
                m.int(20, 7);
            }
            Attr::Strings(n, vs) => {
                m.str(1, n);
                for v in vs {
                    m.str(9, v);
                }
                m.int(20, 8);
            }
        }
        m
    }
}

/// A graph under construction.
#[derive(Default)]
struct Graph {
    nodes: Vec<Msg>,
    initializers: Vec<Msg>,
    inputs: Vec<Msg>,
    outputs: Vec<Msg>,
}

/// A ValueInfoProto: `name`, a tensor of `elem` with `[N, width]`.
fn value_info(name: &str, elem: i64, width: usize) -> Msg {
    let mut n = Msg::default();
    n.str(2, "N");
    let mut w = Msg::default();
    w.int(1, width as i64);
    let mut shape = Msg::default();
    shape.msg(1, &n).msg(1, &w);
    let mut tensor = Msg::default();
    tensor.int(1, elem).msg(2, &shape);
    let mut ty = Msg::default();
    ty.msg(1, &tensor);
    let mut v = Msg::default();
    v.str(1, name).msg(2, &ty);
    v
}

impl Graph {
    fn node(&mut self, op: &str, domain: &str, inputs: &[&str], output: &str, attrs: &[Attr]) {
        let mut m = Msg::default();
        for i in inputs {
            m.str(1, i);
        }
        m.str(2, output)
            .str(3, &format!("{op}_{}", self.nodes.len()))
            .str(4, op);
        for a in attrs {
            m.msg(5, &a.encode());
        }
        if !domain.is_empty() {
            m.str(7, domain);
        }
        self.nodes.push(m);
    }

    /// A node of the default domain with several outputs.
    fn node_n(&mut self, op: &str, inputs: &[&str], outputs: &[&str]) {
        let mut m = Msg::default();
        for i in inputs {
            m.str(1, i);
        }
        for o in outputs {
            m.str(2, o);
        }
        m.str(3, &format!("{op}_{}", self.nodes.len())).str(4, op);
        self.nodes.push(m);
    }

    /// A constant tensor of `elem` with `dims` and little-endian `raw` bytes.
    fn constant(&mut self, name: &str, elem: i64, dims: &[usize], raw: Vec<u8>) {
        let mut t = Msg::default();
        for d in dims {
            t.int(1, *d as i64);
        }
        t.int(2, elem).str(8, name).bytes(9, &raw);
        self.initializers.push(t);
    }

    fn floats(&mut self, name: &str, dims: &[usize], v: &[f32]) {
        let raw = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.constant(name, FLOAT, dims, raw);
    }

    fn double(&mut self, name: &str, v: f64) {
        self.constant(name, DOUBLE, &[1], v.to_le_bytes().to_vec());
    }
}

/// A dense layer as the graph holds it.
#[derive(Debug, Clone, Copy)]
pub struct Dense<'a> {
    pub inputs: usize,
    pub outputs: usize,
    pub weight: Weight<'a>,
    /// `outputs` values.
    pub bias: &'a [f32],
}

/// A dense layer's weight, `[out, in]` (PyTorch's `nn.Linear` layout).
#[derive(Debug, Clone, Copy)]
pub enum Weight<'a> {
    F32(&'a [f32]),
    /// `w ≈ q · scale[out]`: in the graph, the activations are quantized per tensor at
    /// run time (`DynamicQuantizeLinear`), multiplied in integers (`MatMulInteger`) and
    /// scaled back, as onnxruntime's own dynamic quantization writes it.
    Int8 {
        q: &'a [i8],
        scale: &'a [f32],
        /// Static quantization: the calibrated input magnitude. The graph then uses
        /// `QuantizeLinear` with the fixed scale `amax / 127` instead of
        /// `DynamicQuantizeLinear`.
        input_amax: Option<f32>,
    },
}

/// The model and its preprocessing as an ONNX model's bytes.
pub fn onnx<B: Backend>(model: &Mlp<B>, prep: &Preprocessing) -> Result<Vec<u8>> {
    let layers = crate::export::dense(model)?;
    let dense: Vec<Dense<'_>> = layers
        .iter()
        .map(|(w, b)| Dense {
            inputs: w.len() / b.len().max(1),
            outputs: b.len(),
            weight: Weight::F32(w),
            bias: b,
        })
        .collect();
    graph(&dense, prep)
}

/// Dense `layers` (ReLU between them) after `prep`'s preprocessing as an ONNX model's
/// bytes: what the trainer exports, and what optimization writes for a model it
/// changed.
pub fn graph(layers: &[Dense<'_>], prep: &Preprocessing) -> Result<Vec<u8>> {
    check_layers(layers, prep)?;
    let mut g = Graph::default();
    let columns = preprocessing(&mut g, prep);
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    g.node("Concat", "", &refs, "features", &[Attr::Int("axis", 1)]);

    let last = layers.len() - 1;
    let mut x = "features".to_string();
    for (i, layer) in layers.iter().enumerate() {
        let out = if i == last {
            "output".to_string()
        } else {
            format!("layer{i}")
        };
        dense(&mut g, i, layer, &x, &out);
        if i < last {
            g.node("Relu", "", &[&out], &format!("{out}_relu"), &[]);
            x = format!("{out}_relu");
        }
    }
    let k = prep.target.outputs();
    g.outputs.push(value_info("output", FLOAT, k));
    match &prep.target {
        Target::Classification { classes, .. } if classes.len() == 2 => {
            g.node("Sigmoid", "", &["output"], "probability", &[]);
            g.outputs.push(value_info("probability", FLOAT, 1));
        }
        Target::Classification { .. } => {
            g.node(
                "Softmax",
                "",
                &["output"],
                "probabilities",
                &[Attr::Int("axis", 1)],
            );
            g.outputs.push(value_info("probabilities", FLOAT, k));
        }
        Target::Regression { mean, std, .. } => {
            g.floats("target_std", &[1], &[*std as f32]);
            g.floats("target_mean", &[1], &[*mean as f32]);
            g.node("Mul", "", &["output", "target_std"], "scaled", &[]);
            g.node("Add", "", &["scaled", "target_mean"], "prediction", &[]);
            g.outputs.push(value_info("prediction", FLOAT, 1));
        }
    }

    let mut graph = Msg::default();
    for n in &g.nodes {
        graph.msg(1, n);
    }
    graph.str(2, "qanat_mlp");
    for t in &g.initializers {
        graph.msg(5, t);
    }
    for v in &g.inputs {
        graph.msg(11, v);
    }
    for v in &g.outputs {
        graph.msg(12, v);
    }
    let mut model_proto = Msg::default();
    model_proto
        .int(1, 8)
        .str(2, "qanat")
        .str(3, env!("CARGO_PKG_VERSION"))
        .msg(7, &graph);
    for (domain, version) in [("", 13), ("ai.onnx.ml", 2)] {
        let mut opset = Msg::default();
        opset.str(1, domain).int(2, version);
        model_proto.msg(8, &opset);
    }
    Ok(model_proto.0)
}

/// The layers must chain from the preprocessed width to the target's outputs.
fn check_layers(layers: &[Dense<'_>], prep: &Preprocessing) -> Result<()> {
    let mut width = prep.width();
    for (i, l) in layers.iter().enumerate() {
        let weights = match l.weight {
            Weight::F32(w) => w.len(),
            Weight::Int8 { q, scale, .. } => {
                if scale.len() != l.outputs {
                    return Err(Error::invalid(format!(
                        "layer {i} has {} scales for {} outputs",
                        scale.len(),
                        l.outputs
                    )));
                }
                q.len()
            }
        };
        if l.inputs != width || weights != l.inputs * l.outputs || l.bias.len() != l.outputs {
            return Err(Error::invalid(format!(
                "layer {i} is [{}, {}] with {weights} weights and {} biases; the layer \
                 before gives {width} values",
                l.outputs,
                l.inputs,
                l.bias.len()
            )));
        }
        width = l.outputs;
    }
    if layers.is_empty() || width != prep.target.outputs() {
        return Err(Error::invalid(format!(
            "the layers end with {width} outputs; the target needs {}",
            prep.target.outputs()
        )));
    }
    Ok(())
}

/// `x · Wᵀ + b` into `out`: a `Gemm` for a float layer; for an int8 one, the
/// activations quantized at run time, an integer matmul and the two scales.
fn dense(g: &mut Graph, i: usize, l: &Dense<'_>, x: &str, out: &str) {
    let p = format!("layers.{i}");
    g.floats(&format!("{p}.bias"), &[l.outputs], l.bias);
    match l.weight {
        Weight::F32(w) => {
            g.floats(&format!("{p}.weight"), &[l.outputs, l.inputs], w);
            g.node(
                "Gemm",
                "",
                &[x, &format!("{p}.weight"), &format!("{p}.bias")],
                out,
                &[Attr::Int("transB", 1)],
            );
        }
        Weight::Int8 {
            q,
            scale,
            input_amax,
        } => {
            // MatMulInteger multiplies [N, in] by [in, out]. The weights go in as
            // uint8 with zero point 128 (q + 128, exact): onnxruntime's u8×s8 kernels
            // on AVX2 without VNNI add products pairwise in int16 and saturate.
            let mut t = vec![0u8; q.len()];
            for o in 0..l.outputs {
                for k in 0..l.inputs {
                    t[k * l.outputs + o] = (i16::from(q[o * l.inputs + k]) + 128) as u8;
                }
            }
            g.constant(&format!("{p}.weight"), UINT8, &[l.inputs, l.outputs], t);
            g.constant(&format!("{p}.weight_zero"), UINT8, &[], vec![128]);
            g.floats(&format!("{p}.weight_scale"), &[l.outputs], scale);
            let n = |s: &str| format!("{p}.{s}");
            match input_amax {
                None => g.node_n(
                    "DynamicQuantizeLinear",
                    &[x],
                    &[&n("x_q"), &n("x_scale"), &n("x_zero")],
                ),
                Some(amax) => {
                    // Symmetric, held as uint8 around 128 (onnxruntime's AVX2 kernels,
                    // as for the weights).
                    g.floats(&n("x_scale"), &[], &[amax / 127.0]);
                    g.constant(&n("x_zero"), UINT8, &[], vec![128]);
                    g.node_n(
                        "QuantizeLinear",
                        &[x, &n("x_scale"), &n("x_zero")],
                        &[&n("x_q")],
                    );
                }
            }
            g.node_n(
                "MatMulInteger",
                &[&n("x_q"), &n("weight"), &n("x_zero"), &n("weight_zero")],
                &[&n("acc")],
            );
            g.node(
                "Cast",
                "",
                &[&n("acc")],
                &n("acc_f"),
                &[Attr::Int("to", FLOAT)],
            );
            g.node(
                "Mul",
                "",
                &[&n("acc_f"), &n("x_scale")],
                &n("x_scaled"),
                &[],
            );
            g.node(
                "Mul",
                "",
                &[&n("x_scaled"), &n("weight_scale")],
                &n("scaled"),
                &[],
            );
            g.node("Add", "", &[&n("scaled"), &n("bias")], out, &[]);
        }
    }
}

/// The preprocessing as nodes from the raw inputs; the encoded columns' names.
fn preprocessing(g: &mut Graph, prep: &Preprocessing) -> Vec<String> {
    let mut columns = Vec::new();
    for (i, f) in prep.features.iter().enumerate() {
        match f {
            Feature::Numeric {
                name,
                mean,
                std,
                indicator,
            } => {
                g.inputs.push(value_info(name, DOUBLE, 1));
                let p = format!("f{i}");
                g.double(&format!("{p}_mean"), *mean);
                g.double(&format!("{p}_std"), *std);
                // x == x is false only for NaN (IsNaN's output type is not inferred
                // by every runtime).
                g.node("Equal", "", &[name, name], &format!("{p}_present"), &[]);
                g.node(
                    "Where",
                    "",
                    &[&format!("{p}_present"), name, &format!("{p}_mean")],
                    &format!("{p}_filled"),
                    &[],
                );
                g.node(
                    "Sub",
                    "",
                    &[&format!("{p}_filled"), &format!("{p}_mean")],
                    &format!("{p}_centered"),
                    &[],
                );
                g.node(
                    "Div",
                    "",
                    &[&format!("{p}_centered"), &format!("{p}_std")],
                    &format!("{p}_z"),
                    &[],
                );
                g.node(
                    "Cast",
                    "",
                    &[&format!("{p}_z")],
                    &format!("{p}_col"),
                    &[Attr::Int("to", FLOAT)],
                );
                columns.push(format!("{p}_col"));
                if *indicator {
                    g.node(
                        "Not",
                        "",
                        &[&format!("{p}_present")],
                        &format!("{p}_nan"),
                        &[],
                    );
                    g.node(
                        "Cast",
                        "",
                        &[&format!("{p}_nan")],
                        &format!("{p}_missing"),
                        &[Attr::Int("to", FLOAT)],
                    );
                    columns.push(format!("{p}_missing"));
                }
            }
            Feature::Categorical { name, categories } => {
                g.inputs.push(value_info(name, STRING, 1));
                let p = format!("f{i}");
                g.node(
                    "CategoryMapper",
                    "ai.onnx.ml",
                    &[name],
                    &format!("{p}_index"),
                    &[
                        Attr::Strings("cats_strings", categories.clone()),
                        Attr::Ints("cats_int64s", (0..categories.len() as i64).collect()),
                        Attr::Int("default_int64", categories.len() as i64),
                    ],
                );
                let slots: Vec<u8> = (0..=categories.len() as i64)
                    .flat_map(i64::to_le_bytes)
                    .collect();
                g.constant(
                    &format!("{p}_slots"),
                    INT64,
                    &[1, categories.len() + 1],
                    slots,
                );
                g.node(
                    "Equal",
                    "",
                    &[&format!("{p}_index"), &format!("{p}_slots")],
                    &format!("{p}_hot"),
                    &[],
                );
                g.node(
                    "Cast",
                    "",
                    &[&format!("{p}_hot")],
                    &format!("{p}_col"),
                    &[Attr::Int("to", FLOAT)],
                );
                columns.push(format!("{p}_col"));
            }
        }
    }
    columns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_keys_are_protobufs() {
        let mut m = Msg::default();
        m.int(1, 300);
        assert_eq!(m.0, [0x08, 0xac, 0x02]);
        let mut m = Msg::default();
        m.str(2, "hi");
        assert_eq!(m.0, [0x12, 2, b'h', b'i']);
        let mut m = Msg::default();
        m.int(3, -1);
        assert_eq!(m.0.len(), 11, "a negative int64 is ten bytes of varint");
    }
}
