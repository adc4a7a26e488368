//! The CLI's side of the API: stored credentials and a small HTTP client.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// What `qanat login` stores (mode 0600).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Credentials {
    pub server: String,
    pub token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
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
    Ok(Some(serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a Qanat credentials file; run `qanat login` again",
            path.display()
        )
    })?))
}

pub fn save_credentials(creds: &Credentials) -> Result<PathBuf> {
    let path = credentials_path();
    qanat_store::write_secret_file(&path, &serde_json::to_vec_pretty(creds)?)?;
    Ok(path)
}

/// An authenticated API client.
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

fn build_http(ca_cert: Option<&Path>) -> Result<reqwest::Client> {
    let mut b =
        reqwest::Client::builder().user_agent(concat!("qanat-cli/", env!("CARGO_PKG_VERSION")));
    if let Some(ca) = ca_cert {
        let pem = std::fs::read(ca)
            .with_context(|| format!("reading CA certificate {}", ca.display()))?;
        b = b.add_root_certificate(
            reqwest::Certificate::from_pem(&pem)
                .with_context(|| format!("{} is not a PEM certificate", ca.display()))?,
        );
    }
    Ok(b.build()?)
}

impl Client {
    /// A client from (in order of precedence) flags, `QANAT_SERVER_URL` / `QANAT_TOKEN` /
    /// `QANAT_CA_CERT`, and the stored credentials.
    pub fn from_env(
        server: Option<&str>,
        token: Option<&str>,
        ca_cert: Option<&Path>,
    ) -> Result<Client> {
        let stored = load_credentials()?;
        let env = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
        let base = server
            .map(str::to_string)
            .or_else(|| env("QANAT_SERVER_URL"))
            .or_else(|| stored.as_ref().map(|c| c.server.clone()))
            .unwrap_or_else(|| DEFAULT_SERVER.to_string());
        let token = token
            .map(str::to_string)
            .or_else(|| env("QANAT_TOKEN"))
            .or_else(|| stored.as_ref().map(|c| c.token.clone()));
        let ca = ca_cert
            .map(Path::to_path_buf)
            .or_else(|| env("QANAT_CA_CERT").map(PathBuf::from))
            .or_else(|| stored.as_ref().and_then(|c| c.ca_cert.clone()));
        Ok(Client {
            http: build_http(ca.as_deref())?,
            base: base.trim_end_matches('/').to_string(),
            token,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut rb = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(t) = &self.token {
            rb = rb.bearer_auth(t);
        }
        rb
    }

    /// Sends and turns an error reply into a readable error.
    pub async fn send(&self, rb: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let resp = rb.send().await.with_context(|| {
            format!(
                "could not reach the Qanat server at {} (is `qanat server` running?)",
                self.base
            )
        })?;
        self.check(resp).await
    }

    /// Passes a success through; turns an error reply into a readable error.
    pub async fn check(&self, resp: reqwest::Response) -> Result<reqwest::Response> {
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(v) if v.get("error_code").is_some() => bail!(
                "{} ({}): {}",
                v["error_code"].as_str().unwrap_or("ERROR"),
                status.as_u16(),
                v["message"].as_str().unwrap_or("")
            ),
            _ => bail!("server answered {status}: {text}"),
        }
    }

    pub async fn json<T: DeserializeOwned>(&self, rb: reqwest::RequestBuilder) -> Result<T> {
        let resp = self.send(rb).await?;
        resp.json()
            .await
            .context("the server's reply was not the expected JSON")
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.json(self.request(Method::GET, path)).await
    }
}

/// Percent-encodes one path segment.
pub fn seg(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// Percent-encodes a `/`-separated key, keeping the slashes.
pub fn key_path(k: &str) -> String {
    k.split('/').map(seg).collect::<Vec<_>>().join("/")
}
