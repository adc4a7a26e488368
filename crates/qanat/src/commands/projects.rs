//! `qanat projects`: projects, their allowed regions, their members.

use anyhow::Result;
use qanat_governance::wire::{CreateProject, SetMember, UpdateProject};
use qanat_governance::{Member, Project};

use super::Ctx;
use crate::cli::ProjectsCmd;
use crate::output::{self, Record, Row};

pub async fn run(ctx: &Ctx, cmd: ProjectsCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        ProjectsCmd::Create {
            name,
            description,
            regions,
        } => {
            let body = CreateProject {
                name,
                description,
                allowed_regions: regions,
            };
            output::record(format, &c.create_project(&body).await?)
        }
        ProjectsCmd::Ls => output::list(format, &c.projects().await?),
        ProjectsCmd::Show { name } => output::record(format, &c.project(&name).await?),
        ProjectsCmd::SetRegions { name, regions } => {
            let change = UpdateProject {
                allowed_regions: Some(regions),
                ..UpdateProject::default()
            };
            output::record(format, &c.update_project(&name, &change).await?)
        }
        ProjectsCmd::Members { name } => output::list(format, &c.members(&name).await?),
        ProjectsCmd::Grant {
            project,
            user,
            role,
        } => {
            let m = c.set_member(&project, &user, &SetMember { role }).await?;
            output::record(format, &m)
        }
        ProjectsCmd::Revoke { project, user } => {
            c.remove_member(&project, &user).await?;
            eprintln!("removed {user} from {project}");
            Ok(())
        }
    }
}

impl Row for Project {
    const HEADERS: &'static [&'static str] = &["name", "regions", "description", "created"];
    fn cells(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            output::joined(&self.allowed_regions),
            self.description.clone(),
            self.created_at.clone(),
        ]
    }
}

impl Record for Project {
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("name", self.name.clone()),
            ("id", self.id.to_string()),
            ("description", self.description.clone()),
            ("regions", output::joined(&self.allowed_regions)),
            ("created", self.created_at.clone()),
            ("created by", self.created_by.clone()),
        ]
    }
}

impl Row for Member {
    const HEADERS: &'static [&'static str] = &["user", "role", "since"];
    fn cells(&self) -> Vec<String> {
        vec![
            self.user.clone(),
            self.role.to_string(),
            self.created_at.clone(),
        ]
    }
}

impl Record for Member {
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("user", self.user.clone()),
            ("role", self.role.to_string()),
            ("since", self.created_at.clone()),
        ]
    }
}
