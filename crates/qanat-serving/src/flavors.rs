//! MLflow models served natively: `mlflow.xgboost` (a booster or a scikit-learn
//! wrapper, its `model.ubj`/`.json`) and `mlflow.lightgbm` (a booster's `model.lgb`
//! text file) become a [`Forest`] predicted in Rust, with no library of theirs loaded;
//! `mlflow.sklearn` pickles of the estimators [`qanat_runtime::sklearn`] recognises
//! are read as data (never run) and predicted in Rust too. A pickle of anything else
//! goes to the Python runtime.
//!
//! Outputs follow what the model's `pyfunc` `predict` returns, named as MLServer's
//! runtimes name them: a booster answers `predict`, its objective's outputs (a
//! probability for `binary:logistic`, one per class for `multi:softprob`, a value for
//! a regression); a scikit-learn classifier answers `predict` (its labels) and
//! `predict_proba` (one probability per class, as `predict_proba` gives them); a
//! regressor answers `predict`. When the signature names its one output, `predict`
//! takes that name; its dtype is the signature's. Inputs are the signature's columns
//! (one `[N, 1]` tensor each) when it has named columns, else one `[N, features]`
//! tensor, `input-0`.

use qanat_model::package::MlModelFile;
use qanat_runtime::sklearn::SkModel;
use qanat_runtime::trees::{lightgbm, xgboost, Forest, Link};
use serde_json::Value;

use crate::oip::{ResponseOutput, TensorMetadata};

/// The flavors served here, in the order they are tried.
pub const TREE_FLAVORS: [&str; 2] = ["xgboost", "lightgbm"];

/// What a tree model answers besides the forest's raw outputs.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The booster's own `predict`: the link's outputs.
    Booster,
    /// A scikit-learn classifier: labels (from `classes`) and probabilities.
    Classifier { classes: Vec<Value> },
    /// A scikit-learn regressor.
    Regressor,
}

/// What predicts: a forest read from a tree library's file, or a scikit-learn model.
#[derive(Debug)]
pub enum Predictor {
    Forest(Forest),
    Sklearn(SkModel),
}

impl Predictor {
    pub fn features(&self) -> usize {
        match self {
            Predictor::Forest(f) => f.features(),
            Predictor::Sklearn(m) => m.features(),
        }
    }

    pub fn outputs(&self) -> usize {
        match self {
            Predictor::Forest(f) => f.outputs(),
            Predictor::Sklearn(m) => m.outputs(),
        }
    }

    pub fn trees(&self) -> usize {
        match self {
            Predictor::Forest(f) => f.trees(),
            Predictor::Sklearn(m) => m.trees(),
        }
    }

    /// `rows` rows of `x` predicted (blocking): a forest rounds them to `f32` (as
    /// XGBoost does), a scikit-learn model takes them as they are.
    pub fn predict(&self, x: &[f64], rows: usize) -> Result<Vec<f32>, qanat_runtime::Error> {
        match self {
            Predictor::Forest(f) => {
                let x: Vec<f32> = x.iter().map(|v| *v as f32).collect();
                f.predict(&x, rows)
            }
            Predictor::Sklearn(m) => m.predict_f64(x, rows),
        }
    }
}

/// A model ready to answer natively.
#[derive(Debug)]
pub struct TreeModel {
    pub forest: Predictor,
    /// `xgboost`, `lightgbm` or `sklearn`.
    pub flavor: &'static str,
    /// The model's class as the flavor recorded it (`xgboost.sklearn.XGBClassifier`).
    pub class: String,
    pub answer: Answer,
    /// The `predict` output's name and datatype.
    pub predict: (String, String),
}

/// Which file of a flavor holds its model, and how it is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub flavor: &'static str,
    pub file: String,
    pub class: String,
}

