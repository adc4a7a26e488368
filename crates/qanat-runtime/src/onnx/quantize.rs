//! int8 quantization of any ONNX model, by rewriting its matrix products: every
//! `MatMul` and `Gemm` whose weights are a constant float matrix (an initializer)
//! becomes
//!
//! ```text
//! DynamicQuantizeLinear(x) → MatMulInteger(x_q, W_q, x_zero, 128) → Cast(float)
//!   → Mul(x_scale) → Mul(w_scale · alpha) [→ Add(C · beta)]
//! ```
//!
//! as onnxruntime's `quantize_dynamic` writes it, so tract and onnxruntime both run the
//! result. Static quantization ([`Activations::Static`]) replaces the first step with
//! `QuantizeLinear` at a scale calibrated beforehand. The weights are quantized per output column (symmetric, ±127) and stored as
//! uint8 around the zero point 128 — exact, and what onnxruntime's AVX2 kernels
//! multiply without saturating (the same form as the native models' export). The float
//! weights no longer used are dropped, so the file shrinks about fourfold.
//!
//! Left as they are: products whose weights are computed at run time, a `Gemm` with
//! `transA`, weights in external data files (refused, with the reason), and models of an
//! opset before 11 (refused: `DynamicQuantizeLinear` needs 11).

use std::collections::{HashMap, HashSet};

use tract_onnx::pb;

use super::OnnxGraph;
use crate::{Error, Result};

const FLOAT: i32 = 1;
const UINT8: i32 = 2;

/// The rewritten model and what was done to it.
#[derive(Debug, Clone)]
pub struct Quantized {
    pub graph: OnnxGraph,
    /// Products rewritten to integer ones.
    pub nodes: usize,
    /// Their outputs' names, which [`rewrite_products`] takes.
    pub products: Vec<String>,
    /// Products left in float, each with the reason.
    pub skipped: Vec<String>,
}

/// How a rewritten product quantizes its input.
#[derive(Debug, Clone, Copy)]
pub enum Activations<'a> {
    /// At run time, one scale a call (`DynamicQuantizeLinear`).
    Dynamic,
    /// With a fixed scale from calibration (`QuantizeLinear`): the largest absolute
    /// value seen of each product's input, by the input's name.
    Static(&'a HashMap<String, f32>),
}

/// Quantizes `graph`'s constant-weight `MatMul` and `Gemm` nodes to dynamic int8.
pub fn dynamic(graph: &OnnxGraph) -> Result<Quantized> {
    rewrite_products(graph, &[], Activations::Dynamic)
}

/// The inputs of the products [`rewrite_products`] would rewrite: what static
/// quantization calibrates.
pub fn product_inputs(graph: &OnnxGraph) -> Result<Vec<String>> {
    let g = graph
        .proto
        .graph
        .as_ref()
        .ok_or_else(|| Error::invalid("the ONNX model has no graph"))?;
    let weights = initializers(g);
    let mut out = Vec::new();
    for node in &g.node {
        let product = is_product(node);
        if product {
            if let Ok(p) = plan(node, &weights)? {
                if !out.contains(&p.x) {
                    out.push(p.x);
                }
            }
        }
    }
    Ok(out)
}

