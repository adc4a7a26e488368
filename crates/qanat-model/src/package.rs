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
//! | `reference_profile.json` | the training rows' [`TableProfile`](crate::profile::TableProfile) |
//!
//! A package without `spec.json` has no signature and is refused: nothing can check what
//! it is fed. Files are written whole (temporary file, then rename), so a failed write
//! leaves no half package; `spec.json` is written last, so a package with a signature
//! is complete.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::prep::{Feature, Preprocessing, Target};
use crate::{Error, Result};

/// The artifact directory of a run that holds its model package.
pub const DIR: &str = "model";
pub const SPEC: &str = "spec.json";
pub const WEIGHTS: &str = "weights.safetensors";
pub const ONNX: &str = "model.onnx";
pub const MLMODEL: &str = "MLmodel";
pub const INPUT_EXAMPLE: &str = "input_example.json";
pub const OUTPUT_EXAMPLE: &str = "output_example.json";
pub const REFERENCE_PROFILE: &str = "reference_profile.json";

/// The format `spec.json` declares for the trainer's ReLU MLPs.
pub const FORMAT: &str = "qanat-mlp/1";

/// The path of one of the package's files among a run's artifacts (`model/spec.json`).
pub fn in_run(file: &str) -> String {
    format!("{DIR}/{file}")
}

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

/// How a layer's weights are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    F32,
    Int8,
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::Int8 => "int8",
        })
    }
}

/// One input of the signature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Input {
    pub name: String,
    /// MLflow's type name: `double` for a numeric feature, `string` for a text one.
    #[serde(rename = "type")]
    pub dtype: String,
}

/// `spec.json`: what the trainer writes, plus the precision an optimized model runs at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// [`FORMAT`].
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
    /// The signature of a ReLU MLP of `layers` widths (the encoded input's first)
    /// after `prep`.
    pub fn for_layers(prep: &Preprocessing, layers: Vec<usize>) -> Spec {
        Spec {
            format: FORMAT.to_string(),
            inputs: prep
                .features
                .iter()
                .map(|f| Input {
                    name: f.name().to_string(),
                    dtype: match f {
                        Feature::Numeric { .. } => "double",
                        Feature::Categorical { .. } => "string",
                    }
                    .to_string(),
                })
                .collect(),
            preprocessing: prep.clone(),
            layers,
            activation: "relu".to_string(),
            output: match &prep.target {
                Target::Classification { classes, .. } if classes.len() == 2 => {
                    "one logit: the log-odds of the second class"
                }
                Target::Classification { .. } => {
                    "one logit per class (softmax gives probabilities)"
                }
                Target::Regression { .. } => "the standardized target: multiply by std, add mean",
            }
            .to_string(),
            precision: None,
        }
    }

    /// `spec.json`'s bytes as a signature; `origin` names them in errors.
    pub fn parse(bytes: &[u8], origin: &str) -> Result<Spec> {
        let spec: Spec = serde_json::from_slice(bytes)
            .map_err(|e| Error::invalid(format!("{origin}: not a model signature: {e}")))?;
        if !spec.format.starts_with("qanat-mlp/") {
            return Err(Error::invalid(format!(
                "{origin}: format '{}' is not one the native runtime reads ({FORMAT})",
                spec.format
            )));
        }
        Ok(spec)
    }

    /// `spec.json`'s bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        serde_json::to_vec_pretty(self)
            .map_err(|e| Error::internal(format!("serializing the signature: {e}")))
    }

    pub fn precision(&self) -> Precision {
        self.precision.unwrap_or(Precision::F32)
    }
}

/// Reads `dir/spec.json`, refusing a directory without one: a model without a
/// signature cannot be checked against what it is fed.
pub fn read_spec(dir: &Path) -> Result<Spec> {
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
    Spec::parse(&bytes, &path.display().to_string())
}

