//! `qanat`: the Qanat binary. One process serves the platform (`qanat server`); the same
//! binary is the command-line client for it.

mod client;
mod commands;
mod config;
mod data_cmd;
mod output;
mod server;
mod tracking_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// mimalloc instead of the C library's allocator: request handling allocates and frees
/// many small buffers (JSON values, bind arguments), where glibc's malloc spent ~18% of
/// a 1000-metric log-batch.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Qanat: a self-hosted ML platform in one binary.
#[derive(Parser)]
#[command(name = "qanat", version, about, propagate_version = true)]
pub struct Cli {
    /// Config file (default: $QANAT_CONFIG, else ./qanat.toml if present).
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
    /// Server URL for client commands (default: $QANAT_SERVER_URL, else your login).
    #[arg(long, global = true, value_name = "URL")]
    server: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Create the data directory, master key, metadata store and the bootstrap admin.
    Init,
    /// Run the API server.
    Server,
    /// Show configuration.
    Config {
        #[command(subcommand)]
        cmd: commands::ConfigCmd,
    },
    /// Store a token for the CLI (in a 0600 file).
    Login {
        /// The API token (or set QANAT_TOKEN).
        #[arg(long, env = "QANAT_TOKEN", hide_env_values = true)]
        token: String,
        /// CA certificate to trust (for a self-signed server certificate).
        #[arg(long, value_name = "PEM")]
        ca_cert: Option<PathBuf>,
    },
    /// Forget the stored token.
    Logout,
    /// Show who the CLI is logged in as.
    Whoami,
    /// Projects, their residency policy and members.
    Projects {
        #[command(subcommand)]
        cmd: commands::ProjectsCmd,
    },
    /// Users and service accounts.
    Users {
        #[command(subcommand)]
        cmd: commands::UsersCmd,
    },
    /// API tokens.
    Tokens {
        #[command(subcommand)]
        cmd: commands::TokensCmd,
    },
    /// Datasets: immutable, content-addressed versions.
    Data {
        /// The project (or set QANAT_PROJECT).
        #[arg(long, short = 'p', env = "QANAT_PROJECT")]
        project: String,
        #[command(subcommand)]
        cmd: data_cmd::DataCmd,
    },
    /// Experiment runs (the MLflow tracking store): ls, show, compare.
    Runs {
        /// The project (or set QANAT_PROJECT).
        #[arg(long, short = 'p', env = "QANAT_PROJECT")]
        project: String,
        #[command(subcommand)]
        cmd: tracking_cmd::RunsCmd,
    },
    /// The model registry: ls, show, alias, promote, rollback.
    Models {
        /// The project (or set QANAT_PROJECT).
        #[arg(long, short = 'p', env = "QANAT_PROJECT")]
        project: String,
        #[command(subcommand)]
        cmd: tracking_cmd::ModelsCmd,
    },
    /// Where an object came from: `qanat lineage dataset:tx@3`, `model:fraud@champion`.
    Lineage {
        #[arg(long, short = 'p', env = "QANAT_PROJECT")]
        project: String,
        /// dataset:<name>@<version|tag>, model:<name>@<version|alias>, run:<id> or logged_model:<id>.
        reference: String,
        #[arg(long, default_value_t = 10)]
        depth: usize,
    },
    /// A project's encrypted object area.
    Objects {
        #[command(subcommand)]
        cmd: commands::ObjectsCmd,
    },
    /// The audit log.
    Audit {
        #[command(subcommand)]
        cmd: commands::AuditCmd,
    },
    /// Master keys.
    Keys {
        #[command(subcommand)]
        cmd: commands::KeysCmd,
    },
    /// TLS certificates.
    Certs {
        #[command(subcommand)]
        cmd: commands::CertsCmd,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
