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
    pub token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
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
        Ok(Target {
            token: given(token).or_else(|| login.map(|l| l.token.clone())),
            ca_cert: ca_cert
                .map(Path::to_path_buf)
                .or(ca_env)
                .or_else(|| login.and_then(|l| l.ca_cert.clone())),
            server,
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
