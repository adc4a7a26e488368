//! The CLI's side of the API: stored credentials, and the typed client built from them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
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

/// The API client the commands use: `qanat-client`'s, typed per endpoint.
pub use qanat_client::{seg, Client};

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
    let pem = match &ca {
        Some(p) => Some(
            std::fs::read(p).with_context(|| format!("reading CA certificate {}", p.display()))?,
        ),
        None => None,
    };
    Ok(Client::new(&base, token, pem.as_deref())?)
}

/// Percent-encodes a `/`-separated key, keeping the slashes.
pub fn key_path(k: &str) -> String {
    k.split('/').map(seg).collect::<Vec<_>>().join("/")
}
