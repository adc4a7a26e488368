//! `qanat lineage`.

use clap::Args;
use qanat_core::ObjectRef;

#[derive(Args)]
pub struct LineageArgs {
    /// The project.
    #[arg(long, short = 'p', env = "QANAT_PROJECT")]
    pub project: String,
    /// dataset:<name>@<version|tag>, model:<name>@<version|alias>, run:<id> or
    /// logged_model:<id>.
    pub reference: ObjectRef,
    /// Levels to walk up.
    #[arg(long, default_value_t = 10)]
    pub depth: usize,
}
