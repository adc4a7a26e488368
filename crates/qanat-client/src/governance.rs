//! Projects and the audit log.

use qanat_governance::{AuditVerification, Project};

use crate::{Client, Error};

impl Client {
    /// `GET /api/v1/projects`: the projects the caller can see.
    pub async fn projects(&self) -> Result<Vec<Project>, Error> {
        self.get("/api/v1/projects").await
    }

    /// `GET /api/v1/audit/verify`: the whole audit chain recomputed (global admins).
    pub async fn verify_audit(&self) -> Result<AuditVerification, Error> {
        self.get("/api/v1/audit/verify").await
    }
}
