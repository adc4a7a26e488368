//! The CLI's login: the credentials file `qanat login` writes, and the client built from
//! flags, environment and that file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use qanat_client::Client;
use serde::{Deserialize, Serialize};

const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// What `qanat login` stores (mode 0600): a login per server, and the server commands
/// talk to when none is named. A token is only ever sent to the server it was stored
/// for.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Credentials {
    /// The server of the latest `qanat login`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    #[serde(default)]
    pub servers: BTreeMap<String, Login>,
}

/// One server's login.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Login {
    /// A Qanat token, or the identity provider's access token of an SSO login.
    pub token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
    /// How `token` is renewed, for a single sign-on login (`qanat login --sso`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sso: Option<SsoSession>,
}

/// A single sign-on login's session with the identity provider: the access token
/// (the login's `token`) is renewed with the refresh token at the provider's token
/// endpoint shortly before it expires; the provider refuses when the person was
/// disabled or removed there.
#[derive(Clone, Serialize, Deserialize)]
pub struct SsoSession {
    pub issuer: String,
    pub token_endpoint: String,
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the access token expires, in unix seconds.
    pub expires_at: i64,
}

impl std::fmt::Debug for SsoSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SsoSession")
            .field("issuer", &self.issuer)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// Renewed this long before the access token expires, in seconds.
const RENEW_BEFORE_SECS: i64 = 30;

/// What the provider's token endpoint answers, as the CLI reads it.
#[derive(Deserialize)]
pub struct ProviderTokens {
    pub access_token: String,
    #[serde(default)]
    pub refresh_token: Option<String>,
    #[serde(default)]
    pub expires_in: Option<i64>,
}

/// An OAuth error answer.
#[derive(Deserialize)]
pub struct OAuthError {
    pub error: String,
    #[serde(default)]
    pub error_description: Option<String>,
}

impl std::fmt::Display for OAuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.error_description {
            Some(d) => write!(f, "{} ({d})", self.error),
            None => f.write_str(&self.error),
        }
    }
}

/// The HTTP client for the identity provider: it follows no redirect (a redirected
/// POST would carry the refresh token elsewhere).
fn provider_client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("qanat-cli/", env!("CARGO_PKG_VERSION")))
        .build()?)
}

/// The endpoints of the provider `issuer`, from its own discovery document (not from
/// what a server says): its device authorization endpoint, if any, and its token
/// endpoint. The document must name `issuer` as itself.
pub async fn provider_endpoints(issuer: &str) -> Result<(Option<String>, String)> {
    #[derive(Deserialize)]
    struct Discovery {
        issuer: String,
        token_endpoint: String,
        #[serde(default)]
        device_authorization_endpoint: Option<String>,
    }
    let url = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let parsed =
        url::Url::parse(&url).with_context(|| format!("the issuer '{issuer}' is not a URL"))?;
    if parsed.scheme() != "https" && !crate::config::is_loopback(&parsed) {
        anyhow::bail!(
            "the identity provider '{issuer}' is not an https URL; refusing to log in through it"
        );
    }
    let resp = provider_client()?
        .get(&url)
        .header("Accept", "application/json")
        .send()
        .await
        .with_context(|| format!("asking the identity provider at {url}"))?;
    if !resp.status().is_success() {
        anyhow::bail!(
            "the identity provider's discovery document {url} answered {}",
            resp.status()
        );
    }
    let doc: Discovery = resp
        .json()
        .await
        .with_context(|| format!("the discovery document {url} is not understood"))?;
    if doc.issuer != issuer {
        anyhow::bail!(
            "the provider at {url} calls itself '{}', not '{issuer}'",
            doc.issuer
        );
    }
    Ok((doc.device_authorization_endpoint, doc.token_endpoint))
}