/// The flavor `mlmodel` can be served natively by, and its file; `Err` with the reason
/// when its flavor is a tree flavor this server cannot read (a pickled or skops
/// scikit-learn wrapper of LightGBM); `Ok(None)` when it has none. A scikit-learn
/// pickle is planned here, and may yet be refused by [`load`] (an estimator not read
/// natively): the Python runtime then serves it.
pub fn plan(mlmodel: &MlModelFile) -> Result<Option<Plan>, String> {
    if let Some(file) = mlmodel.setting("sklearn", "pickled_model") {
        let format = mlmodel
            .setting("sklearn", "serialization_format")
            .unwrap_or("cloudpickle");
        if matches!(format, "cloudpickle" | "pickle") && inside(file) {
            return Ok(Some(Plan {
                flavor: "sklearn",
                file: file.to_string(),
                class: String::new(),
            }));
        }
        return Ok(None);
    }
    for flavor in TREE_FLAVORS {
        let Some(file) = mlmodel.setting(flavor, "data") else {
            continue;
        };
        let class = mlmodel
            .setting(flavor, "model_class")
            .unwrap_or_default()
            .to_string();
        if !inside(file) {
            return Err(format!(
                "its MLmodel names the {flavor} model file '{file}', which is not a path inside the model"
            ));
        }
        if flavor == "lightgbm" && !file.ends_with(".lgb") && !file.ends_with(".txt") {
            return Err(format!(
                "its LightGBM model ({class}) is saved as {file}, a serialized Python \
                 object this server does not read; log the booster itself \
                 (`mlflow.lightgbm.log_model(model.booster_, …)`), whose text model \
                 file is served natively"
            ));
        }
        return Ok(Some(Plan {
            flavor,
            file: file.to_string(),
            class,
        }));
    }
    Ok(None)
}

/// Whether `file` is a relative path that stays inside the model's directory.
fn inside(file: &str) -> bool {
    !(file.is_empty()
        || file.starts_with('/')
        || file
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == ".."))
}

/// The estimator kind a scikit-learn wrapper's class name says.
fn wrapper_kind(class: &str) -> Option<bool> {
    let name = class.rsplit('.').next().unwrap_or(class);
    if name.ends_with("Classifier") {
        Some(true)
    } else if name.ends_with("Regressor") || name.ends_with("Ranker") {
        Some(false)
    } else {
        None
    }
}

/// The largest tree model file read: parsing takes memory a small multiple of it, in
/// the server's own process.
pub const MAX_FILE_BYTES: usize = 512 << 20;

/// The model of `plan`, read from `bytes`.
pub fn load(plan: &Plan, bytes: &[u8], mlmodel: &MlModelFile) -> Result<TreeModel, String> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(format!(
            "its {} model file is {} MiB, over the {} MiB a tree model may take here",
            plan.flavor,
            bytes.len() >> 20,
            MAX_FILE_BYTES >> 20
        ));
    }
    if plan.flavor == "sklearn" {
        return load_sklearn(plan, bytes, mlmodel);
    }
    let wrapper = wrapper_kind(&plan.class);
    let forest = match plan.flavor {
        "xgboost" => {
            let mut m = xgboost::read(bytes).map_err(|e| e.to_string())?;
            if wrapper.is_some() {
                // The scikit-learn wrapper's predict stops at the best iteration.
                m.to_best_iteration();
            }
            m.forest
        }
        _ => {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| "its LightGBM model file is not text".to_string())?;
            lightgbm::read(text).map_err(|e| e.to_string())?.forest
        }
    };
    let answer = match wrapper {
        Some(true) => {
            let k = match forest.link() {
                Link::Sigmoid { .. } if forest.groups() == 1 => 2,
                Link::Softmax | Link::Sigmoid { .. } => forest.groups(),
                other => {
                    return Err(format!(
                        "a classifier whose objective gives {other:?} outputs, not probabilities"
                    ))
                }
            };
            Answer::Classifier {
                classes: (0..k as i64).map(Value::from).collect(),
            }
        }
        Some(false) => Answer::Regressor,
        None => Answer::Booster,
    };
    let default_type = match (&answer, plan.flavor) {
        (Answer::Classifier { .. }, _) => "INT64",
        (_, "lightgbm") => "FP64",
        _ => "FP32",
    };
    let predict = signature_output(mlmodel).unwrap_or_default();
    let predict = (
        predict.0.unwrap_or_else(|| "predict".into()),
        predict.1.unwrap_or_else(|| default_type.into()),
    );
    Ok(TreeModel {
        forest: Predictor::Forest(forest),
        flavor: plan.flavor,
        class: plan.class.clone(),
        answer,
        predict,
    })
}

