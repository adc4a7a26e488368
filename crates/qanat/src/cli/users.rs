//! `qanat users`.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum UsersCmd {
    /// Create a user or a service account (global admins).
    Create {
        name: String,
        /// A service account (for pipelines and jobs) instead of a person.
        #[arg(long)]
        service: bool,
        /// Make them a global administrator.
        #[arg(long)]
        admin: bool,
    },
    /// List users.
    Ls,
    /// Disable a user: their tokens stop working at once.
    Disable { name: String },
    /// Re-enable a disabled user.
    Enable { name: String },
    /// Grant or remove global admin rights.
    SetAdmin {
        name: String,
        #[arg(action = clap::ArgAction::Set)]
        admin: bool,
    },
}
