//! What the labels matched so far say about a version.

use serde::{Deserialize, Serialize};

/// What the labels matched so far say about one version in one window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LiveQuality {
    /// Rows with a label.
    pub labelled: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auc: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rmse: Option<f64>,
}
