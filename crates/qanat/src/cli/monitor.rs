//! `qanat monitor`: drift between a reference and current data.

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum MonitorCmd {
    /// Drift of a current table from a reference, column by column, on this machine
    /// (no server): `qanat monitor compare train.csv last_week.parquet`.
    ///
    /// Each column gets the method Evidently's data-drift preset would choose (KS or
    /// chi-squared up to 1,000 reference rows, Wasserstein or Jensen–Shannon above);
    /// the dataset drifted when half its columns did (docs/monitoring.md). Exits 0
    /// whether or not it drifted; read `drifted` in the JSON.
    Compare {
        /// The reference table: CSV with a header row, or Parquet (.parquet, .pq); or a
        /// saved profile (.json), such as a trained model's model/reference_profile.json.
        reference: PathBuf,
        /// The current table, in either format.
        current: PathBuf,
        /// A column's method: COLUMN=ks|chisquare|z|wasserstein|jensenshannon|psi
        /// (repeatable).
        #[arg(long = "method", value_name = "COLUMN=METHOD", value_parser = crate::cli::parse_kv)]
        methods: Vec<(String, String)>,
        /// A column's threshold: a p-value for ks, chisquare and z (drift below it), a
        /// distance for the others (drift at or above it) (repeatable).
        #[arg(long = "threshold", value_name = "COLUMN=X", value_parser = crate::cli::parse_kv)]
        thresholds: Vec<(String, String)>,
        /// Only these columns (comma-separated).
        #[arg(long, value_name = "COLUMNS", value_delimiter = ',')]
        columns: Option<Vec<String>>,
        /// Also write the report as one self-contained HTML page (the verdicts and,
        /// per column, both distributions drawn).
        #[arg(long, value_name = "PATH")]
        html: Option<PathBuf>,
    },
}
