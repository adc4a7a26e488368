//! The CLI's login: the credentials file `qanat login` writes, and the client built from
//! flags, environment and that file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use qanat_client::Client;
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

/// Where a client connects and how it authenticates: each part from the flag (or its
/// variable), else the stored login, else the default.
pub struct Target {
    pub server: String,
    pub token: Option<String>,
    pub ca_cert: Option<PathBuf>,
}

impl Target {
    /// `server` and `token` come from `--server`/`QANAT_SERVER_URL` and
    /// `--token`/`QANAT_TOKEN`; `ca_cert` from `--ca-cert` (login) or `QANAT_CA_CERT`.
    pub fn resolve(
        server: Option<&str>,
        token: Option<&str>,
        ca_cert: Option<&Path>,
    ) -> Result<Target> {
        let stored = load_credentials()?;
        let given = |v: Option<&str>| v.filter(|s| !s.is_empty()).map(str::to_string);
        let ca_env = std::env::var_os("QANAT_CA_CERT")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        Ok(Target {
            server: given(server)
                .or_else(|| stored.as_ref().map(|c| c.server.clone()))
                .unwrap_or_else(|| DEFAULT_SERVER.to_string()),
            token: given(token).or_else(|| stored.as_ref().map(|c| c.token.clone())),
            ca_cert: ca_cert
                .map(Path::to_path_buf)
                .or(ca_env)
                .or_else(|| stored.and_then(|c| c.ca_cert)),
        })
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
