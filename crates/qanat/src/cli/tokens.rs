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
        /// inference: the token may call only the inference endpoints (REST and
        /// gRPC), e.g. for a service that calls deployed models.
        #[arg(long, value_parser = ["all", "inference"])]
        scope: Option<String>,
        /// Requests a second the token may make (a burst of one second's worth);
        /// more get 429.
        #[arg(long, value_name = "PER_SECOND")]
        rate_limit: Option<u32>,
    },
    /// List tokens (yours; global admins: anyone's).
    Ls {
        #[arg(long)]
        user: Option<String>,
    },
    /// Revoke a token by id.
    Revoke { id: String },
}
