//! Projects (the unit of isolation) and their members.

use qanat_core::{ProjectId, UserId};
use qanat_store::{now_micros, Region};
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::identity::rfc3339;
use crate::{Error, Governance, Result};
use crate::{Member, Principal, Project, Role, User, UserKind};

fn project_from_row(row: &AnyRow) -> Result<Project> {
    let regions: String = row.try_get("allowed_regions")?;
    Ok(Project {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        description: row.try_get("description")?,
        allowed_regions: serde_json::from_str(&regions)
            .map_err(|e| Error::invalid("stored regions", e.to_string()))?,
        require_pii_declared: row.try_get::<i64, _>("require_pii_declared")? != 0,
        inference_log_days: row
            .try_get::<Option<i64>, _>("inference_log_days")?
            .and_then(|d| u32::try_from(d).ok()),
        dataset_version_days: row
            .try_get::<Option<i64>, _>("dataset_version_days")?
            .and_then(|d| u32::try_from(d).ok()),
        created_at: rfc3339(row.try_get("created_at")?),
        created_by: row.try_get("created_by")?,
        deleted_at: row.try_get::<Option<i64>, _>("deleted_at")?.map(rfc3339),
    })
}

fn validate_regions(regions: &[String]) -> Result<Vec<String>> {
    if regions.is_empty() {
        return Err(Error::invalid(
            "allowed regions",
            "a project needs at least one allowed region, e.g. [\"uae-north\"]",
        ));
    }
    let mut out = Vec::with_capacity(regions.len());
    for r in regions {
        let region: Region = r.parse()?;
        if !out.contains(&region.to_string()) {
            out.push(region.to_string());
        }
    }
    Ok(out)
}

