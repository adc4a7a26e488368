//! The command line, as clap definitions only: each command group's arguments in its own
//! file, the code that runs them in `crate::commands`. The doc comments here are the
//! `--help` text.

mod audit;
mod certs;
mod compliance;
mod config;
mod data;
mod deploy;
mod experiments;
mod features;
mod jobs;
mod keys;
mod lineage;
mod models;
mod monitor;
mod objects;
mod optimize;
mod projects;
mod quickstart;
mod runs;
mod server;
mod tokens;
mod train;
mod users;
mod webhooks;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

pub use audit::AuditCmd;
pub use certs::CertsCmd;
pub use compliance::ComplianceCmd;
pub use config::ConfigCmd;
pub use data::DataCmd;
pub use deploy::{DeployCmd, SpecArgs};
pub use experiments::ExperimentsCmd;
pub use features::FeaturesCmd;
pub use jobs::{JobFlags, JobsCmd, QuotaCmd, SubmitArgs};
pub use keys::KeysCmd;
pub use lineage::LineageArgs;
pub use models::ModelsCmd;
pub use monitor::MonitorCmd;
pub use objects::ObjectsCmd;
pub use optimize::OptimizeArgs;
pub use projects::ProjectsCmd;
pub use quickstart::QuickstartArgs;
pub use runs::{ArtifactsCmd, RunsCmd};
pub use server::ServerArgs;
pub use tokens::TokensCmd;
pub use train::TrainArgs;
pub use users::UsersCmd;
pub use webhooks::WebhooksCmd;

