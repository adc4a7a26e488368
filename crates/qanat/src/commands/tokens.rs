//! `qanat tokens`: create (the secret is printed once), list, revoke.

use std::time::Duration;

use anyhow::Result;
use qanat_governance::wire::{CreateToken, TokenFilter};
use qanat_governance::TokenInfo;

use super::Ctx;
use crate::cli::{Format, TokensCmd};
use crate::output;

pub async fn run(ctx: &Ctx, cmd: TokensCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        TokensCmd::Create {
            name,
            user,
            expires_in,
            scope,
            rate_limit,
        } => {
            let body = CreateToken {
                name,
                user,
                expires_in_seconds: expires_in
                    .map(|d| i64::try_from(Duration::from(d).as_secs()).unwrap_or(i64::MAX)),
                scope: scope.map(|s| s.parse()).transpose()?,
                rate_limit,
            };
            let t = c.create_token(&body).await?;
            if format == Format::Json {
                return output::json(&t);
            }
            // The secret alone on stdout, so `$(qanat tokens create)` captures just it.
            eprintln!(
                "token {} for {} (shown once, store it now):",
                t.info.id, t.info.user
            );
            println!("{}", t.token);
            Ok(())
        }
        TokensCmd::Ls { user } => output::list(format, &c.tokens(&TokenFilter { user }).await?),
        TokensCmd::Revoke { id } => output::record(format, &c.revoke_token(&id).await?),
    }
}

output::columns!(TokenInfo, |x| {
    "id" => x.id.clone(),
    "user" => x.user.clone(),
    "name" => x.name.clone(),
    "created" => x.created_at.clone(),
    "expires" => output::opt(x.expires_at.as_ref()),
    "revoked" => output::opt(x.revoked_at.as_ref()),
    "last used" => output::opt(x.last_used_at.as_ref()),
    "scope" => x.scope.to_string(),
    "rate limit" => x.rate_limit.map_or("-".into(), |r| format!("{r}/s")),
});

output::fields!(TokenInfo = Row);
