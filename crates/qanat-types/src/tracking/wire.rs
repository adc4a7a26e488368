//! Request and response bodies of the tracking and registry APIs, shared by `qanat-api`
//! (which serves them) and `qanat-client` (which sends and reads them). Plain data: no
//! HTTP types here. [`mlflow`] holds the MLflow REST shapes the Qanat client uses.

use serde::{Deserialize, Serialize};

use super::{AliasMove, ModelVersion, RegisteredModel};

/// A project's registered models.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelList {
    /// Registered models (MLflow's shape: name, description, aliases, latest_versions…).
    #[schema(value_type = Vec<Object>)]
    pub models: Vec<RegisteredModel>,
}

/// Which registered models to list.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
pub struct ModelListParams {
    /// MLflow filter, e.g. `name LIKE 'fraud%'`.
    pub filter: Option<String>,
    /// At most this many (default 100).
    pub max_results: Option<i64>,
}

/// A registered model with every version and the history of its aliases.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelDetail {
    #[schema(value_type = Object)]
    pub model: RegisteredModel,
    /// Every version, newest first.
    #[schema(value_type = Vec<Object>)]
    pub versions: Vec<ModelVersion>,
    /// Every move of every alias, oldest first.
    #[schema(value_type = Vec<Object>)]
    pub alias_history: Vec<AliasMove>,
}

/// Where an alias should point.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AliasTarget {
    /// The version the alias should point at.
    pub version: String,
}

/// An alias after a move.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AliasMoved {
    pub name: String,
    pub alias: String,
    /// Where the alias points now.
    pub version: Option<String>,
    /// Where it pointed before (None if it was new).
    pub previous_version: Option<String>,
}

/// The MLflow REST shapes (`/api/2.0/mlflow/...`) that both the server and the Qanat
/// client use. Requests ignore unknown fields, as MLflow's server does.
pub mod mlflow {
    use serde::{Deserialize, Serialize};

    use crate::tracking::{Experiment, Run};

    /// `experiments/search` (POST body or GET query).
    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    pub struct SearchExperiments {
        #[serde(skip_serializing_if = "Option::is_none")]
        pub max_results: Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub page_token: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub filter: Option<String>,
        /// `ACTIVE_ONLY` (default), `DELETED_ONLY` or `ALL`.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub view_type: Option<String>,
        /// `name`, `creation_time`, `last_update_time` or `experiment_id`, each with
        /// `ASC`/`DESC` (default: newest first).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub order_by: Vec<String>,
    }

    /// One page of experiments.
    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    pub struct ExperimentsPage {
        #[serde(default)]
        pub experiments: Vec<Experiment>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub next_page_token: Option<String>,
    }

    /// `experiments/get` and `experiments/get-by-name`.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct ExperimentReply {
        pub experiment: Experiment,
    }

    /// `runs/search`.
    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    pub struct SearchRuns {
        #[serde(default)]
        pub experiment_ids: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub filter: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub run_view_type: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub max_results: Option<i64>,
        /// e.g. `metrics.rmse ASC`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub order_by: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub page_token: Option<String>,
    }

    /// One entry of an artifact listing: a file with its size, or a directory.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct ArtifactFile {
        /// Relative to the run's artifact root (`artifacts/list`) or to the listed
        /// directory (`mlflow-artifacts/artifacts`).
        pub path: String,
        pub is_dir: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub file_size: Option<u64>,
    }

    /// `artifacts/list` (and, without `root_uri`, `mlflow-artifacts/artifacts`).
    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    pub struct ArtifactList {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub root_uri: Option<String>,
        #[serde(default)]
        pub files: Vec<ArtifactFile>,
    }

    /// One page of runs (MLflow leaves an empty list out).
    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    pub struct RunsPage {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub runs: Vec<Run>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub next_page_token: Option<String>,
    }

    /// `runs/get`.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct RunReply {
        pub run: Run,
    }
}
