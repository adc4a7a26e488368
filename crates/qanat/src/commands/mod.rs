//! What the CLI commands do (their flags are in `cli/`). Local ones (`init`, `server`, `config`, `certs`) work on the data
//! directory; the rest are clients of a running server.

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::cli::admin::{CertsCmd, ConfigCmd};
use crate::cli::{Cli, Command, Format};
use crate::client::{self, Credentials};
use crate::config::Config;
use crate::output;
use crate::server;

mod admin;
mod audit;
mod data;
mod identity;
mod lineage;
mod models;
mod objects;
mod projects;
mod runs;

pub async fn run(cli: Cli) -> Result<()> {
    let fmt = cli.output;
    let client = || client::from_env(cli.server.as_deref(), cli.token.as_deref(), None);
    let config = || Config::load(cli.config.as_deref(), cli.home.as_deref());
    match cli.command {
        Command::Init => init(config()?, fmt).await,
        Command::Server { bind, port } => {
            let mut cfg = config()?;
            cfg.listen_on(bind, port)?;
            init_tracing(&cfg)?;
            server::serve(cfg).await
        }
        Command::Config {
            cmd: ConfigCmd::Show,
        } => {
            let cfg = config()?;
            if fmt == Format::Json {
                let v: Value = toml::from_str(&cfg.redacted_toml()?)?;
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", cfg.redacted_toml()?);
            }
            Ok(())
        }
        Command::Login { ca_cert } => {
            let Some(token) = cli.token.clone() else {
                bail!(
                    "give the token to store: `qanat login --token <token>` (or set QANAT_TOKEN)"
                );
            };
            let c = client::from_env(cli.server.as_deref(), Some(&token), ca_cert.as_deref())?;
            let me: Value = c.get("/api/v1/whoami").await?;
            let path = client::save_credentials(&Credentials {
                server: c.base().to_string(),
                token,
                ca_cert: ca_cert.map(|p| std::fs::canonicalize(&p).unwrap_or(p)),
            })?;
            eprintln!(
                "logged in to {} as {}; credentials saved to {}",
                c.base(),
                me["name"].as_str().unwrap_or("?"),
                path.display()
            );
            Ok(())
        }
        Command::Logout => {
            let path = client::credentials_path();
            if path.exists() {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
            eprintln!("logged out");
            Ok(())
        }
        Command::Whoami => {
            let me: Value = client()?.get("/api/v1/whoami").await?;
            output::object(fmt, &me);
            Ok(())
        }
        Command::Projects { cmd } => projects::projects(&client()?, fmt, cmd).await,
        Command::Users { cmd } => identity::users(&client()?, fmt, cmd).await,
        Command::Tokens { cmd } => identity::tokens(&client()?, fmt, cmd).await,
        Command::Objects { cmd } => objects::objects(&client()?, fmt, cmd).await,
        Command::Lineage {
            project,
            reference,
            depth,
        } => lineage::lineage(&client()?, fmt, &project, &reference, depth).await,
        Command::Runs { project, cmd } => runs::runs(&client()?, fmt, &project, cmd).await,
        Command::Models { project, cmd } => models::models(&client()?, fmt, &project, cmd).await,
        Command::Data { project, cmd } => data::run(&client()?, fmt, &project, cmd).await,
        Command::Audit { cmd } => audit::audit(&client()?, fmt, cmd).await,
        Command::Keys { cmd } => admin::keys(&client()?, fmt, cmd).await,
        Command::Certs {
            cmd: CertsCmd::Dev { out, hosts },
        } => {
            let cfg = config()?;
            admin::certs_dev(&cfg, out, hosts)
        }
    }
}

fn init_tracing(cfg: &Config) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&cfg.log.level))
        .with_context(|| format!("log.level = '{}' is not a valid filter", cfg.log.level))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = if cfg.log.format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    result.map_err(|e| anyhow::anyhow!("starting the logger: {e}"))
}

fn server_url(cfg: &Config) -> String {
    let scheme = if cfg.tls_enabled() { "https" } else { "http" };
    let bind = &cfg.server.bind;
    let host = bind
        .replace("0.0.0.0:", "127.0.0.1:")
        .replace("[::]:", "[::1]:");
    format!("{scheme}://{host}")
}

/// Prints the bootstrap token (once, on stderr) and stores it for the local CLI if no
/// credentials exist yet.
pub fn announce_bootstrap(cfg: &Config, token: &qanat_governance::NewToken) -> Result<()> {
    eprintln!();
    eprintln!("  Qanat initialised in {}", cfg.home.display());
    eprintln!(
        "  Bootstrap admin '{}' — API token (shown once, store it now):",
        token.info.user
    );
    eprintln!();
    eprintln!("      {}", token.token);
    eprintln!();
    if client::load_credentials()?.is_none() && !cfg.server.bind.ends_with(":0") {
        let path = client::save_credentials(&Credentials {
            server: server_url(cfg),
            token: token.token.clone(),
            ca_cert: cfg.server.tls_cert.clone(),
        })?;
        eprintln!(
            "  The CLI on this machine is logged in (credentials in {}).",
            path.display()
        );
    } else {
        eprintln!("  Log the CLI in with: qanat login --token <token>");
    }
    eprintln!();
    Ok(())
}

async fn init(cfg: Config, fmt: Format) -> Result<()> {
    let inst = server::open(&cfg, true).await?;
    let token = server::bootstrap(&cfg, &inst).await?;
    inst.meta.close().await;
    match token {
        Some(t) => {
            if fmt == Format::Json {
                println!(
                    "{}",
                    json!({"home": cfg.home, "admin": t.info.user, "token": t.token})
                );
            } else {
                announce_bootstrap(&cfg, &t)?;
            }
            Ok(())
        }
        None => bail!(
            "{} is already initialised (the bootstrap token was shown when it was created); \
             create a new token with `qanat tokens create`",
            cfg.home.display()
        ),
    }
}
