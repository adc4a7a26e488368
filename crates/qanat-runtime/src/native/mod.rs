//! The native runtime: Qanat's own forward pass for the trainer's linear and MLP models,
//! in f32 or with int8 layers, on the kernels of [`kernels`].
//!
//! A model is a stack of dense layers with ReLU between them (never after the last),
//! read from and written to `weights.safetensors` as the trainer writes it
//! (`layers.{i}.weight` `[out, in]`, `layers.{i}.bias` `[out]`). An int8 layer stores
//! its weight as I8 with one f32 scale per output channel (`layers.{i}.weight_scale`);
//! its input is quantized per row at run time (dynamic quantization).
//!
//! [`NativeMlp::forward`] allocates nothing once its [`Scratch`] has grown to the batch
//! size: batch-1 latency is the kernels' time alone.

pub(crate) mod kernels;

use std::collections::HashMap;

use safetensors::{Dtype, SafeTensors};

use crate::{Error, Result};
use kernels::INT_PAD;

use qanat_model::package::Precision;

#[derive(Debug, Clone, PartialEq)]
enum Weights {
    /// `[out, in]`, and the same packed for `qanat_simd`'s kernel where the CPU has
    /// one ([`Layer::pack`]).
    F32 {
        w: Vec<f32>,
        packed: Option<Box<qanat_simd::PackedF32>>,
    },
    /// `[out, kp]` int8 values, each row zero-padded to `kp` (a multiple of 32) for
    /// the kernel; `w ≈ q · scale[out]`; packed for the VNNI kernel where the CPU has
    /// it.
    Int8 {
        q: Vec<i8>,
        kp: usize,
        scale: Vec<f32>,
        packed: Option<Box<qanat_simd::PackedI8>>,
    },
}

/// Whether layers are packed for `qanat_simd`'s kernels (where the CPU has them):
/// `QANAT_NATIVE_KERNELS=portable` keeps every layer on the portable kernels (to
/// compare the two, or to rule the accelerated ones out).
fn accelerated() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("QANAT_NATIVE_KERNELS").as_deref() != Ok("portable"))
}

/// One dense layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    d_in: usize,
    d_out: usize,
    weights: Weights,
    bias: Vec<f32>,
    /// Static int8: the calibrated largest input magnitude (one activation scale for
    /// every row); `None` quantizes each row with its own (dynamic).
    input_amax: Option<f32>,
}

impl Layer {
    /// A float layer from its `[out, in]` weight and its bias.
    pub fn f32(d_in: usize, weight: Vec<f32>, bias: Vec<f32>) -> Result<Self> {
        let d_out = bias.len();
        if d_in == 0 || d_out == 0 || weight.len() != d_in * d_out {
            return Err(Error::invalid(format!(
                "a layer's weight must be [out, in] = [{d_out}, {d_in}] ({} values), not {} values",
                d_in * d_out,
                weight.len()
            )));
        }
        Ok(Layer {
            d_in,
            d_out,
            weights: Weights::F32 {
                w: weight,
                packed: None,
            },
            bias,
            input_amax: None,
        }
        .pack())
    }

    /// This layer with its weights also packed for the CPU's accelerated kernel, when
    /// it has one (and [`accelerated`]).
    fn pack(mut self) -> Self {
        if !accelerated() {
            return self;
        }
        match &mut self.weights {
            Weights::F32 { w, packed } => {
                // A layer of fewer outputs than a panel (an output layer, mostly) would
                // leave most of each packed FMA idle: its dot products along the inputs
                // are faster.
                if qanat_simd::f32_kernel().is_some() && self.d_out >= qanat_simd::PANEL {
                    *packed = Some(Box::new(qanat_simd::PackedF32::new(
                        w, self.d_in, &self.bias,
                    )));
                }
            }
            Weights::Int8 {
                q,
                kp,
                scale,
                packed,
            } => {
                if qanat_simd::int8_kernel().is_some() {
                    *packed = Some(Box::new(qanat_simd::PackedI8::new(
                        q, *kp, scale, &self.bias,
                    )));
                }
            }
        }
        self
    }

