//! Single sign-on with an OpenID provider: its discovery document and signing keys
//! (fetched at first use, kept, fetched again when a token names a key not held —
//! the provider rotated its keys — at most once every [`REFETCH_EVERY`]), and its
//! access tokens accepted as bearer tokens beside Qanat's own.
//!
//! A token is accepted when its signature verifies with one of the provider's keys
//! ([`crate::jwt`]: asymmetric algorithms only), its issuer is the configured one, its
//! audience names this server, and it has not expired (with [`OidcConfig::leeway_secs`]
//! of clock skew). Its bearer is then signed in ([`Governance::sign_in_external`]):
//! their user provisioned or found, their groups' roles applied.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::sync::Mutex;

use crate::jwt::{self, JwkSet, JwtError};
use crate::{Error, ExternalIdentity, Governance, Principal, Result, RoleMapping};

/// Soonest a token naming an unknown key makes the keys be fetched again.
pub const REFETCH_EVERY: Duration = Duration::from_secs(10);
/// How long the discovery document and keys are kept before they are fetched again.
pub const KEEP_FOR: Duration = Duration::from_secs(3600);
/// Longest wait for the provider.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest discovery document or key set read.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// How this server trusts its OpenID provider.
#[derive(Debug, Clone)]
pub struct OidcConfig {
    /// The provider's issuer URL, exactly as its tokens' `iss` gives it.
    pub issuer: String,
    /// This server's client at the provider (the web UI's login).
    pub client_id: String,
    /// What access tokens must name in `aud` to be accepted by the API.
    pub audience: String,
    /// The claim that gives a person's Qanat user name (`preferred_username`).
    pub username_claim: String,
    /// The claim that lists a person's groups (`groups`).
    pub groups_claim: String,
    /// How groups become roles.
    pub mapping: RoleMapping,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway_secs: i64,
}

/// The provider's discovery document (`/.well-known/openid-configuration`): what
/// this server reads of it.
#[derive(Debug, Clone, Deserialize)]
pub struct Discovery {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    #[serde(default)]
    pub userinfo_endpoint: Option<String>,
    #[serde(default)]
    pub device_authorization_endpoint: Option<String>,
    #[serde(default)]
    pub end_session_endpoint: Option<String>,
}

#[derive(Debug, Clone)]
struct Fetched {
    doc: Discovery,
    keys: JwkSet,
    at: Instant,
}

/// The provider, as this server knows it. Cheap to clone.
#[derive(Clone)]
pub struct Oidc {
    config: Arc<OidcConfig>,
    http: reqwest::Client,
    fetched: Arc<Mutex<Option<Fetched>>>,
    last_refetch: Arc<Mutex<Option<Instant>>>,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.config.issuer)
            .finish_non_exhaustive()
    }
}

fn unreachable_provider(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Unauthenticated(format!(
        "the identity provider could not be asked for its {what} to check the token ({e}); Qanat tokens still work"
    ))
}

