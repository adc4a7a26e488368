//! `qanat login`, `logout` and `whoami`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use qanat_governance::wire::WhoAmI;

use super::Ctx;
use crate::credentials::{self, Credentials, Target};
use crate::output;

/// Checks the token against the server, then stores it.
pub async fn login(
    server: Option<&str>,
    token: Option<&str>,
    ca_cert: Option<&Path>,
) -> Result<()> {
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        bail!("give the token: qanat login --token <token> (or set QANAT_TOKEN)");
    };
    let target = Target::resolve(server, Some(token), ca_cert)?;
    let me = target.client()?.whoami().await?;
    let path = credentials::save_credentials(&Credentials {
        server: target.server.trim_end_matches('/').to_string(),
        token: token.to_string(),
        ca_cert: ca_cert.map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())),
    })?;
    eprintln!(
        "logged in to {} as {}; credentials saved to {}",
        target.server,
        me.principal.name,
        path.display()
    );
    Ok(())
}

pub fn logout() -> Result<()> {
    let path = credentials::credentials_path();
    if path.exists() {
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    }
    eprintln!("logged out");
    Ok(())
}

pub async fn whoami(ctx: &Ctx) -> Result<()> {
    output::record(ctx.format, &ctx.client.whoami().await?)
}

output::fields!(WhoAmI, |x| {
    "name" => x.principal.name.clone(),
    "kind" => x.principal.kind.to_string(),
    "admin" => x.principal.is_admin.to_string(),
    "token" => x.principal.token_id.clone(),
    "projects" => x.projects.iter().map(|r| match r.role {
        Some(role) => format!("{} ({role})", r.project),
        None => r.project.clone(),
    }).collect::<Vec<_>>().join(", "),
});
