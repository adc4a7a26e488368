//! The code behind each command. Local commands (`init`, `server`, `config`, `certs`)
//! work on the data directory, and `monitor compare` on the files it is given; the
//! others are clients of a running server through `qanat-client`, printing through
//! [`crate::output`].

mod audit;
mod certs;
mod compliance;
mod config;
mod data;
mod deploy;
mod experiments;
mod features;
pub mod init;
mod jobs;
mod keys;
mod lineage;
mod models;
mod monitor;
mod objects;
mod optimize_worker;
mod projects;
mod quickstart;
mod runs;
mod server;
mod session;
mod sweep_worker;
mod tokens;
mod train_worker;
mod users;
mod webhooks;
mod worker;

use anyhow::Result;
use qanat_client::Client;

use crate::cli::{Cli, Command, Format, MonitorCmd};
use crate::config::{Config, Overrides};
use crate::credentials::Target;

/// What every client command gets: the client and the output format.
pub struct Ctx {
    pub client: Client,
    pub format: Format,
    /// The server's URL, for messages.
    pub server: String,
}

pub async fn run(cli: Cli) -> Result<()> {
    let (server, token) = (cli.server.clone(), cli.token.clone());
    // `login` says which server refused the token itself.
    let hint = !matches!(cli.command, Command::Login { .. });
    command(cli).await.map_err(|e| {
        // A token the server refused: say which server, and how to log in to it.
        let refused = e
            .chain()
            .filter_map(|c| c.downcast_ref::<qanat_client::Error>())
            .any(|c| c.status() == Some(401))
            && hint;
        match Target::resolve(server.as_deref(), token.as_deref(), None) {
            Ok(t) if refused => e.context(format!(
                "{} refused the token (log in with `qanat login --server {} --token <TOKEN>`)",
                t.server, t.server
            )),
            _ => e,
        }
    })
}

async fn command(cli: Cli) -> Result<()> {
    let format = cli.output;
    let overrides = Overrides {
        home: cli.home.clone(),
        ..Overrides::default()
    };
    let load = |o: &Overrides| Config::load(cli.config.as_deref(), o);
    let ctx = || async {
        let target = Target::resolve(cli.server.as_deref(), cli.token.as_deref(), None)?
            .fresh()
            .await?;
        if target.token.is_none() {
            anyhow::bail!(
                "not logged in: run `qanat login --server {} --token <TOKEN>` (the admin's token is the one `qanat init` printed), or set QANAT_TOKEN",
                target.server
            );
        }
        Ok::<Ctx, anyhow::Error>(Ctx {
            client: target.client()?,
            format,
            server: target.server,
        })
    };
    match cli.command {
        Command::Init => init::run(&load(&overrides)?, format).await,
        Command::Server(args) => {
            let cfg = load(&Overrides {
                bind: args.bind,
                port: args.port,
                ..overrides
            })?;
            server::run(cfg).await
        }
        Command::Quickstart(args) => {
            let cfg = load(&Overrides {
                bind: args.server.bind,
                port: args.server.port,
                home: overrides
                    .home
                    .or_else(|| Some(quickstart::DEFAULT_HOME.into())),
            })?;
            quickstart::run(cfg, args.exit).await
        }
        Command::Serve(args) => {
            let cfg = load(&Overrides {
                bind: args.bind,
                port: args.port,
                ..overrides
            })?;
            server::run_data_plane(cfg).await
        }
        Command::Config { cmd } => config::run(&load(&overrides)?, format, cmd),
        Command::Certs { cmd } => certs::run(&load(&overrides)?, cmd),
        Command::Login { ca_cert, sso: true } => {
            session::login_sso(cli.server.as_deref(), ca_cert.as_deref()).await
        }
        Command::Login {
            ca_cert,
            sso: false,
        } => {
            session::login(
                cli.server.as_deref(),
                cli.token.as_deref(),
                ca_cert.as_deref(),
            )
            .await
        }
        Command::Logout => session::logout(cli.server.as_deref()),
        Command::Whoami => session::whoami(&ctx().await?).await,
        Command::Projects { cmd } => projects::run(&ctx().await?, cmd).await,
        Command::Users { cmd } => users::run(&ctx().await?, cmd).await,
        Command::Tokens { cmd } => tokens::run(&ctx().await?, cmd).await,
        Command::Objects { cmd } => objects::run(&ctx().await?, cmd).await,
        Command::Data { project, cmd } => data::run(&ctx().await?, &which(project)?, cmd).await,
        Command::Experiments { project, cmd } => {
            experiments::run(&ctx().await?, &which(project)?, cmd).await
        }
        Command::Runs { project, cmd } => runs::run(&ctx().await?, &which(project)?, cmd).await,
        Command::Models { project, cmd } => models::run(&ctx().await?, &which(project)?, cmd).await,
        Command::Webhooks { project, cmd } => {
            webhooks::run(&ctx().await?, &which(project)?, cmd).await
        }
        Command::Jobs { project, cmd } => jobs::run(&ctx().await?, &which(project)?, cmd).await,
        Command::Deploy { project, cmd } => {
            deploy::run(&ctx().await?, &which(project)?, *cmd).await
        }
        Command::Features { project, cmd } => {
            features::run(&ctx().await?, &which(project)?, cmd).await
        }
        Command::Monitor {
            cmd: cmd @ (MonitorCmd::Compare { .. } | MonitorCmd::Profile { .. }),
            ..
        } => monitor::compare(format, cmd),
        Command::Monitor { project, cmd } => {
            monitor::run(&ctx().await?, &which(project)?, cmd).await
        }
        Command::Gpus => jobs::gpus(&ctx().await?).await,
        Command::TrainWorker => train_worker::run().await,
        Command::SweepWorker => sweep_worker::run().await,
        Command::OptimizeWorker => optimize_worker::run().await,
        Command::Optimize { project, args } => {
            jobs::optimize(&ctx().await?, &which(project)?, *args).await
        }
        Command::Train { project, args } => {
            jobs::train(&ctx().await?, &which(project)?, *args).await
        }
        Command::Gc { project, grace } => data::gc(&ctx().await?, project.as_deref(), grace).await,
        Command::Lineage(args) => lineage::run(&ctx().await?, args).await,
        Command::Audit { cmd } => audit::run(&ctx().await?, cmd).await,
        Command::Keys { cmd } => keys::run(&ctx().await?, cmd).await,
        Command::Compliance { cmd } => compliance::run(&ctx().await?, cmd).await,
    }
}

/// The project a project-scoped command works in.
fn which(project: Option<String>) -> Result<String> {
    project.ok_or_else(|| {
        anyhow::anyhow!("which project? pass -p/--project NAME or set QANAT_PROJECT")
    })
}
