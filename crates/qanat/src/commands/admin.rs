//! `qanat keys` and `qanat certs`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use reqwest::Method;
use serde_json::Value;

use crate::cli::admin::KeysCmd;
use crate::cli::Format;
use crate::client::Client;
use crate::config::Config;
use crate::output;

pub(super) async fn keys(c: &Client, fmt: Format, cmd: KeysCmd) -> Result<()> {
    let v: Value = match cmd {
        KeysCmd::Rotate => {
            c.json(c.request(Method::POST, "/api/v1/admin/keys/rotate"))
                .await?
        }
        KeysCmd::Status => c.get("/api/v1/admin/keys").await?,
    };
    output::object(fmt, &v);
    Ok(())
}

pub(super) fn certs_dev(cfg: &Config, out: Option<PathBuf>, hosts: Vec<String>) -> Result<()> {
    let dir = out.unwrap_or_else(|| cfg.home.join("tls"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    names.extend(hosts);
    let ck =
        rcgen::generate_simple_self_signed(names.clone()).context("generating the certificate")?;
    let cert_path = dir.join("dev-cert.pem");
    let key_path = dir.join("dev-key.pem");
    std::fs::write(&cert_path, ck.cert.pem())
        .with_context(|| format!("writing {}", cert_path.display()))?;
    qanat_store::write_secret_file(&key_path, ck.key_pair.serialize_pem().as_bytes())?;
    eprintln!(
        "wrote a self-signed certificate for {} (development only):",
        names.join(", ")
    );
    eprintln!("  certificate: {}", cert_path.display());
    eprintln!("  private key: {} (0600)", key_path.display());
    eprintln!("enable TLS 1.3 with, in qanat.toml:");
    eprintln!(
        "  [server]\n  tls_cert = \"{}\"\n  tls_key = \"{}\"",
        cert_path.display(),
        key_path.display()
    );
    eprintln!("and log the CLI in with: qanat login --server https://127.0.0.1:8080 --ca-cert {} --token <token>", cert_path.display());
    Ok(())
}