    /// The kernel this layer runs on: `amx-int8+avx512-vnni`, `avx512-vnni`,
    /// `avx512-fma`, or the portable kernels' instruction set.
    pub fn kernel(&self) -> &'static str {
        match &self.weights {
            Weights::F32 {
                packed: Some(_), ..
            } => qanat_simd::f32_kernel().unwrap_or("portable"),
            Weights::Int8 {
                packed: Some(_), ..
            } => qanat_simd::int8_kernel().unwrap_or("portable"),
            Weights::F32 { .. } => kernels::f32_path(),
            Weights::Int8 { .. } => kernels::int8_path(),
        }
    }

    pub fn inputs(&self) -> usize {
        self.d_in
    }

    pub fn outputs(&self) -> usize {
        self.d_out
    }

    pub fn precision(&self) -> Precision {
        match self.weights {
            Weights::F32 { .. } => Precision::F32,
            Weights::Int8 { .. } => Precision::Int8,
        }
    }

    /// The weight as f32 `[out, in]` (dequantized for an int8 layer).
    pub fn weight_f32(&self) -> Vec<f32> {
        match &self.weights {
            Weights::F32 { w, .. } => w.clone(),
            Weights::Int8 { q, kp, scale, .. } => (0..self.d_out)
                .flat_map(|o| {
                    q[o * kp..o * kp + self.d_in]
                        .iter()
                        .map(move |v| f32::from(*v) * scale[o])
                })
                .collect(),
        }
    }

    pub fn bias(&self) -> &[f32] {
        &self.bias
    }

    /// The calibrated input magnitude of a statically quantized layer.
    pub fn input_amax(&self) -> Option<f32> {
        self.input_amax
    }

    /// An int8 layer's `[out, in]` values and per-output scales (`None` for f32).
    pub fn int8(&self) -> Option<(Vec<i8>, &[f32])> {
        match &self.weights {
            Weights::F32 { .. } => None,
            Weights::Int8 { q, kp, scale, .. } => Some((
                (0..self.d_out)
                    .flat_map(|o| q[o * kp..o * kp + self.d_in].iter().copied())
                    .collect(),
                scale,
            )),
        }
    }

    /// This layer with its weight quantized to int8, one symmetric scale per output
    /// channel (`max |w[o, :]| / 127`).
    pub fn quantized(&self) -> Layer {
        let w = self.weight_f32();
        let kp = self.d_in.div_ceil(INT_PAD) * INT_PAD;
        let mut q = vec![0i8; self.d_out * kp];
        let mut scale = vec![1f32; self.d_out];
        for o in 0..self.d_out {
            let row = &w[o * self.d_in..(o + 1) * self.d_in];
            let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            if amax > 0.0 && amax.is_finite() {
                scale[o] = amax / 127.0;
            }
            for (qv, v) in q[o * kp..].iter_mut().zip(row) {
                *qv = (v / scale[o]).round().clamp(-127.0, 127.0) as i8;
            }
        }
        Layer {
            weights: Weights::Int8 {
                q,
                kp,
                scale,
                packed: None,
            },
            // Dynamic unless a calibration sets it.
            input_amax: None,
            ..self.clone()
        }
        .pack()
    }

    fn forward(&self, x: &[f32], rows: usize, relu: bool, y: &mut [f32], scratch: &mut Quant) {
        match &self.weights {
            Weights::F32 { w, packed } => {
                if let Some(p) = packed {
                    if qanat_simd::gemm_f32(x, p, relu, y) {
                        return;
                    }
                }
                kernels::gemm_f32(x, self.d_in, w, &self.bias, relu, y)
            }
            Weights::Int8 {
                q,
                kp,
                scale,
                packed,
            } => {
                grow(&mut scratch.scale, rows, 0.0);
                if let Some(p) = packed {
                    grow(&mut scratch.u, rows * kp, 0);
                    let xu = &mut scratch.u[..rows * kp];
                    let xs = &mut scratch.scale[..rows];
                    kernels::quantize_rows(x, self.d_in, *kp, xu, xs, self.input_amax);
                    if qanat_simd::gemm_u8i8(xu, xs, p, relu, y) {
                        return;
                    }
                }
                grow(&mut scratch.q, rows * kp, 0);
                grow(&mut scratch.scale, rows, 0.0);
                let xq = &mut scratch.q[..rows * kp];
                let xs = &mut scratch.scale[..rows];
                kernels::quantize_rows(x, self.d_in, *kp, xq, xs, self.input_amax);
                kernels::gemm_i8(xq, xs, *kp, q, scale, &self.bias, relu, y);
            }
        }
    }

    /// Bytes its weights take on disk.
    fn stored_bytes(&self) -> usize {
        let w = match &self.weights {
            Weights::F32 { w, .. } => w.len() * 4,
            Weights::Int8 { scale, .. } => self.d_in * self.d_out + scale.len() * 4,
        };
        w + self.bias.len() * 4
    }
}

