//! `qanat certs`.

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum CertsCmd {
    /// Write a self-signed certificate and key for localhost (development only).
    Dev {
        /// Directory to write to (default: <home>/tls).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Extra host names or IPs to include.
        #[arg(long = "host")]
        hosts: Vec<String>,
    },
}
