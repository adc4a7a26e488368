//! `qanat users`: people and service accounts (global admins).

use anyhow::Result;
use qanat_governance::wire::{CreateUser, UpdateUser};
use qanat_governance::{User, UserKind};

use super::Ctx;
use crate::cli::UsersCmd;
use crate::output;

pub async fn run(ctx: &Ctx, cmd: UsersCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    let change = |admin, disabled| UpdateUser { admin, disabled };
    let user = match cmd {
        UsersCmd::Create {
            name,
            service,
            admin,
        } => {
            let kind = if service {
                UserKind::Service
            } else {
                UserKind::User
            };
            c.create_user(&CreateUser {
                name,
                kind: Some(kind),
                admin,
            })
            .await?
        }
        UsersCmd::Ls => return output::list(format, &c.users().await?),
        UsersCmd::Disable { name } => c.update_user(&name, &change(None, Some(true))).await?,
        UsersCmd::Enable { name } => c.update_user(&name, &change(None, Some(false))).await?,
        UsersCmd::SetAdmin { name, admin } => {
            c.update_user(&name, &change(Some(admin), None)).await?
        }
    };
    output::record(format, &user)
}

output::columns!(User, |x| {
    "name" => x.name.clone(),
    "kind" => x.kind.to_string(),
    "admin" => x.is_admin.to_string(),
    "disabled" => x.disabled.to_string(),
    "created" => x.created_at.clone(),
});

output::fields!(User, |x| {
    "name" => x.name.clone(),
    "id" => x.id.to_string(),
    "kind" => x.kind.to_string(),
    "admin" => x.is_admin.to_string(),
    "disabled" => x.disabled.to_string(),
    "created" => x.created_at.clone(),
});
