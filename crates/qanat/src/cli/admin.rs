//! `qanat config`, `qanat keys`, `qanat certs`: the installation itself.

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum ConfigCmd {
    /// Print the effective configuration (file + environment + defaults), secrets redacted.
    Show,
}

#[derive(Subcommand)]
pub enum KeysCmd {
    /// Rotate the master key (re-wraps data keys; objects are not rewritten).
    Rotate,
    /// Show master key ids and their source.
    Status,
}

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
