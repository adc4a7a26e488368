//! People an OpenID provider vouches for: one user per (issuer, subject), provisioned
//! at their first sign-in, with the roles their groups map to re-applied at every
//! sign-in and token check, kept apart from the grants an admin made.
//!
//! The mapping decides a global admin flag and project roles. An admin's explicit
//! grant still works beside it: a person's role in a project is the higher of the
//! two, and [`Governance::role_source`] says which one decided. A person the provider
//! no longer lists in a group loses that group's roles at their next sign-in or token
//! check, without an admin; a user disabled in Qanat is refused at once, whatever the
//! provider says.

use std::collections::BTreeMap;

use qanat_core::UserId;
use qanat_store::now_micros;
use sqlx::Row;

use crate::{Error, Governance, Principal, Result, Role, TokenScope, UserKind};

/// What a validated token of the provider says about its bearer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExternalIdentity {
    /// The provider's issuer URL.
    pub issuer: String,
    /// The provider's stable id of the person (`sub`).
    pub subject: String,
    /// Their Qanat user name (from the configured claim).
    pub username: String,
    /// The groups (or roles) the configured claim lists.
    pub groups: Vec<String>,
}

/// One line of the mapping: members of `group` get `role` in `project`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRole {
    pub group: String,
    pub project: String,
    pub role: Role,
}

/// How groups become roles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleMapping {
    /// Members of any of these groups are global admins.
    pub admin_groups: Vec<String>,
    pub roles: Vec<GroupRole>,
}

/// The roles a set of groups maps to, per project name, with the groups behind each.
type Mapped = BTreeMap<String, (Role, Vec<String>)>;

impl RoleMapping {
    /// The admin flag and the role in each project (the highest any group gives),
    /// with the groups that gave it.
    pub fn apply(&self, groups: &[String]) -> (bool, Mapped) {
        let has = |g: &str| groups.iter().any(|x| x == g);
        let admin = self.admin_groups.iter().any(|g| has(g));
        let mut roles: Mapped = BTreeMap::new();
        for m in self.roles.iter().filter(|m| has(&m.group)) {
            let e = roles
                .entry(m.project.clone())
                .or_insert((m.role, Vec::new()));
            e.0 = e.0.max(m.role);
            e.1.push(m.group.clone());
        }
        (admin, roles)
    }
}

/// Who decided a caller's role in a project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleSource {
    /// An admin's grant (`qanat projects grant`).
    Grant,
    /// The identity provider's groups, through the mapping.
    Groups(Vec<String>),
}

impl std::fmt::Display for RoleSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoleSource::Grant => f.write_str("an admin's grant"),
            RoleSource::Groups(g) => write!(f, "the provider's group(s) {}", g.join(", ")),
        }
    }
}

impl Governance {
    /// Signs in a person the provider vouches for: their user (provisioned at the
    /// first sign-in, found by issuer and subject afterwards) with the admin flag and
    /// project roles `mapping` gives their groups now. Refused when Qanat disabled
    /// them, or when their user name belongs to another account (a local user, or
    /// another subject): an identity is never joined to an account by name alone.
    #[qanat_macros::boxed]
    pub async fn sign_in_external(
        &self,
        id: &ExternalIdentity,
        mapping: &RoleMapping,
    ) -> Result<Principal> {
        let (admin, mapped) = mapping.apply(&id.groups);
        let row = sqlx::query("SELECT * FROM users WHERE issuer = $1 AND subject = $2")
            .bind(&id.issuer)
            .bind(&id.subject)
            .fetch_optional(self.meta.reader())
            .await?;
        let row = match row {
            Some(r) => r,
            None => {
                qanat_core::IdentityName::parse_as("user name", &id.username).map_err(|e| {
                    Error::Unauthenticated(format!(
                        "the provider's user name '{}' cannot be a Qanat user name: {e}",
                        id.username
                    ))
                })?;
                let user_id = format!("usr_{}", uuid::Uuid::new_v4().simple());
                let res = sqlx::query(
                    "INSERT INTO users (id, name, kind, is_admin, disabled, created_at, issuer, subject, mapped_admin) \
                     VALUES ($1, $2, 'user', 0, 0, $3, $4, $5, $6)",
                )
                .bind(&user_id)
                .bind(&id.username)
                .bind(now_micros())
                .bind(&id.issuer)
                .bind(&id.subject)
                .bind(i64::from(admin))
                .execute(self.meta.writer())
                .await;
                match res {
                    Ok(_) => crate::auth_changed(),
                    Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {}
                    Err(e) => return Err(e.into()),
                }
                // Ours, or one made at the same moment by another request of theirs.
                match sqlx::query("SELECT * FROM users WHERE issuer = $1 AND subject = $2")
                    .bind(&id.issuer)
                    .bind(&id.subject)
                    .fetch_optional(self.meta.reader())
                    .await?
                {
                    Some(r) => r,
                    None => {
                        return Err(Error::Forbidden(format!(
                            "a Qanat user named '{}' already exists and is not this provider's '{}'; \
                             an admin can rename one of them, or give the provider's account another user name claim",
                            id.username, id.subject
                        )))
                    }
                }
            }
        };
        let user_id: UserId = row.try_get("id")?;
        let name: String = row.try_get("name")?;
        if row.try_get::<i64, _>("disabled")? != 0 {
            return Err(Error::Unauthenticated(format!(
                "the account '{name}' is disabled in Qanat"
            )));
        }
        if (row.try_get::<i64, _>("mapped_admin")? != 0) != admin {
            sqlx::query("UPDATE users SET mapped_admin = $1 WHERE id = $2")
                .bind(i64::from(admin))
                .bind(&user_id)
                .execute(self.meta.writer())
                .await?;
            crate::auth_changed();
        }
        self.sync_mapped_members(&user_id, &mapped).await?;
        Ok(Principal {
            user_id,
            name,
            kind: UserKind::User,
            is_admin: admin || row.try_get::<i64, _>("is_admin")? != 0,
            token_id: format!("oidc:{}", id.subject),
            scope: TokenScope::All,
            rate_limit: None,
            provider: Some(crate::ProviderIdentity {
                issuer: id.issuer.clone(),
                subject: id.subject.clone(),
            }),
        })
    }

