//! Deployments: an endpoint name answering with one or more versions of a registered
//! model. Each target is a version, or an alias followed as it moves; weighted targets
//! split the traffic (a canary, or an A/B test sticky by a request key) and shadow
//! targets get a copy of it whose outputs are compared, never returned.
//!
//! The store keeps every revision of a deployment's spec: `create`, `update`,
//! `promote` and `rollback` each add one in a single transaction with its audit
//! record, so a rollback restores an earlier revision and the history stays.

use qanat_governance::{append_audit_in, AuditRecord, Project};
use qanat_store::{now_micros, MetaStore};
use sqlx::Row;

pub use qanat_types::serving::{wire, Deployment, DeploymentSpec, Revision, Routing, Target};

use crate::{Error, Result};

/// The deployments of every project, in the metadata store.
#[derive(Clone)]
pub struct Deployments {
    meta: MetaStore,
    tracking: qanat_tracking::Tracking,
}

fn parse_spec(text: &str) -> Result<DeploymentSpec> {
    serde_json::from_str(text)
        .map_err(|e| Error::Internal(format!("a stored deployment spec does not parse: {e}")))
}

fn row_to_deployment(project: &Project, row: &sqlx::any::AnyRow, spec: &str) -> Result<Deployment> {
    Ok(Deployment {
        name: row.try_get("name")?,
        project: project.name.clone(),
        revision: row.try_get("revision")?,
        spec: parse_spec(spec)?,
        created_at: row.try_get("created_at")?,
        created_by: row.try_get("created_by")?,
        updated_at: row.try_get("updated_at")?,
        updated_by: row.try_get("updated_by")?,
    })
}

const SELECT: &str =
    "SELECT d.name, d.revision, d.created_at, d.created_by, d.updated_at, d.updated_by, r.spec \
     FROM deployments d JOIN deployment_revisions r \
     ON r.project_id = d.project_id AND r.name = d.name AND r.revision = d.revision";

impl Deployments {
    pub fn new(meta: MetaStore, tracking: qanat_tracking::Tracking) -> Self {
        Deployments { meta, tracking }
    }

    /// Checks `spec` and that its model and every target exist in the registry.
    async fn check(&self, project: &Project, spec: &DeploymentSpec) -> Result<()> {
        spec.check().map_err(Error::Invalid)?;
        self.tracking
            .registered_model(project, &spec.model)
            .await
            .map_err(|e| {
                let it = qanat_core::ObjectRef::unversioned(qanat_core::Kind::Model, &spec.model);
                crate::not_found(&it.to_string(), e)
            })?;
        for t in &spec.targets {
            let found = match (&t.version, &t.alias) {
                (Some(v), _) => self.tracking.model_version(project, &spec.model, v).await,
                (_, Some(a)) => {
                    self.tracking
                        .version_by_alias(project, &spec.model, a)
                        .await
                }
                _ => unreachable!("checked: a target is a version or an alias"),
            };
            found.map_err(|e| {
                let at = t.label();
                let it = qanat_core::ObjectRef::at(qanat_core::Kind::Model, &spec.model, &at);
                crate::not_found(&it.to_string(), e)
            })?;
        }
        Ok(())
    }

    /// Creates deployment `name` at revision 1.
    #[qanat_macros::boxed]
    pub async fn create(
        &self,
        project: &Project,
        name: &str,
        spec: DeploymentSpec,
        by: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<Deployment> {
        qanat_core::Name::parse_as("deployment name", name)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        self.check(project, &spec).await?;
        let now = now_micros();
        let mut tx = self.meta.writer().begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO deployments (project_id, name, model, revision, created_at, created_by, updated_at, updated_by) \
             VALUES ($1, $2, $3, 1, $4, $5, $4, $5) ON CONFLICT (project_id, name) DO NOTHING",
        )
        .bind(project.id.as_str())
        .bind(name)
        .bind(&spec.model)
        .bind(now)
        .bind(by)
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() != 1 {
            return Err(qanat_core::Refusal::already_exists("deployment", name).into());
        }
        insert_revision(&mut tx, project, name, 1, &spec, "create", "", now, by).await?;
        if let Some(rec) = audit {
            let mut rec = rec.clone();
            rec.resource = format!("project:{}/deployment:{name}@1", project.name);
            append_audit_in(&mut tx, &rec).await?;
        }
        tx.commit().await?;
        self.get(project, name).await
    }

