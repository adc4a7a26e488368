//! `qanat compliance`.

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum ComplianceCmd {
    /// The compliance report: where data lives (locations, regions, bytes per
    /// project), the personal data held and how it is protected, residency refusals,
    /// reads of personal data in clear, retention and gc, keys, and the audit chain's
    /// verification. The whole installation (global admins) or one project (its
    /// admins); --output json for every figure, --html FILE for a page to hand over.
    Report {
        /// One project only.
        #[arg(long, short = 'p')]
        project: Option<String>,
        /// Start of the audit period, RFC 3339 (default: 30 days before --until).
        #[arg(long)]
        since: Option<String>,
        /// End of the audit period, RFC 3339 (default: now).
        #[arg(long)]
        until: Option<String>,
        /// Also write the report as an HTML page to FILE.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
    },
}
