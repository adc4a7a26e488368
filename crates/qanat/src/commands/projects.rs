//! `qanat projects`: create, list, show, grant, revoke.

use anyhow::Result;
use reqwest::Method;
use serde_json::{json, Value};

use crate::cli::projects::ProjectsCmd;
use crate::cli::Format;
use crate::client::{seg, Client};
use crate::output;

pub(super) async fn projects(c: &Client, fmt: Format, cmd: ProjectsCmd) -> Result<()> {
    match cmd {
        ProjectsCmd::Create {
            name,
            description,
            regions,
        } => {
            let mut body = json!({"name": name, "description": description});
            if let Some(r) = regions {
                body["allowed_regions"] = json!(r);
            }
            let p: Value = c
                .json(c.request(Method::POST, "/api/v1/projects").json(&body))
                .await?;
            output::object(fmt, &p);
        }
        ProjectsCmd::Ls => {
            let ps = c.projects().await?;
            output::table(
                fmt,
                &ps,
                &["name", "regions", "description", "created"],
                |p| {
                    vec![
                        p.name.clone(),
                        p.allowed_regions.join(","),
                        p.description.clone(),
                        p.created_at.clone(),
                    ]
                },
            );
        }
        ProjectsCmd::Show { name } => {
            let p: Value = c.get(&format!("/api/v1/projects/{}", seg(&name))).await?;
            output::object(fmt, &p);
        }
        ProjectsCmd::SetRegions { name, regions } => {
            let p: Value = c
                .json(
                    c.request(Method::PATCH, &format!("/api/v1/projects/{}", seg(&name)))
                        .json(&json!({"allowed_regions": regions})),
                )
                .await?;
            output::object(fmt, &p);
        }
        ProjectsCmd::Members { name } => {
            let ms: Value = c
                .get(&format!("/api/v1/projects/{}/members", seg(&name)))
                .await?;
            output::list(
                fmt,
                &ms,
                &[("user", "user"), ("role", "role"), ("since", "created_at")],
            );
        }
        ProjectsCmd::Grant {
            project,
            user,
            role,
        } => {
            let m: Value = c
                .json(
                    c.request(
                        Method::PUT,
                        &format!("/api/v1/projects/{}/members/{}", seg(&project), seg(&user)),
                    )
                    .json(&json!({"role": role})),
                )
                .await?;
            output::object(fmt, &m);
        }
        ProjectsCmd::Revoke { project, user } => {
            c.send(c.request(
                Method::DELETE,
                &format!("/api/v1/projects/{}/members/{}", seg(&project), seg(&user)),
            ))
            .await?;
            eprintln!("removed {user} from {project}");
        }
    }
    Ok(())
}
