//! `qanat monitor`: drift between a reference and current data, and the monitors that
//! watch deployments on a server.

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
    /// Profile a table as a reference, on this machine (no server): per column its
    /// type, null rate, quantiles and histogram (numbers) or category counts (text).
    /// `compare` takes the profile instead of the table, as it takes a trained model's
    /// model/reference_profile.json: `qanat monitor profile train.parquet --to
    /// train.json`, later `qanat monitor compare train.json today.parquet`.
    Profile {
        /// The table: CSV with a header row, or Parquet (.parquet, .pq).
        table: PathBuf,
        /// Where to write the profile (JSON).
        #[arg(long, value_name = "PATH")]
        to: PathBuf,
    },
    /// Watch a deployment: its inference log is cut into windows (`--window-rows` or
    /// `--window-seconds`), each version's traffic is compared with the reference
    /// profile stored with its model, and the alert rules of the spec run
    /// (docs/monitoring.md). Replaces the spec of a monitor that exists.
    Set {
        deployment: String,
        /// A YAML or JSON file with the spec (window, min_rows, methods, thresholds,
        /// alerts, canary); flags given beside it override it.
        #[arg(long, short = 'f')]
        file: Option<PathBuf>,
        /// A window per this many logged rows.
        #[arg(long, conflicts_with = "window_seconds")]
        window_rows: Option<u64>,
        /// A window per this many seconds.
        #[arg(long)]
        window_seconds: Option<u64>,
        /// Fewest rows a window needs to be tested (default 30).
        #[arg(long)]
        min_rows: Option<u64>,
    },
    /// The project's monitors.
    Ls,
    /// A monitor: its newest checks (drift share, prediction drift, live quality per
    /// version), its alerts and what their actions did, and its labels.
    Status { deployment: String },
    /// One check (the newest by default), column by column; `--html PATH` saves its
    /// report page.
    Report {
        deployment: String,
        /// The check's number.
        #[arg(long)]
        check: Option<i64>,
        #[arg(long, value_name = "PATH")]
        html: Option<PathBuf>,
    },
    /// A monitor's alerts, newest first, with each action's outcome.
    Alerts {
        deployment: String,
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
    /// Post the ground truth of past requests: a CSV file with a header `id,value`
    /// (the request's x-request-id or its own id, and the true value), or JSON
    /// `[{"id": ..., "value": ...}]`. Live accuracy, AUC or RMSE follow per window.
    Labels { deployment: String, file: PathBuf },
    /// Delete a monitor with its checks, alerts and labels.
    Delete { deployment: String },
}
