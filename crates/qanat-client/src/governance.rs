//! Projects and the audit log.

use qanat_governance::{AuditVerification, LineageGraph, Project};

use crate::{seg, Client, Error};

impl Client {
    /// `GET /api/v1/projects`: the projects the caller can see.
    pub async fn projects(&self) -> Result<Vec<Project>, Error> {
        self.get("/api/v1/projects").await
    }

    /// `GET /api/v1/audit/verify`: the whole audit chain recomputed (global admins).
    pub async fn verify_audit(&self) -> Result<AuditVerification, Error> {
        self.get("/api/v1/audit/verify").await
    }

    /// `GET /api/v1/projects/{project}/lineage`: where `reference` (e.g.
    /// `model:fraud@champion`) came from, at most `depth` levels up.
    pub async fn lineage(
        &self,
        project: &str,
        reference: &str,
        depth: usize,
    ) -> Result<LineageGraph, Error> {
        self.get(&format!(
            "/api/v1/projects/{}/lineage?ref={}&depth={depth}",
            seg(project),
            seg(reference)
        ))
        .await
    }
}
