//! A model version's directory, as the trainer uploads it under a run's `model/`
//! artifact and as optimization writes it:
//!
//! | file | what |
//! |---|---|
//! | `spec.json` | the signature: input names and types, preprocessing, layer widths, precision |
//! | `weights.safetensors` | the layers (f32, or int8 with per-channel scales) |
//! | `model.onnx` | the same model with its preprocessing for ONNX runtimes |
//! | `MLmodel` | MLflow's description: the `onnx` and `python_function` flavors, the signature |
//! | `input_example.json`, `output_example.json` | rows and the trainer's outputs for them |
//!
//! A package without `spec.json` has no signature and is refused: nothing can check what
//! it is fed. Files are written whole (temporary file, then rename), so a failed write
//! leaves no half package.

use std::path::{Path, PathBuf};

use qanat_train::prep::Preprocessing;
use qanat_train::Table;
use serde::{Deserialize, Serialize};

use crate::native::{NativeMlp, Precision, Scratch};
use crate::{Error, Result, Runtime};

pub const SPEC: &str = "spec.json";
pub const WEIGHTS: &str = "weights.safetensors";
pub const ONNX: &str = "model.onnx";
pub const MLMODEL: &str = "MLmodel";

/// The column names of one side (`inputs` or `outputs`) of an `MLmodel` file's
/// signature when that side is columns (`None` for a tensor signature, or none).
pub fn signature_columns(mlmodel: &[u8], side: &str) -> Option<Vec<String>> {
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_slice(mlmodel).ok()?;
    let specs = doc.get("signature")?.get(side)?.as_str()?;
    let specs: Vec<serde_json::Value> = serde_json::from_str(specs).ok()?;
    specs
        .iter()
        .map(|i| {
            (i.get("type")?.as_str()? != "tensor")
                .then(|| i.get("name")?.as_str().map(str::to_string))?
        })
        .collect()
}

/// One input of the signature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Input {
    pub name: String,
    /// MLflow's type name: `double` or `string`.
    #[serde(rename = "type")]
    pub dtype: String,
}

/// `spec.json`: what the trainer writes, plus the precision an optimized model runs at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// `qanat-mlp/1`.
    pub format: String,
    pub inputs: Vec<Input>,
    pub preprocessing: Preprocessing,
    /// Widths from the encoded input to the output.
    pub layers: Vec<usize>,
    pub activation: String,
    /// What the outputs mean, in words.
    #[serde(default)]
    pub output: String,
    /// Absent in the trainer's f32 packages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
}

impl Spec {
    /// The trainer's signature for a ReLU MLP of `layers` widths after `prep`.
    pub fn for_layers(prep: &Preprocessing, layers: Vec<usize>) -> Result<Spec> {
        let spec = qanat_train::export::spec_for(prep, layers);
        serde_json::to_value(&spec)
            .and_then(serde_json::from_value)
            .map_err(|e| Error::internal(format!("the trainer's signature: {e}")))
    }

    pub fn precision(&self) -> Precision {
        self.precision.unwrap_or(Precision::F32)
    }
}

/// A model package on disk.
#[derive(Debug, Clone)]
pub struct ModelPackage {
    dir: PathBuf,
    spec: Spec,
}

impl ModelPackage {
    /// Reads `dir/spec.json`; the weights are read by [`native`](Self::native).
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(SPEC);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::invalid(format!(
                    "{} has no {SPEC}: the model has no signature (input names and types, \
                     preprocessing), so it cannot be run or optimized; models trained by \
                     `qanat train` carry one",
                    dir.display()
                )))
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        let spec = parse_spec(&bytes, &path.display().to_string())?;
        Ok(ModelPackage {
            dir: dir.to_path_buf(),
            spec,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The model on the native runtime, checked against its signature.
    pub fn native(&self) -> Result<NativeModel> {
        let path = self.dir.join(WEIGHTS);
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        let mlp = NativeMlp::from_safetensors(&bytes)?;
        NativeModel::new(self.spec.clone(), mlp)
    }

    /// Writes a package for `model` into `dir` (created if missing): its
    /// [`files`](NativeModel::files), each whole or not at all, `spec.json` last.
    pub fn write(dir: &Path, model: &NativeModel) -> Result<ModelPackage> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let info = qanat_train::onnx::MlModelInfo {
            artifact_path: "model".into(),
            ..Default::default()
        };
        for (name, bytes) in model.files(&info)? {
            write_whole(&dir.join(name), &bytes)?;
        }
        ModelPackage::open(dir)
    }
}

/// `spec.json`'s bytes as a signature the native runtime reads; `origin` names them in
/// errors.
fn parse_spec(bytes: &[u8], origin: &str) -> Result<Spec> {
    let spec: Spec = serde_json::from_slice(bytes)
        .map_err(|e| Error::invalid(format!("{origin}: not a model signature: {e}")))?;
    if !spec.format.starts_with("qanat-mlp/") {
        return Err(Error::invalid(format!(
            "{origin}: format '{}' is not one the native runtime reads (qanat-mlp/1)",
            spec.format
        )));
    }
    Ok(spec)
}

fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// A package's model on the native runtime: its preprocessing and its layers.
#[derive(Debug, Clone)]
pub struct NativeModel {
    spec: Spec,
    mlp: NativeMlp,
}

