//! Qanat's governance core: who is calling, what they may do, and the record of it.
//!
//! * Identities ([`User`], human or service account) authenticate with API tokens: 256
//!   random bits, shown once, stored only as a SHA-256 hash, with expiry and revocation.
//! * Projects are the unit of isolation; each member holds one [`Role`] (viewer < editor <
//!   maintainer < admin), and global admins may do everything. [`authorize`] is the one
//!   decision function every API route goes through.
//! * The audit log is an append-only hash chain: each entry carries the hash of the one
//!   before, so [`Governance::verify_audit`] finds an entry changed, deleted or reordered.
//! * Residency: each project lists the regions its bytes may live in;
//!   [`check_residency`] refuses a write anywhere else.
//!
//! Nothing here knows about HTTP; `qanat-api` maps these decisions onto requests.

mod audit;
mod cache;
mod checkpoint;
mod error;
mod external;
mod identity;
pub mod jwt;
pub mod lineage;
mod oidc;
mod projects;
mod rbac;
mod residency;
mod sso;

#[cfg(feature = "testing")]
pub mod testing;

pub use audit::{append_audit_in, commit_audited, AuditOutcome, AuditRecord, SERVICE_ACTOR_PREFIX};
pub use cache::{auth_changed, TTL as AUTH_CACHE_TTL};
pub use error::Error;
pub use external::{ExternalIdentity, GroupRole, RoleMapping, RoleSource};
pub use identity::{TokenGrant, MAX_RATE_LIMIT};
pub use oidc::{
    constant_eq, pkce_challenge, random_token, ClientSecret, Discovery, Oidc, OidcConfig, SsoLogin,
    TokenRefusal, TokenResponse,
};
pub use qanat_types::governance::{
    compliance, wire, AuditCheckpoint, AuditEntry, AuditVerification, ChainProblem,
    CheckpointVerification, LineageEdge, LineageGraph, Member, NewToken, PiiReader, Principal,
    Project, ProviderIdentity, Role, TokenInfo, TokenScope, User, UserKind,
};
pub use rbac::{authorize, Decision, Requirement};
pub use residency::check_residency;

/// This domain's tables: identities and tokens, projects and members, the audit chain, and the data keys of encryption at rest (0001).
/// A schema that lists it applies them (see `qanat_store::migrations`).
pub static MIGRATIONS: qanat_store::migrations::DomainMigrations = qanat_store::domain_migrations!(
    "governance",
    [
        "0001_foundation.sql",
        "0005_object_index.sql",
        "0006_project_deletion.sql",
        "0011_audit_chain_guard.sql",
        "0013_token_scope.sql",
        "0017_external_identities.sql",
        "0018_sso_sessions.sql",
        "0020_pii_policy.sql",
        "0022_dataset_version_retention.sql",
    ]
);

use qanat_core::cache::Cache;
use qanat_core::UserId;
use qanat_store::MetaStore;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Governance over one metadata store. Cheap to clone.
#[derive(Clone)]
pub struct Governance {
    meta: MetaStore,
    audit: std::sync::Arc<audit::AuditBatcher>,
    /// Accepted tokens by secret hash.
    principals: std::sync::Arc<Cache<String, identity::CachedToken>>,
    /// (user, project name) → the project and the user's role in it.
    scopes: std::sync::Arc<Cache<(UserId, String), Scope>>,
    /// (user, project id) → whether the user holds the project's PII permission.
    pii: std::sync::Arc<Cache<(UserId, String), bool>>,
    /// The OpenID provider whose access tokens are accepted beside Qanat's, if any.
    oidc: Option<Oidc>,
    /// Seals the refresh tokens single sign-on sessions keep.
    keys: Option<qanat_store::Keyring>,
}

/// A project and a caller's role in it.
type Scope = (Project, Option<(Role, RoleSource)>);

impl std::fmt::Debug for Governance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Governance")
            .field("meta", &self.meta)
            .finish_non_exhaustive()
    }
}

impl Governance {
    pub fn new(meta: MetaStore) -> Self {
        Governance {
            meta,
            audit: Default::default(),
            principals: cache::new(),
            scopes: cache::new(),
            pii: cache::new(),
            oidc: None,
            keys: None,
        }
    }

    /// Accepts `oidc`'s access tokens as bearer tokens too, and signs people in
    /// through it; `keys` seal the refresh tokens of their sessions.
    pub fn with_oidc(mut self, oidc: Oidc, keys: qanat_store::Keyring) -> Self {
        self.oidc = Some(oidc);
        self.keys = Some(keys);
        self
    }

    /// The OpenID provider, when single sign-on is configured.
    pub fn oidc(&self) -> Option<&Oidc> {
        self.oidc.as_ref()
    }

    pub fn meta(&self) -> &MetaStore {
        &self.meta
    }
}
