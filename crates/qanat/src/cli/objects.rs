//! `qanat objects`.

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum ObjectsCmd {
    /// Upload a file (streamed, encrypted at rest).
    Put {
        project: String,
        key: String,
        file: PathBuf,
        /// Storage location (default: the server's default).
        #[arg(long)]
        location: Option<String>,
    },
    /// Download an object to a file (or stdout with `-`).
    Get {
        project: String,
        key: String,
        #[arg(default_value = "-")]
        out: PathBuf,
        #[arg(long)]
        location: Option<String>,
    },
    /// List a project's objects.
    Ls {
        project: String,
        #[arg(long)]
        prefix: Option<String>,
        #[arg(long)]
        location: Option<String>,
    },
    /// Delete an object.
    Rm {
        project: String,
        key: String,
        #[arg(long)]
        location: Option<String>,
    },
    /// List storage locations and their regions.
    Locations,
}