impl NativeModel {
    /// Pairs a signature with layers, refusing layers that do not fit it.
    pub fn new(mut spec: Spec, mlp: NativeMlp) -> Result<Self> {
        let mut widths = vec![mlp.inputs()];
        widths.extend(mlp.layers().iter().map(|l| l.outputs()));
        if widths != spec.layers {
            return Err(Error::invalid(format!(
                "{WEIGHTS} has layers {widths:?} but {SPEC} says {:?}",
                spec.layers
            )));
        }
        if spec.preprocessing.width() != mlp.inputs() {
            return Err(Error::invalid(format!(
                "the preprocessing gives {} values a row but the first layer takes {}",
                spec.preprocessing.width(),
                mlp.inputs()
            )));
        }
        if spec.preprocessing.target.outputs() != mlp.outputs() {
            return Err(Error::invalid(format!(
                "the target needs {} outputs but the last layer gives {}",
                spec.preprocessing.target.outputs(),
                mlp.outputs()
            )));
        }
        spec.precision = match mlp.precision() {
            Precision::F32 => None,
            p => Some(p),
        };
        Ok(NativeModel { spec, mlp })
    }

    /// The model from the bytes of its `spec.json` and `weights.safetensors`, as
    /// fetched from artifact storage (nothing is written to disk).
    pub fn from_bytes(spec: &[u8], weights: &[u8]) -> Result<Self> {
        NativeModel::new(
            parse_spec(spec, SPEC)?,
            NativeMlp::from_safetensors(weights)?,
        )
    }

    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    pub fn mlp(&self) -> &NativeMlp {
        &self.mlp
    }

    /// The model and its preprocessing as ONNX (int8 layers as onnxruntime's dynamic
    /// quantization writes them: `DynamicQuantizeLinear` and `MatMulInteger`).
    pub fn to_onnx(&self) -> Result<Vec<u8>> {
        use qanat_train::onnx::{Dense, Weight};
        let int8: Vec<_> = self.mlp.layers().iter().map(|l| l.int8()).collect();
        let f32s: Vec<_> = self
            .mlp
            .layers()
            .iter()
            .map(|l| {
                if l.int8().is_none() {
                    l.weight_f32()
                } else {
                    Vec::new()
                }
            })
            .collect();
        let dense: Vec<Dense<'_>> = self
            .mlp
            .layers()
            .iter()
            .enumerate()
            .map(|(i, l)| Dense {
                inputs: l.inputs(),
                outputs: l.outputs(),
                weight: match &int8[i] {
                    Some((q, scale)) => Weight::Int8 {
                        q,
                        scale,
                        input_amax: l.input_amax(),
                    },
                    None => Weight::F32(&f32s[i]),
                },
                bias: l.bias(),
            })
            .collect();
        Ok(qanat_train::onnx::graph(&dense, &self.spec.preprocessing)?)
    }

    /// The package's files, ready to store under a run's `model/` artifact: the
    /// weights, the signature, the ONNX graph and the `MLmodel` file that lets the
    /// `mlflow` client load it (`info` says which run holds it and, in its metadata,
    /// `qanat.runtime` when the model is made for another runtime than `native`).
    pub fn files(
        &self,
        info: &qanat_train::onnx::MlModelInfo,
    ) -> Result<Vec<(&'static str, Vec<u8>)>> {
        let spec = serde_json::to_vec_pretty(&self.spec)
            .map_err(|e| Error::internal(format!("serializing the signature: {e}")))?;
        let mut info = info.clone();
        if !info.metadata.iter().any(|(k, _)| k == "qanat.runtime") {
            info.metadata
                .push(("qanat.runtime".to_string(), "native".to_string()));
        }
        info.metadata.push((
            "qanat.precision".to_string(),
            self.spec.precision().to_string(),
        ));
        Ok(vec![
            (WEIGHTS, self.mlp.to_safetensors()?),
            (ONNX, self.to_onnx()?),
            (
                MLMODEL,
                qanat_train::onnx::mlmodel(&self.spec.preprocessing, &info).into_bytes(),
            ),
            // Last: a package with a signature is complete.
            (SPEC, spec),
        ])
    }

    /// The same preprocessing with another network of the same inputs and outputs (a
    /// pruned one may have narrower hidden layers).
    pub fn with_mlp(&self, mlp: NativeMlp) -> Result<NativeModel> {
        let mut spec = self.spec.clone();
        spec.layers = std::iter::once(mlp.inputs())
            .chain(mlp.layers().iter().map(|l| l.outputs()))
            .collect();
        NativeModel::new(spec, mlp)
    }

    /// The same model with [`NativeMlp::quantize_dynamic`] applied.
    pub fn quantize_dynamic(&self) -> Result<NativeModel> {
        NativeModel::new(self.spec.clone(), self.mlp.quantize_dynamic())
    }
}

impl Runtime for NativeModel {
    fn name(&self) -> &'static str {
        "native"
    }

    fn outputs(&self) -> usize {
        self.mlp.outputs()
    }

    fn predict(&self, table: &Table) -> Result<Vec<f32>> {
        let rows: Vec<usize> = (0..table.rows()).collect();
        let x = self.spec.preprocessing.encode_features(table, &rows)?;
        let mut scratch = Scratch::default();
        Ok(self.mlp.forward(&x, rows.len(), &mut scratch)?.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::signature_columns;

    #[test]
    fn signature_columns_reads_either_side_and_refuses_tensors() {
        let mlmodel = br#"flavors: {}
signature:
  inputs: '[{"type": "double", "name": "age", "required": true}, {"type": "string", "name": "city"}]'
  outputs: '[{"type": "long", "name": "label"}]'
"#;
        assert_eq!(
            signature_columns(mlmodel, "inputs"),
            Some(vec!["age".to_string(), "city".to_string()])
        );
        assert_eq!(
            signature_columns(mlmodel, "outputs"),
            Some(vec!["label".to_string()])
        );
        let tensors = br#"signature:
  inputs: '[{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, 4]}}]'
"#;
        assert_eq!(signature_columns(tensors, "inputs"), None);
        assert_eq!(signature_columns(tensors, "outputs"), None);
        assert_eq!(signature_columns(b"flavors: {}\n", "inputs"), None);
    }
}
