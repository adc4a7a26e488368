//! `qanat projects`.

use clap::Subcommand;

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
    Ls,
    /// Show one project.
    Show { name: String },
    /// Replace a project's allowed regions (project admins).
    SetRegions {
        name: String,
        #[arg(long, value_delimiter = ',', required = true)]
        regions: Vec<String>,
    },
    /// List a project's members.
    Members { name: String },
    /// Give a user a role in a project: viewer, editor, maintainer or admin.
    Grant {
        project: String,
        user: String,
        role: String,
    },
    /// Remove a user from a project.
    Revoke { project: String, user: String },
}
