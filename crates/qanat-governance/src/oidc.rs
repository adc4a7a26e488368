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

pub use crate::sso::SsoLogin;

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
    /// The web UI client's secret, when the provider gave it one (a confidential
    /// client); the UI's login sends it to the token endpoint.
    pub client_secret: Option<ClientSecret>,
    /// Scopes the web UI asks for (space-separated).
    pub scopes: String,
    /// The CLI's client (a public one that may use the device flow).
    pub cli_client_id: String,
    /// Scopes the CLI asks for (space-separated).
    pub cli_scopes: String,
    /// Where the provider sends the browser back after a UI login; derived from the
    /// request when `None`.
    pub redirect_url: Option<String>,
    /// How often a UI session is checked again at the provider (by refreshing).
    pub session_check_secs: i64,
    /// Extra parameters of the UI's authorization request (e.g. Google's
    /// `access_type = offline`).
    pub auth_params: Vec<(String, String)>,
}

/// A client secret: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientSecret(pub String);

impl std::fmt::Debug for ClientSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientSecret(***)")
    }
}

/// What the provider's token endpoint answers.
#[derive(Clone, Deserialize)]
pub struct TokenResponse {
    pub access_token: String,
    #[serde(default)]
    pub id_token: Option<String>,
    #[serde(default)]
    pub refresh_token: Option<String>,
    /// Seconds the access token lives.
    #[serde(default)]
    pub expires_in: Option<i64>,
}

impl std::fmt::Debug for TokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenResponse")
            .field("expires_in", &self.expires_in)
            .field("refresh_token", &self.refresh_token.is_some())
            .finish_non_exhaustive()
    }
}

/// Why the token endpoint gave no tokens.
#[derive(Debug, Clone)]
pub enum TokenRefusal {
    /// The provider said no (`invalid_grant` and the like): the grant is over.
    Refused(String),
    /// The provider could not be asked.
    Unreachable(String),
}

impl std::fmt::Display for TokenRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenRefusal::Refused(why) => write!(f, "the identity provider refused: {why}"),
            TokenRefusal::Unreachable(why) => {
                write!(f, "the identity provider could not be asked: {why}")
            }
        }
    }
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
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
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
    /// When fetching last failed, and why: not tried again for [`FAILED_WAIT`].
    failed: Arc<std::sync::Mutex<Option<(Instant, String)>>>,
}

/// How long a failed fetch of the discovery document or keys is not tried again
/// (the keys held, if any, check tokens meanwhile).
pub const FAILED_WAIT: Duration = Duration::from_secs(30);

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.config.issuer)
            .finish_non_exhaustive()
    }
}

