//! `qanat tokens`: create (the secret is printed once), list, revoke.

use std::time::Duration;

use anyhow::Result;
use qanat_governance::wire::{CreateToken, TokenFilter};
use qanat_governance::TokenInfo;

use super::Ctx;
use crate::cli::{Format, TokensCmd};
use crate::output::{self, Record, Row};

pub async fn run(ctx: &Ctx, cmd: TokensCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        TokensCmd::Create {
            name,
            user,
            expires_in,
        } => {
            let body = CreateToken {
                name,
                user,
                expires_in_seconds: expires_in
                    .map(|d| i64::try_from(Duration::from(d).as_secs()).unwrap_or(i64::MAX)),
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

impl Row for TokenInfo {
    const HEADERS: &'static [&'static str] = &[
        "id",
        "user",
        "name",
        "created",
        "expires",
        "revoked",
        "last used",
    ];
    fn cells(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.user.clone(),
            self.name.clone(),
            self.created_at.clone(),
            output::opt(self.expires_at.as_ref()),
            output::opt(self.revoked_at.as_ref()),
            output::opt(self.last_used_at.as_ref()),
        ]
    }
}

impl Record for TokenInfo {
    fn fields(&self) -> Vec<(&'static str, String)> {
        Self::HEADERS.iter().copied().zip(self.cells()).collect()
    }
}
