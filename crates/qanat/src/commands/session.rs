//! `qanat login`, `logout` and `whoami`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use qanat_governance::wire::WhoAmI;
use serde::Serialize;

use super::Ctx;
use crate::credentials::{self, Login, Target};
use crate::output;

/// Checks the token against the server, then stores it as that server's login and
/// makes the server the one commands talk to.
pub async fn login(
    server: Option<&str>,
    token: Option<&str>,
    ca_cert: Option<&Path>,
) -> Result<()> {
    let target = Target::resolve(server, None, ca_cert)?;
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        bail!(
            "give the token: qanat login --server {} --token <token> (or set QANAT_TOKEN)",
            target.server
        );
    };
    let target = Target {
        token: Some(token.to_string()),
        ..target
    };
    let me = target
        .client()?
        .whoami()
        .await
        .with_context(|| format!("logging in to {}", target.server))?;
    let path = credentials::remember(
        &target.server,
        Login {
            token: token.to_string(),
            ca_cert: target
                .ca_cert
                .as_deref()
                .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())),
        },
    )?;
    eprintln!(
        "logged in to {} as {}; credentials saved to {}",
        target.server,
        me.principal.name,
        path.display()
    );
    Ok(())
}

/// Forgets the login of `server` (else of the server commands talk to).
pub fn logout(server: Option<&str>) -> Result<()> {
    let target = Target::resolve(server, None, None)?;
    let key = credentials::server_key(&target.server);
    if credentials::forget(|s, _| s == key)?.is_empty() {
        eprintln!("not logged in to {key}");
    } else {
        eprintln!("logged out of {key}");
    }
    Ok(())
}

/// Who the token is, on which server.
#[derive(Serialize)]
struct Me<'a> {
    server: &'a str,
    #[serde(flatten)]
    who: WhoAmI,
}

pub async fn whoami(ctx: &Ctx) -> Result<()> {
    let me = Me {
        server: &ctx.server,
        who: ctx.client.whoami().await?,
    };
    output::record(ctx.format, &me)
}

output::fields!(Me<'_>, |x| {
    "server" => x.server.to_string(),
    "name" => x.who.principal.name.clone(),
    "kind" => x.who.principal.kind.to_string(),
    "admin" => x.who.principal.is_admin.to_string(),
    "token" => x.who.principal.token_id.clone(),
    "projects" => x.who.projects.iter().map(|r| match r.role {
        Some(role) => format!("{} ({role})", r.project),
        None => r.project.clone(),
    }).collect::<Vec<_>>().join(", "),
});
