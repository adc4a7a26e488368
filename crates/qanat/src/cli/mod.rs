//! The command line as clap sees it: every command, flag and help text, and nothing
//! that runs (that is in `commands/`). One file per command group.

pub mod admin;
pub mod audit;
pub mod data;
pub mod identity;
pub mod models;
pub mod objects;
pub mod projects;
pub mod runs;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Qanat: a self-hosted ML platform in one binary.
#[derive(Parser)]
#[command(name = "qanat", version, about, propagate_version = true)]
pub struct Cli {
    /// Config file (default: $QANAT_CONFIG, else ./qanat.toml if present).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Data directory for local commands (init, server, config, certs) [default:
    /// $QANAT_HOME, else home in the config file, else ./.qanat].
    #[arg(long, global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Server URL for client commands (default: $QANAT_SERVER_URL, else your login).
    #[arg(long, global = true, value_name = "URL")]
    pub server: Option<String>,
    /// API token for client commands, instead of the stored login.
    #[arg(long, global = true, env = "QANAT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

#[derive(Subcommand)]
pub enum Command {
    /// Create the data directory, master key, metadata store and the bootstrap admin.
    Init,
    /// Run the API server.
    Server {
        /// Address to listen on, HOST:PORT (default: server.bind in the config,
        /// $QANAT_SERVER_BIND, else 127.0.0.1:8080).
        #[arg(long, value_name = "ADDR")]
        bind: Option<String>,
        /// Port to listen on, keeping the configured host.
        #[arg(long, value_name = "PORT")]
        port: Option<u16>,
    },
    /// Show configuration.
    Config {
        #[command(subcommand)]
        cmd: admin::ConfigCmd,
    },
    /// Store a token for the CLI (in a 0600 file): `qanat login --token <token>` (or
    /// with QANAT_TOKEN set).
    Login {
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
        cmd: projects::ProjectsCmd,
    },
    /// Users and service accounts.
    Users {
        #[command(subcommand)]
        cmd: identity::UsersCmd,
    },
    /// API tokens.
    Tokens {
        #[command(subcommand)]
        cmd: identity::TokensCmd,
    },
    /// Datasets: immutable, content-addressed versions.
    Data {
        /// The project (or set QANAT_PROJECT).
        #[arg(long, short = 'p', env = "QANAT_PROJECT")]
        project: String,
        #[command(subcommand)]
        cmd: data::DataCmd,
    },
    /// Experiment runs (the MLflow tracking store): ls, show, compare.
    Runs {
        /// The project (or set QANAT_PROJECT).
        #[arg(long, short = 'p', env = "QANAT_PROJECT")]
        project: String,
        #[command(subcommand)]
        cmd: runs::RunsCmd,
    },
    /// The model registry: ls, show, alias, promote, rollback.
    Models {
        /// The project (or set QANAT_PROJECT).
        #[arg(long, short = 'p', env = "QANAT_PROJECT")]
        project: String,
        #[command(subcommand)]
        cmd: models::ModelsCmd,
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
        cmd: objects::ObjectsCmd,
    },
    /// The audit log.
    Audit {
        #[command(subcommand)]
        cmd: audit::AuditCmd,
    },
    /// Master keys.
    Keys {
        #[command(subcommand)]
        cmd: admin::KeysCmd,
    },
    /// TLS certificates.
    Certs {
        #[command(subcommand)]
        cmd: admin::CertsCmd,
    },
}