/// Rewrites `graph`'s constant-weight products to int8, quantizing their inputs as
/// `activations` says, except those whose outputs are named in `keep`.
pub fn rewrite_products(
    graph: &OnnxGraph,
    keep: &[String],
    activations: Activations<'_>,
) -> Result<Quantized> {
    let mut proto = graph.proto.clone();
    let opset = proto
        .opset_import
        .iter()
        .filter(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .max()
        .unwrap_or(0);
    if opset < 11 {
        return Err(Error::invalid(format!(
            "the model uses ONNX opset {opset}; dynamic quantization needs opset 11 or newer \
             (re-export it with a newer opset)"
        )));
    }
    let g = proto
        .graph
        .as_mut()
        .ok_or_else(|| Error::invalid("the ONNX model has no graph"))?;
    let weights = initializers(g);
    let mut nodes = Vec::with_capacity(g.node.len());
    let mut added = Vec::new();
    let (mut count, mut skipped, mut products) = (0, Vec::new(), Vec::new());
    for node in std::mem::take(&mut g.node) {
        let product = is_product(&node);
        if !product {
            nodes.push(node);
            continue;
        }
        if node.output.first().is_some_and(|o| keep.contains(o)) {
            skipped.push(format!(
                "{} '{}': kept in float",
                node.op_type, node.output[0]
            ));
            nodes.push(node);
            continue;
        }
        let planned = plan(&node, &weights)?.and_then(|p| match activations {
            Activations::Static(amax) if !amax.contains_key(&p.x) => {
                Err(format!("its input '{}' was not calibrated", p.x))
            }
            _ => Ok(p),
        });
        match planned {
            Ok(p) => {
                products.push(node.output[0].clone());
                rewrite(&node, p, activations, &mut nodes, &mut added);
                count += 1;
            }
            Err(reason) => {
                skipped.push(format!(
                    "{} '{}': {reason}",
                    node.op_type,
                    node.output.first().map_or("", String::as_str)
                ));
                nodes.push(node);
            }
        }
    }
    if count == 0 {
        return Err(Error::invalid(format!(
            "nothing to quantize: the model has no MatMul or Gemm with constant float weights{}",
            if skipped.is_empty() {
                String::new()
            } else {
                format!(" ({})", skipped.join("; "))
            }
        )));
    }
    g.node = nodes;
    g.initializer.extend(added);
    // Drop the float weights nothing reads any more.
    let used: HashSet<&str> = g
        .node
        .iter()
        .flat_map(|n| n.input.iter().map(String::as_str))
        .chain(g.output.iter().map(|o| o.name.as_str()))
        .collect();
    let unused: HashSet<String> = g
        .initializer
        .iter()
        .filter(|t| !used.contains(t.name.as_str()))
        .map(|t| t.name.clone())
        .collect();
    g.initializer.retain(|t| !unused.contains(&t.name));
    g.input.retain(|i| !unused.contains(&i.name));
    proto.metadata_props.push(pb::StringStringEntryProto {
        key: "qanat.quantization".into(),
        value: match activations {
            Activations::Dynamic => "int8-dynamic",
            Activations::Static(_) => "int8-static",
        }
        .into(),
    });
    use prost::Message;
    Ok(Quantized {
        graph: OnnxGraph::read(&proto.encode_to_vec())?,
        nodes: count,
        products,
        skipped,
    })
}

/// The graph's initializers by name.
fn initializers(g: &pb::GraphProto) -> HashMap<String, pb::TensorProto> {
    g.initializer
        .iter()
        .map(|t| (t.name.clone(), t.clone()))
        .collect()
}

/// A matrix product of the default domain.
fn is_product(node: &pb::NodeProto) -> bool {
    node.domain.is_empty() && matches!(node.op_type.as_str(), "MatMul" | "Gemm")
}

/// A product to rewrite: `x · W · alpha + C · beta`, `W` as `[K, N]`.
struct Plan {
    x: String,
    k: usize,
    n: usize,
    /// `[K, N]` row-major.
    w: Vec<f32>,
    alpha: f32,
    c: Option<(String, f32)>,
}

/// The plan for `node`, or why it stays float (`Err` outside: the model is unusable).
fn plan(
    node: &pb::NodeProto,
    weights: &HashMap<String, pb::TensorProto>,
) -> Result<std::result::Result<Plan, String>> {
    let attr = |name: &str| node.attribute.iter().find(|a| a.name == name);
    let int = |name: &str, default: i64| attr(name).map_or(default, |a| a.i);
    let float = |name: &str| attr(name).map_or(1.0, |a| a.f);
    let (Some(x), Some(b)) = (node.input.first(), node.input.get(1)) else {
        return Ok(Err("fewer than two inputs".into()));
    };
    let Some(t) = weights.get(b) else {
        return Ok(Err("its weights are computed at run time".into()));
    };
    if t.data_type != FLOAT || t.dims.len() != 2 {
        return Ok(Err(format!(
            "its weights are not a float matrix (type {}, shape {:?})",
            t.data_type, t.dims
        )));
    }
    if node.op_type == "Gemm" && int("transA", 0) != 0 {
        return Ok(Err("Gemm with transA".into()));
    }
    let values = floats(t)?;
    let (rows, cols) = (t.dims[0] as usize, t.dims[1] as usize);
    let trans = node.op_type == "Gemm" && int("transB", 0) != 0;
    let (k, n) = if trans { (cols, rows) } else { (rows, cols) };
    let w = if trans {
        let mut w = vec![0f32; k * n];
        for r in 0..rows {
            for c in 0..cols {
                w[c * n + r] = values[r * cols + c];
            }
        }
        w
    } else {
        values
    };
    let c = node
        .input
        .get(2)
        .filter(|c| node.op_type == "Gemm" && !c.is_empty())
        .map(|c| (c.clone(), float("beta")));
    Ok(Ok(Plan {
        x: x.clone(),
        k,
        n,
        w,
        alpha: if node.op_type == "Gemm" {
            float("alpha")
        } else {
            1.0
        },
        c,
    }))
}

/// A float initializer's values, refusing data kept outside the file.
fn floats(t: &pb::TensorProto) -> Result<Vec<f32>> {
    if t.data_location == Some(1) || !t.external_data.is_empty() {
        return Err(Error::invalid(format!(
            "initializer '{}' is stored in an external data file: save the model with its \
             weights inside (onnx.save(model, path, save_as_external_data=False))",
            t.name
        )));
    }
    let expected: usize = t.dims.iter().map(|d| *d as usize).product();
    let v: Vec<f32> = if t.raw_data.is_empty() {
        t.float_data.clone()
    } else {
        t.raw_data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    if v.len() != expected {
        return Err(Error::invalid(format!(
            "initializer '{}' holds {} values for shape {:?}",
            t.name,
            v.len(),
            t.dims
        )));
    }
    Ok(v)
}

fn tensor(name: &str, data_type: i32, dims: &[usize], raw: Vec<u8>) -> pb::TensorProto {
    pb::TensorProto {
        name: name.to_string(),
        data_type,
        dims: dims.iter().map(|d| *d as i64).collect(),
        raw_data: raw,
        ..Default::default()
    }
}

fn f32s(name: &str, dims: &[usize], v: &[f32]) -> pb::TensorProto {
    tensor(
        name,
        FLOAT,
        dims,
        v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    )
}

fn node(
    op: &str,
    inputs: &[&str],
    outputs: &[&str],
    attribute: Vec<pb::AttributeProto>,
) -> pb::NodeProto {
    pb::NodeProto {
        op_type: op.to_string(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: outputs[0].to_string(),
        attribute,
        ..Default::default()
    }
}

/// Per output column: the scale and the weights as uint8 around 128.
pub(crate) fn quantize_columns(w: &[f32], k: usize, n: usize) -> (Vec<u8>, Vec<f32>) {
    let mut scale = vec![0f32; n];
    for row in w.chunks_exact(n) {
        for (s, v) in scale.iter_mut().zip(row) {
            *s = s.max(v.abs());
        }
    }
    for s in &mut scale {
        *s = if *s > 0.0 { *s / 127.0 } else { 1.0 };
    }
    let mut q = vec![0u8; k * n];
    for (i, v) in w.iter().enumerate() {
        let level = (v / scale[i % n]).round().clamp(-127.0, 127.0);
        q[i] = (level as i16 + 128) as u8;
    }
    (q, scale)
}

fn rewrite(
    old: &pb::NodeProto,
    p: Plan,
    activations: Activations<'_>,
    nodes: &mut Vec<pb::NodeProto>,
    added: &mut Vec<pb::TensorProto>,
) {
    let y = &old.output[0];
    let n = |s: &str| format!("{y}/int8/{s}");
    let (q, mut scale) = quantize_columns(&p.w, p.k, p.n);
    for s in &mut scale {
        *s *= p.alpha;
    }
    added.push(tensor(&n("weight"), UINT8, &[p.k, p.n], q));
    added.push(tensor(&n("weight_zero"), UINT8, &[], vec![128]));
    added.push(f32s(&n("weight_scale"), &[p.n], &scale));
    match activations {
        Activations::Dynamic => nodes.push(node(
            "DynamicQuantizeLinear",
            &[&p.x],
            &[&n("x_q"), &n("x_scale"), &n("x_zero")],
            vec![],
        )),
        Activations::Static(amax) => {
            // Symmetric, held as uint8 around 128 (as the weights); values beyond the
            // calibrated range saturate.
            let a = amax.get(&p.x).copied().unwrap_or(0.0);
            let scale = if a > 0.0 && a.is_finite() {
                a / 127.0
            } else {
                1.0
            };
            added.push(f32s(&n("x_scale"), &[], &[scale]));
            added.push(tensor(&n("x_zero"), UINT8, &[], vec![128]));
            nodes.push(node(
                "QuantizeLinear",
                &[&p.x, &n("x_scale"), &n("x_zero")],
                &[&n("x_q")],
                vec![],
            ));
        }
    }
    nodes.push(node(
        "MatMulInteger",
        &[&n("x_q"), &n("weight"), &n("x_zero"), &n("weight_zero")],
        &[&n("acc")],
        vec![],
    ));
    nodes.push(node(
        "Cast",
        &[&n("acc")],
        &[&n("acc_f")],
        vec![pb::AttributeProto {
            name: "to".into(),
            r#type: pb::attribute_proto::AttributeType::Int as i32,
            i: i64::from(FLOAT),
            ..Default::default()
        }],
    ));
    nodes.push(node(
        "Mul",
        &[&n("acc_f"), &n("x_scale")],
        &[&n("x_scaled")],
        vec![],
    ));
    let scaled = if p.c.is_some() {
        n("scaled")
    } else {
        y.clone()
    };
    nodes.push(node(
        "Mul",
        &[&n("x_scaled"), &n("weight_scale")],
        &[&scaled],
        vec![],
    ));
    if let Some((c, beta)) = p.c {
        let c = if beta == 1.0 {
            c
        } else {
            added.push(f32s(&n("beta"), &[], &[beta]));
            nodes.push(node("Mul", &[&c, &n("beta")], &[&n("c")], vec![]));
            n("c")
        };
        nodes.push(node("Add", &[&scaled, &c], &[y], vec![]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_quantize_symmetrically_around_128() {
        // K = 2, N = 2: column 0 is [1, -0.5], column 1 is [0, 0].
        let (q, scale) = quantize_columns(&[1.0, 0.0, -0.5, 0.0], 2, 2);
        assert_eq!(scale, vec![1.0 / 127.0, 1.0]);
        assert_eq!(q, vec![255, 128, 128 - 64, 128]);
    }
}