/// Writes the package's `files` into `dir` (created if missing), each whole or not
/// at all, in the order given (`spec.json` belongs last).
pub fn write(dir: &Path, files: &[(&str, Vec<u8>)]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    for (name, bytes) in files {
        write_whole(&dir.join(name), bytes)?;
    }
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file renamed over it.
pub fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// What the `MLmodel` file records besides the signature.
#[derive(Debug, Clone, Default)]
pub struct MlModelInfo {
    /// The run whose artifacts hold the model.
    pub run_id: String,
    /// The artifact path under the run ([`DIR`]).
    pub artifact_path: String,
    /// RFC 3339, UTC.
    pub created: String,
    /// Free-form `metadata` (the runtime and precision the model is made for).
    pub metadata: Vec<(String, String)>,
}

/// The ONNX release whose IR and opsets the trainer's graph uses (IR 8, opset 13 are
/// 1.10's).
pub const ONNX_VERSION: &str = "1.10.0";

/// The `MLmodel` file for the ONNX graph the trainer writes for `prep` (YAML): the
/// `onnx` flavor and `python_function` through `mlflow.onnx`, with a tensor signature,
/// since the graph takes one `[N, 1]` tensor per column (MLflow's pyfunc feeds each
/// column of a DataFrame to the input of its name).
pub fn mlmodel(prep: &Preprocessing, info: &MlModelInfo) -> String {
    use serde_json::json;
    let q = |s: &str| serde_json::Value::from(s).to_string();
    let tensor = |name: &str, dtype: &str, width: usize| json!({"type": "tensor", "tensor-spec": {"dtype": dtype, "shape": [-1, width]}, "name": name});
    let inputs: Vec<_> = prep
        .features
        .iter()
        .map(|f| match f {
            Feature::Numeric { name, .. } => tensor(name, "float64", 1),
            Feature::Categorical { name, .. } => tensor(name, "object", 1),
        })
        .collect();
    let k = prep.target.outputs();
    let mut outputs = vec![tensor("output", "float32", k)];
    outputs.push(match &prep.target {
        Target::Classification { classes, .. } if classes.len() == 2 => {
            tensor("probability", "float32", 1)
        }
        Target::Classification { .. } => tensor("probabilities", "float32", k),
        Target::Regression { .. } => tensor("prediction", "float32", 1),
    });
    let mut y = String::new();
    y.push_str(&format!("artifact_path: {}\n", q(&info.artifact_path)));
    y.push_str(&format!(
        "flavors:\n  onnx:\n    code: null\n    data: {ONNX}\n"
    ));
    y.push_str(&format!("    onnx_version: {}\n", q(ONNX_VERSION)));
    y.push_str("    providers: [CPUExecutionProvider]\n");
    y.push_str(&format!(
        "  python_function:\n    data: {ONNX}\n    loader_module: mlflow.onnx\n"
    ));
    if !info.metadata.is_empty() {
        y.push_str("metadata:\n");
        for (k, v) in &info.metadata {
            y.push_str(&format!("  {}: {}\n", q(k), q(v)));
        }
    }
    y.push_str(&format!("run_id: {}\n", q(&info.run_id)));
    y.push_str(&format!(
        "saved_input_example_info:\n  artifact_path: {INPUT_EXAMPLE}\n"
    ));
    y.push_str("  pandas_orient: split\n  type: dataframe\n");
    y.push_str("signature:\n");
    y.push_str(&format!("  inputs: {}\n", q(&json!(inputs).to_string())));
    y.push_str(&format!("  outputs: {}\n", q(&json!(outputs).to_string())));
    y.push_str("  params: null\n");
    y.push_str(&format!("utc_time_created: {}\n", q(&info.created)));
    y
}

/// The flavors an `MLmodel` file lists (`sklearn`, `python_function`, …), in its order;
/// none when it is not YAML or has no `flavors` mapping.
pub fn flavors(mlmodel: &[u8]) -> Vec<String> {
    let Ok(doc) = serde_yaml_ng::from_slice::<serde_yaml_ng::Value>(mlmodel) else {
        return Vec::new();
    };
    doc.get("flavors")
        .and_then(serde_yaml_ng::Value::as_mapping)
        .map(|m| {
            m.keys()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The parts of an `MLmodel` file serving reads: each flavor's settings, and the
/// signature's sides as MLflow writes them (each a list of column or tensor specs).
#[derive(Debug, Clone, Default)]
pub struct MlModelFile {
    pub flavors: serde_json::Map<String, serde_json::Value>,
    pub inputs: Option<Vec<serde_json::Value>>,
    pub outputs: Option<Vec<serde_json::Value>>,
}

impl MlModelFile {
    /// Reads `MLmodel`'s YAML; `None` when it is not YAML with a `flavors` mapping.
    pub fn parse(mlmodel: &[u8]) -> Option<MlModelFile> {
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_slice(mlmodel).ok()?;
        let flavors = match serde_json::to_value(doc.get("flavors")?).ok()? {
            serde_json::Value::Object(m) => m,
            _ => return None,
        };
        let side = |name: &str| -> Option<Vec<serde_json::Value>> {
            let specs = doc.get("signature")?.get(name)?.as_str()?;
            serde_json::from_str(specs).ok()
        };
        Some(MlModelFile {
            flavors,
            inputs: side("inputs"),
            outputs: side("outputs"),
        })
    }

    /// A setting of a flavor (`xgboost`'s `data`, …) when it is a string.
    pub fn setting(&self, flavor: &str, key: &str) -> Option<&str> {
        self.flavors.get(flavor)?.get(key)?.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavors_are_listed_in_order_and_anything_else_lists_none() {
        let sklearn = b"artifact_path: model\nflavors:\n  python_function:\n    loader_module: mlflow.sklearn\n  sklearn:\n    pickled_model: model.pkl\nrun_id: abc\n";
        assert_eq!(flavors(sklearn), ["python_function", "sklearn"]);
        assert!(flavors(b"flavors: {}\n").is_empty());
        assert!(flavors(b"run_id: abc\n").is_empty());
        assert!(flavors(b"\xff\xfe not yaml: [").is_empty());
    }

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

    #[test]
    fn a_directory_without_a_signature_is_refused_and_a_written_one_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = read_spec(dir.path()).expect_err("no spec.json");
        assert!(err.to_string().contains("has no spec.json"), "{err}");
        std::fs::write(dir.path().join(SPEC), br#"{"format": "other/1"}"#).expect("write");
        assert!(read_spec(dir.path()).is_err());
        write(dir.path(), &[(SPEC, b"not json".to_vec())]).expect("write");
        let err = read_spec(dir.path()).expect_err("not json");
        assert!(err.to_string().contains("not a model signature"), "{err}");
        assert!(!dir.path().join("spec.partial").exists());
    }
}
