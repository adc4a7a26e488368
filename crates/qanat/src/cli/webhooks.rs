//! `qanat webhooks`.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum WebhooksCmd {
    /// The project's webhooks (create and change them with the mlflow client).
    Ls,
    /// Deliveries, newest first, with their attempts: one webhook's, or with --all
    /// every delivery of the project (NATS publishes too).
    Deliveries {
        /// The webhook's id (see `qanat webhooks ls`).
        #[arg(required_unless_present = "all")]
        webhook_id: Option<String>,
        #[arg(long, conflicts_with = "webhook_id")]
        all: bool,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
}