    /// Makes the user's mapped roles what `mapped` says (projects that do not exist
    /// are skipped), writing only what changed.
    async fn sync_mapped_members(&self, user_id: &UserId, mapped: &Mapped) -> Result<()> {
        let mut want: BTreeMap<String, (String, Role, String)> = BTreeMap::new();
        for (project, (role, groups)) in mapped {
            if let Some(r) =
                sqlx::query("SELECT id FROM projects WHERE name = $1 AND deleted_at IS NULL")
                    .bind(project)
                    .fetch_optional(self.meta.reader())
                    .await?
            {
                let pid: String = r.try_get("id")?;
                want.insert(
                    pid,
                    (
                        project.clone(),
                        *role,
                        serde_json::to_string(groups).unwrap_or_default(),
                    ),
                );
            }
        }
        let have: BTreeMap<String, (String, String)> =
            sqlx::query("SELECT project_id, role, groups FROM mapped_members WHERE user_id = $1")
                .bind(user_id)
                .fetch_all(self.meta.reader())
                .await?
                .iter()
                .map(|r| {
                    Ok((
                        r.try_get("project_id")?,
                        (r.try_get("role")?, r.try_get("groups")?),
                    ))
                })
                .collect::<Result<_>>()?;
        let same = have.len() == want.len()
            && want.iter().all(|(pid, (_, role, groups))| {
                have.get(pid)
                    .is_some_and(|(r, g)| r == role.as_str() && g == groups)
            });
        if same {
            return Ok(());
        }
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query("DELETE FROM mapped_members WHERE user_id = $1")
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        for (pid, (_, role, groups)) in &want {
            sqlx::query(
                "INSERT INTO mapped_members (project_id, user_id, role, groups, updated_at) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(pid)
            .bind(user_id)
            .bind(role.as_str())
            .bind(groups)
            .bind(now_micros())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        crate::auth_changed();
        Ok(())
    }

    /// Who decided `user`'s role in the project `project_id`: an admin's grant, or
    /// the provider's groups (the higher role wins; a tie goes to the grant).
    #[qanat_macros::boxed]
    pub async fn role_source(
        &self,
        user_id: &UserId,
        project_id: &str,
    ) -> Result<Option<(Role, RoleSource)>> {
        let row = sqlx::query(
            "SELECT (SELECT role FROM members WHERE project_id = $1 AND user_id = $2) AS granted, \
             (SELECT role FROM mapped_members WHERE project_id = $1 AND user_id = $2) AS mapped, \
             (SELECT groups FROM mapped_members WHERE project_id = $1 AND user_id = $2) AS groups",
        )
        .bind(project_id)
        .bind(user_id)
        .fetch_one(self.meta.reader())
        .await?;
        role_from_row(&row, "granted", "mapped", "groups")
    }
}

/// The role a row's grant and mapped columns give, and which decided: the higher of
/// the two, a tie going to the grant.
pub(crate) fn role_from_row(
    row: &sqlx::any::AnyRow,
    granted: &str,
    mapped: &str,
    groups: &str,
) -> Result<Option<(Role, RoleSource)>> {
    let granted: Option<Role> = row
        .try_get::<Option<String>, _>(granted)?
        .map(|r| r.parse())
        .transpose()?;
    let mapped: Option<Role> = row
        .try_get::<Option<String>, _>(mapped)?
        .map(|r| r.parse())
        .transpose()?;
    let groups = || -> Result<Vec<String>> {
        Ok(row
            .try_get::<Option<String>, _>(groups)?
            .and_then(|g| serde_json::from_str(&g).ok())
            .unwrap_or_default())
    };
    Ok(match (granted, mapped) {
        (Some(g), Some(m)) if m > g => Some((m, RoleSource::Groups(groups()?))),
        (Some(g), _) => Some((g, RoleSource::Grant)),
        (None, Some(m)) => Some((m, RoleSource::Groups(groups()?))),
        (None, None) => None,
    })
}
