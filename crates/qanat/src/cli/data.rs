//! `qanat data`.

use std::path::PathBuf;

use clap::Subcommand;
use qanat_core::{Kind, ObjectRef, RefError};
use qanat_data::{Classification, VersionRef};

use super::parse_kv;

/// `DATASET[@VERSION|@TAG]`, with or without the `dataset:` kind.
fn dataset_ref(s: &str) -> Result<ObjectRef, RefError> {
    ObjectRef::parse_of(Kind::Dataset, s)
}

/// A tag for a version: a name that does not read as a version number (`3`, `v3`,
/// `latest`), checked before anything is sent.
fn tag_label(s: &str) -> Result<String, String> {
    match s.parse::<VersionRef>() {
        Ok(VersionRef::Label(name)) => Ok(name.to_string()),
        Ok(_) => Err(format!(
            "'{s}' would read as a version number; a tag needs a letter or a '-', e.g. golden or 2026-11"
        )),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(Subcommand)]
pub enum DataCmd {
    /// Create a dataset.
    Create {
        name: String,
        #[arg(long, default_value = "")]
        description: String,
        /// public, internal, confidential or restricted.
        #[arg(long, default_value = "internal")]
        classification: Classification,
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
        /// Columns that hold personal data (comma-separated): pseudonymized for
        /// readers without the project's PII permission.
        #[arg(long, value_delimiter = ',', value_name = "COLUMNS")]
        pii: Vec<String>,
    },
    /// Declare columns that hold personal data (editors): pseudonymized for readers
    /// without the project's PII permission, and no longer flagged as undeclared.
    DeclarePii {
        dataset: String,
        columns: Vec<String>,
        /// Make the given columns the whole declaration (none: declare nothing beyond
        /// the schema's `pii: true` columns) instead of adding to it.
        #[arg(long)]
        replace: bool,
    },
    /// List the project's datasets.
    Ls {
        /// The deleted ones that gc has not purged yet (restorable) instead.
        #[arg(long)]
        deleted: bool,
    },
    /// Push files and directories as a new immutable version.
    Push {
        dataset: String,
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[arg(short, long, default_value = "")]
        message: String,
        /// Tag the new version (checked before anything is sent).
        #[arg(long, value_parser = tag_label)]
        tag: Option<String>,
        /// Push even when the paths hold no file (an empty version).
        #[arg(long)]
        allow_empty: bool,
        /// Record what this version was derived from (repeatable), e.g. dataset:raw@3.
        #[arg(long = "derived-from")]
        derived_from: Vec<ObjectRef>,
    },
    /// Restore a version (DATASET@VERSION|TAG, default latest) into a directory.
    Pull {
        #[arg(value_parser = dataset_ref)]
        reference: ObjectRef,
        dir: PathBuf,
        /// Write into a directory that is not empty (same-named files are replaced).
        #[arg(long)]
        force: bool,
        /// Remove the files the version does not have (implies --force).
        #[arg(long)]
        delete: bool,
    },
    /// Versions of a dataset, newest first.
    Log { dataset: String },
    /// A dataset, or one version's files (DATASET@VERSION).
    Show {
        #[arg(value_parser = dataset_ref)]
        reference: ObjectRef,
    },
    /// Copy a version into another dataset (e.g. in another storage location):
    /// SRC@VERSION DST.
    Copy {
        #[arg(value_parser = dataset_ref)]
        reference: ObjectRef,
        to: String,
        #[arg(short, long, default_value = "")]
        message: String,
    },
    /// What changed between two versions: DATASET FROM TO.
    Diff {
        dataset: String,
        from: VersionRef,
        to: VersionRef,
    },
    /// Tag a version: DATASET@VERSION TAG.
    Tag {
        #[arg(value_parser = dataset_ref)]
        reference: ObjectRef,
        #[arg(value_parser = tag_label)]
        tag: String,
    },
    /// Delete a dataset (project admins; restorable until gc purges it).
    ///
    /// Hidden at once; its versions, bytes and name are kept until gc purges them after
    /// the retention period (retention.deleted_days).
    Rm { dataset: String },
    /// Erase one data subject's rows (project admins): a new version without them, and
    /// every older version's chunks that held them destroyed for good.
    ///
    /// A row goes when its column holds one of the values (as text, spaces around it
    /// ignored); name several columns to catch the subject wherever they appear. The
    /// old versions' files that held the rows cannot be read any more (their data keys
    /// are destroyed); lineage shows `erasure:REQUEST_ID`. The record keeps the request
    /// id and the columns, never the values.
    Erase {
        dataset: String,
        /// The data subject request's reference (e.g. DSR-2026-0042): how the audit
        /// log, lineage and the compliance report name this erasure.
        #[arg(long)]
        request_id: String,
        /// COLUMN=VALUE, repeated: the subject's identifiers.
        #[arg(long = "match", value_name = "COLUMN=VALUE", required = true)]
        matches: Vec<String>,
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// The erasures of a dataset: each request, its columns, what it removed.
    Erasures { dataset: String },
    /// Bring back a deleted dataset that gc has not purged yet (project admins).
    Restore { dataset: String },
    /// Purge what outlived its retention, free unreferenced chunks (maintainers).
    ///
    /// The same as `qanat gc -p PROJECT`.
    Gc {
        /// Keep chunks a push used this recently.
        #[arg(long, default_value = "1h")]
        grace: humantime::Duration,
    },
}
