//! `qanat users`: people and service accounts (global admins).

use anyhow::Result;
use qanat_governance::wire::{CreateUser, UpdateUser};
use qanat_governance::{User, UserKind};

use super::Ctx;
use crate::cli::UsersCmd;
use crate::output::{self, Record, Row};

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

impl Row for User {
    const HEADERS: &'static [&'static str] = &["name", "kind", "admin", "disabled", "created"];
    fn cells(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.kind.to_string(),
            self.is_admin.to_string(),
            self.disabled.to_string(),
            self.created_at.clone(),
        ]
    }
}

impl Record for User {
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("name", self.name.clone()),
            ("id", self.id.to_string()),
            ("kind", self.kind.to_string()),
            ("admin", self.is_admin.to_string()),
            ("disabled", self.disabled.to_string()),
            ("created", self.created_at.clone()),
        ]
    }
}
