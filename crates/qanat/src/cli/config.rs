//! `qanat config`.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum ConfigCmd {
    /// Print the effective configuration (file + environment + defaults), secrets redacted.
    Show,
}