/// Grows `v` to at least `n` items; never shrinks, so a warm scratch never allocates.
fn grow<T: Clone>(v: &mut Vec<T>, n: usize, fill: T) {
    if v.len() < n {
        v.resize(n, fill);
    }
}

/// Working memory of a forward pass, reused from call to call.
#[derive(Debug, Default)]
pub struct Scratch {
    a: Vec<f32>,
    b: Vec<f32>,
    quant: Quant,
}

#[derive(Debug, Default)]
struct Quant {
    q: Vec<i16>,
    /// Activations as `q + 128` for the VNNI kernel.
    u: Vec<u8>,
    scale: Vec<f32>,
}

/// A dense network: layers with ReLU between them.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeMlp {
    layers: Vec<Layer>,
}

impl NativeMlp {
    /// Checks that each layer's input is the previous layer's output.
    pub fn new(layers: Vec<Layer>) -> Result<Self> {
        if layers.is_empty() {
            return Err(Error::invalid("a model needs at least one layer"));
        }
        for (i, pair) in layers.windows(2).enumerate() {
            if pair[0].d_out != pair[1].d_in {
                return Err(Error::invalid(format!(
                    "layer {i} gives {} values but layer {} takes {}",
                    pair[0].d_out,
                    i + 1,
                    pair[1].d_in
                )));
            }
        }
        Ok(NativeMlp { layers })
    }

    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// Width of the (encoded) input.
    pub fn inputs(&self) -> usize {
        self.layers[0].d_in
    }

    pub fn outputs(&self) -> usize {
        self.layers[self.layers.len() - 1].d_out
    }

    /// `int8` if any layer is, else `f32`.
    pub fn precision(&self) -> Precision {
        if self.layers.iter().any(|l| l.precision() == Precision::Int8) {
            Precision::Int8
        } else {
            Precision::F32
        }
    }

    /// The kernels its layers run on, in layer order without repeats (e.g.
    /// `avx512-vnni, avx512-fma`): what `deploy status` reports.
    pub fn kernels(&self) -> String {
        let mut names: Vec<&str> = Vec::new();
        for l in &self.layers {
            if !names.contains(&l.kernel()) {
                names.push(l.kernel());
            }
        }
        names.join(", ")
    }

    /// This model on the portable kernels only (what `QANAT_NATIVE_KERNELS=portable`
    /// gives): to compare the two.
    pub fn portable(&self) -> NativeMlp {
        let mut m = self.clone();
        for l in &mut m.layers {
            match &mut l.weights {
                Weights::F32 { packed, .. } => *packed = None,
                Weights::Int8 { packed, .. } => *packed = None,
            }
        }
        m
    }