/// A scikit-learn pickle read natively; `Err` names what is not recognised.
fn load_sklearn(plan: &Plan, bytes: &[u8], mlmodel: &MlModelFile) -> Result<TreeModel, String> {
    let model = SkModel::read(bytes)?;
    let (answer, default_type) = match &model.classes {
        Some(classes) => {
            let t = match classes.first() {
                Some(Value::String(_)) => "BYTES",
                Some(Value::Bool(_)) => "BOOL",
                Some(Value::Number(n)) if n.is_f64() => "FP64",
                _ => "INT64",
            };
            (
                Answer::Classifier {
                    classes: classes.clone(),
                },
                t,
            )
        }
        None => (Answer::Regressor, "FP64"),
    };
    let predict = signature_output(mlmodel).unwrap_or_default();
    let predict = (
        predict.0.unwrap_or_else(|| "predict".into()),
        predict.1.unwrap_or_else(|| default_type.into()),
    );
    Ok(TreeModel {
        class: model.describe.clone(),
        forest: Predictor::Sklearn(model),
        flavor: plan.flavor,
        answer,
        predict,
    })
}

/// OIP's datatype for an MLflow column type or numpy dtype.
fn datatype(t: &str) -> Option<&'static str> {
    Some(match t {
        "double" | "float64" => "FP64",
        "float" | "float32" => "FP32",
        "long" | "int64" => "INT64",
        "integer" | "int32" => "INT32",
        "boolean" | "bool" => "BOOL",
        "string" | "str" | "object" => "BYTES",
        _ => return None,
    })
}

/// The type of one spec: a column's `type`, or a tensor's dtype.
fn spec_type(spec: &Value) -> Option<&'static str> {
    let t = spec.get("type")?.as_str()?;
    if t == "tensor" {
        datatype(spec.get("tensor-spec")?.get("dtype")?.as_str()?)
    } else {
        datatype(t)
    }
}

/// The name and datatype of the signature's one output, when it has one.
fn signature_output(mlmodel: &MlModelFile) -> Option<(Option<String>, Option<String>)> {
    let outputs = mlmodel.outputs.as_ref()?;
    let [one] = outputs.as_slice() else {
        return None;
    };
    Some((
        one.get("name").and_then(Value::as_str).map(String::from),
        spec_type(one).map(String::from),
    ))
}

/// The model's inputs: the signature's named columns when there are as many as the
/// forest's features, else one `[N, features]` tensor.
pub fn inputs(model: &TreeModel, mlmodel: &MlModelFile) -> Vec<TensorMetadata> {
    let f = model.forest.features();
    if let Some(specs) = &mlmodel.inputs {
        let columns: Option<Vec<TensorMetadata>> = specs
            .iter()
            .map(|s| {
                Some(TensorMetadata {
                    name: s.get("name")?.as_str()?.to_string(),
                    datatype: spec_type(s).unwrap_or("FP64").into(),
                    shape: vec![-1, 1],
                })
            })
            .collect();
        if let Some(c) = columns.filter(|c| c.len() == f) {
            return c;
        }
    }
    let datatype = mlmodel
        .inputs
        .as_ref()
        .and_then(|s| s.first())
        .and_then(spec_type)
        .unwrap_or("FP32");
    vec![TensorMetadata {
        name: "input-0".into(),
        datatype: datatype.into(),
        shape: vec![-1, f as i64],
    }]
}

/// The model's outputs (see [the module](self)).
pub fn outputs(model: &TreeModel) -> Vec<TensorMetadata> {
    let k = model.forest.outputs() as i64;
    let mut out = vec![TensorMetadata {
        name: model.predict.0.clone(),
        datatype: model.predict.1.clone(),
        // Labels, or one value a row: a vector; else a matrix.
        shape: if k == 1 || matches!(model.answer, Answer::Classifier { .. }) {
            vec![-1]
        } else {
            vec![-1, k]
        },
    }];
    if let Answer::Classifier { classes } = &model.answer {
        out.push(TensorMetadata {
            name: "predict_proba".into(),
            datatype: "FP32".into(),
            shape: vec![-1, classes.len() as i64],
        });
    }
    out
}

/// A value as JSON of `datatype`.
pub(crate) fn typed(v: f32, datatype: &str) -> Value {
    match datatype {
        "INT64" | "INT32" | "INT16" | "INT8" | "UINT8" | "UINT16" | "UINT32" | "UINT64" => {
            Value::from(v as i64)
        }
        "BOOL" => Value::from(v != 0.0),
        _ => Value::from(f64::from(v)),
    }
}

