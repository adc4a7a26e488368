//! `qanat init`, and the bootstrap announcement `qanat server` shares with it.

use anyhow::{bail, Result};
use serde::Serialize;

use crate::cli::Format;
use crate::config::Config;
use crate::credentials::{self, Login};
use crate::server;

/// What `qanat init --output json` prints.
#[derive(Serialize)]
struct Initialised<'a> {
    home: &'a std::path::Path,
    admin: &'a str,
    token: &'a str,
}

pub async fn run(cfg: &Config, format: Format) -> Result<()> {
    let inst = server::open(cfg, true).await?;
    let token = server::bootstrap(cfg, &inst).await?;
    inst.meta.close().await;
    let Some(t) = token else {
        bail!(
            "{} is already initialised (the bootstrap token was shown when it was created); \
             create a new token with `qanat tokens create`",
            cfg.home.display()
        );
    };
    if format == Format::Json {
        // One line: scripts (and the tests) read it as they read any JSON.
        println!(
            "{}",
            serde_json::to_string(&Initialised {
                home: &cfg.home,
                admin: &t.info.user,
                token: &t.token,
            })?
        );
        return Ok(());
    }
    announce_bootstrap(cfg, &t)
}

/// The URL the local CLI reaches a server bound as configured at.
pub fn server_url(cfg: &Config) -> String {
    let scheme = if cfg.tls_enabled() { "https" } else { "http" };
    let host = cfg
        .server
        .bind
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
    let url = server_url(cfg);
    let known = credentials::load_credentials()?.is_some_and(|c| c.login(&url).is_some());
    if !known && !cfg.server.bind.ends_with(":0") {
        let path = credentials::remember(
            &url,
            Login {
                token: token.token.clone(),
                ca_cert: cfg.server.tls_cert.clone(),
                sso: None,
            },
        )?;
        eprintln!(
            "  The CLI on this machine is logged in to {url} (credentials in {}).",
            path.display()
        );
    } else {
        // A login to this address exists (a server before this one?): kept, and said.
        eprintln!("  Log the CLI in with: qanat login --server {url} --token <token>");
    }
    eprintln!();
    Ok(())
}
