//! `qanat data`.

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum DataCmd {
    /// Create a dataset.
    Create {
        name: String,
        #[arg(long, default_value = "")]
        description: String,
        /// public, internal, confidential or restricted.
        #[arg(long, default_value = "internal")]
        classification: String,
        /// Narrow the project's allowed regions for this dataset (comma-separated).
        #[arg(long, value_delimiter = ',')]
        regions: Option<Vec<String>>,
        /// Storage location for its chunks (default: the server's default).
        #[arg(long)]
        location: Option<String>,
        /// key=value labels.
        #[arg(long = "tag", value_parser = parse_kv)]
        tags: Vec<(String, String)>,
        /// A JSON file declaring the columns every CSV/Parquet file must have:
        /// {"columns": [{"name": "id", "type": "Int64", "nullable": false, "pii": false}]}
        #[arg(long, value_name = "JSON")]
        schema: Option<PathBuf>,
    },
    /// List the project's datasets.
    Ls,
    /// Push files and directories as a new immutable version.
    Push {
        dataset: String,
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[arg(short, long, default_value = "")]
        message: String,
        /// Tag the new version.
        #[arg(long)]
        tag: Option<String>,
        /// Record what this version was derived from (repeatable), e.g. dataset:raw@3.
        #[arg(long = "derived-from")]
        derived_from: Vec<String>,
    },
    /// Restore a version (DATASET@VERSION|TAG, default latest) into a directory.
    Pull { reference: String, dir: PathBuf },
    /// Versions of a dataset, newest first.
    Log { dataset: String },
    /// A dataset, or one version's files (DATASET@VERSION).
    Show { reference: String },
    /// Copy a version into another dataset (e.g. in another storage location):
    /// SRC@VERSION DST.
    Copy {
        reference: String,
        to: String,
        #[arg(short, long, default_value = "")]
        message: String,
    },
    /// What changed between two versions: DATASET FROM TO.
    Diff {
        dataset: String,
        from: String,
        to: String,
    },
    /// Tag a version: DATASET@VERSION TAG.
    Tag { reference: String, tag: String },
    /// Delete chunks no version of the project references (maintainers).
    Gc {
        /// Keep chunks a push used this recently.
        #[arg(long, default_value = "1h")]
        grace: humantime::Duration,
    },
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("'{s}': use key=value"))
}
