//! `qanat server`: logging, then the server itself (`crate::server`).

use anyhow::{Context, Result};

use crate::config::Config;

pub async fn run(cfg: Config) -> Result<()> {
    init_tracing(&cfg)?;
    crate::server::serve(cfg).await
}

/// `qanat serve`.
pub async fn run_data_plane(cfg: Config) -> Result<()> {
    init_tracing(&cfg)?;
    crate::server::serve_data_plane(cfg).await
}

pub(crate) fn init_tracing(cfg: &Config) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&cfg.log.level))
        .with_context(|| format!("log.level = '{}' is not a valid filter", cfg.log.level))?;
    use std::io::IsTerminal;
    let terminal = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal, never in a file or a collector's pipe.
        .with_ansi(terminal);
    let json = match cfg.log.format.as_str() {
        "json" => true,
        "text" => false,
        _ => !terminal,
    };
    let result = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    result.map_err(|e| anyhow::anyhow!("starting the logger: {e}"))
}