    #[qanat_macros::boxed]
    pub async fn get(&self, project: &Project, name: &str) -> Result<Deployment> {
        self.find(project, name)
            .await?
            .ok_or_else(|| qanat_core::Refusal::not_found("deployment", name).into())
    }

    /// The deployment, or `None` when there is none by that name.
    #[qanat_macros::boxed]
    pub async fn find(&self, project: &Project, name: &str) -> Result<Option<Deployment>> {
        let row = sqlx::query(&format!("{SELECT} WHERE d.project_id = $1 AND d.name = $2"))
            .bind(project.id.as_str())
            .bind(name)
            .fetch_optional(self.meta.reader())
            .await?;
        row.map(|r| {
            let spec: String = r.try_get("spec")?;
            row_to_deployment(project, &r, &spec)
        })
        .transpose()
    }

    /// The current revision number of `name`, or `None` (cheap: what servers poll).
    #[qanat_macros::boxed]
    pub async fn revision(&self, project: &Project, name: &str) -> Result<Option<i64>> {
        let row =
            sqlx::query("SELECT revision FROM deployments WHERE project_id = $1 AND name = $2")
                .bind(project.id.as_str())
                .bind(name)
                .fetch_optional(self.meta.reader())
                .await?;
        Ok(row.map(|r| r.try_get("revision")).transpose()?)
    }

    #[qanat_macros::boxed]
    pub async fn list(&self, project: &Project) -> Result<Vec<Deployment>> {
        let rows = sqlx::query(&format!("{SELECT} WHERE d.project_id = $1 ORDER BY d.name"))
            .bind(project.id.as_str())
            .fetch_all(self.meta.reader())
            .await?;
        rows.iter()
            .map(|r| {
                let spec: String = r.try_get("spec")?;
                row_to_deployment(project, r, &spec)
            })
            .collect()
    }

    /// Every revision of `name`, newest first.
    #[qanat_macros::boxed]
    pub async fn revisions(&self, project: &Project, name: &str) -> Result<Vec<Revision>> {
        self.get(project, name).await?;
        let rows = sqlx::query(
            "SELECT revision, action, note, spec, created_at, created_by FROM deployment_revisions \
             WHERE project_id = $1 AND name = $2 ORDER BY revision DESC",
        )
        .bind(project.id.as_str())
        .bind(name)
        .fetch_all(self.meta.reader())
        .await?;
        rows.iter()
            .map(|r| {
                let spec: String = r.try_get("spec")?;
                Ok(Revision {
                    revision: r.try_get("revision")?,
                    action: r.try_get("action")?,
                    note: r.try_get("note")?,
                    spec: parse_spec(&spec)?,
                    created_at: r.try_get("created_at")?,
                    created_by: r.try_get("created_by")?,
                })
            })
            .collect()
    }

