//! Identities, tokens, projects and roles, the audit log and lineage, as the API shows
//! them (`qanat-governance` keeps, checks and decides with them).

use std::fmt;

use qanat_core::{ProjectId, UserId};
use serde::{Deserialize, Serialize};

pub mod compliance;
pub mod wire;

qanat_core::word_enum! {
    /// A human user or a service account (for pipelines and jobs).
    #[derive(utoipa::ToSchema)]
    pub enum UserKind as "user kind" {
        User,
        Service,
    }
}

qanat_core::word_enum! {
    /// What a token may be used for.
    #[derive(Default, utoipa::ToSchema)]
    pub enum TokenScope as "token scope" {
        /// Everything its owner may do.
        #[default]
        All,
        /// Only the inference endpoints (the Open Inference Protocol over REST and
        /// gRPC): for the services that call deployed models.
        Inference,
        /// Only `/metrics`: for the Prometheus that scrapes the server. Only global
        /// admins create them.
        Metrics,
    }
}

/// An identity.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct User {
    #[schema(value_type = String)]
    pub id: UserId,
    pub name: String,
    pub kind: UserKind,
    pub is_admin: bool,
    pub disabled: bool,
    /// RFC 3339, UTC.
    pub created_at: String,
}

/// The authenticated caller of a request.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Principal {
    #[schema(value_type = String)]
    pub user_id: UserId,
    pub name: String,
    pub kind: UserKind,
    pub is_admin: bool,
    pub token_id: String,
    /// What the token may be used for.
    #[serde(default)]
    pub scope: TokenScope,
    /// The token's rate limit, in requests per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<u32>,
    /// Who the identity provider says this is, for a person it vouches for (single
    /// sign-on); `None` for local users and service accounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderIdentity>,
}

/// A person as an OpenID provider names them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProviderIdentity {
    /// The provider's issuer URL.
    pub issuer: String,
    /// The provider's stable id of the person (`sub`).
    pub subject: String,
}

/// A token as listed: never the secret.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenInfo {
    pub id: String,
    pub user: String,
    pub name: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
    pub last_used_at: Option<String>,
    #[serde(default)]
    pub scope: TokenScope,
    /// Requests per second, when limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<u32>,
}

/// A freshly created token: the only time the secret exists outside the caller.
#[derive(Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NewToken {
    #[serde(flatten)]
    pub info: TokenInfo,
    /// The secret. Shown once; store it now.
    pub token: String,
}

impl fmt::Debug for NewToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewToken")
            .field("info", &self.info)
            .field("token", &"<redacted>")
            .finish()
    }
}

qanat_core::word_enum! {
    /// A member's role in a project. Each role includes the ones below it.
    #[derive(PartialOrd, Ord, utoipa::ToSchema)]
    pub enum Role as "role" {
        /// Reads everything in the project.
        Viewer,
        /// Writes objects: datasets, runs, artifacts, features.
        Editor,
        /// Manages deployments, aliases and members.
        Maintainer,
        /// Everything, including the project's policies (regions, PII rules).
        Admin,
    }
}

/// A project: its objects, its members, its residency policy.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Project {
    #[schema(value_type = String)]
    pub id: ProjectId,
    pub name: String,
    pub description: String,
    /// Regions this project's bytes may be stored in.
    pub allowed_regions: Vec<String>,
    /// Whether a push whose tables hold personal data its dataset does not declare is
    /// refused (otherwise it is accepted and flagged).
    #[serde(default)]
    pub require_pii_declared: bool,
    /// Days its deployments' inference logs are kept (gc deletes older days); none:
    /// until deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_log_days: Option<u32>,
    /// Days dataset versions that are neither their dataset's latest nor tagged are
    /// kept (gc removes older ones); none: until deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_version_days: Option<u32>,
    pub created_at: String,
    pub created_by: String,
    /// When it was deleted (only deleted projects, listed by global admins, have it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<String>,
}

/// Someone granted the project's PII permission: personal data in clear.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PiiReader {
    pub user: String,
    pub granted_by: String,
    pub granted_at: String,
}

/// A project member and their role.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Member {
    pub user: String,
    pub role: Role,
    pub created_at: String,
}

/// A stored entry.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditEntry {
    pub seq: i64,
    /// RFC 3339, UTC, microseconds.
    pub time: String,
    pub request_id: String,
    pub actor: String,
    pub action: String,
    pub resource: String,
    pub project: Option<String>,
    pub outcome: String,
    pub detail: String,
    pub prev_hash: String,
    pub hash: String,
}

/// One thing wrong with the chain.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChainProblem {
    pub seq: i64,
    /// `changed`, `missing`, `broken_link` or `truncated`.
    pub kind: String,
    pub message: String,
}

/// The result of checking the whole chain.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditVerification {
    pub ok: bool,
    pub entries_checked: u64,
    pub head_seq: i64,
    pub problems: Vec<ChainProblem>,
}

/// The chain's head at one moment, signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditCheckpoint {
    pub seq: i64,
    pub hash: String,
    /// RFC 3339, UTC.
    pub time: String,
    /// The master key the MAC's key was derived from.
    pub key_id: String,
    pub mac: String,
}

/// What checking checkpoints against the chain found.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CheckpointVerification {
    pub ok: bool,
    pub checkpoints_checked: usize,
    pub head_seq: i64,
    /// One line per problem, e.g. a truncation below a checkpoint.
    pub problems: Vec<String>,
}

/// One edge: `child` came from `parent` by `relation`.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
pub struct LineageEdge {
    pub child: String,
    pub parent: String,
    /// `previous_version`, `derived_from`, `produced_by` (a user), `trained_on` (run →
    /// dataset version), `output_of` (logged model or model version → run) or
    /// `registers` (model version → logged model).
    pub relation: String,
}

/// The upstream graph of one object.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LineageGraph {
    pub root: String,
    pub edges: Vec<LineageEdge>,
    /// True when the walk stopped at the depth limit with parents left unvisited.
    pub truncated: bool,
}