impl Oidc {
    pub fn new(config: OidcConfig) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::Unauthenticated(format!("an HTTP client for the provider: {e}")))?;
        Ok(Oidc {
            config: Arc::new(config),
            http,
            fetched: Default::default(),
            last_refetch: Default::default(),
        })
    }

    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str, what: &str) -> Result<T> {
        let resp = self
            .http
            .get(url)
            .header("Accept", "application/json")
            .send()
            .await
            .map_err(|e| unreachable_provider(what, e))?;
        if !resp.status().is_success() {
            return Err(unreachable_provider(
                what,
                format!("{url} answered {}", resp.status()),
            ));
        }
        let body = resp
            .bytes()
            .await
            .map_err(|e| unreachable_provider(what, e))?;
        if body.len() > MAX_DOCUMENT_BYTES {
            return Err(unreachable_provider(what, "the document is too large"));
        }
        serde_json::from_slice(&body).map_err(|e| unreachable_provider(what, e))
    }

    async fn fetch(&self) -> Result<Fetched> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer.trim_end_matches('/')
        );
        let doc: Discovery = self.get_json(&url, "discovery document").await?;
        if doc.issuer != self.config.issuer {
            return Err(Error::Unauthenticated(format!(
                "the provider at {url} calls itself '{}', not the configured issuer '{}'",
                doc.issuer, self.config.issuer
            )));
        }
        let keys: JwkSet = self.get_json(&doc.jwks_uri, "keys").await?;
        Ok(Fetched {
            doc,
            keys,
            at: Instant::now(),
        })
    }

    /// The discovery document and keys, fetched when not held or older than
    /// [`KEEP_FOR`] (or when `again`, a token naming a key not held).
    async fn current(&self, again: bool) -> Result<Fetched> {
        let mut held = self.fetched.lock().await;
        if let Some(f) = held.as_ref() {
            if !again && f.at.elapsed() < KEEP_FOR {
                return Ok(f.clone());
            }
        }
        match self.fetch().await {
            Ok(f) => {
                *held = Some(f.clone());
                Ok(f)
            }
            // The provider is down: the keys held still check tokens.
            Err(e) => match held.as_ref() {
                Some(f) if !again => Ok(f.clone()),
                _ => Err(e),
            },
        }
    }

    /// The provider's discovery document.
    pub async fn discovery(&self) -> Result<Discovery> {
        Ok(self.current(false).await?.doc)
    }

    /// Verifies a token of the provider for `audience`; its claims and expiry (unix
    /// seconds).
    pub async fn verify(&self, token: &str, audience: &str) -> Result<(Map<String, Value>, i64)> {
        let refused = |e: JwtError| Error::Unauthenticated(format!("{e}"));
        let t = jwt::decode(token).map_err(refused)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or_default();
        // The claims first: a token refused by them (another issuer's, expired, for
        // another audience) never makes this server fetch the provider's keys, so
        // strangers' tokens cannot spend the refetch allowance a rotation needs.
        // Nothing is trusted before the signature verifies below.
        let exp = jwt::Expect {
            issuer: &self.config.issuer,
            audience,
            now,
            leeway: self.config.leeway_secs,
        }
        .check(&t.claims)
        .map_err(refused)?;
        let mut keys = self.current(false).await?.keys;
        if let Err(JwtError::UnknownKey(_)) = t.verify_signature(&keys) {
            // Perhaps rotated: fetch the keys again, unless that was done just now.
            let mut last = self.last_refetch.lock().await;
            if last.is_none_or(|at| at.elapsed() >= REFETCH_EVERY) {
                *last = Some(Instant::now());
                drop(last);
                if let Ok(f) = self.current(true).await {
                    keys = f.keys;
                }
            }
        }
        t.verify_signature(&keys).map_err(refused)?;
        Ok((t.claims, exp))
    }

    /// Who a verified token's claims name.
    pub fn identity(&self, claims: &Map<String, Value>) -> Result<ExternalIdentity> {
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Error::Unauthenticated("the token names no subject ('sub')".into()))?;
        let username = claims
            .get(&self.config.username_claim)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                Error::Unauthenticated(format!(
                    "the token lacks the user name claim '{}' (set security.oidc.username_claim to one the provider sends)",
                    self.config.username_claim
                ))
            })?;
        let groups = match claims.get(&self.config.groups_claim) {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|g| g.as_str().map(String::from))
                .collect(),
            Some(Value::String(s)) => s.split_whitespace().map(String::from).collect(),
            _ => Vec::new(),
        };
        Ok(ExternalIdentity {
            issuer: self.config.issuer.clone(),
            subject: subject.to_string(),
            username: username.to_string(),
            groups,
        })
    }
}

impl Governance {
    /// Authenticates a provider's access token for the API (its audience must be
    /// [`OidcConfig::audience`]): the bearer signed in with their groups' roles, and
    /// the token's expiry (unix seconds).
    pub(crate) async fn authenticate_external(
        &self,
        oidc: &Oidc,
        token: &str,
    ) -> Result<(Principal, i64)> {
        let (claims, exp) = oidc.verify(token, &oidc.config.audience).await?;
        let id = oidc.identity(&claims)?;
        Ok((self.sign_in_external(&id, &oidc.config.mapping).await?, exp))
    }
}
