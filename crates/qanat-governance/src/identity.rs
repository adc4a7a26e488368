//! Users, service accounts and their API tokens.
//!
//! A token reads `qnt_<43 base64url chars>`: 256 random bits. Only its SHA-256 is
//! stored; a salted slow hash buys nothing for a secret with 256 bits of entropy, and a
//! plain hash lets a request find its token with one indexed lookup.

use base64::Engine as _;
use qanat_store::{now_micros, Micros};
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::{Error, Governance, Result};
use crate::{NewToken, Principal, TokenInfo, TokenScope, User, UserKind};

const TOKEN_PREFIX: &str = "qnt_";
/// `last_used_at` is refreshed at most this often, to keep reads from becoming writes.
const LAST_USED_GRANULARITY: Micros = 60_000_000;

/// The most requests a second a token's rate limit may allow.
pub const MAX_RATE_LIMIT: u32 = 1_000_000;

/// What a new token may do, beyond its owner's permissions.
#[derive(Debug, Clone, Default)]
pub struct TokenGrant {
    /// Valid until then (micros), if given.
    pub expires_at: Option<Micros>,
    pub scope: TokenScope,
    /// Requests per second (a burst of one second's worth), if limited.
    pub rate_limit: Option<u32>,
}

pub(crate) use qanat_store::format_micros as rfc3339;

