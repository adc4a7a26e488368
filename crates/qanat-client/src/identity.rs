//! Who-am-I, users, tokens, the audit log and master keys.

use qanat_types::governance::wire::{
    AuditFilter, CreateToken, CreateUser, TokenFilter, UpdateUser, WhoAmI,
};
use qanat_types::governance::{
    AuditCheckpoint, AuditEntry, AuditVerification, CheckpointVerification, NewToken, TokenInfo,
    User,
};
use qanat_types::store::wire::{KeyStatus, RotationView};
use reqwest::Method;

use crate::{seg, Client, Result};

impl Client {
    /// The caller's identity and projects (`GET /api/v1/whoami`).
    #[qanat_macros::boxed]
    pub async fn whoami(&self) -> Result<WhoAmI> {
        self.get("/api/v1/whoami").await
    }

    /// How to log in through the server's identity provider (no token needed).
    #[qanat_macros::boxed]
    pub async fn sso_settings(&self) -> Result<qanat_types::governance::wire::SsoSettings> {
        self.get("/api/v1/auth/sso").await
    }

    /// Creates a user or service account (global admins).
    #[qanat_macros::boxed]
    pub async fn create_user(&self, user: &CreateUser) -> Result<User> {
        self.with_body(Method::POST, "/api/v1/users", user).await
    }

    /// Every user (global admins).
    #[qanat_macros::boxed]
    pub async fn users(&self) -> Result<Vec<User>> {
        self.get("/api/v1/users").await
    }

    /// Grants or removes global admin, disables or re-enables (global admins).
    #[qanat_macros::boxed]
    pub async fn update_user(&self, name: &str, change: &UpdateUser) -> Result<User> {
        let path = format!("/api/v1/users/{}", seg(name));
        self.with_body(Method::PATCH, &path, change).await
    }

    /// Creates a token; the secret is in the answer and nowhere else.
    #[qanat_macros::boxed]
    pub async fn create_token(&self, token: &CreateToken) -> Result<NewToken> {
        self.with_body(Method::POST, "/api/v1/tokens", token).await
    }

    /// Tokens: the caller's, or (global admins) anyone's.
    #[qanat_macros::boxed]
    pub async fn tokens(&self, filter: &TokenFilter) -> Result<Vec<TokenInfo>> {
        self.get_query("/api/v1/tokens", filter).await
    }

    /// Revokes a token by id.
    #[qanat_macros::boxed]
    pub async fn revoke_token(&self, id: &str) -> Result<TokenInfo> {
        let path = format!("/api/v1/tokens/{}", seg(id));
        self.json(self.request(Method::DELETE, &path), &path).await
    }

    /// Audit entries matching `filter`, oldest first (global admins).
    #[qanat_macros::boxed]
    pub async fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>> {
        self.get_query("/api/v1/audit", filter).await
    }

    /// Recomputes the audit hash chain (global admins).
    #[qanat_macros::boxed]
    pub async fn verify_audit(&self) -> Result<AuditVerification> {
        self.get("/api/v1/audit/verify").await
    }

    /// Checks checkpoints kept outside the database against the chain (global admins).
    #[qanat_macros::boxed]
    pub async fn verify_checkpoints(
        &self,
        checkpoints: &[AuditCheckpoint],
    ) -> Result<CheckpointVerification> {
        self.with_body(
            Method::POST,
            "/api/v1/audit/verify-checkpoints",
            &checkpoints,
        )
        .await
    }

    /// Master key ids and where they come from (global admins).
    #[qanat_macros::boxed]
    pub async fn keys(&self) -> Result<KeyStatus> {
        self.get("/api/v1/admin/keys").await
    }

    /// Rotates the master key (global admins).
    #[qanat_macros::boxed]
    pub async fn rotate_keys(&self) -> Result<RotationView> {
        let path = "/api/v1/admin/keys/rotate";
        self.json(self.request(Method::POST, path), path).await
    }
}