    /// Bytes of `weights.safetensors` apart from its header.
    pub fn weight_bytes(&self) -> usize {
        self.layers.iter().map(Layer::stored_bytes).sum()
    }

    /// An f32 network from `inputs` and each layer's `[out, in]` weight and bias (as
    /// `qanat_train::export::dense` gives them).
    pub fn from_dense(inputs: usize, layers: Vec<(Vec<f32>, Vec<f32>)>) -> Result<NativeMlp> {
        let mut d_in = inputs;
        let mut out = Vec::with_capacity(layers.len());
        for (w, b) in layers {
            let d_out = b.len();
            out.push(Layer::f32(d_in, w, b)?);
            d_in = d_out;
        }
        NativeMlp::new(out)
    }

    /// Static int8: as [`quantize_dynamic`](Self::quantize_dynamic), but each int8
    /// layer quantizes its inputs with one scale, calibrated as the largest input
    /// magnitude the f32 network sees on `rows` rows of `x` (the encoded calibration
    /// data), instead of each row's own.
    pub fn quantize_static(&self, x: &[f32], rows: usize) -> Result<NativeMlp> {
        if rows == 0 || x.len() != rows * self.inputs() {
            return Err(Error::invalid(format!(
                "calibration needs rows of {} values; got {} values for {rows} rows",
                self.inputs(),
                x.len()
            )));
        }
        if self.precision() != Precision::F32 {
            return Err(Error::invalid(
                "static quantization calibrates an f32 model",
            ));
        }
        let last = self.layers.len() - 1;
        let mut layers = Vec::with_capacity(self.layers.len());
        let mut a = x.to_vec();
        let mut scratch = Quant::default();
        for (i, l) in self.layers.iter().enumerate() {
            let amax = a
                .iter()
                .filter(|v| v.is_finite())
                .fold(0f32, |m, v| m.max(v.abs()));
            if i < last {
                let mut q = l.quantized();
                q.input_amax = Some(if amax > 0.0 { amax } else { 1.0 });
                layers.push(q);
            } else {
                layers.push(l.clone());
            }
            let mut y = vec![0f32; rows * l.d_out];
            l.forward(&a, rows, i < last, &mut y, &mut scratch);
            a = y;
        }
        NativeMlp::new(layers)
    }

    /// Post-training dynamic quantization: every layer but the output layer gets int8
    /// weights (per output channel) and int8 activations (per row, at run time). The
    /// output layer stays f32: it is a small share of the work and carries the
    /// decision, so its rounding would cost accuracy for no speed.
    pub fn quantize_dynamic(&self) -> NativeMlp {
        let last = self.layers.len() - 1;
        NativeMlp {
            layers: self
                .layers
                .iter()
                .enumerate()
                .map(|(i, l)| if i < last { l.quantized() } else { l.clone() })
                .collect(),
        }
    }

