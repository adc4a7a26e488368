//! `qanat projects`.

use clap::Subcommand;
use qanat_governance::Role;

#[derive(Subcommand)]
pub enum ProjectsCmd {
    /// Create a project (global admins).
    Create {
        name: String,
        #[arg(long, default_value = "")]
        description: String,
        /// Allowed regions, comma-separated (default: the default location's region).
        #[arg(long, value_delimiter = ',')]
        regions: Option<Vec<String>>,
    },
    /// List the projects you can see.
    Ls {
        /// Deleted projects not purged yet instead (global admins).
        #[arg(long)]
        deleted: bool,
    },
    /// Show one project.
    Show { name: String },
    /// Replace a project's allowed regions (project admins).
    SetRegions {
        name: String,
        #[arg(long, value_delimiter = ',', required = true)]
        regions: Vec<String>,
    },
    /// Refuse (true) or accept and flag (false) pushes whose tables hold personal data
    /// their dataset does not declare (project admins).
    RequirePiiDeclared {
        name: String,
        #[arg(action = clap::ArgAction::Set)]
        required: bool,
    },
    /// How long the project keeps inference logs and old dataset versions (project
    /// admins): gc deletes what is older (0: keep until deleted). Each gc says what it
    /// removed.
    SetRetention {
        name: String,
        /// Days of inference logs kept: today (UTC) and the days before it.
        #[arg(
            long,
            value_name = "DAYS",
            required_unless_present = "dataset_version_days"
        )]
        inference_log_days: Option<u32>,
        /// Days a dataset version is kept after it was pushed, unless it is its
        /// dataset's latest or tagged (tag a version to keep it).
        #[arg(long, value_name = "DAYS")]
        dataset_version_days: Option<u32>,
    },
    /// Who holds the project's PII permission (personal data in clear).
    PiiReaders { name: String },
    /// Grant a user the project's PII permission (project admins; audited): personal
    /// data in clear on every path, each such read audited.
    GrantPii { project: String, user: String },
    /// Take the project's PII permission from a user (project admins).
    RevokePii { project: String, user: String },
    /// List a project's members.
    Members { name: String },
    /// Give a user a role in a project: viewer, editor, maintainer or admin.
    Grant {
        project: String,
        user: String,
        role: Role,
    },
    /// Remove a user from a project.
    Revoke { project: String, user: String },
    /// Delete a project (its admins; restorable until gc purges it).
    ///
    /// Gone for everyone at once; a global admin can restore it, and its name is kept,
    /// until gc purges it after the retention period (retention.deleted_days).
    Rm { name: String },
    /// Bring back a deleted project that gc has not purged yet (global admins).
    Restore { name: String },
}
