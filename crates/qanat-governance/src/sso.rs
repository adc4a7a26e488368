//! Single sign-on logins and the sessions they open.
//!
//! The web UI logs a person in through the provider's authorization code flow
//! ([`Governance::sign_in_with_code`]); the session it then opens is a Qanat token like
//! any other (so logging out, revoking and disabling end it), tied here to the login
//! that opened it ([`Governance::keep_sso_session`]): the provider's refresh token,
//! sealed at rest, and when to check the person again. At that moment — at most
//! [`crate::OidcConfig::session_check_secs`] after the last check — the next request
//! of the session refreshes at the provider: a refusal (the person was disabled or
//! removed there, or their grant revoked) ends the session, and the new ID token's
//! groups are applied, so a group change reaches a session without a new login.

use qanat_core::UserId;
use qanat_store::now_micros;
use sqlx::Row;

use crate::{Error, Governance, Principal, Result, TokenRefusal, TokenResponse};

/// What the refresh token is sealed for (bound into its ciphertext).
const PURPOSE: &str = "sso-refresh-token";
/// How long a claimed check keeps other requests from starting one (a check that
/// dies leaves the session due again after this).
const CHECK_LEASE_MICROS: i64 = 60_000_000;

/// A person signed in through the provider, with the tokens of the login.
#[derive(Debug)]
pub struct SsoLogin {
    pub principal: Principal,
    pub tokens: TokenResponse,
}

impl Governance {
    fn sso(&self) -> Result<&crate::Oidc> {
        self.oidc.as_ref().ok_or_else(|| {
            Error::Unauthenticated(
                "single sign-on is not configured on this server ([security.oidc])".into(),
            )
        })
    }

    /// Signs a person in with the authorization code the provider sent back, the PKCE
    /// verifier and the nonce of the login that asked for it: the code traded for
    /// tokens, the ID token verified (signature, issuer, this client as audience,
    /// expiry, nonce), the person provisioned or found and their groups' roles applied.
    #[qanat_macros::boxed]
    pub async fn sign_in_with_code(
        &self,
        code: &str,
        verifier: &str,
        redirect_uri: &str,
        nonce: &str,
    ) -> Result<SsoLogin> {
        let oidc = self.sso()?;
        let tokens = oidc
            .exchange_code(code, verifier, redirect_uri)
            .await
            .map_err(|e| {
                Error::Unauthenticated(format!("the login could not be completed: {e}"))
            })?;
        let id = oidc.login_identity(&tokens, Some(nonce)).await?.ok_or_else(|| {
            Error::Unauthenticated(
                "the provider's answer has no ID token: the login must ask for the 'openid' scope (security.oidc.scopes)".into(),
            )
        })?;
        let principal = self.sign_in_external(&id, &oidc.config().mapping).await?;
        Ok(SsoLogin { principal, tokens })
    }