/// Posts a form to a provider's endpoint: its JSON answer, or its OAuth error.
pub async fn provider_post<T: serde::de::DeserializeOwned>(
    url: &str,
    form: &[(&str, &str)],
) -> Result<std::result::Result<T, OAuthError>> {
    let http = provider_client()?;
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form.iter().copied())
        .finish();
    let resp = http
        .post(url)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Accept", "application/json")
        .body(body)
        .send()
        .await
        .with_context(|| format!("asking the identity provider at {url}"))?;
    let status = resp.status();
    let bytes = resp.bytes().await?;
    if status.is_success() {
        return Ok(Ok(serde_json::from_slice(&bytes).with_context(|| {
            format!("the identity provider's answer from {url} is not understood")
        })?));
    }
    match serde_json::from_slice::<OAuthError>(&bytes) {
        Ok(e) => Ok(Err(e)),
        Err(_) => anyhow::bail!("the identity provider at {url} answered {status}"),
    }
}

pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// The file as earlier versions wrote it: one server.
#[derive(Deserialize)]
struct SingleLogin {
    server: String,
    token: String,
    #[serde(default)]
    ca_cert: Option<PathBuf>,
}

/// Tried in order: the one-server form has required fields, the newer one none.
#[derive(Deserialize)]
#[serde(untagged)]
enum OnDisk {
    Single(SingleLogin),
    PerServer(Credentials),
}

/// A server URL as logins are keyed: without a trailing `/`.
pub fn server_key(server: &str) -> String {
    server.trim_end_matches('/').to_string()
}

impl Credentials {
    /// The login stored for `server`.
    pub fn login(&self, server: &str) -> Option<&Login> {
        self.servers.get(&server_key(server))
    }
}

/// `$QANAT_CREDENTIALS`, else `$XDG_CONFIG_HOME/qanat/credentials.json`, else
/// `~/.config/qanat/credentials.json`.
pub fn credentials_path() -> PathBuf {
    if let Some(p) = std::env::var_os("QANAT_CREDENTIALS") {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("qanat").join("credentials.json")
}

pub fn load_credentials() -> Result<Option<Credentials>> {
    let path = credentials_path();
    if !path.exists() {
        return Ok(None);
    }
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let on_disk: OnDisk = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a Qanat credentials file; run `qanat login` again",
            path.display()
        )
    })?;
    Ok(Some(match on_disk {
        OnDisk::PerServer(c) => c,
        OnDisk::Single(one) => {
            let key = server_key(&one.server);
            Credentials {
                current: Some(key.clone()),
                servers: BTreeMap::from([(
                    key,
                    Login {
                        token: one.token,
                        ca_cert: one.ca_cert,
                        sso: None,
                    },
                )]),
            }
        }
    }))
}

pub fn save_credentials(creds: &Credentials) -> Result<PathBuf> {
    let path = credentials_path();
    qanat_store::write_secret_file(&path, &serde_json::to_vec_pretty(creds)?)?;
    Ok(path)
}

/// Stores `login` for `server` (replacing the one it had) and makes `server` the one
/// commands talk to. The file's path.
pub fn remember(server: &str, login: Login) -> Result<PathBuf> {
    let mut creds = load_credentials()?.unwrap_or_default();
    let key = server_key(server);
    creds.servers.insert(key.clone(), login);
    creds.current = Some(key);
    save_credentials(&creds)
}

/// Removes the logins `drop` picks (and the current server, if its login goes); the
/// servers whose logins went.
pub fn forget(drop: impl Fn(&str, &Login) -> bool) -> Result<Vec<String>> {
    let Some(mut creds) = load_credentials()? else {
        return Ok(Vec::new());
    };
    let gone: Vec<String> = creds
        .servers
        .iter()
        .filter(|(server, login)| drop(server, login))
        .map(|(server, _)| server.clone())
        .collect();
    if gone.is_empty() {
        return Ok(gone);
    }
    for server in &gone {
        creds.servers.remove(server);
    }
    if creds.current.as_ref().is_some_and(|c| gone.contains(c)) {
        creds.current = None;
    }
    let path = credentials_path();
    if creds.servers.is_empty() {
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    } else {
        save_credentials(&creds)?;
    }
    Ok(gone)
}

