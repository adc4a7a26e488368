//! `qanat keys`.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum KeysCmd {
    /// Rotate the master key (re-wraps data keys; objects are not rewritten).
    Rotate,
    /// Show master key ids and their source.
    Status,
}
