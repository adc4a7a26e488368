//! `qanat server`.

use clap::Args;

#[derive(Args)]
pub struct ServerArgs {
    /// Address to listen on, e.g. 0.0.0.0:8080 (overrides server.bind and
    /// QANAT_SERVER_BIND).
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,
    /// Port to listen on, keeping the configured host (0 picks a free port).
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
}
