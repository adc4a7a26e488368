//! A model package (`qanat_model::package`: its files, its signature) on the native
//! runtime: [`ModelPackage`] opens a directory, [`NativeModel`] pairs the signature with
//! its layers, runs them, and writes the package's files back (optimization does).

use std::path::{Path, PathBuf};

use qanat_model::package::{self, MlModelInfo, Precision, Spec, MLMODEL, ONNX, SPEC, WEIGHTS};
use qanat_model::Table;

use crate::native::{NativeMlp, Scratch};
use crate::{Error, Result, Runtime};

/// A model package on disk.
#[derive(Debug, Clone)]
pub struct ModelPackage {
    dir: PathBuf,
    spec: Spec,
}

impl ModelPackage {
    /// Reads `dir/spec.json`; the weights are read by [`native`](Self::native).
    pub fn open(dir: &Path) -> Result<Self> {
        let spec = package::read_spec(dir)?;
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
        let info = MlModelInfo {
            artifact_path: package::DIR.into(),
            ..Default::default()
        };
        package::write(dir, &model.files(&info)?)?;
        ModelPackage::open(dir)
    }
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
            Spec::parse(spec, SPEC)?,
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
    pub fn files(&self, info: &MlModelInfo) -> Result<Vec<(&'static str, Vec<u8>)>> {
        let spec = self.spec.to_bytes()?;
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
                package::mlmodel(&self.spec.preprocessing, &info).into_bytes(),
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
