//! The trained model's files: `weights.safetensors` (each layer's weight in PyTorch's
//! `[out, in]` layout and its bias, f32, little-endian) and `spec.json` (the signature:
//! feature names and kinds, the preprocessing, the label mapping, the layer widths).

use burn::tensor::backend::Backend;
use qanat_model::package::Spec;
use qanat_model::prep::{Feature, Preprocessing};

use crate::fit::Mlp;
use crate::{Error, Result};

/// One named tensor.
struct Named {
    name: String,
    shape: Vec<usize>,
    data: Vec<f32>,
}

fn tensors<B: Backend>(model: &Mlp<B>) -> Result<Vec<Named>> {
    let read = |d: burn::tensor::TensorData| {
        d.to_vec::<f32>()
            .map_err(|e| Error::internal(format!("reading weights: {e:?}")))
    };
    let mut out = Vec::new();
    for (i, layer) in model.layers.iter().enumerate() {
        let w = layer.weight.val();
        let [d_in, d_out] = w.dims();
        let v = read(w.into_data())?;
        // burn keeps [in, out]; PyTorch's nn.Linear (and ONNX Gemm transB) [out, in].
        let mut t = vec![0f32; v.len()];
        for r in 0..d_in {
            for c in 0..d_out {
                t[c * d_in + r] = v[r * d_out + c];
            }
        }
        out.push(Named {
            name: format!("layers.{i}.weight"),
            shape: vec![d_out, d_in],
            data: t,
        });
        if let Some(b) = &layer.bias {
            out.push(Named {
                name: format!("layers.{i}.bias"),
                shape: vec![d_out],
                data: read(b.val().into_data())?,
            });
        }
    }
    Ok(out)
}

/// Each layer's weight (`[out, in]`) and bias, as plain values.
pub fn dense<B: Backend>(model: &Mlp<B>) -> Result<Vec<(Vec<f32>, Vec<f32>)>> {
    let mut out: Vec<(Vec<f32>, Vec<f32>)> = Vec::new();
    for t in tensors(model)? {
        if t.name.ends_with(".weight") {
            // A zero bias until the layer's own (if it has one) follows.
            out.push((t.data, vec![0.0; t.shape[0]]));
        } else if let Some(last) = out.last_mut() {
            last.1 = t.data;
        }
    }
    Ok(out)
}

/// The model's weights in the safetensors format.
pub fn safetensors<B: Backend>(model: &Mlp<B>) -> Result<Vec<u8>> {
    let ts = tensors(model)?;
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for t in &ts {
        let len = t.data.len() * 4;
        header.insert(
            t.name.clone(),
            serde_json::json!({"dtype": "F32", "shape": t.shape, "data_offsets": [offset, offset + len]}),
        );
        offset += len;
    }
    header.insert(
        "__metadata__".into(),
        serde_json::json!({"format": "qanat-mlp", "activation": "relu"}),
    );
    let mut h = serde_json::to_vec(&header).map_err(|e| Error::internal(e.to_string()))?;
    // The data starts 8-aligned.
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + h.len() + offset);
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&h);
    for t in &ts {
        for v in &t.data {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    Ok(out)
}

/// `spec.json` of `model` after `prep`.
pub fn spec<B: Backend>(model: &Mlp<B>, prep: &Preprocessing) -> Spec {
    let mut layers = vec![prep.width()];
    layers.extend(model.layers.iter().map(|l| l.weight.val().dims()[1]));
    Spec::for_layers(prep, layers)
}

/// An input example and the model's outputs for it: `rows` of `table` as MLflow's
/// `input_example.json` (`{"columns": [...], "data": [[...]]}`, raw values, `null`
/// for missing) and the raw outputs the trainer computes for them
/// (`{"output": [[...]]}`), so that another runtime (the ONNX export) can be checked
/// against the trainer.
pub fn example<B: Backend>(
    model: &Mlp<B>,
    prep: &Preprocessing,
    table: &qanat_model::Table,
    rows: &[usize],
    device: &B::Device,
) -> Result<(serde_json::Value, serde_json::Value)> {
    use qanat_model::table::Values;
    use serde_json::{json, Value};
    let mut data = vec![Vec::with_capacity(prep.features.len()); rows.len()];
    for f in &prep.features {
        let col = table.column(f.name())?;
        for (r, i) in rows.iter().enumerate() {
            data[r].push(match &col.values {
                Values::Numeric(v) if v[*i].is_nan() => Value::Null,
                Values::Numeric(v) => json!(v[*i]),
                Values::Text(v) => v[*i].as_ref().map_or(Value::Null, |s| json!(s)),
                Values::Unsupported(..) => Value::Null,
            });
        }
    }
    let encoded = prep.encode(table, rows, &[])?;
    let out = crate::fit::outputs(model, &encoded, device)?;
    let k = prep.target.outputs();
    let input = json!({
        "columns": prep.features.iter().map(Feature::name).collect::<Vec<_>>(),
        "data": data,
    });
    let output = json!({ "output": out.chunks(k).collect::<Vec<_>>() });
    Ok((input, output))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::Cpu;

    #[test]
    fn safetensors_has_a_header_then_little_endian_f32s() {
        let device = Default::default();
        let m: Mlp<Cpu> = Mlp::new(3, &[4], 1, &device);
        let bytes = safetensors(&m).expect("bytes");
        let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
        assert_eq!(n % 8, 0);
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("json");
        assert_eq!(
            header["layers.0.weight"]["shape"],
            serde_json::json!([4, 3])
        );
        assert_eq!(
            header["layers.1.bias"]["data_offsets"],
            serde_json::json!([80, 84])
        );
        assert_eq!(bytes.len(), 8 + n + (12 + 4 + 4 + 1) * 4);
        // The first stored value is weight[out 0][in 0] = burn's weight[0][0].
        let w = m.layers[0]
            .weight
            .val()
            .into_data()
            .to_vec::<f32>()
            .expect("w");
        assert_eq!(
            f32::from_le_bytes(bytes[8 + n..8 + n + 4].try_into().expect("4")),
            w[0]
        );
        assert_eq!(
            f32::from_le_bytes(bytes[8 + n + 4..8 + n + 8].try_into().expect("4")),
            w[4]
        );
    }
}
