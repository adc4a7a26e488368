//! `qanat users` and `qanat tokens`.

use std::time::Duration;

use anyhow::Result;
use reqwest::Method;
use serde_json::{json, Value};

use crate::cli::identity::{TokensCmd, UsersCmd};
use crate::cli::Format;
use crate::client::{seg, Client};
use crate::output;

pub(super) async fn users(c: &Client, fmt: Format, cmd: UsersCmd) -> Result<()> {
    let patch = |name: &str, body: Value| {
        c.request(Method::PATCH, &format!("/api/v1/users/{}", seg(name)))
            .json(&body)
    };
    let u: Value = match cmd {
        UsersCmd::Create {
            name,
            service,
            admin,
        } => {
            let kind = if service { "service" } else { "user" };
            c.json(
                c.request(Method::POST, "/api/v1/users")
                    .json(&json!({"name": name, "kind": kind, "admin": admin})),
            )
            .await?
        }
        UsersCmd::Ls => {
            let us: Value = c.get("/api/v1/users").await?;
            output::list(
                fmt,
                &us,
                &[
                    ("name", "name"),
                    ("kind", "kind"),
                    ("admin", "is_admin"),
                    ("disabled", "disabled"),
                    ("created", "created_at"),
                ],
            );
            return Ok(());
        }
        UsersCmd::Disable { name } => c.json(patch(&name, json!({"disabled": true}))).await?,
        UsersCmd::Enable { name } => c.json(patch(&name, json!({"disabled": false}))).await?,
        UsersCmd::SetAdmin { name, admin } => c.json(patch(&name, json!({"admin": admin}))).await?,
    };
    output::object(fmt, &u);
    Ok(())
}

pub(super) async fn tokens(c: &Client, fmt: Format, cmd: TokensCmd) -> Result<()> {
    match cmd {
        TokensCmd::Create {
            name,
            user,
            expires_in,
        } => {
            let mut body = json!({"name": name});
            if let Some(u) = user {
                body["user"] = json!(u);
            }
            if let Some(d) = expires_in {
                body["expires_in_seconds"] = json!(Duration::from(d).as_secs());
            }
            let t: Value = c
                .json(c.request(Method::POST, "/api/v1/tokens").json(&body))
                .await?;
            if fmt == Format::Json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                eprintln!(
                    "token {} for {} (shown once, store it now):",
                    t["id"].as_str().unwrap_or("?"),
                    t["user"].as_str().unwrap_or("?")
                );
                println!("{}", t["token"].as_str().unwrap_or(""));
            }
        }
        TokensCmd::Ls { user } => {
            let path = match user {
                Some(u) => format!("/api/v1/tokens?user={}", seg(&u)),
                None => "/api/v1/tokens".into(),
            };
            let ts: Value = c.get(&path).await?;
            output::list(
                fmt,
                &ts,
                &[
                    ("id", "id"),
                    ("user", "user"),
                    ("name", "name"),
                    ("created", "created_at"),
                    ("expires", "expires_at"),
                    ("revoked", "revoked_at"),
                    ("last used", "last_used_at"),
                ],
            );
        }
        TokensCmd::Revoke { id } => {
            let t: Value = c
                .json(c.request(Method::DELETE, &format!("/api/v1/tokens/{}", seg(&id))))
                .await?;
            output::object(fmt, &t);
        }
    }
    Ok(())
}
