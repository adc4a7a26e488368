//! Roles and the single authorization decision.

use crate::{Principal, Role};

/// What a route needs from its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// No identity needed (health probes, metrics, the OpenAPI document).
    Public,
    /// Any valid identity.
    Authenticated,
    /// At least this role in the project the request names.
    Project(Role),
    /// A global administrator.
    GlobalAdmin,
}

/// The outcome of [`authorize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// No (valid) identity: 401.
    Unauthenticated,
    /// An identity without the permission: 403, with the reason.
    Deny(String),
    /// A project the caller is not a member of: answered exactly as a project that does
    /// not exist (404, `reply`), so that outsiders cannot learn which projects exist;
    /// `reason` is for the audit log.
    Hidden {
        reply: String,
        reason: String,
    },
}

/// The one authorization decision. `project_role` is the caller's role in the project
/// the request names (None when not a member or no project is named).
pub fn authorize(
    principal: Option<&Principal>,
    requirement: Requirement,
    project: Option<&str>,
    project_role: Option<Role>,
) -> Decision {
    if requirement == Requirement::Public {
        return Decision::Allow;
    }
    let Some(p) = principal else {
        return Decision::Unauthenticated;
    };
    if p.is_admin {
        return Decision::Allow;
    }
    match requirement {
        Requirement::Public | Requirement::Authenticated => Decision::Allow,
        Requirement::GlobalAdmin => Decision::Deny(format!(
            "'{}' is not a global administrator; this action needs one",
            p.name
        )),
        Requirement::Project(needed) => match (project, project_role) {
            (Some(_), Some(role)) if role >= needed => Decision::Allow,
            (Some(project), Some(role)) => Decision::Deny(format!(
                "'{}' is {role} in project '{project}'; this action needs {needed} or higher",
                p.name
            )),
            (Some(project), None) => Decision::Hidden {
                reply: crate::Error::not_found("project", project).to_string(),
                reason: format!(
                    "'{}' is not a member of project '{project}' (answered as not found)",
                    p.name
                ),
            },
            (None, _) => Decision::Deny("this action needs a project".into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UserKind;

    fn principal(admin: bool) -> Principal {
        Principal {
            user_id: "u1".into(),
            name: "alice".into(),
            kind: UserKind::User,
            is_admin: admin,
            token_id: "t1".into(),
            scope: Default::default(),
            rate_limit: None,
            provider: None,
        }
    }

    #[test]
    fn roles_are_ordered() {
        assert!(Role::Viewer < Role::Editor);
        assert!(Role::Editor < Role::Maintainer);
        assert!(Role::Maintainer < Role::Admin);
    }

    #[test]
    fn anonymous_is_unauthenticated_except_public() {
        assert_eq!(
            authorize(None, Requirement::Authenticated, None, None),
            Decision::Unauthenticated
        );
        assert_eq!(
            authorize(None, Requirement::Public, None, None),
            Decision::Allow
        );
    }

    #[test]
    fn viewer_may_read_but_not_write() {
        let p = principal(false);
        let read = authorize(
            Some(&p),
            Requirement::Project(Role::Viewer),
            Some("x"),
            Some(Role::Viewer),
        );
        assert_eq!(read, Decision::Allow);
        let write = authorize(
            Some(&p),
            Requirement::Project(Role::Editor),
            Some("x"),
            Some(Role::Viewer),
        );
        assert!(matches!(write, Decision::Deny(m) if m.contains("needs editor")));
    }

    #[test]
    fn non_members_and_non_admins_are_denied() {
        let p = principal(false);
        assert!(matches!(
            authorize(
                Some(&p),
                Requirement::Project(Role::Viewer),
                Some("x"),
                None
            ),
            Decision::Hidden { reply, .. } if reply == "project 'x' does not exist"
        ));
        assert!(matches!(
            authorize(Some(&p), Requirement::GlobalAdmin, None, None),
            Decision::Deny(_)
        ));
        assert_eq!(
            authorize(Some(&principal(true)), Requirement::GlobalAdmin, None, None),
            Decision::Allow
        );
    }
}