    /// Ties the session token `token_id` to the single sign-on login that opened it:
    /// its refresh token (sealed), checked again at the provider after
    /// `session_check_secs`. Without a refresh token the session ends at that check.
    #[qanat_macros::boxed]
    pub async fn keep_sso_session(
        &self,
        token_id: &str,
        user_id: &UserId,
        refresh_token: Option<&str>,
    ) -> Result<()> {
        let oidc = self.sso()?;
        let sealed = match (refresh_token, &self.keys) {
            (Some(rt), Some(keys)) => Some(keys.seal(&self.meta, PURPOSE, rt.as_bytes()).await?),
            _ => None,
        };
        let now = now_micros();
        sqlx::query(
            "INSERT INTO sso_sessions (token_id, user_id, refresh_sealed, check_at, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(token_id)
        .bind(user_id)
        .bind(&sealed)
        .bind(now + oidc.config().session_check_secs.saturating_mul(1_000_000))
        .bind(now)
        .execute(self.meta.writer())
        .await?;
        Ok(())
    }

    /// Checks the single sign-on session `token_id` again at the provider, when it is
    /// due (see the module's documentation). An error refuses the request; a session
    /// the provider no longer accepts is ended (its token revoked).
    ///
    /// The check is claimed in the database first (one request of one server does
    /// it; the others go on meanwhile), and runs in a task of its own, so that a
    /// request the client abandons cannot lose a refresh token the provider has just
    /// rotated.
    #[qanat_macros::boxed]
    pub(crate) async fn recheck_sso_session(&self, token_id: &str) -> Result<()> {
        let now = now_micros();
        let claimed = sqlx::query(
            "UPDATE sso_sessions SET check_at = $1 WHERE token_id = $2 AND check_at <= $3",
        )
        .bind(now + CHECK_LEASE_MICROS)
        .bind(token_id)
        .bind(now)
        .execute(self.meta.writer())
        .await?
        .rows_affected();
        if claimed == 0 {
            return Ok(()); // another request is checking it, or just did
        }
        let gov = self.clone();
        let id = token_id.to_string();
        match tokio::spawn(async move { gov.recheck_claimed(&id).await }).await {
            Ok(r) => r,
            Err(e) => Err(Error::ProviderUnavailable(format!(
                "the session's check stopped: {e}"
            ))),
        }
    }

    #[qanat_macros::boxed]
    async fn recheck_claimed(&self, token_id: &str) -> Result<()> {
        let Some(row) = sqlx::query(
            "SELECT s.refresh_sealed, u.subject FROM sso_sessions s JOIN users u ON u.id = s.user_id WHERE s.token_id = $1",
        )
        .bind(token_id)
        .fetch_optional(self.meta.writer())
        .await?
        else {
            return Ok(());
        };
        let sealed: Option<String> = row.try_get("refresh_sealed")?;
        let subject: Option<String> = row.try_get("subject")?;
        let Some(oidc) = self.oidc.as_ref() else {
            return self
                .end_sso_session(
                    token_id,
                    sealed.as_deref(),
                    "single sign-on is no longer configured on this server; log in again",
                )
                .await;
        };
        let (Some(sealed_rt), Some(keys)) = (sealed.as_deref(), &self.keys) else {
            return self
                .end_sso_session(
                    token_id,
                    None,
                    "the identity provider gave this session no refresh token, so it ends at its first check; log in again",
                )
                .await;
        };
        let rt = String::from_utf8(keys.open(&self.meta, PURPOSE, sealed_rt).await?)
            .map_err(|_| Error::Unauthenticated("a session's refresh token is damaged".into()))?;
        let tokens = match oidc.refresh(&rt).await {
            Ok(t) => t,
            Err(TokenRefusal::Refused(why)) => {
                return self
                    .end_sso_session(
                        token_id,
                        Some(sealed_rt),
                        &format!(
                            "the identity provider no longer accepts this session ({why}); log in again"
                        ),
                    )
                    .await
            }
            Err(e @ TokenRefusal::Unreachable(_)) => {
                self.check_again_soon(token_id).await?;
                return Err(Error::ProviderUnavailable(format!(
                    "this session is due to be checked again and {e}; try again shortly (Qanat tokens still work)"
                )));
            }
        };
        // The new refresh token is kept before anything else can fail: the old one
        // may already be spent.
        let sealed_now = match tokens.refresh_token.as_deref() {
            Some(new) if new != rt => {
                let s = keys.seal(&self.meta, PURPOSE, new.as_bytes()).await?;
                sqlx::query("UPDATE sso_sessions SET refresh_sealed = $1 WHERE token_id = $2")
                    .bind(&s)
                    .bind(token_id)
                    .execute(self.meta.writer())
                    .await?;
                keys.forget(&self.meta, sealed_rt).await.ok();
                s
            }
            _ => sealed_rt.to_string(),
        };
        let id = match oidc.login_identity(&tokens, None).await {
            Ok(id) => id,
            Err(e @ Error::ProviderUnavailable(_)) => {
                self.check_again_soon(token_id).await?;
                return Err(e);
            }
            Err(e) => {
                return self
                    .end_sso_session(token_id, Some(&sealed_now), &e.to_string())
                    .await
            }
        };
        if let Some(id) = id {
            if subject.as_deref() != Some(id.subject.as_str()) {
                return self
                    .end_sso_session(
                        token_id,
                        Some(&sealed_now),
                        "the identity provider's refreshed tokens name another person; log in again",
                    )
                    .await;
            }
            // Roles as the groups say now; refused (and the session ended) when the
            // user was disabled in Qanat meanwhile.
            match self.sign_in_external(&id, &oidc.config().mapping).await {
                Ok(_) => {}
                Err(e @ (Error::Unauthenticated(_) | Error::Forbidden(_))) => {
                    return self
                        .end_sso_session(token_id, Some(&sealed_now), &e.to_string())
                        .await
                }
                Err(e) => {
                    self.check_again_soon(token_id).await?;
                    return Err(e);
                }
            }
        }
        sqlx::query("UPDATE sso_sessions SET check_at = $1 WHERE token_id = $2")
            .bind(now_micros() + oidc.config().session_check_secs.saturating_mul(1_000_000))
            .bind(token_id)
            .execute(self.meta.writer())
            .await?;
        Ok(())
    }

    /// A check that could not be finished is due again at once (not after the lease).
    async fn check_again_soon(&self, token_id: &str) -> Result<()> {
        sqlx::query("UPDATE sso_sessions SET check_at = $1 WHERE token_id = $2")
            .bind(now_micros())
            .bind(token_id)
            .execute(self.meta.writer())
            .await?;
        Ok(())
    }

    /// Forgets the single sign-on login behind the session token `token_id` (at
    /// logout, after its token is revoked): the row, and the key of its sealed refresh
    /// token. Nothing to do for other tokens.
    #[qanat_macros::boxed]
    pub async fn forget_sso_session(&self, token_id: &str) -> Result<()> {
        let sealed: Option<Option<String>> =
            sqlx::query_scalar("SELECT refresh_sealed FROM sso_sessions WHERE token_id = $1")
                .bind(token_id)
                .fetch_optional(self.meta.writer())
                .await?;
        sqlx::query("DELETE FROM sso_sessions WHERE token_id = $1")
            .bind(token_id)
            .execute(self.meta.writer())
            .await?;
        if let (Some(Some(s)), Some(keys)) = (sealed, &self.keys) {
            keys.forget(&self.meta, &s).await.ok();
        }
        Ok(())
    }

    /// Ends a session the provider no longer vouches for: its token revoked, its
    /// sealed refresh token's key forgotten. Always the refusal `why`.
    async fn end_sso_session(&self, token_id: &str, sealed: Option<&str>, why: &str) -> Result<()> {
        // The row goes only with the token: a session whose token could not be
        // revoked stays due for its check.
        self.revoke_token(token_id).await?;
        sqlx::query("DELETE FROM sso_sessions WHERE token_id = $1")
            .bind(token_id)
            .execute(self.meta.writer())
            .await?;
        if let (Some(s), Some(keys)) = (sealed, &self.keys) {
            keys.forget(&self.meta, s).await.ok();
        }
        Err(Error::Unauthenticated(why.to_string()))
    }
}
