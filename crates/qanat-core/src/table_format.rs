//! The tabular file formats Qanat reads (datasets' profiles, training tables, holdouts),
//! told apart by extension.

use serde::{Deserialize, Serialize};

/// Which tabular format a file is, by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TableFormat {
    Csv,
    Parquet,
}

impl std::fmt::Display for TableFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TableFormat::Csv => "csv",
            TableFormat::Parquet => "parquet",
        })
    }
}

impl TableFormat {
    pub fn of(path: &str) -> Option<TableFormat> {
        let lower = path.to_ascii_lowercase();
        if lower.ends_with(".csv") {
            Some(TableFormat::Csv)
        } else if lower.ends_with(".parquet") || lower.ends_with(".pq") {
            Some(TableFormat::Parquet)
        } else {
            None
        }
    }
}
