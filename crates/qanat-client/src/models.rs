//! The native model registry: list and show models, move aliases (set, promote,
//! rollback, delete), each move atomic and audited.

use qanat_types::tracking::wire::{
    AliasMoved, AliasTarget, ModelDetail, ModelList, ModelListParams,
};
use reqwest::Method;

use crate::{project_path, seg, Client, Result};

fn alias_path(project: &str, model: &str, alias: &str) -> String {
    format!(
        "{}/models/{}/aliases/{}",
        project_path(project),
        seg(model),
        seg(alias)
    )
}

impl Client {
    /// A project's registered models.
    #[qanat_macros::boxed]
    pub async fn models(&self, project: &str, params: &ModelListParams) -> Result<ModelList> {
        let path = format!("{}/models", project_path(project));
        self.get_query(&path, params).await
    }

    /// A model with all its versions and its alias history.
    #[qanat_macros::boxed]
    pub async fn model(&self, project: &str, name: &str) -> Result<ModelDetail> {
        self.get(&format!("{}/models/{}", project_path(project), seg(name)))
            .await
    }

    /// Points `alias` at `version` (maintainers).
    #[qanat_macros::boxed]
    pub async fn set_alias(
        &self,
        project: &str,
        model: &str,
        alias: &str,
        version: &str,
    ) -> Result<AliasMoved> {
        let path = alias_path(project, model, alias);
        let body = AliasTarget {
            version: version.to_string(),
        };
        self.with_body(Method::PUT, &path, &body).await
    }

    /// Removes `alias` (maintainers).
    #[qanat_macros::boxed]
    pub async fn delete_alias(&self, project: &str, model: &str, alias: &str) -> Result<()> {
        self.no_content(Method::DELETE, &alias_path(project, model, alias))
            .await
    }

    /// Promotes `version`: moves `alias` to it in one transaction (maintainers).
    #[qanat_macros::boxed]
    pub async fn promote(
        &self,
        project: &str,
        model: &str,
        alias: &str,
        version: &str,
    ) -> Result<AliasMoved> {
        let path = format!("{}/promote", alias_path(project, model, alias));
        let body = AliasTarget {
            version: version.to_string(),
        };
        self.with_body(Method::POST, &path, &body).await
    }

    /// Moves `alias` one step back along its history; each call goes one step further
    /// (maintainers).
    #[qanat_macros::boxed]
    pub async fn rollback(&self, project: &str, model: &str, alias: &str) -> Result<AliasMoved> {
        let path = format!("{}/rollback", alias_path(project, model, alias));
        self.json(self.request(Method::POST, &path), &path).await
    }
}
