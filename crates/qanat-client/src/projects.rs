//! Projects, their residency policy, and their members.

use qanat_types::governance::wire::{CreateProject, SetMember, UpdateProject};
use qanat_types::governance::{Member, PiiReader, Project};
use reqwest::Method;

use crate::{project_path, seg, Client, Result};

impl Client {
    /// Creates a project (global admins); the caller becomes its admin.
    #[qanat_macros::boxed]
    pub async fn create_project(&self, project: &CreateProject) -> Result<Project> {
        self.with_body(Method::POST, "/api/v1/projects", project)
            .await
    }

    /// The projects the caller can see.
    #[qanat_macros::boxed]
    pub async fn projects(&self) -> Result<Vec<Project>> {
        self.get("/api/v1/projects").await
    }

    /// One project.
    #[qanat_macros::boxed]
    pub async fn project(&self, name: &str) -> Result<Project> {
        self.get(&project_path(name)).await
    }

    /// Changes a project's description or allowed regions (project admins).
    #[qanat_macros::boxed]
    pub async fn update_project(&self, name: &str, change: &UpdateProject) -> Result<Project> {
        self.with_body(Method::PATCH, &project_path(name), change)
            .await
    }

    /// Deletes a project (its admins); `gc` purges it after the retention period.
    #[qanat_macros::boxed]
    pub async fn delete_project(&self, name: &str) -> Result<Project> {
        let path = project_path(name);
        self.json(self.request(Method::DELETE, &path), &path).await
    }

    /// Brings back a deleted project (global admins).
    #[qanat_macros::boxed]
    pub async fn restore_project(&self, name: &str) -> Result<Project> {
        let path = format!("{}/restore", project_path(name));
        self.json(self.request(Method::POST, &path), &path).await
    }

    /// Deleted projects not purged yet (global admins).
    #[qanat_macros::boxed]
    pub async fn deleted_projects(&self) -> Result<Vec<Project>> {
        self.get("/api/v1/deleted-projects").await
    }

    /// Purges what outlived its retention in every project, and deleted projects
    /// (global admins).
    #[qanat_macros::boxed]
    pub async fn gc_all(
        &self,
        options: &qanat_types::data::wire::GcBody,
    ) -> Result<qanat_types::data::InstallationGc> {
        self.with_body(Method::POST, "/api/v1/gc", options).await
    }

    /// A project's members.
    #[qanat_macros::boxed]
    pub async fn members(&self, project: &str) -> Result<Vec<Member>> {
        self.get(&format!("{}/members", project_path(project)))
            .await
    }

    /// Gives a user a role in a project (maintainers; admins for the admin role).
    #[qanat_macros::boxed]
    pub async fn set_member(&self, project: &str, user: &str, role: &SetMember) -> Result<Member> {
        let path = format!("{}/members/{}", project_path(project), seg(user));
        self.with_body(Method::PUT, &path, role).await
    }

    /// Who holds a project's PII permission.
    #[qanat_macros::boxed]
    pub async fn pii_readers(&self, project: &str) -> Result<Vec<PiiReader>> {
        self.get(&format!("{}/pii-readers", project_path(project)))
            .await
    }

    /// Grants a user a project's PII permission (project admins).
    #[qanat_macros::boxed]
    pub async fn grant_pii(&self, project: &str, user: &str) -> Result<PiiReader> {
        let path = format!("{}/pii-readers/{}", project_path(project), seg(user));
        self.json(self.request(Method::PUT, &path), &path).await
    }

    /// Takes a project's PII permission from a user (project admins).
    #[qanat_macros::boxed]
    pub async fn revoke_pii(&self, project: &str, user: &str) -> Result<()> {
        let path = format!("{}/pii-readers/{}", project_path(project), seg(user));
        self.no_content(Method::DELETE, &path).await
    }

    /// Removes a user from a project (maintainers).
    #[qanat_macros::boxed]
    pub async fn remove_member(&self, project: &str, user: &str) -> Result<()> {
        let path = format!("{}/members/{}", project_path(project), seg(user));
        self.no_content(Method::DELETE, &path).await
    }
}