    /// Replaces the spec of `name` (a new revision).
    #[qanat_macros::boxed]
    pub async fn update(
        &self,
        project: &Project,
        name: &str,
        spec: DeploymentSpec,
        by: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<Deployment> {
        let current = self.get(project, name).await?;
        if spec.model != current.spec.model {
            return Err(Error::Invalid(format!(
                "deployment '{name}' serves model '{}': a deployment keeps its model (create another for '{}')",
                current.spec.model, spec.model
            )));
        }
        self.check(project, &spec).await?;
        self.revise(project, &current, spec, "update", String::new(), by, audit)
            .await
    }

    /// Makes a candidate the only answering target: the one canary, or the one shadow
    /// when there is no canary, or the target labelled `to` (`3`, `@challenger`).
    #[qanat_macros::boxed]
    pub async fn promote(
        &self,
        project: &Project,
        name: &str,
        to: Option<&str>,
        by: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<Deployment> {
        let current = self.get(project, name).await?;
        let spec = &current.spec;
        let primary = spec.weighted().next().map(Target::label);
        let candidates: Vec<&Target> = match to {
            Some(label) => spec
                .targets
                .iter()
                .filter(|t| t.label() == label.trim_start_matches(':'))
                .collect(),
            None => {
                let canaries: Vec<&Target> = spec.weighted().skip(1).collect();
                if canaries.is_empty() {
                    spec.targets.iter().filter(|t| t.shadow).collect()
                } else {
                    canaries
                }
            }
        };
        let chosen = match candidates[..] {
            [one] => one,
            [] => {
                return Err(match to {
                    Some(l) => Error::Invalid(format!(
                        "deployment '{name}' has no target '{l}' (targets: {})",
                        spec.targets
                            .iter()
                            .map(Target::label)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                    None => Error::Invalid(format!(
                        "deployment '{name}' has no canary or shadow to promote"
                    )),
                })
            }
            _ => {
                return Err(Error::Invalid(format!(
                    "deployment '{name}' has several candidates ({}): name one to promote",
                    candidates
                        .iter()
                        .map(|t| t.label())
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        };
        if !chosen.shadow && Some(chosen.label()) == primary && spec.targets.len() == 1 {
            return Err(Error::Invalid(format!(
                "target '{}' already takes all of deployment '{name}''s traffic",
                chosen.label()
            )));
        }
        let promoted = DeploymentSpec {
            targets: vec![Target {
                weight: 100,
                shadow: false,
                ..chosen.clone()
            }],
            ..spec.clone()
        };
        let note = format!("promoted {}", chosen.label());
        self.check(project, &promoted).await?;
        self.revise(project, &current, promoted, "promote", note, by, audit)
            .await
    }

    /// Restores revision `to`, or the one before the current.
    #[qanat_macros::boxed]
    pub async fn rollback(
        &self,
        project: &Project,
        name: &str,
        to: Option<i64>,
        by: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<Deployment> {
        let current = self.get(project, name).await?;
        let to = to.unwrap_or(current.revision - 1);
        if to < 1 || to >= current.revision {
            return Err(Error::Invalid(if current.revision == 1 {
                format!("deployment '{name}' has one revision: there is nothing to roll back to")
            } else {
                format!(
                    "revision {to}: roll back to an earlier revision, 1 to {}",
                    current.revision - 1
                )
            }));
        }
        let row = sqlx::query(
            "SELECT spec FROM deployment_revisions WHERE project_id = $1 AND name = $2 AND revision = $3",
        )
        .bind(project.id.as_str())
        .bind(name)
        .bind(to)
        .fetch_one(self.meta.reader())
        .await?;
        let spec = parse_spec(&row.try_get::<String, _>("spec")?)?;
        // A version rolled back to may have been deleted since: refuse before switching.
        self.check(project, &spec).await?;
        let note = format!("rolled back to revision {to}");
        self.revise(project, &current, spec, "rollback", note, by, audit)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn revise(
        &self,
        project: &Project,
        current: &Deployment,
        spec: DeploymentSpec,
        action: &str,
        note: String,
        by: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<Deployment> {
        let name = &current.name;
        let next = current.revision + 1;
        let now = now_micros();
        let mut tx = self.meta.writer().begin().await?;
        let moved = sqlx::query(
            "UPDATE deployments SET revision = $1, updated_at = $2, updated_by = $3 \
             WHERE project_id = $4 AND name = $5 AND revision = $6",
        )
        .bind(next)
        .bind(now)
        .bind(by)
        .bind(project.id.as_str())
        .bind(name)
        .bind(current.revision)
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() != 1 {
            return Err(Error::Conflict(format!(
                "deployment '{name}' changed while this {action} ran: look at it again and retry"
            )));
        }
        insert_revision(&mut tx, project, name, next, &spec, action, &note, now, by).await?;
        if let Some(rec) = audit {
            let mut rec = rec.clone();
            rec.resource = format!("project:{}/deployment:{name}@{next}", project.name);
            if !note.is_empty() {
                rec.detail = format!("{} {note}", rec.detail);
            }
            append_audit_in(&mut tx, &rec).await?;
        }
        tx.commit().await?;
        self.get(project, name).await
    }

    /// Deletes `name` and its history (the audit chain keeps what happened).
    #[qanat_macros::boxed]
    pub async fn delete(
        &self,
        project: &Project,
        name: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<()> {
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query("DELETE FROM deployment_revisions WHERE project_id = $1 AND name = $2")
            .bind(project.id.as_str())
            .bind(name)
            .execute(&mut *tx)
            .await?;
        let gone = sqlx::query("DELETE FROM deployments WHERE project_id = $1 AND name = $2")
            .bind(project.id.as_str())
            .bind(name)
            .execute(&mut *tx)
            .await?;
        if gone.rows_affected() != 1 {
            return Err(qanat_core::Refusal::not_found("deployment", name).into());
        }
        if let Some(rec) = audit {
            let mut rec = rec.clone();
            rec.resource = format!("project:{}/deployment:{name}", project.name);
            append_audit_in(&mut tx, &rec).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
async fn insert_revision(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    project: &Project,
    name: &str,
    revision: i64,
    spec: &DeploymentSpec,
    action: &str,
    note: &str,
    now: i64,
    by: &str,
) -> Result<()> {
    let spec = serde_json::to_string(spec)
        .map_err(|e| Error::Internal(format!("a deployment spec does not serialize: {e}")))?;
    sqlx::query(
        "INSERT INTO deployment_revisions (project_id, name, revision, spec, action, note, created_at, created_by) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(project.id.as_str())
    .bind(name)
    .bind(revision)
    .bind(spec)
    .bind(action)
    .bind(note)
    .bind(now)
    .bind(by)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Batching;

    fn spec(targets: Vec<Target>) -> DeploymentSpec {
        DeploymentSpec {
            model: "m".into(),
            targets,
            routing: Routing::Weighted,
            batching: Batching::default(),
            log: Default::default(),
            features: None,
        }
    }

    #[test]
    fn specs_that_cannot_route_are_refused_with_the_reason() {
        let shadow = Target {
            shadow: true,
            ..Target::version("3", 0)
        };
        let ok = spec(vec![
            Target::version("1", 90),
            Target::alias("challenger", 10),
            shadow.clone(),
        ]);
        ok.check().expect("valid");
        let cases = [
            (spec(vec![]), "at least one target"),
            (spec(vec![Target::version("1", 90)]), "add up to 90"),
            (spec(vec![Target::version("0", 100)]), "number from 1"),
            (
                spec(vec![Target::version("1", 50), Target::version("1", 50)]),
                "listed twice",
            ),
            (
                spec(vec![
                    Target::version("1", 100),
                    Target {
                        weight: 5,
                        ..shadow
                    },
                ]),
                "its weight is 0",
            ),
            (
                spec(vec![Target {
                    alias: Some("a".into()),
                    ..Target::version("1", 100)
                }]),
                "exactly one of version and alias",
            ),
        ];
        for (s, want) in cases {
            let e = s.check().expect_err(want).to_string();
            assert!(e.contains(want), "{e} (wanted {want})");
        }
    }

    #[test]
    fn specs_read_back_from_json_and_refuse_unknown_fields() {
        let s: DeploymentSpec = serde_json::from_str(
            r#"{"model":"m","targets":[{"version":"2","weight":100}],"routing":"sticky"}"#,
        )
        .expect("parse");
        assert_eq!(s.routing, Routing::Sticky);
        assert_eq!(s.batching, Batching::default());
        let bad = serde_json::from_str::<DeploymentSpec>(
            r#"{"model":"m","targets":[{"version":"2","weigth":100}]}"#,
        );
        assert!(bad.is_err());
    }
}