/// Where a client connects and how it authenticates: each part from the flag (or its
/// variable), else the stored login, else the default.
pub struct Target {
    pub server: String,
    pub token: Option<String>,
    pub ca_cert: Option<PathBuf>,
    /// The stored single sign-on session `token` came from, if it did.
    pub sso: Option<SsoSession>,
}

impl Target {
    /// `server` and `token` come from `--server`/`QANAT_SERVER_URL` and
    /// `--token`/`QANAT_TOKEN`; `ca_cert` from `--ca-cert` (login) or `QANAT_CA_CERT`.
    pub fn resolve(
        server: Option<&str>,
        token: Option<&str>,
        ca_cert: Option<&Path>,
    ) -> Result<Target> {
        let stored = load_credentials()?.unwrap_or_default();
        let given = |v: Option<&str>| v.filter(|s| !s.is_empty()).map(str::to_string);
        let ca_env = std::env::var_os("QANAT_CA_CERT")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let server = given(server)
            .or_else(|| stored.current.clone())
            .unwrap_or_else(|| DEFAULT_SERVER.to_string());
        let login = stored.login(&server);
        let flag = given(token);
        Ok(Target {
            sso: match flag {
                Some(_) => None,
                None => login.and_then(|l| l.sso.clone()),
            },
            token: flag.or_else(|| login.map(|l| l.token.clone())),
            ca_cert: ca_cert
                .map(Path::to_path_buf)
                .or(ca_env)
                .or_else(|| login.and_then(|l| l.ca_cert.clone())),
            server,
        })
    }

    /// The target with its single sign-on access token renewed at the provider when it
    /// expires soon (the stored login updated); as it is otherwise.
    pub async fn fresh(mut self) -> Result<Target> {
        let Some(sso) = self.sso.clone() else {
            return Ok(self);
        };
        if sso.expires_at - RENEW_BEFORE_SECS > unix_now() {
            return Ok(self);
        }
        let relogin = format!("run `qanat login --sso --server {}`", self.server);
        let Some(refresh) = sso.refresh_token.as_deref() else {
            anyhow::bail!(
                "your single sign-on session with {} has expired: {relogin}",
                sso.issuer
            );
        };
        let answer = provider_post::<ProviderTokens>(
            &sso.token_endpoint,
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh),
                ("client_id", &sso.client_id),
            ],
        )
        .await?;
        let tokens = match answer {
            Ok(t) => t,
            Err(e) => anyhow::bail!(
                "{} no longer renews your single sign-on session ({e}): {relogin}",
                sso.issuer
            ),
        };
        let renewed = SsoSession {
            refresh_token: tokens.refresh_token.or(sso.refresh_token.clone()),
            expires_at: unix_now() + tokens.expires_in.unwrap_or(300),
            ..sso
        };
        // The renewed token replaces the stored one; the current server stays.
        let mut creds = load_credentials()?.unwrap_or_default();
        if let Some(login) = creds.servers.get_mut(&server_key(&self.server)) {
            login.token = tokens.access_token.clone();
            login.sso = Some(renewed.clone());
            save_credentials(&creds)?;
        }
        self.token = Some(tokens.access_token);
        self.sso = Some(renewed);
        Ok(self)
    }

    pub fn client(&self) -> Result<Client> {
        let mut b = Client::builder(&self.server)
            .user_agent(concat!("qanat-cli/", env!("CARGO_PKG_VERSION")));
        if let Some(t) = &self.token {
            b = b.token(t);
        }
        if let Some(ca) = &self.ca_cert {
            let pem = std::fs::read(ca)
                .with_context(|| format!("reading CA certificate {}", ca.display()))?;
            b = b.ca_certificate_pem(pem);
        }
        match &self.ca_cert {
            Some(ca) => b
                .build()
                .with_context(|| format!("trusting {}", ca.display())),
            None => Ok(b.build()?),
        }
    }
}
