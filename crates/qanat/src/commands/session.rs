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
            sso: None,
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

/// What a provider's device authorization endpoint answers (RFC 8628, 3.2).
#[derive(serde::Deserialize)]
struct DeviceAuthorization {
    device_code: String,
    user_code: String,
    verification_uri: String,
    #[serde(default)]
    verification_uri_complete: Option<String>,
    expires_in: i64,
    #[serde(default)]
    interval: Option<u64>,
}

/// Logs in through the server's identity provider with the device authorization
/// grant: the person opens the URL printed (on any device), signs in there and
/// confirms the code; the provider's access and refresh tokens are stored as the
/// server's login (the password never passes through here).
pub async fn login_sso(server: Option<&str>, ca_cert: Option<&Path>) -> Result<()> {
    let target = Target::resolve(server, None, ca_cert)?;
    let anonymous = Target {
        token: None,
        sso: None,
        ..target
    };
    let settings = anonymous.client()?.sso_settings().await.with_context(|| {
        format!(
            "asking {} how to log in through single sign-on",
            anonymous.server
        )
    })?;
    // The endpoints come from the provider's own discovery document, not from the
    // server: the refresh token is only ever sent to the issuer's token endpoint.
    let (device_endpoint, token_endpoint) =
        credentials::provider_endpoints(&settings.issuer).await?;
    let Some(device_endpoint) = device_endpoint.as_deref() else {
        bail!(
            "the identity provider {} offers no device authorization grant, which `qanat login --sso` uses; log in with a token (`qanat login --token`) or enable the device flow for client '{}'",
            settings.issuer,
            settings.client_id
        );
    };
    let device = match credentials::provider_post::<DeviceAuthorization>(
        device_endpoint,
        &[
            ("client_id", &settings.client_id),
            ("scope", &settings.scopes),
        ],
    )
    .await?
    {
        Ok(d) => d,
        Err(e) => bail!("the identity provider refused to start a device login: {e}"),
    };
    eprintln!(
        "To log in to {} through {}, open\n\n    {}\n\nand confirm the code {}",
        anonymous.server,
        settings.issuer,
        device
            .verification_uri_complete
            .as_deref()
            .unwrap_or(&device.verification_uri),
        device.user_code
    );
    if device.verification_uri_complete.is_some() {
        eprintln!("(or open {} and enter it)", device.verification_uri);
    }
    eprintln!(
        "waiting for the login (the code is good for {} s)…",
        device.expires_in
    );
    let mut interval = device.interval.unwrap_or(5).max(1);
    let deadline = credentials::unix_now() + device.expires_in;
    let tokens = loop {
        tokio::time::sleep(std::time::Duration::from_secs(interval)).await;
        if credentials::unix_now() > deadline {
            bail!("the login code expired before the login was confirmed; run `qanat login --sso` again");
        }
        match credentials::provider_post::<credentials::ProviderTokens>(
            &token_endpoint,
            &[
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
                ("device_code", &device.device_code),
                ("client_id", &settings.client_id),
            ],
        )
        .await?
        {
            Ok(t) => break t,
            Err(e) if e.error == "authorization_pending" => {}
            Err(e) if e.error == "slow_down" => interval += 5,
            Err(e) if e.error == "access_denied" => {
                bail!("the login was refused at the identity provider ({e})")
            }
            Err(e) if e.error == "expired_token" => {
                bail!("the login code expired before the login was confirmed; run `qanat login --sso` again")
            }
            Err(e) => bail!("the identity provider refused the login: {e}"),
        }
    };
    let sso = credentials::SsoSession {
        issuer: settings.issuer.clone(),
        token_endpoint: token_endpoint.clone(),
        client_id: settings.client_id.clone(),
        refresh_token: tokens.refresh_token.clone(),
        expires_at: credentials::unix_now() + tokens.expires_in.unwrap_or(300),
    };
    let target = Target {
        token: Some(tokens.access_token.clone()),
        sso: Some(sso.clone()),
        ..anonymous
    };
    let me = target.client()?.whoami().await.with_context(|| {
        format!(
            "{} did not accept the identity provider's token (does security.oidc.audience name what the provider puts in 'aud' for client '{}'?)",
            target.server, settings.client_id
        )
    })?;
    let path = credentials::remember(
        &target.server,
        Login {
            token: tokens.access_token,
            ca_cert: target
                .ca_cert
                .as_deref()
                .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())),
            sso: Some(sso),
        },
    )?;
    eprintln!(
        "logged in to {} as {} through single sign-on ({}); the session renews itself{}; credentials saved to {}",
        target.server,
        me.principal.name,
        settings.issuer,
        if tokens.refresh_token.is_some() { "" } else { " only until the provider's token expires (it gave no refresh token)" },
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