/// Qanat: a self-hosted ML platform in one binary.
#[derive(Parser)]
#[command(name = "qanat", version, about, propagate_version = true)]
pub struct Cli {
    /// Config file (default: $QANAT_CONFIG, else ./qanat.toml if present).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Data directory of `init`, `server`, `config` and `certs` (overrides `home` in the
    /// config file).
    #[arg(long, global = true, value_name = "DIR", env = "QANAT_HOME")]
    pub home: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Server URL for client commands (default: your login, else http://127.0.0.1:8080).
    #[arg(long, global = true, value_name = "URL", env = "QANAT_SERVER_URL")]
    pub server: Option<String>,
    /// API token for client commands, used instead of the one `qanat login` stored.
    #[arg(
        long,
        global = true,
        value_name = "TOKEN",
        env = "QANAT_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// How results are printed.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Human-readable tables; on a terminal 100 columns wide (or `COLUMNS`), long text
    /// cut with `…`.
    Table,
    /// Tables with every cell in full, however wide.
    Wide,
    /// JSON, for scripts.
    Json,
}

#[derive(Subcommand)]
pub enum Command {
    /// Create the data directory, master key, metadata store and the bootstrap admin.
    Init,
    /// Run the API server.
    Server(ServerArgs),
    /// Start the server and run the whole lifecycle on a dataset shipped in this
    /// binary, printing each step with the references and URLs to follow: dataset
    /// push, feature apply, materialize, training set, train, register, int8
    /// optimization, deploy, a monitor, traffic that drifts half-way, the drift alert,
    /// retraining, canary, promotion. The server then keeps running (docs/quickstart.md).
    ///
    /// It works in a data directory of its own, ./.qanat-quickstart unless --home says
    /// otherwise, made afresh on each run (a directory an earlier quickstart made is
    /// replaced; any other is refused).
    Quickstart(QuickstartArgs),
    /// Run the inference data plane alone: the Open Inference Protocol for this
    /// installation's deployments and models, health and metrics, nothing else. Run
    /// as many as needed behind a load balancer, on the same metadata store and
    /// storage as `qanat server`; each follows deployment changes within a second.
    Serve(ServerArgs),
    /// Show configuration.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
    /// Store a token for the CLI (in a 0600 file): `qanat login --token <token>`, or
    /// log in through the server's identity provider: `qanat login --sso`.
    Login {
        /// CA certificate to trust (for a self-signed server certificate).
        #[arg(long, value_name = "PEM")]
        ca_cert: Option<PathBuf>,
        /// Log in through single sign-on (the provider's device flow: open the URL
        /// printed, enter the code); the session is refreshed with the provider as
        /// it is used, and no password is ever stored.
        #[arg(long, conflicts_with = "token")]
        sso: bool,
    },
    /// Forget the stored token.
    Logout,
    /// Show who the CLI is logged in as.
    Whoami,
    /// Projects, their residency policy and members.
    Projects {
        #[command(subcommand)]
        cmd: ProjectsCmd,
    },
    /// Users and service accounts.
    Users {
        #[command(subcommand)]
        cmd: UsersCmd,
    },
    /// API tokens.
    Tokens {
        #[command(subcommand)]
        cmd: TokensCmd,
    },
    /// Datasets: immutable, content-addressed versions.
    Data {
        /// The project (anywhere on the command line).
        #[arg(long, short = 'p', env = "QANAT_PROJECT", global = true)]
        project: Option<String>,
        #[command(subcommand)]
        cmd: DataCmd,
    },
    /// Experiments (the MLflow tracking store): ls, show, rm, restore.
    Experiments {
        /// The project (anywhere on the command line).
        #[arg(long, short = 'p', env = "QANAT_PROJECT", global = true)]
        project: Option<String>,
        #[command(subcommand)]
        cmd: ExperimentsCmd,
    },
    /// Experiment runs (the MLflow tracking store): ls, show, compare, artifacts.
    Runs {
        /// The project (anywhere on the command line).
        #[arg(long, short = 'p', env = "QANAT_PROJECT", global = true)]
        project: Option<String>,
        #[command(subcommand)]
        cmd: RunsCmd,
    },
    /// The model registry: ls, show, alias, promote, rollback.
    Models {
        /// The project (anywhere on the command line).
        #[arg(long, short = 'p', env = "QANAT_PROJECT", global = true)]
        project: Option<String>,
        #[command(subcommand)]
        cmd: ModelsCmd,
    },
    /// Registry webhooks and their deliveries: ls, deliveries.
    Webhooks {
        /// The project (anywhere on the command line).
        #[arg(long, short = 'p', env = "QANAT_PROJECT", global = true)]
        project: Option<String>,
        #[command(subcommand)]
        cmd: WebhooksCmd,
    },
    /// Training jobs: submit, ls, show, cancel, retry, logs, quota.
    Jobs {
        /// The project (anywhere on the command line).
        #[arg(long, short = 'p', env = "QANAT_PROJECT", global = true)]
        project: Option<String>,
        #[command(subcommand)]
        cmd: JobsCmd,
    },
    /// Deployments that serve registered models: create, update, promote, rollback,
    /// status, ls, history, delete (docs/serving.md).
    Deploy {
        /// The project (anywhere on the command line).
        #[arg(long, short = 'p', env = "QANAT_PROJECT", global = true)]
        project: Option<String>,
        #[command(subcommand)]
        cmd: Box<DeployCmd>,
    },
    /// The feature store: plan, apply, ls, show.
    Features {
        /// The project (anywhere on the command line).
        #[arg(long, short = 'p', env = "QANAT_PROJECT", global = true)]
        project: Option<String>,
        #[command(subcommand)]
        cmd: FeaturesCmd,
    },
    /// Train a model with Qanat's native trainer (a `train` job).
    ///
    /// `qanat train -p demo --data dataset:cancer@1 --target diagnosis --register cancer
    /// --wait`; `-c train.yaml` for every field (docs/training.md).
    Train {
        /// The project.
        #[arg(long, short = 'p', env = "QANAT_PROJECT")]
        project: Option<String>,
        #[command(flatten)]
        args: Box<TrainArgs>,
    },
    /// Make a registered model version smaller and faster (an `optimize` job).
    ///
    /// `qanat optimize -p demo cancer@1 --quantize int8 --holdout dataset:cancer@1
    /// --wait`: both versions are measured on the holdout (quality, size, latency); the
    /// result is registered as a new version derived from the source only if it loses
    /// at most the budget (docs/optimization.md).
    Optimize {
        /// The project.
        #[arg(long, short = 'p', env = "QANAT_PROJECT")]
        project: Option<String>,
        #[command(flatten)]
        args: Box<OptimizeArgs>,
    },
    /// Drift detection: `compare` two tables here, or watch a deployment on the
    /// server: set, ls, status, report, alerts, labels, delete (docs/monitoring.md).
    Monitor {
        /// The project (anywhere on the command line; not needed by `compare`).
        #[arg(long, short = 'p', env = "QANAT_PROJECT", global = true)]
        project: Option<String>,
        #[command(subcommand)]
        cmd: MonitorCmd,
    },
    /// The executors' capacity and GPUs (model, memory, which job holds each).
    Gpus,
    /// The process a `train` job runs (started by the scheduler, not by hand).
    #[command(hide = true)]
    TrainWorker,
    /// The process a `sweep` job runs (started by the scheduler, not by hand).
    #[command(hide = true)]
    SweepWorker,
    /// The process an `optimize` job runs (started by the scheduler, not by hand).
    #[command(hide = true)]
    OptimizeWorker,
    /// Purge what was deleted longer ago than the retention period.
    ///
    /// With -p (maintainers): the project's deleted datasets, experiments and runs,
    /// with their bytes, then unreferenced chunks. Without (global admins): deleted
    /// projects as a whole too, and every project's gc.
    Gc {
        /// One project only.
        #[arg(long, short = 'p', env = "QANAT_PROJECT")]
        project: Option<String>,
        /// Keep dataset chunks a push used this recently.
        #[arg(long, default_value = "1h")]
        grace: humantime::Duration,
    },
    /// Where an object came from: `qanat lineage dataset:tx@3`, `model:fraud@champion`.
    Lineage(LineageArgs),
    /// A project's encrypted object area.
    Objects {
        #[command(subcommand)]
        cmd: ObjectsCmd,
    },
    /// The audit log.
    Audit {
        #[command(subcommand)]
        cmd: AuditCmd,
    },
    /// Compliance: personal data, residency and access, reported on demand.
    Compliance {
        #[command(subcommand)]
        cmd: ComplianceCmd,
    },
    /// Master keys.
    Keys {
        #[command(subcommand)]
        cmd: KeysCmd,
    },
    /// TLS certificates.
    Certs {
        #[command(subcommand)]
        cmd: CertsCmd,
    },
}

/// `key=value`, as `--tag` takes it.
pub(crate) fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("'{s}': use key=value"))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn login_still_takes_its_token_after_the_subcommand() {
        let cli = Cli::try_parse_from(["qanat", "login", "--token", "qnt_x"]).expect("parses");
        assert_eq!(cli.token.as_deref(), Some("qnt_x"));
    }
}