impl Governance {
    /// Creates a project; `creator` becomes its admin.
    #[qanat_macros::boxed]
    pub async fn create_project(
        &self,
        name: &str,
        description: &str,
        allowed_regions: &[String],
        creator: &Principal,
    ) -> Result<Project> {
        qanat_core::Name::parse_as("project name", name)?;
        let regions = validate_regions(allowed_regions)?;
        let id = format!("prj_{}", uuid::Uuid::new_v4().simple());
        let now = now_micros();
        let regions_json = serde_json::to_string(&regions)
            .map_err(|e| Error::invalid("regions", e.to_string()))?;
        let mut tx = self.meta.writer().begin().await?;
        let res = sqlx::query(
            "INSERT INTO projects (id, name, description, allowed_regions, created_at, created_by) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&id)
        .bind(name)
        .bind(description)
        .bind(regions_json)
        .bind(now)
        .bind(&creator.name)
        .execute(&mut *tx)
        .await;
        match res {
            Ok(_) => {}
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                let deleted = sqlx::query(
                    "SELECT 1 FROM projects WHERE name = $1 AND deleted_at IS NOT NULL",
                )
                .bind(name)
                .fetch_optional(self.meta.reader())
                .await?
                .is_some();
                if deleted {
                    return Err(Error::already_exists(
                        "project",
                        format!("{name} (deleted: the name stays taken until gc purges it after the retention period; a global admin can `qanat projects restore {name}`)"),
                    ));
                }
                return Err(Error::already_exists("project", name));
            }
            Err(e) => return Err(e.into()),
        }
        sqlx::query(
            "INSERT INTO members (project_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(&id)
        .bind(&creator.user_id)
        .bind(Role::Admin.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        crate::auth_changed();
        self.project(name).await
    }

    /// Looks a project up by name.
    #[qanat_macros::boxed]
    pub async fn project(&self, name: &str) -> Result<Project> {
        let row = sqlx::query("SELECT * FROM projects WHERE name = $1 AND deleted_at IS NULL")
            .bind(name)
            .fetch_optional(self.meta.reader())
            .await?
            .ok_or_else(|| Error::not_found("project", name))?;
        project_from_row(&row)
    }

    /// Looks a live project up by id (what rows of other domains keep).
    #[qanat_macros::boxed]
    pub async fn project_by_id(&self, id: &ProjectId) -> Result<Project> {
        let row = sqlx::query("SELECT * FROM projects WHERE id = $1 AND deleted_at IS NULL")
            .bind(id)
            .fetch_optional(self.meta.reader())
            .await?
            .ok_or_else(|| Error::not_found("project", id.as_str()))?;
        project_from_row(&row)
    }

    /// The service account `name` (created when missing) with exactly `role` in `p`:
    /// what the server's own services act as inside one project (a job's token belongs
    /// to `jobs@<project>`). Refused if a human user already holds the name.
    #[qanat_macros::boxed]
    pub async fn service_member(&self, p: &Project, name: &str, role: Role) -> Result<User> {
        let user = match self.user(name).await {
            Ok(u) => u,
            Err(Error::Refused(qanat_core::Refusal::NotFound { .. })) => {
                match self.create_user(name, UserKind::Service, false).await {
                    Ok(u) => u,
                    // Another server created it at the same moment.
                    Err(Error::Refused(qanat_core::Refusal::AlreadyExists { .. })) => {
                        self.user(name).await?
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        if user.kind != UserKind::Service || user.is_admin {
            return Err(Error::Forbidden(format!(
                "'{name}' is taken by an account that is not a plain service account; rename it so Qanat can use the name"
            )));
        }
        sqlx::query(
            "INSERT INTO members (project_id, user_id, role, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (project_id, user_id) DO UPDATE SET role = excluded.role",
        )
        .bind(&p.id)
        .bind(&user.id)
        .bind(role.as_str())
        .bind(now_micros())
        .execute(self.meta.writer())
        .await?;
        crate::auth_changed();
        Ok(user)
    }

    /// The projects `principal` can see: all for a global admin, else their memberships.
    #[qanat_macros::boxed]
    pub async fn projects_for(&self, principal: &Principal) -> Result<Vec<Project>> {
        let rows = if principal.is_admin {
            sqlx::query("SELECT * FROM projects WHERE deleted_at IS NULL ORDER BY name")
                .fetch_all(self.meta.reader())
                .await?
        } else {
            sqlx::query(
                "SELECT p.* FROM projects p WHERE p.deleted_at IS NULL AND (\
                 EXISTS (SELECT 1 FROM members m WHERE m.project_id = p.id AND m.user_id = $1) OR \
                 EXISTS (SELECT 1 FROM mapped_members x WHERE x.project_id = p.id AND x.user_id = $1)) ORDER BY p.name",
            )
            .bind(&principal.user_id)
            .fetch_all(self.meta.reader())
            .await?
        };
        rows.iter().map(project_from_row).collect()
    }

    /// Deletes a project: it is gone for everyone at once (every request naming it gets
    /// 404), while its data stays until `gc` purges it after the retention period; a
    /// global admin can [`Self::restore_project`] it until then. Its name stays taken.
    #[qanat_macros::boxed]
    pub async fn delete_project(&self, p: &Project, by: &Principal) -> Result<Project> {
        let done = sqlx::query(
            "UPDATE projects SET deleted_at = $1, deleted_by = $2 WHERE id = $3 AND deleted_at IS NULL",
        )
        .bind(now_micros())
        .bind(&by.name)
        .bind(&p.id)
        .execute(self.meta.writer())
        .await?
        .rows_affected();
        crate::auth_changed();
        if done == 0 {
            return Err(Error::not_found("project", &p.name));
        }
        self.deleted_project(&p.name).await
    }

    /// A deleted project not purged yet, by name.
    #[qanat_macros::boxed]
    pub async fn deleted_project(&self, name: &str) -> Result<Project> {
        let row = sqlx::query("SELECT * FROM projects WHERE name = $1 AND deleted_at IS NOT NULL")
            .bind(name)
            .fetch_optional(self.meta.reader())
            .await?
            .ok_or_else(|| Error::not_found("deleted project", name))?;
        project_from_row(&row)
    }

    /// Every deleted project not purged yet.
    #[qanat_macros::boxed]
    pub async fn deleted_projects(&self) -> Result<Vec<Project>> {
        let rows = sqlx::query("SELECT * FROM projects WHERE deleted_at IS NOT NULL ORDER BY name")
            .fetch_all(self.meta.reader())
            .await?;
        rows.iter().map(project_from_row).collect()
    }

    /// Brings back a deleted project, with its members, before `gc` purges it.
    #[qanat_macros::boxed]
    pub async fn restore_project(&self, name: &str) -> Result<Project> {
        let done = sqlx::query(
            "UPDATE projects SET deleted_at = NULL, deleted_by = NULL WHERE name = $1 AND deleted_at IS NOT NULL",
        )
        .bind(name)
        .execute(self.meta.writer())
        .await?
        .rows_affected();
        crate::auth_changed();
        if done == 0 {
            return Err(Error::not_found("deleted project", name));
        }
        self.project(name).await
    }

    /// Removes a deleted project's own rows (its members, then the project). The other
    /// domains purge theirs first; the audit log keeps every entry about it.
    #[qanat_macros::boxed]
    pub async fn purge_project(&self, p: &Project) -> Result<()> {
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query("DELETE FROM members WHERE project_id = $1")
            .bind(&p.id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM projects WHERE id = $1 AND deleted_at IS NOT NULL")
            .bind(&p.id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        crate::auth_changed();
        Ok(())
    }

    /// Changes a project's description and/or residency policy.
    #[qanat_macros::boxed]
    pub async fn update_project(
        &self,
        current: &Project,
        change: &crate::wire::UpdateProject,
    ) -> Result<Project> {
        let regions = match change.allowed_regions.as_deref() {
            Some(r) => validate_regions(r)?,
            None => current.allowed_regions.clone(),
        };
        let regions_json = serde_json::to_string(&regions)
            .map_err(|e| Error::invalid("regions", e.to_string()))?;
        let require = change
            .require_pii_declared
            .unwrap_or(current.require_pii_declared);
        let days = |what: &'static str, given: Option<u32>, now: Option<u32>| match given {
            Some(0) => Ok(None),
            Some(d) if d > 36_500 => Err(Error::invalid(
                what,
                "at most 36500 (100 years); 0 keeps them until deleted",
            )),
            Some(d) => Ok(Some(d)),
            None => Ok(now),
        };
        let log_days = days(
            "inference_log_days",
            change.inference_log_days,
            current.inference_log_days,
        )?;
        let version_days = days(
            "dataset_version_days",
            change.dataset_version_days,
            current.dataset_version_days,
        )?;
        sqlx::query("UPDATE projects SET description = $1, allowed_regions = $2, require_pii_declared = $3, inference_log_days = $4, dataset_version_days = $5 WHERE id = $6")
            .bind(change.description.as_deref().unwrap_or(&current.description))
            .bind(regions_json)
            .bind(i64::from(require))
            .bind(log_days.map(i64::from))
            .bind(version_days.map(i64::from))
            .bind(&current.id)
            .execute(self.meta.writer())
            .await?;
        crate::auth_changed();
        self.project(&current.name).await
    }

    /// The project named `project` and `user_id`'s role in it (None for a
    /// non-member), in one query: what the authorization point resolves once per
    /// request and hands to the handler, remembered for a moment (see
    /// [`crate::cache`]). Errors if the project does not exist.
    #[qanat_macros::boxed]
    pub async fn project_and_role(
        &self,
        user_id: &UserId,
        project: &str,
    ) -> Result<(Project, Option<Role>)> {
        let (p, role) = self.project_role_and_source(user_id, project).await?;
        Ok((p, role.map(|(r, _)| r)))
    }

    /// [`Governance::project_and_role`], with what decided the role: an admin's grant
    /// or the identity provider's groups (the higher of the two; a tie goes to the
    /// grant). From the same query and the same cache.
    #[qanat_macros::boxed]
    pub async fn project_role_and_source(
        &self,
        user_id: &UserId,
        project: &str,
    ) -> Result<(Project, Option<(Role, crate::RoleSource)>)> {
        let key = (user_id.clone(), project.to_string());
        if let Some(hit) = self.scopes.get(&key) {
            return Ok(hit);
        }
        let generation = self.scopes.generation();
        let row = sqlx::query(
            "SELECT p.*, m.role AS member_role, x.role AS mapped_role, x.groups AS mapped_groups FROM projects p \
             LEFT JOIN members m ON m.project_id = p.id AND m.user_id = $1 \
             LEFT JOIN mapped_members x ON x.project_id = p.id AND x.user_id = $1 \
             WHERE p.name = $2 AND p.deleted_at IS NULL",
        )
        .bind(user_id)
        .bind(project)
        .fetch_optional(self.meta.reader())
        .await?
        .ok_or_else(|| Error::not_found("project", project))?;
        let role =
            crate::external::role_from_row(&row, "member_role", "mapped_role", "mapped_groups")?;
        let found = (project_from_row(&row)?, role);
        self.scopes.put(key, found.clone(), generation);
        Ok(found)
    }

    /// The caller's role in `project`; errors if the project does not exist.
    #[qanat_macros::boxed]
    pub async fn role_in(&self, user_id: &UserId, project: &str) -> Result<Option<Role>> {
        Ok(self.project_and_role(user_id, project).await?.1)
    }

    /// Who holds the project's PII permission (personal data in clear).
    #[qanat_macros::boxed]
    pub async fn pii_readers(&self, p: &Project) -> Result<Vec<crate::PiiReader>> {
        let rows = sqlx::query(
            "SELECT u.name, r.granted_by, r.granted_at FROM pii_readers r JOIN users u ON u.id = r.user_id \
             WHERE r.project_id = $1 ORDER BY u.name",
        )
        .bind(&p.id)
        .fetch_all(self.meta.reader())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(crate::PiiReader {
                    user: r.try_get("name")?,
                    granted_by: r.try_get("granted_by")?,
                    granted_at: rfc3339(r.try_get("granted_at")?),
                })
            })
            .collect()
    }

    /// Grants `user` the project's PII permission (idempotent). The user must exist;
    /// the permission shows nothing the user's role does not already let them read.
    #[qanat_macros::boxed]
    pub async fn grant_pii(
        &self,
        p: &Project,
        user: &str,
        by: &Principal,
    ) -> Result<crate::PiiReader> {
        let u = self.user(user).await?;
        sqlx::query(
            "INSERT INTO pii_readers (project_id, user_id, granted_by, granted_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (project_id, user_id) DO NOTHING",
        )
        .bind(&p.id)
        .bind(&u.id)
        .bind(&by.name)
        .bind(now_micros())
        .execute(self.meta.writer())
        .await?;
        crate::auth_changed();
        self.pii_readers(p)
            .await?
            .into_iter()
            .find(|r| r.user == u.name)
            .ok_or_else(|| Error::not_found("PII reader", user))
    }

    /// Takes the project's PII permission from `user`; not found when they had none.
    #[qanat_macros::boxed]
    pub async fn revoke_pii(&self, p: &Project, user: &str) -> Result<()> {
        let u = self.user(user).await?;
        let gone = sqlx::query("DELETE FROM pii_readers WHERE project_id = $1 AND user_id = $2")
            .bind(&p.id)
            .bind(&u.id)
            .execute(self.meta.writer())
            .await?
            .rows_affected();
        crate::auth_changed();
        if gone == 0 {
            return Err(Error::not_found(
                "PII permission",
                format!("{user} in project {}", p.name),
            ));
        }
        Ok(())
    }

    /// Whether `who` may read the project's personal data in clear: a global admin,
    /// or someone granted its PII permission.
    #[qanat_macros::boxed]
    pub async fn reads_pii(&self, p: &Project, who: &Principal) -> Result<bool> {
        if who.is_admin {
            return Ok(true);
        }
        let key = (who.user_id.clone(), p.id.to_string());
        if let Some(hit) = self.pii.get(&key) {
            return Ok(hit);
        }
        let generation = self.pii.generation();
        let granted = self.pii_granted(p, &who.user_id).await?;
        self.pii.put(key, granted, generation);
        Ok(granted)
    }

    /// Whether user `id` was granted project `p`'s PII permission.
    async fn pii_granted(&self, p: &Project, id: &UserId) -> Result<bool> {
        Ok(
            sqlx::query("SELECT 1 AS one FROM pii_readers WHERE project_id = $1 AND user_id = $2")
                .bind(&p.id)
                .bind(id)
                .fetch_optional(self.meta.reader())
                .await?
                .is_some(),
        )
    }

    /// [`Governance::reads_pii`] for user `name` (a job's submitter): a global admin,
    /// or a holder of the project's PII permission; a disabled user holds nothing.
    #[qanat_macros::boxed]
    pub async fn user_reads_pii(&self, p: &Project, name: &str) -> Result<bool> {
        let u = self.user(name).await?;
        if u.disabled {
            return Ok(false);
        }
        if u.is_admin {
            return Ok(true);
        }
        self.pii_granted(p, &u.id).await
    }

    /// Members of a project.
    #[qanat_macros::boxed]
    pub async fn members(&self, p: &Project) -> Result<Vec<Member>> {
        let rows = sqlx::query(
            "SELECT u.name, m.role, m.created_at FROM members m JOIN users u ON u.id = m.user_id WHERE m.project_id = $1 ORDER BY u.name",
        )
        .bind(&p.id)
        .fetch_all(self.meta.reader())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Member {
                    user: r.try_get("name")?,
                    role: r.try_get::<String, _>("role")?.parse()?,
                    created_at: rfc3339(r.try_get("created_at")?),
                })
            })
            .collect()
    }

    /// Grants `user` a role in `p` (replacing any earlier role), acting as `by`, who has
    /// `by_role` in the project (a global admin acts as a project admin). Nobody grants
    /// a role above their own or changes a member ranked above them, and the project
    /// keeps at least one admin.
    #[qanat_macros::boxed]
    pub async fn set_member(
        &self,
        p: &Project,
        user: &str,
        role: Role,
        by: &Principal,
        by_role: Option<Role>,
    ) -> Result<Member> {
        let rank = standing(p, by, by_role)?;
        if role > rank {
            return Err(Error::Forbidden(format!(
                "you are {rank} of project '{}' and may grant roles up to {rank}, not {role}",
                p.name
            )));
        }
        let u = self.user(user).await?;
        let mut tx = self.lock_members(p).await?;
        let current = member_role(&mut tx, p, &u.id).await?;
        check_rank(p, user, current, rank)?;
        if current == Some(Role::Admin) && role != Role::Admin {
            keeps_an_admin(&mut tx, p, user).await?;
        }
        sqlx::query(
            "INSERT INTO members (project_id, user_id, role, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (project_id, user_id) DO UPDATE SET role = excluded.role",
        )
        .bind(&p.id)
        .bind(&u.id)
        .bind(role.as_str())
        .bind(now_micros())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        crate::auth_changed();
        self.members(p)
            .await?
            .into_iter()
            .find(|m| m.user == user)
            .ok_or_else(|| Error::not_found("member", user))
    }

    /// Removes `user` from `p`, acting as `by` (the rules of [`Governance::set_member`]).
    #[qanat_macros::boxed]
    pub async fn remove_member(
        &self,
        p: &Project,
        user: &str,
        by: &Principal,
        by_role: Option<Role>,
    ) -> Result<()> {
        let rank = standing(p, by, by_role)?;
        let u = self.user(user).await?;
        let mut tx = self.lock_members(p).await?;
        let Some(current) = member_role(&mut tx, p, &u.id).await? else {
            return Err(Error::not_found("member", format!("{user} in {}", p.name)));
        };
        check_rank(p, user, Some(current), rank)?;
        if current == Role::Admin {
            keeps_an_admin(&mut tx, p, user).await?;
        }
        sqlx::query("DELETE FROM members WHERE project_id = $1 AND user_id = $2")
            .bind(&p.id)
            .bind(&u.id)
            .execute(&mut *tx)
            .await?;
        // The PII permission goes with the membership: someone added back later does
        // not quietly read personal data in clear again.
        sqlx::query("DELETE FROM pii_readers WHERE project_id = $1 AND user_id = $2")
            .bind(&p.id)
            .bind(&u.id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        crate::auth_changed();
        Ok(())
    }

    /// A transaction in which no other membership change of `p` runs: it holds the
    /// project's row (PostgreSQL locks it; SQLite has one writer).
    async fn lock_members(&self, p: &Project) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query("UPDATE projects SET name = name WHERE id = $1")
            .bind(&p.id)
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }
}

/// The role `by` acts with in `p`: a global admin acts as a project admin.
fn standing(p: &Project, by: &Principal, by_role: Option<Role>) -> Result<Role> {
    if by.is_admin {
        return Ok(Role::Admin);
    }
    by_role.ok_or_else(|| {
        Error::Forbidden(format!(
            "'{}' is not a member of project '{}'",
            by.name, p.name
        ))
    })
}

fn check_rank(p: &Project, user: &str, current: Option<Role>, rank: Role) -> Result<()> {
    match current {
        Some(r) if r > rank => Err(Error::Forbidden(format!(
            "'{user}' is {r} of project '{}', above your role ({rank}): only a member ranked {r} or higher may change or remove them",
            p.name
        ))),
        _ => Ok(()),
    }
}

async fn member_role(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    p: &Project,
    user_id: &UserId,
) -> Result<Option<Role>> {
    let row = sqlx::query("SELECT role FROM members WHERE project_id = $1 AND user_id = $2")
        .bind(&p.id)
        .bind(user_id)
        .fetch_optional(&mut **tx)
        .await?;
    match row {
        Some(r) => Ok(Some(r.try_get::<String, _>("role")?.parse()?)),
        None => Ok(None),
    }
}

/// Refuses to take the admin role from `user` when they are the project's last admin.
async fn keeps_an_admin(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    p: &Project,
    user: &str,
) -> Result<()> {
    let admins: i64 =
        sqlx::query("SELECT COUNT(*) AS n FROM members WHERE project_id = $1 AND role = 'admin'")
            .bind(&p.id)
            .fetch_one(&mut **tx)
            .await?
            .try_get("n")?;
    if admins <= 1 {
        return Err(Error::Forbidden(format!(
            "'{user}' is the last admin of project '{}': a project keeps at least one admin; make another member admin first",
            p.name
        )));
    }
    Ok(())
}
