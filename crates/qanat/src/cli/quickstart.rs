//! `qanat quickstart`.

use clap::Args;

use super::ServerArgs;

#[derive(Args)]
pub struct QuickstartArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Stop the server once the lifecycle has run, instead of serving on.
    #[arg(long)]
    pub exit: bool,
}
