//! Request and response bodies of the governance API (identities, tokens, projects,
//! members, the audit log, lineage), shared by `qanat-api` (which serves them) and
//! `qanat-client` (which sends and reads them). Plain data: no HTTP types here.

use serde::{Deserialize, Serialize};

use super::{Principal, Role, UserKind};

/// The caller's identity and the projects they can see.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WhoAmI {
    #[serde(flatten)]
    pub principal: Principal,
    pub projects: Vec<ProjectRole>,
}

/// How a command-line client logs in through the server's identity provider
/// (`qanat login --sso`): the OAuth 2.0 device authorization grant (RFC 8628) as this
/// public client, with these scopes. The client reads the provider's endpoints from
/// the issuer's own discovery document.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SsoSettings {
    pub issuer: String,
    /// The public client the CLI uses.
    pub client_id: String,
    /// Space-separated scopes to ask for.
    pub scopes: String,
}

/// A project the caller can see, and their role in it (none for a global admin who is
/// not a member).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectRole {
    pub project: String,
    pub role: Option<Role>,
}

/// A user or service account to create.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    pub name: String,
    /// `user` (default) or `service`.
    pub kind: Option<UserKind>,
    /// Global administrator.
    #[serde(default)]
    pub admin: bool,
}

/// Changes to a user; absent fields stay as they are.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateUser {
    pub admin: Option<bool>,
    pub disabled: Option<bool>,
}

/// A token to create.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// A label, e.g. `laptop` or `ci`.
    pub name: String,
    /// Whose token; default the caller. Only global admins may name someone else.
    pub user: Option<String>,
    /// Lifetime in seconds; default: no expiry.
    pub expires_in_seconds: Option<i64>,
    /// `inference`: the token may call only the inference endpoints. Default `all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<super::TokenScope>,
    /// Requests a second this token may make (a burst of one second's worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<u32>,
}

/// Whose tokens to list.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
pub struct TokenFilter {
    /// Global admins: one user's tokens, or everyone's when omitted.
    pub user: Option<String>,
}

/// Filters for reading the audit log, as a query string (times as RFC 3339 text; the
/// server turns them into `AuditQuery`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<String>,
    pub project: Option<String>,
    /// `success`, `denied` or `failure`.
    pub outcome: Option<String>,
    /// RFC 3339 time; entries at or after it.
    pub since: Option<String>,
    /// RFC 3339 time; entries before it.
    pub until: Option<String>,
    /// Entries after this sequence number, oldest first (for following the log).
    pub after_seq: Option<i64>,
    /// 1-1000, default 100.
    pub limit: Option<i64>,
}

/// A project to create.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProject {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Regions the project's bytes may live in. Default: the default location's region.
    pub allowed_regions: Option<Vec<String>>,
}

/// Changes to a project; absent fields stay as they are.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateProject {
    pub description: Option<String>,
    pub allowed_regions: Option<Vec<String>>,
    /// Refuse pushes holding personal data their dataset does not declare.
    pub require_pii_declared: Option<bool>,
    /// Days inference logs are kept (gc deletes older days); 0 keeps them until
    /// deleted.
    pub inference_log_days: Option<u32>,
    /// Days dataset versions other than each dataset's latest and its tagged ones are
    /// kept (gc removes older ones); 0 keeps them until deleted.
    pub dataset_version_days: Option<u32>,
}

/// The role to give a project member.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetMember {
    pub role: Role,
}

/// Where to start a lineage walk, and how far up to go.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::IntoParams)]
pub struct LineageParams {
    /// What to start from, e.g. `dataset:tx@3`, `dataset:tx@golden`, `model:fraud@champion`,
    /// `run:<run_id>` or `logged_model:<model_id>`.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Levels to walk up (default 10, at most 100).
    pub depth: Option<usize>,
}
