//! Deployments: create, update, promote, roll back, delete; status, list, history.

use qanat_types::serving::wire::{
    DeploymentList, LogList, NewDeployment, Promote, RevisionList, Rollback,
};
use qanat_types::serving::{Deployment, DeploymentSpec, DeploymentStatus};
use reqwest::Method;

use crate::{project_path, seg, Client, Result};

impl Client {
    fn deployment_path(project: &str, name: &str) -> String {
        format!("{}/deployments/{}", project_path(project), seg(name))
    }

    /// Creates a deployment (editors); its versions are loaded and probed when this
    /// returns.
    #[qanat_macros::boxed]
    pub async fn create_deployment(
        &self,
        project: &str,
        name: &str,
        spec: &DeploymentSpec,
    ) -> Result<Deployment> {
        let path = format!("{}/deployments", project_path(project));
        let body = NewDeployment {
            name: name.to_string(),
            spec: spec.clone(),
        };
        self.with_body(Method::POST, &path, &body).await
    }

    /// A project's deployments.
    #[qanat_macros::boxed]
    pub async fn deployments(&self, project: &str) -> Result<DeploymentList> {
        self.get(&format!("{}/deployments", project_path(project)))
            .await
    }

    /// A deployment and how the server serves it.
    #[qanat_macros::boxed]
    pub async fn deployment(&self, project: &str, name: &str) -> Result<DeploymentStatus> {
        self.get(&Self::deployment_path(project, name)).await
    }

    /// Replaces a deployment's spec (a new revision).
    #[qanat_macros::boxed]
    pub async fn update_deployment(
        &self,
        project: &str,
        name: &str,
        spec: &DeploymentSpec,
    ) -> Result<Deployment> {
        self.with_body(Method::PUT, &Self::deployment_path(project, name), spec)
            .await
    }

    /// Promotes a canary or shadow (`to`: which one) to take all the traffic.
    #[qanat_macros::boxed]
    pub async fn promote_deployment(
        &self,
        project: &str,
        name: &str,
        to: Option<&str>,
    ) -> Result<Deployment> {
        let path = format!("{}/promote", Self::deployment_path(project, name));
        let body = Promote {
            to: to.map(str::to_string),
        };
        self.with_body(Method::POST, &path, &body).await
    }

    /// Restores an earlier revision (default: the one before the current).
    #[qanat_macros::boxed]
    pub async fn rollback_deployment(
        &self,
        project: &str,
        name: &str,
        revision: Option<i64>,
    ) -> Result<Deployment> {
        let path = format!("{}/rollback", Self::deployment_path(project, name));
        self.with_body(Method::POST, &path, &Rollback { revision })
            .await
    }

    /// A deployment's revisions, newest first.
    #[qanat_macros::boxed]
    pub async fn deployment_revisions(&self, project: &str, name: &str) -> Result<RevisionList> {
        let path = format!("{}/revisions", Self::deployment_path(project, name));
        self.get(&path).await
    }

    /// The newest `limit` inference log records of a deployment (or model).
    #[qanat_macros::boxed]
    pub async fn deployment_log(&self, project: &str, name: &str, limit: usize) -> Result<LogList> {
        let path = format!("{}/log", Self::deployment_path(project, name));
        self.get_query(&path, &[("limit", limit)]).await
    }

    /// Deletes a deployment.
    #[qanat_macros::boxed]
    pub async fn delete_deployment(&self, project: &str, name: &str) -> Result<()> {
        self.no_content(Method::DELETE, &Self::deployment_path(project, name))
            .await
    }

    /// Runs a request through a deployment (or a model by name) in the Open Inference
    /// Protocol: `body` is an OIP request (`{"id": …, "inputs": [{"name", "datatype",
    /// "shape", "data"}]}`).
    #[qanat_macros::boxed]
    pub async fn infer(
        &self,
        deployment: &str,
        body: &serde_json::Value,
    ) -> Result<qanat_types::serving::InferResponse> {
        let path = format!("/v2/models/{}/infer", seg(deployment));
        self.with_body(Method::POST, &path, body).await
    }
}
