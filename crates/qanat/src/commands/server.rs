//! `qanat server`: logging, then the server itself (`crate::server`).

use anyhow::{Context, Result};

use crate::config::Config;

pub async fn run(cfg: Config) -> Result<()> {
    init_tracing(&cfg)?;
    crate::server::serve(cfg).await
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
