//! `qanat projects`: projects, their allowed regions, their members.

use anyhow::Result;
use qanat_governance::wire::{CreateProject, SetMember, UpdateProject};
use qanat_governance::{Member, PiiReader, Project};

use super::Ctx;
use crate::cli::ProjectsCmd;
use crate::output;

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
        ProjectsCmd::Ls { deleted: false } => output::list(format, &c.projects().await?),
        ProjectsCmd::Ls { deleted: true } => output::list(format, &c.deleted_projects().await?),
        ProjectsCmd::Show { name } => output::record(format, &c.project(&name).await?),
        ProjectsCmd::SetRegions { name, regions } => {
            let change = UpdateProject {
                allowed_regions: Some(regions),
                ..UpdateProject::default()
            };
            output::record(format, &c.update_project(&name, &change).await?)
        }
        ProjectsCmd::RequirePiiDeclared { name, required } => {
            let change = UpdateProject {
                require_pii_declared: Some(required),
                ..UpdateProject::default()
            };
            output::record(format, &c.update_project(&name, &change).await?)
        }
        ProjectsCmd::SetRetention {
            name,
            inference_log_days,
            dataset_version_days,
        } => {
            let change = UpdateProject {
                inference_log_days,
                dataset_version_days,
                ..UpdateProject::default()
            };
            output::record(format, &c.update_project(&name, &change).await?)
        }
        ProjectsCmd::PiiReaders { name } => output::list(format, &c.pii_readers(&name).await?),
        ProjectsCmd::GrantPii { project, user } => {
            output::record(format, &c.grant_pii(&project, &user).await?)
        }
        ProjectsCmd::RevokePii { project, user } => {
            c.revoke_pii(&project, &user).await?;
            eprintln!("{user} no longer holds the PII permission of {project}");
            Ok(())
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
        ProjectsCmd::Rm { name } => {
            let p = c.delete_project(&name).await?;
            if format == crate::cli::Format::Json {
                return output::json(&p);
            }
            eprintln!(
                "deleted project '{name}': a global admin can `qanat projects restore {name}` until gc purges it after the retention period"
            );
            Ok(())
        }
        ProjectsCmd::Restore { name } => output::record(format, &c.restore_project(&name).await?),
    }
}

output::columns!(Project, |x| {
    "name" => x.name.clone(),
    "regions" => output::joined(&x.allowed_regions),
    "description" => x.description.clone(),
    "created" => x.created_at.clone(),
});

output::fields!(Project, |x| {
    "name" => x.name.clone(),
    "id" => x.id.to_string(),
    "description" => x.description.clone(),
    "regions" => output::joined(&x.allowed_regions),
    "personal data" => if x.require_pii_declared { "must be declared" } else { "flagged when undeclared" }.to_string(),
    "inference logs kept" => x.inference_log_days.map_or_else(|| "until deleted".into(), |d| format!("{d} days")),
    "old dataset versions kept" => x.dataset_version_days.map_or_else(|| "until deleted".into(), |d| format!("{d} days (latest and tagged: always)")),
    "created" => x.created_at.clone(),
    "created by" => x.created_by.clone(),
});

output::columns!(PiiReader, |x| {
    "user" => x.user.clone(),
    "granted by" => x.granted_by.clone(),
    "since" => x.granted_at.clone(),
});

output::fields!(PiiReader = Row);

output::columns!(Member, |x| {
    "user" => x.user.clone(),
    "role" => x.role.to_string(),
    "since" => x.created_at.clone(),
});

output::fields!(Member = Row);