/// The response tensors of `n` rows whose forest gave `raw`.
pub fn respond(model: &TreeModel, n: usize, raw: &[f32]) -> Vec<ResponseOutput> {
    let (name, datatype) = &model.predict;
    let k = model.forest.outputs().max(1);
    let tensor = |name: &str, datatype: &str, shape: Vec<usize>, data: Vec<Value>| ResponseOutput {
        name: name.to_string(),
        shape,
        datatype: datatype.to_string(),
        parameters: None,
        data: Value::Array(data),
    };
    match &model.answer {
        Answer::Booster | Answer::Regressor => {
            let shape = if k == 1 { vec![n] } else { vec![n, k] };
            vec![tensor(
                name,
                datatype,
                shape,
                raw.iter().map(|v| typed(*v, datatype)).collect(),
            )]
        }
        Answer::Classifier { classes } => {
            let c = classes.len();
            // Probabilities per class, as predict_proba gives them.
            let probs: Vec<f32> = if k == 1 && c == 2 {
                raw.iter().flat_map(|p| [1.0 - p, *p]).collect()
            } else {
                raw.to_vec()
            };
            let labels: Vec<Value> = probs
                .chunks(c.max(1))
                .map(|p| {
                    let class = if c == 2 && k == 1 {
                        usize::from(p[1] > 0.5)
                    } else {
                        qanat_runtime::evaluate::argmax(p)
                    };
                    match &classes[class] {
                        Value::Number(x) => typed(x.as_f64().unwrap_or_default() as f32, datatype),
                        other => other.clone(),
                    }
                })
                .collect();
            vec![
                tensor(name, datatype, vec![n], labels),
                tensor(
                    "predict_proba",
                    "FP32",
                    vec![n, c],
                    probs.iter().map(|p| Value::from(f64::from(*p))).collect(),
                ),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mlmodel(yaml: &str) -> MlModelFile {
        MlModelFile::parse(yaml.as_bytes()).expect("valid")
    }

    #[test]
    fn plans_read_the_flavor_s_file_and_refuse_paths_outside_the_model() {
        let m = mlmodel(
            "flavors:\n  python_function: {data: model.ubj}\n  xgboost:\n    data: model.ubj\n    model_class: xgboost.sklearn.XGBClassifier\n",
        );
        assert_eq!(
            plan(&m).expect("valid"),
            Some(Plan {
                flavor: "xgboost",
                file: "model.ubj".into(),
                class: "xgboost.sklearn.XGBClassifier".into()
            })
        );
        for bad in ["../x", "/etc/passwd", "a//b", "./m"] {
            let m = mlmodel(&format!("flavors:\n  xgboost: {{data: '{bad}'}}\n"));
            assert!(
                plan(&m).expect_err("refused").contains("not a path inside"),
                "{bad}"
            );
        }
        let skops = mlmodel(
            "flavors:\n  lightgbm: {data: model.skops, model_class: lightgbm.sklearn.LGBMClassifier}\n",
        );
        assert!(plan(&skops).expect_err("refused").contains("booster_"));
        assert_eq!(
            plan(&mlmodel("flavors:\n  sklearn: {pickled_model: m.pkl}\n")).expect("valid"),
            Some(Plan {
                flavor: "sklearn",
                file: "m.pkl".into(),
                class: String::new()
            })
        );
        // skops files, and paths outside the model, are the Python runtime's to judge.
        for other in [
            "{pickled_model: m.skops, serialization_format: skops}",
            "{pickled_model: ../m.pkl}",
        ] {
            let m = mlmodel(&format!("flavors:\n  sklearn: {other}\n"));
            assert_eq!(plan(&m).expect("valid"), None, "{other}");
        }
        assert_eq!(
            plan(&mlmodel("flavors:\n  python_function: {}\n")).expect("valid"),
            None
        );
    }

    #[test]
    fn wrappers_are_told_by_their_class() {
        assert_eq!(wrapper_kind("xgboost.sklearn.XGBClassifier"), Some(true));
        assert_eq!(wrapper_kind("xgboost.sklearn.XGBRFRegressor"), Some(false));
        assert_eq!(wrapper_kind("xgboost.core.Booster"), None);
        assert_eq!(wrapper_kind(""), None);
    }
}