    /// Runs `rows` rows of `x` (`rows × inputs`, row-major); the outputs are
    /// `rows × outputs` in `scratch`.
    pub fn forward<'s>(
        &self,
        x: &[f32],
        rows: usize,
        scratch: &'s mut Scratch,
    ) -> Result<&'s [f32]> {
        if x.len() != rows * self.inputs() {
            return Err(Error::invalid(format!(
                "the model takes {} values a row: {} values are not {rows} rows",
                self.inputs(),
                x.len()
            )));
        }
        let mut src = std::mem::take(&mut scratch.a);
        let mut dst = std::mem::take(&mut scratch.b);
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            let n = rows * layer.d_out;
            grow(&mut dst, n, 0.0);
            let input = if i == 0 { x } else { &src[..rows * layer.d_in] };
            layer.forward(input, rows, i < last, &mut dst[..n], &mut scratch.quant);
            std::mem::swap(&mut src, &mut dst);
        }
        scratch.a = src;
        scratch.b = dst;
        Ok(&scratch.a[..rows * self.outputs()])
    }

    /// [`forward`](Self::forward) into a new vector.
    pub fn predict(&self, x: &[f32], rows: usize) -> Result<Vec<f32>> {
        let mut scratch = Scratch::default();
        Ok(self.forward(x, rows, &mut scratch)?.to_vec())
    }

    /// Reads `weights.safetensors` (f32 layers as the trainer writes them, or int8
    /// layers with their scales).
    pub fn from_safetensors(bytes: &[u8]) -> Result<Self> {
        let st = SafeTensors::deserialize(bytes)
            .map_err(|e| Error::invalid(format!("weights.safetensors cannot be read: {e}")))?;
        let count = (0..)
            .take_while(|i| st.tensor(&format!("layers.{i}.weight")).is_ok())
            .count();
        if count == 0 {
            return Err(Error::invalid(
                "weights.safetensors holds no `layers.0.weight`: it is not a Qanat MLP",
            ));
        }
        let known = |n: &str| {
            n.strip_prefix("layers.")
                .and_then(|r| r.split_once('.'))
                .is_some_and(|(i, t)| {
                    i.parse::<usize>().is_ok_and(|i| i < count)
                        && matches!(t, "weight" | "bias" | "weight_scale" | "input_amax")
                })
        };
        if let Some(extra) = st.names().into_iter().find(|n| !known(n)) {
            return Err(Error::invalid(format!(
                "weights.safetensors has tensor '{extra}', which no layer of a {count}-layer MLP has"
            )));
        }
        let mut layers = Vec::with_capacity(count);
        for i in 0..count {
            let name = format!("layers.{i}.weight");
            let w = st
                .tensor(&name)
                .map_err(|e| Error::invalid(format!("{name}: {e}")))?;
            let [d_out, d_in] = w.shape() else {
                return Err(Error::invalid(format!(
                    "{name} has shape {:?}; a layer's weight is [out, in]",
                    w.shape()
                )));
            };
            let (d_out, d_in) = (*d_out, *d_in);
            let bias = match st.tensor(&format!("layers.{i}.bias")) {
                Ok(b) => f32s(&format!("layers.{i}.bias"), &b, &[d_out])?,
                Err(_) => vec![0.0; d_out],
            };
            let layer = match w.dtype() {
                Dtype::F32 => Layer::f32(d_in, f32s(&name, &w, &[d_out, d_in])?, bias)?,
                Dtype::I8 => {
                    let sname = format!("layers.{i}.weight_scale");
                    let s = st.tensor(&sname).map_err(|_| {
                        Error::invalid(format!("{name} is int8 but {sname} is missing"))
                    })?;
                    let scale = f32s(&sname, &s, &[d_out])?;
                    if let Some(bad) = scale.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                        return Err(Error::invalid(format!(
                            "{sname} holds {bad}; scales must be positive and finite"
                        )));
                    }
                    let kp = d_in.div_ceil(INT_PAD) * INT_PAD;
                    let mut q = vec![0i8; d_out * kp];
                    for (o, row) in w.data().chunks_exact(d_in.max(1)).enumerate() {
                        for (qv, b) in q[o * kp..].iter_mut().zip(row) {
                            *qv = *b as i8;
                        }
                    }
                    let aname = format!("layers.{i}.input_amax");
                    let input_amax = match st.tensor(&aname) {
                        Err(_) => None,
                        Ok(t) => match f32s(&aname, &t, &[1])?[..] {
                            [a] if a.is_finite() && a > 0.0 => Some(a),
                            _ => {
                                return Err(Error::invalid(format!(
                                    "{aname} must be positive and finite: it is the calibrated input range"
                                )))
                            }
                        },
                    };
                    Layer {
                        d_in,
                        d_out,
                        weights: Weights::Int8 {
                            q,
                            kp,
                            scale,
                            packed: None,
                        },
                        bias,
                        input_amax,
                    }
                    .pack()
                }
                other => {
                    return Err(Error::invalid(format!(
                        "{name} is {other:?}; the native runtime reads F32 and I8 weights"
                    )))
                }
            };
            layers.push(layer);
        }
        NativeMlp::new(layers)
    }

    /// `weights.safetensors` for this model, readable by [`from_safetensors`] (and, for
    /// an f32 model, by anything that reads the trainer's files).
    ///
    /// [`from_safetensors`]: Self::from_safetensors
    pub fn to_safetensors(&self) -> Result<Vec<u8>> {
        let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
        let le = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        for (i, l) in self.layers.iter().enumerate() {
            let shape = vec![l.d_out, l.d_in];
            match &l.weights {
                Weights::F32 { w, .. } => {
                    tensors.push((format!("layers.{i}.weight"), Dtype::F32, shape, le(w)))
                }
                Weights::Int8 { q, kp, scale, .. } => {
                    let bytes = (0..l.d_out)
                        .flat_map(|o| q[o * kp..o * kp + l.d_in].iter().map(|v| *v as u8))
                        .collect();
                    tensors.push((format!("layers.{i}.weight"), Dtype::I8, shape, bytes));
                    tensors.push((
                        format!("layers.{i}.weight_scale"),
                        Dtype::F32,
                        vec![l.d_out],
                        le(scale),
                    ));
                    if let Some(a) = l.input_amax {
                        tensors.push((
                            format!("layers.{i}.input_amax"),
                            Dtype::F32,
                            vec![1],
                            le(&[a]),
                        ));
                    }
                }
            }
            tensors.push((
                format!("layers.{i}.bias"),
                Dtype::F32,
                vec![l.d_out],
                le(&l.bias),
            ));
        }
        let views = tensors
            .iter()
            .map(|(n, d, s, b)| {
                safetensors::tensor::TensorView::new(*d, s.clone(), b)
                    .map(|v| (n.clone(), v))
                    .map_err(|e| Error::internal(format!("{n}: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let meta = HashMap::from([
            ("format".to_string(), "qanat-mlp".to_string()),
            ("activation".to_string(), "relu".to_string()),
            ("precision".to_string(), self.precision().to_string()),
        ]);
        safetensors::serialize(views, Some(meta)).map_err(|e| Error::internal(e.to_string()))
    }
}

/// A tensor's values as f32, checking its dtype and shape.
fn f32s(name: &str, t: &safetensors::tensor::TensorView<'_>, shape: &[usize]) -> Result<Vec<f32>> {
    if t.dtype() != Dtype::F32 || t.shape() != shape {
        return Err(Error::invalid(format!(
            "{name} is {:?} {:?}; expected F32 {shape:?}",
            t.dtype(),
            t.shape()
        )));
    }
    let v: Vec<f32> = t
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if let Some(bad) = v.iter().find(|x| !x.is_finite()) {
        return Err(Error::invalid(format!(
            "{name} holds {bad}: weights must be finite"
        )));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{random_mlp, Rng};

    #[test]
    fn int8_outputs_stay_within_the_stated_error_of_f32() {
        let mut g = Rng(7);
        let f = random_mlp(&mut g, &[64, 256, 256, 4]);
        let q = f.quantize_dynamic();
        assert_eq!(q.precision(), Precision::Int8);
        let rows = 256;
        let x = g.normals(rows * 64);
        let yf = f.predict(&x, rows).expect("f32");
        let yq = q.predict(&x, rows).expect("int8");
        let scale = yf.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = yf
            .iter()
            .zip(&yq)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        // The stated bound (docs/optimization.md): 3% of the largest output.
        assert!(
            worst <= crate::INT8_TOLERANCE * scale,
            "worst {worst} vs scale {scale}"
        );
    }

    #[test]
    fn safetensors_round_trip_keeps_every_value() {
        let mut g = Rng(3);
        let f = random_mlp(&mut g, &[5, 17, 3]);
        for m in [f.clone(), f.quantize_dynamic()] {
            let back =
                NativeMlp::from_safetensors(&m.to_safetensors().expect("bytes")).expect("reads");
            assert_eq!(back, m);
        }
        // int8 weights take about a quarter of the bytes (scales and biases stay f32).
        let wide = random_mlp(&mut g, &[128, 256, 1]);
        assert!(wide.quantize_dynamic().weight_bytes() * 3 < wide.weight_bytes());
    }

    #[test]
    fn the_accelerated_kernels_give_the_portable_kernels_outputs() {
        // Widths across the VNNI kernel's panels (16) and row blocks (6), with an input
        // width that is no multiple of 4; every batch size from 1 to 13.
        let mut g = Rng(23);
        let f = random_mlp(&mut g, &[37, 70, 33, 3]);
        let cases = [
            ("f32", f.clone()),
            ("dynamic int8", f.quantize_dynamic()),
            (
                "static int8",
                f.quantize_static(&g.normals(20 * 37), 20)
                    .expect("calibrates"),
            ),
        ];
        for (what, m) in cases {
            let portable = m.portable();
            let names = portable.kernels();
            assert!(
                !names.contains("vnni") && !names.contains("avx512-fma"),
                "{what}: {names}"
            );
            for rows in 1..=13 {
                let x = g.normals(rows * 37);
                let a = m.predict(&x, rows).expect("accelerated");
                let b = portable.predict(&x, rows).expect("portable");
                // int8 products are exact on both; the f32 layers add in another order.
                for (u, v) in a.iter().zip(&b) {
                    assert!(
                        (u - v).abs() <= 1e-4 * (1.0 + v.abs()),
                        "{what}, {rows} rows ({}): {u} vs {v}",
                        m.kernels()
                    );
                }
            }
        }
        if let Some(int8) = qanat_simd::int8_kernel() {
            // The hidden layers on the int8 kernel; the output layer (3 outputs, fewer
            // than a panel) on the dot-product path, as in the f32 model.
            let out = f.layers().last().expect("layers").kernel();
            assert_eq!(f.quantize_dynamic().kernels(), format!("{int8}, {out}"));
        }
        if qanat_simd::f32_kernel().is_some() {
            assert_eq!(f.kernels(), format!("avx512-fma, {}", kernels::f32_path()));
        }
    }

    #[test]
    fn a_warm_scratch_gives_the_same_outputs_for_any_batch() {
        let mut g = Rng(11);
        let m = random_mlp(&mut g, &[9, 33, 2]).quantize_dynamic();
        let x = g.normals(7 * 9);
        let all = m.predict(&x, 7).expect("batch");
        let mut scratch = Scratch::default();
        for r in 0..7 {
            let one = m
                .forward(&x[r * 9..(r + 1) * 9], 1, &mut scratch)
                .expect("row");
            assert_eq!(one, &all[r * 2..(r + 1) * 2]);
        }
    }

    #[test]
    fn malformed_weights_are_refused_with_the_tensor_named() {
        let mut g = Rng(5);
        let ok = random_mlp(&mut g, &[4, 6, 1]);
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("not safetensors", b"hello".to_vec(), "cannot be read"),
            (
                "layers that do not chain",
                NativeMlp {
                    layers: vec![ok.layers[0].clone(), ok.layers[0].clone()],
                }
                .to_safetensors()
                .expect("bytes"),
                "layer 0 gives 6 values but layer 1 takes 4",
            ),
            (
                "no layers",
                safetensors::serialize(
                    Vec::<(String, safetensors::tensor::TensorView<'_>)>::new(),
                    None,
                )
                .expect("empty"),
                "holds no `layers.0.weight`",
            ),
        ];
        for (name, bytes, want) in cases {
            let err = NativeMlp::from_safetensors(&bytes).expect_err(name);
            assert!(err.to_string().contains(want), "{name}: {err}");
        }
        assert!(ok.forward(&[1.0; 5], 1, &mut Scratch::default()).is_err());
    }
}
