//! `qanat audit`.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum AuditCmd {
    /// Show the newest entries (and keep following with --follow).
    Tail {
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: i64,
        #[arg(long)]
        follow: bool,
        #[arg(long)]
        actor: Option<String>,
        #[arg(long)]
        action: Option<String>,
        #[arg(long)]
        project: Option<String>,
        /// success, denied or failure.
        #[arg(long)]
        outcome: Option<String>,
        /// RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
    },
    /// Recompute the hash chain; exits non-zero if any entry was changed, deleted or moved.
    /// With --checkpoint, also check the signed checkpoints of an audit sink file
    /// (`audit.file`), which catches a log truncated below any of them.
    Verify {
        #[arg(long, value_name = "FILE")]
        checkpoint: Option<std::path::PathBuf>,
    },
}
