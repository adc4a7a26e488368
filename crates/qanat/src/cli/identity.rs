//! `qanat users` and `qanat tokens`.

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

#[derive(Subcommand)]
pub enum TokensCmd {
    /// Create a token; the secret is printed once.
    Create {
        /// A label, e.g. laptop or ci.
        #[arg(long, default_value = "cli")]
        name: String,
        /// Whose token (global admins only; default: you).
        #[arg(long)]
        user: Option<String>,
        /// Lifetime, e.g. 12h, 30d (default: no expiry).
        #[arg(long)]
        expires_in: Option<humantime::Duration>,
    },
    /// List tokens (yours; global admins: anyone's).
    Ls {
        #[arg(long)]
        user: Option<String>,
    },
    /// Revoke a token by id.
    Revoke { id: String },
}
