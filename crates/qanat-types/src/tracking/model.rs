//! Tracking objects in the shape MLflow's REST API gives them (field names, enums by
//! name, int64 as numbers, NaN and infinities as strings).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A key/value tag on an experiment or a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tag {
    pub key: String,
    #[serde(default)]
    pub value: String,
}

/// A run parameter (immutable once logged).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Param {
    pub key: String,
    #[serde(default)]
    pub value: String,
}

/// A metric value: any f64, with NaN and ±Infinity written as MLflow writes them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MetricValue(pub f64);

impl Serialize for MetricValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_nan() {
            s.serialize_str("NaN")
        } else if v == f64::INFINITY {
            s.serialize_str("Infinity")
        } else if v == f64::NEG_INFINITY {
            s.serialize_str("-Infinity")
        } else {
            s.serialize_f64(v)
        }
    }
}

impl<'de> Deserialize<'de> for MetricValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(v) => Ok(MetricValue(v)),
            Raw::Text(t) => match t.as_str() {
                "NaN" | "nan" => Ok(MetricValue(f64::NAN)),
                "Infinity" | "inf" | "+Infinity" => Ok(MetricValue(f64::INFINITY)),
                "-Infinity" | "-inf" => Ok(MetricValue(f64::NEG_INFINITY)),
                other => other.parse::<f64>().map(MetricValue).map_err(|_| {
                    serde::de::Error::custom(format!(
                        "metric value '{other}' is not a number (use a number, \"NaN\", \"Infinity\" or \"-Infinity\")"
                    ))
                }),
            },
        }
    }
}

/// One logged metric point. The optional fields link a point to a logged model and
/// the dataset it was measured on (MLflow 3); run metrics leave them out.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Metric {
    pub key: String,
    pub value: MetricValue,
    /// Epoch milliseconds.
    pub timestamp: i64,
    #[serde(default)]
    pub step: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Experiment {
    pub experiment_id: String,
    pub name: String,
    pub artifact_location: String,
    pub lifecycle_stage: String,
    pub last_update_time: i64,
    pub creation_time: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    pub run_id: String,
    /// The same as `run_id` (older clients read this one).
    pub run_uuid: String,
    pub run_name: String,
    pub experiment_id: String,
    pub user_id: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<i64>,
    pub artifact_uri: String,
    pub lifecycle_stage: String,
}

impl RunInfo {
    /// The run's artifact root as a path under the MLflow artifact API
    /// (`<experiment>/<run>/artifacts`), without `mlflow-artifacts:/`.
    pub fn artifact_root(&self) -> &str {
        self.artifact_uri
            .strip_prefix("mlflow-artifacts:/")
            .unwrap_or(&self.artifact_uri)
            .trim_matches('/')
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunData {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Metric>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<Param>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
}

/// A dataset as MLflow describes it (`mlflow.data`): name, digest and where it came
/// from. `source` is JSON text, e.g. `{"uri": "qanat://proj/dataset@3"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    pub name: String,
    pub digest: String,
    pub source_type: String,
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// A dataset a run read, with tags such as `mlflow.data.context` = `training`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetInput {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
    pub dataset: Dataset,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInput {
    pub model_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelOutput {
    pub model_id: String,
    #[serde(default)]
    pub step: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunInputs {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dataset_inputs: Vec<DatasetInput>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_inputs: Vec<ModelInput>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunOutputs {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_outputs: Vec<ModelOutput>,
}

/// Logged model states (MLflow's `LoggedModelStatus`, by name).
pub const LOGGED_MODEL_STATUSES: [&str; 3] = [
    "LOGGED_MODEL_PENDING",
    "LOGGED_MODEL_READY",
    "LOGGED_MODEL_UPLOAD_FAILED",
];

/// A registered model version this logged model became.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Registration {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct LoggedModelInfo {
    pub model_id: String,
    pub experiment_id: String,
    pub name: String,
    pub creation_timestamp_ms: i64,
    pub last_updated_timestamp_ms: i64,
    pub artifact_uri: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub registrations: Vec<Registration>,
    /// Who created it (a Qanat extension; MLflow's `creator_id` is a number).
    pub creator: String,
    /// `active` or `deleted`.
    #[serde(skip)]
    pub lifecycle_stage: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct LoggedModelData {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<Param>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Metric>,
}

/// A model logged by a run (MLflow 3's `LoggedModel`): its artifacts live under
/// `artifact_uri`; registry versions point at it.
#[derive(Debug, Clone, Serialize)]
pub struct LoggedModel {
    pub info: LoggedModelInfo,
    pub data: LoggedModelData,
}

/// Registry stages (MLflow's, kept for `transition-stage`; aliases are the modern way).
pub const STAGES: [&str; 4] = ["None", "Staging", "Production", "Archived"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelAlias {
    pub alias: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelVersion {
    pub name: String,
    pub version: String,
    pub creation_timestamp: i64,
    pub last_updated_timestamp: i64,
    pub user_id: String,
    pub current_stage: String,
    pub description: String,
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_link: Option<String>,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
    /// Where the version's files are (what get-download-uri answers).
    #[serde(skip)]
    pub storage_location: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisteredModel {
    pub name: String,
    pub creation_timestamp: i64,
    pub last_updated_timestamp: i64,
    pub description: String,
    /// The newest version in each stage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latest_versions: Vec<ModelVersion>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<ModelAlias>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub info: RunInfo,
    pub data: RunData,
    #[serde(default)]
    pub inputs: RunInputs,
    #[serde(default)]
    pub outputs: RunOutputs,
}

/// Run statuses MLflow knows.
pub const RUN_STATUSES: [&str; 5] = ["RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_values_round_trip_nan_and_infinities_as_strings() {
        for (v, wire) in [
            (f64::NAN, "\"NaN\""),
            (f64::INFINITY, "\"Infinity\""),
            (f64::NEG_INFINITY, "\"-Infinity\""),
            (1.5, "1.5"),
        ] {
            let text = serde_json::to_string(&MetricValue(v)).expect("ser");
            assert_eq!(text, wire);
            let back: MetricValue = serde_json::from_str(&text).expect("de");
            assert!(back.0 == v || (v.is_nan() && back.0.is_nan()));
        }
        assert!(serde_json::from_str::<MetricValue>("\"many\"").is_err());
    }
}

/// A dataset some run of an experiment read, with the context it was read in
/// (`training`, `evaluation`, …): MLflow's `DatasetSummary`, what the UI filters by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct DatasetSummary {
    pub experiment_id: String,
    pub name: String,
    pub digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}