fn unreachable_provider(what: &str, e: impl std::fmt::Display) -> Error {
    Error::ProviderUnavailable(format!(
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
            failed: Default::default(),
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
        // A fetch that failed just now is not tried again at once: requests do not
        // queue behind the provider's timeouts while it is down.
        let recent_failure = self
            .failed
            .lock()
            .ok()
            .and_then(|f| f.clone())
            .filter(|(at, _)| at.elapsed() < FAILED_WAIT);
        let fetched = match recent_failure {
            Some((_, why)) => Err(Error::ProviderUnavailable(why)),
            None => self.fetch().await,
        };
        match fetched {
            Ok(f) => {
                *held = Some(f.clone());
                if let Ok(mut failed) = self.failed.lock() {
                    *failed = None;
                }
                Ok(f)
            }
            // The provider is down: the keys held still check tokens.
            Err(e) => {
                if let Ok(mut failed) = self.failed.lock() {
                    if failed
                        .as_ref()
                        .is_none_or(|(at, _)| at.elapsed() >= FAILED_WAIT)
                    {
                        tracing::warn!(error = %e, "the identity provider could not be asked for its discovery document or keys");
                        *failed = Some((Instant::now(), e.to_string()));
                    }
                }
                match held.as_ref() {
                    Some(f) if !again => Ok(f.clone()),
                    _ => Err(e),
                }
            }
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

impl Oidc {
    /// Where the browser goes to log in: the authorization code flow with PKCE
    /// (`challenge` is the S256 hash of the verifier), `state` and `nonce`.
    pub async fn authorization_url(
        &self,
        redirect_uri: &str,
        state: &str,
        nonce: &str,
        challenge: &str,
    ) -> Result<String> {
        let doc = self.discovery().await?;
        let mut url = url::Url::parse(&doc.authorization_endpoint).map_err(|e| {
            Error::Unauthenticated(format!(
                "the provider's authorization endpoint '{}' is not a URL: {e}",
                doc.authorization_endpoint
            ))
        })?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.config.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", &self.config.scopes)
            .append_pair("state", state)
            .append_pair("nonce", nonce)
            .append_pair("code_challenge", challenge)
            .append_pair("code_challenge_method", "S256");
        for (k, v) in &self.config.auth_params {
            url.query_pairs_mut().append_pair(k, v);
        }
        Ok(url.into())
    }

    /// Posts `form` to the token endpoint as the web UI's client (its secret by HTTP
    /// basic authentication, or in the form when the provider takes only that).
    async fn token_request(
        &self,
        mut form: Vec<(&str, String)>,
    ) -> std::result::Result<TokenResponse, TokenRefusal> {
        let doc = self
            .discovery()
            .await
            .map_err(|e| TokenRefusal::Unreachable(e.to_string()))?;
        let mut req = self.http.post(&doc.token_endpoint);
        let id = self.config.client_id.clone();
        match &self.config.client_secret {
            Some(secret) => {
                // HTTP basic unless the provider lists only the form way.
                let basic = doc
                    .token_endpoint_auth_methods_supported
                    .as_ref()
                    .is_none_or(|m| {
                        m.iter().any(|m| m == "client_secret_basic")
                            || !m.iter().any(|m| m == "client_secret_post")
                    });
                if basic {
                    let enc =
                        |v: &str| form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>();
                    req = req.basic_auth(enc(&id), Some(enc(&secret.0)));
                } else {
                    form.push(("client_id", id));
                    form.push(("client_secret", secret.0.clone()));
                }
            }
            None => form.push(("client_id", id)),
        }
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
            .finish();
        let resp = req
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Accept", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| TokenRefusal::Unreachable(e.to_string()))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| TokenRefusal::Unreachable(e.to_string()))?;
        if bytes.len() > MAX_DOCUMENT_BYTES {
            return Err(TokenRefusal::Unreachable("the answer is too large".into()));
        }
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                TokenRefusal::Unreachable(format!(
                    "the token endpoint's answer is not understood: {e}"
                ))
            });
        }
        #[derive(Deserialize)]
        struct OAuthError {
            error: String,
            #[serde(default)]
            error_description: Option<String>,
        }
        match serde_json::from_slice::<OAuthError>(&bytes) {
            // Only `invalid_grant` says the grant is over (the person disabled or
            // removed, the session revoked); the others (a client secret that
            // expired, a rate limit) are this server's or the provider's trouble,
            // and must not end people's sessions.
            Ok(e) if status.is_client_error() && e.error == "invalid_grant" => {
                Err(TokenRefusal::Refused(match e.error_description {
                    Some(d) => format!("{} ({d})", e.error),
                    None => e.error,
                }))
            }
            Ok(e) => {
                tracing::error!(error = %e.error, status = %status, "the identity provider's token endpoint refused this server");
                Err(TokenRefusal::Unreachable(format!(
                    "the token endpoint answered {status} {}",
                    e.error
                )))
            }
            _ => Err(TokenRefusal::Unreachable(format!(
                "the token endpoint answered {status}"
            ))),
        }
    }

    /// Trades an authorization code (and its PKCE verifier) for tokens.
    pub async fn exchange_code(
        &self,
        code: &str,
        verifier: &str,
        redirect_uri: &str,
    ) -> std::result::Result<TokenResponse, TokenRefusal> {
        self.token_request(vec![
            ("grant_type", "authorization_code".into()),
            ("code", code.into()),
            ("code_verifier", verifier.into()),
            ("redirect_uri", redirect_uri.into()),
        ])
        .await
    }

    /// Trades a refresh token for new tokens: the provider's check that the person
    /// still may sign in.
    pub async fn refresh(
        &self,
        refresh_token: &str,
    ) -> std::result::Result<TokenResponse, TokenRefusal> {
        self.token_request(vec![
            ("grant_type", "refresh_token".into()),
            ("refresh_token", refresh_token.into()),
        ])
        .await
    }

    /// Verifies an ID token for the web UI's client; with `nonce`, that it is the one
    /// the login sent.
    pub async fn verify_id_token(
        &self,
        id_token: &str,
        nonce: Option<&str>,
    ) -> Result<Map<String, Value>> {
        let (claims, _) = self.verify(id_token, &self.config.client_id).await?;
        if let Some(want) = nonce {
            let got = claims
                .get("nonce")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !constant_eq(got.as_bytes(), want.as_bytes()) {
                return Err(Error::Unauthenticated(
                    "the ID token's nonce is not the one this login sent (a replayed or injected login); log in again"
                        .into(),
                ));
            }
        }
        Ok(claims)
    }

    /// The claims of the userinfo endpoint for `access_token`.
    async fn userinfo(&self, access_token: &str) -> Result<Map<String, Value>> {
        let doc = self.discovery().await?;
        let Some(url) = doc.userinfo_endpoint else {
            return Ok(Map::new());
        };
        let resp = self
            .http
            .get(&url)
            .bearer_auth(access_token)
            .header("Accept", "application/json")
            .send()
            .await
            .map_err(|e| unreachable_provider("userinfo", e))?;
        if !resp.status().is_success() {
            return Err(Error::Unauthenticated(format!(
                "the provider's userinfo endpoint answered {}",
                resp.status()
            )));
        }
        let body = resp
            .bytes()
            .await
            .map_err(|e| unreachable_provider("userinfo", e))?;
        if body.len() > MAX_DOCUMENT_BYTES {
            return Err(unreachable_provider(
                "userinfo",
                "the document is too large",
            ));
        }
        serde_json::from_slice(&body).map_err(|e| unreachable_provider("userinfo", e))
    }

    /// Who a login's tokens name: the verified ID token's claims (with `nonce`
    /// checked at a login, not at a refresh), completed from the userinfo endpoint
    /// when they lack the user name or groups claim (some providers send groups
    /// only there). `None` when the answer has no ID token.
    pub async fn login_identity(
        &self,
        tokens: &TokenResponse,
        nonce: Option<&str>,
    ) -> Result<Option<ExternalIdentity>> {
        let Some(id_token) = &tokens.id_token else {
            return Ok(None);
        };
        let mut claims = self.verify_id_token(id_token, nonce).await?;
        let lacks = |c: &Map<String, Value>| {
            !c.contains_key(&self.config.username_claim)
                || !c.contains_key(&self.config.groups_claim)
        };
        if lacks(&claims) {
            let info = self.userinfo(&tokens.access_token).await?;
            if info.get("sub") == claims.get("sub") {
                for (k, v) in info {
                    claims.entry(k).or_insert(v);
                }
            }
        }
        self.identity(&claims).map(Some)
    }
}

/// A fresh random value for a login's state, nonce or PKCE verifier (256 bits,
/// URL-safe base64).
pub fn random_token() -> String {
    use base64::Engine as _;
    use rand::RngCore as _;
    let mut random = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut random);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random)
}

/// The PKCE challenge of `verifier` (method S256, RFC 7636).
pub fn pkce_challenge(verifier: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()))
}

/// Equality in time that does not depend on where the inputs differ.
pub fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
        // An ID token is the provider's word to the UI's client that a person logged
        // in there, not a credential for the API (its `aud` may well be this
        // server's, when the audience is the client id).
        if claims.contains_key("nonce") {
            return Err(Error::Unauthenticated(
                "this is an ID token (it carries a nonce); send the provider's access token".into(),
            ));
        }
        let id = oidc.identity(&claims)?;
        Ok((self.sign_in_external(&id, &oidc.config.mapping).await?, exp))
    }
}
