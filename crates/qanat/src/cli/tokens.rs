//! `qanat tokens`.

use clap::Subcommand;

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
