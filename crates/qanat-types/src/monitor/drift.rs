//! Drift findings, per column and for a dataset, as checks and reports show them.

use serde::{Deserialize, Serialize};

qanat_core::word_enum! {
    /// A drift method.
    #[derive(utoipa::ToSchema)]
    pub enum Method as "drift method" {
        /// Two-sample Kolmogorov–Smirnov (p-value).
        Ks,
        /// Pearson's chi-squared on category counts (p-value).
        ChiSquared = "chisquare",
        /// Two-proportion z-test, for two categories (p-value).
        Z,
        /// Wasserstein distance over the reference's standard deviation.
        Wasserstein,
        /// Jensen–Shannon distance between the two distributions.
        JensenShannon = "jensenshannon",
        /// Population Stability Index.
        Psi,
    }
}

impl Method {
    /// Whether the statistic is a p-value test (drift below the threshold) rather than
    /// a distance (drift at or above it).
    pub fn is_test(self) -> bool {
        matches!(self, Method::Ks | Method::ChiSquared | Method::Z)
    }

    /// The threshold Evidently uses for this method.
    pub fn default_threshold(self) -> f64 {
        if self.is_test() {
            0.05
        } else {
            0.1
        }
    }
}

/// A column's method and threshold, chosen by the caller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<Method>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
}

/// Rows up to which a reference is compared with tests rather than distances.
pub const SMALL_REFERENCE: u64 = 1_000;

/// Distinct values up to which a numeric column is compared as categories.
pub const FEW_VALUES: usize = 5;

/// The dataset drifted when at least this share of its columns did.
pub const DATASET_SHARE: f64 = 0.5;

/// One column's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColumnDrift {
    pub column: String,
    /// `numeric` or `categorical`.
    pub kind: String,
    pub method: Method,
    /// The statistic: a p-value for tests, a distance for the others. `None` when
    /// there was nothing to compare (see `note`).
    pub statistic: Option<f64>,
    /// For tests, the test's own statistic (KS's D, χ², z).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_statistic: Option<f64>,
    pub threshold: f64,
    pub drifted: bool,
    /// Computed from exact values, not from the histograms.
    pub exact: bool,
    pub reference_rows: u64,
    pub current_rows: u64,
    pub quality: Quality,
    /// Why there is no statistic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl ColumnDrift {
    /// In words: why there is no statistic, values outside the reference's range,
    /// categories it never had, a statistic from histograms ("" when none).
    pub fn findings(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = &self.note {
            parts.push(n.clone());
        }
        if let Some(share) = self.quality.out_of_range.filter(|s| *s > 0.0) {
            parts.push(format!(
                "{:.1}% outside the reference's range",
                share * 100.0
            ));
        }
        if let Some(share) = self.quality.unseen_share.filter(|s| *s > 0.0) {
            parts.push(format!(
                "{:.1}% in categories the reference never had ({})",
                share * 100.0,
                self.quality.unseen.join(", ")
            ));
        }
        if self.statistic.is_some() && !self.exact {
            parts.push("computed from histograms".into());
        }
        parts.join("; ")
    }
}

/// Data-quality findings for one column: the nulls, the values outside what the
/// reference saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Quality {
    pub reference_null_rate: f64,
    pub current_null_rate: f64,
    /// Numeric: the share of current values outside the reference's [min, max].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_range: Option<f64>,
    /// Categorical: the share of current rows in categories the reference never had,
    /// and the first few of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unseen_share: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unseen: Vec<String>,
}

/// The verdict on a whole table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetDrift {
    /// Columns with a statistic.
    pub columns: usize,
    pub drifted_columns: usize,
    pub share: f64,
    pub threshold: f64,
    pub drifted: bool,
    pub by_column: Vec<ColumnDrift>,
}