fn hash_secret(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn user_from_row(row: &AnyRow) -> Result<User> {
    Ok(User {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        kind: row.try_get::<String, _>("kind")?.parse()?,
        is_admin: row.try_get::<i64, _>("is_admin")? != 0,
        disabled: row.try_get::<i64, _>("disabled")? != 0,
        created_at: rfc3339(row.try_get("created_at")?),
    })
}

fn token_from_row(row: &AnyRow) -> Result<TokenInfo> {
    Ok(TokenInfo {
        id: row.try_get("id")?,
        user: row.try_get("user_name")?,
        name: row.try_get("name")?,
        created_at: rfc3339(row.try_get("created_at")?),
        expires_at: row.try_get::<Option<i64>, _>("expires_at")?.map(rfc3339),
        revoked_at: row.try_get::<Option<i64>, _>("revoked_at")?.map(rfc3339),
        last_used_at: row.try_get::<Option<i64>, _>("last_used_at")?.map(rfc3339),
        scope: row.try_get::<String, _>("scope")?.parse()?,
        rate_limit: rate_limit(row)?,
    })
}

fn rate_limit(row: &AnyRow) -> Result<Option<u32>> {
    Ok(row
        .try_get::<Option<i64>, _>("rate_limit")?
        .map(|r| u32::try_from(r).unwrap_or(MAX_RATE_LIMIT)))
}

const TOKEN_COLUMNS: &str =
    "t.id, u.name AS user_name, t.name, t.created_at, t.expires_at, t.revoked_at, t.last_used_at, t.scope, t.rate_limit";

impl Governance {
    /// Creates a user or service account.
    #[qanat_macros::boxed]
    pub async fn create_user(&self, name: &str, kind: UserKind, is_admin: bool) -> Result<User> {
        qanat_core::IdentityName::parse_as("user name", name)?;
        let id = format!("usr_{}", uuid::Uuid::new_v4().simple());
        let now = now_micros();
        let res = sqlx::query(
            "INSERT INTO users (id, name, kind, is_admin, disabled, created_at) VALUES ($1, $2, $3, $4, 0, $5)",
        )
        .bind(&id)
        .bind(name)
        .bind(kind.as_str())
        .bind(i64::from(is_admin))
        .bind(now)
        .execute(self.meta.writer())
        .await;
        match res {
            Ok(_) => {}
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Err(Error::already_exists("user", name))
            }
            Err(e) => return Err(e.into()),
        }
        self.user(name).await
    }

    /// Looks a user up by name.
    #[qanat_macros::boxed]
    pub async fn user(&self, name: &str) -> Result<User> {
        let row = sqlx::query("SELECT * FROM users WHERE name = $1")
            .bind(name)
            .fetch_optional(self.meta.reader())
            .await?
            .ok_or_else(|| Error::not_found("user", name))?;
        user_from_row(&row)
    }

    /// Every user, by name.
    #[qanat_macros::boxed]
    pub async fn users(&self) -> Result<Vec<User>> {
        let rows = sqlx::query("SELECT * FROM users ORDER BY name")
            .fetch_all(self.meta.reader())
            .await?;
        rows.iter().map(user_from_row).collect()
    }

    /// Changes a user's admin flag and/or disables or re-enables them. A disabled user's
    /// tokens stop working at once.
    #[qanat_macros::boxed]
    pub async fn update_user(
        &self,
        name: &str,
        is_admin: Option<bool>,
        disabled: Option<bool>,
    ) -> Result<User> {
        let user = self.user(name).await?;
        sqlx::query("UPDATE users SET is_admin = $1, disabled = $2 WHERE id = $3")
            .bind(i64::from(is_admin.unwrap_or(user.is_admin)))
            .bind(i64::from(disabled.unwrap_or(user.disabled)))
            .bind(&user.id)
            .execute(self.meta.writer())
            .await?;
        crate::auth_changed();
        self.user(name).await
    }

    /// Whether any user exists yet (a fresh installation has none).
    #[qanat_macros::boxed]
    pub async fn has_users(&self) -> Result<bool> {
        let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM users")
            .fetch_one(self.meta.reader())
            .await?
            .try_get("n")?;
        Ok(n > 0)
    }

    /// On a fresh installation, creates the global admin `name` and its first token.
    /// Returns `None` when users already exist: the bootstrap token is printed once.
    #[qanat_macros::boxed]
    pub async fn bootstrap_admin(&self, name: &str) -> Result<Option<NewToken>> {
        if self.has_users().await? {
            return Ok(None);
        }
        self.create_user(name, UserKind::User, true).await?;
        Ok(Some(self.create_token(name, "bootstrap", None).await?))
    }

    /// Issues a new token for `user`, valid until `expires_at` (micros) if given.
    #[qanat_macros::boxed]
    pub async fn create_token(
        &self,
        user: &str,
        label: &str,
        expires_at: Option<Micros>,
    ) -> Result<NewToken> {
        let grant = TokenGrant {
            expires_at,
            ..TokenGrant::default()
        };
        self.create_token_with(user, label, &grant).await
    }

    /// Issues a new token for `user` with `grant`'s expiry, scope and rate limit.
    #[qanat_macros::boxed]
    pub async fn create_token_with(
        &self,
        user: &str,
        label: &str,
        grant: &TokenGrant,
    ) -> Result<NewToken> {
        let expires_at = grant.expires_at;
        qanat_core::IdentityName::parse_as("token name", label)?;
        if let Some(r) = grant.rate_limit {
            if r == 0 || r > MAX_RATE_LIMIT {
                return Err(Error::invalid(
                    "rate_limit",
                    format!("a rate limit is 1 to {MAX_RATE_LIMIT} requests a second, not {r}"),
                ));
            }
        }
        let owner = self.user(user).await?;
        let now = now_micros();
        if let Some(exp) = expires_at {
            if exp <= now {
                return Err(Error::invalid("expiry", "the expiry must be in the future"));
            }
        }
        let mut secret = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut secret);
        let token = format!(
            "{TOKEN_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
        );
        let id = format!("tok_{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
        sqlx::query(
            "INSERT INTO tokens (id, user_id, name, secret_hash, created_at, expires_at, scope, rate_limit) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&id)
        .bind(&owner.id)
        .bind(label)
        .bind(hash_secret(&token))
        .bind(now)
        .bind(expires_at)
        .bind(grant.scope.as_str())
        .bind(grant.rate_limit.map(i64::from))
        .execute(self.meta.writer())
        .await?;
        Ok(NewToken {
            info: self.token(&id).await?,
            token,
        })
    }

    /// One token's listing entry.
    #[qanat_macros::boxed]
    pub async fn token(&self, id: &str) -> Result<TokenInfo> {
        let row = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.id = $1"
        ))
        .bind(id)
        .fetch_optional(self.meta.reader())
        .await?
        .ok_or_else(|| Error::not_found("token", id))?;
        token_from_row(&row)
    }

    /// Tokens of one user, or of everyone when `user` is None.
    #[qanat_macros::boxed]
    pub async fn tokens(&self, user: Option<&str>) -> Result<Vec<TokenInfo>> {
        let rows = match user {
            Some(name) => {
                sqlx::query(&format!(
                    "SELECT {TOKEN_COLUMNS} FROM tokens t JOIN users u ON u.id = t.user_id WHERE u.name = $1 ORDER BY t.created_at"
                ))
                .bind(name)
                .fetch_all(self.meta.reader())
                .await?
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {TOKEN_COLUMNS} FROM tokens t JOIN users u ON u.id = t.user_id ORDER BY u.name, t.created_at"
                ))
                .fetch_all(self.meta.reader())
                .await?
            }
        };
        rows.iter().map(token_from_row).collect()
    }

    /// Revokes a token; it stops working at once.
    #[qanat_macros::boxed]
    pub async fn revoke_token(&self, id: &str) -> Result<TokenInfo> {
        let res =
            sqlx::query("UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
                .bind(now_micros())
                .bind(id)
                .execute(self.meta.writer())
                .await?;
        crate::auth_changed();
        let info = self.token(id).await?;
        if res.rows_affected() == 0 && info.revoked_at.is_none() {
            return Err(Error::not_found("token", id));
        }
        Ok(info)
    }

    /// Revokes a token inside the caller's transaction (a job's token goes with the
    /// change that ends its attempt). Revoking a revoked or unknown token does nothing.
    /// Call [`crate::auth_changed`] once the transaction commits, so that this
    /// process stops accepting the token at once.
    #[qanat_macros::boxed]
    pub async fn revoke_token_in(conn: &mut sqlx::AnyConnection, id: &str) -> Result<()> {
        sqlx::query("UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(now_micros())
            .bind(id)
            .execute(&mut *conn)
            .await?;
        crate::auth_changed();
        Ok(())
    }

    /// Resolves a bearer token to its principal, or says why it is not accepted.
    /// Accepted tokens are remembered for a moment (see [`crate::cache`]).
    #[qanat_macros::boxed]
    pub async fn authenticate(&self, token: &str) -> Result<Principal> {
        let reject = |why: &str| Err(Error::Unauthenticated(why.to_string()));
        let external = !token.starts_with(TOKEN_PREFIX)
            && self.oidc.is_some()
            && crate::jwt::looks_like_jwt(token);
        if !token.starts_with(TOKEN_PREFIX) && !external {
            return reject(if self.oidc.is_some() {
                "the bearer token is neither a Qanat token (they start with 'qnt_') nor a JWT of the identity provider"
            } else {
                "the bearer token is not a Qanat token (they start with 'qnt_')"
            });
        }
        let secret_hash = hash_secret(token);
        let now = now_micros();
        if let Some(hit) = self.principals.get(&secret_hash) {
            if hit.expires_at.is_none_or(|exp| exp > now) {
                return Ok(hit.principal);
            }
        }
        let generation = self.principals.generation();
        if let (true, Some(oidc)) = (external, &self.oidc) {
            let (principal, exp) = self.authenticate_external(oidc, token).await?;
            self.principals.put(
                secret_hash,
                CachedToken {
                    principal: principal.clone(),
                    expires_at: Some(exp.saturating_mul(1_000_000)),
                },
                generation,
            );
            return Ok(principal);
        }
        let row = sqlx::query(
            "SELECT t.id AS token_id, t.expires_at, t.revoked_at, t.last_used_at, t.scope, t.rate_limit, u.id AS user_id, u.name, u.kind, u.is_admin, u.mapped_admin, u.disabled, u.issuer, u.subject, s.check_at AS sso_check_at \
             FROM tokens t JOIN users u ON u.id = t.user_id LEFT JOIN sso_sessions s ON s.token_id = t.id \
             WHERE t.secret_hash = $1",
        )
        .bind(&secret_hash)
        .fetch_optional(self.meta.reader())
        .await?;
        let Some(row) = row else {
            return reject("the bearer token is not valid");
        };
        if row.try_get::<Option<i64>, _>("revoked_at")?.is_some() {
            return reject("the bearer token has been revoked");
        }
        let expires_at = row.try_get::<Option<i64>, _>("expires_at")?;
        if let Some(exp) = expires_at {
            if exp <= now {
                return reject(
                    "the bearer token has expired; create a new one with `qanat tokens create`",
                );
            }
        }
        if row.try_get::<i64, _>("disabled")? != 0 {
            return reject("the account that owns this token is disabled");
        }
        let token_id: String = row.try_get("token_id")?;
        // A single sign-on session is checked at the provider again when due.
        if row
            .try_get::<Option<i64>, _>("sso_check_at")?
            .is_some_and(|at| at <= now)
        {
            self.recheck_sso_session(&token_id).await?;
        }
        let last_used: Option<i64> = row.try_get("last_used_at")?;
        if last_used.is_none_or(|t| now - t > LAST_USED_GRANULARITY) {
            sqlx::query("UPDATE tokens SET last_used_at = $1 WHERE id = $2")
                .bind(now)
                .bind(&token_id)
                .execute(self.meta.writer())
                .await?;
        }
        let principal = Principal {
            user_id: row.try_get("user_id")?,
            name: row.try_get("name")?,
            kind: row.try_get::<String, _>("kind")?.parse()?,
            // An admin by an admin's flag, or by the identity provider's groups.
            is_admin: row.try_get::<i64, _>("is_admin")? != 0
                || row.try_get::<i64, _>("mapped_admin")? != 0,
            token_id,
            scope: row.try_get::<String, _>("scope")?.parse()?,
            rate_limit: rate_limit(&row)?,
            provider: match (
                row.try_get::<Option<String>, _>("issuer")?,
                row.try_get::<Option<String>, _>("subject")?,
            ) {
                (Some(issuer), Some(subject)) => Some(crate::ProviderIdentity { issuer, subject }),
                _ => None,
            },
        };
        self.principals.put(
            secret_hash,
            CachedToken {
                principal: principal.clone(),
                expires_at,
            },
            generation,
        );
        Ok(principal)
    }
}

/// An accepted token as remembered: its principal, and when it expires.
#[derive(Clone)]
pub(crate) struct CachedToken {
    principal: Principal,
    expires_at: Option<Micros>,
}
