//! The feature store: plan and apply a feature repo, read the registry.

use qanat_types::features::wire::{
    ApplyRequest, FreshnessList, MaterializationRun, MaterializationRuns, MaterializeRequest,
    Materialized, ObjectHistory, Plan, RegisteredObject, Registry, StreamList, TrainingSet,
    TrainingSetRequest,
};
use qanat_types::features::{FeatureRepo, ObjectKind};
use reqwest::Method;

use crate::{project_path, seg, Client, Result};

impl Client {
    /// What applying `repo` would change (writes nothing).
    #[qanat_macros::boxed]
    pub async fn plan_features(&self, project: &str, repo: &FeatureRepo) -> Result<Plan> {
        let path = format!("{}/features/plan", project_path(project));
        let body = ApplyRequest {
            repo: repo.clone(),
            expected_revision: None,
        };
        self.with_body(Method::POST, &path, &body).await
    }

    /// Applies `repo` (editors); with `expected_revision`, only if the registry is
    /// still at the revision a plan showed.
    #[qanat_macros::boxed]
    pub async fn apply_features(
        &self,
        project: &str,
        repo: &FeatureRepo,
        expected_revision: Option<i64>,
    ) -> Result<Plan> {
        let path = format!("{}/features/apply", project_path(project));
        let body = ApplyRequest {
            repo: repo.clone(),
            expected_revision,
        };
        self.with_body(Method::POST, &path, &body).await
    }

    /// Every live object of the feature registry at its newest version.
    #[qanat_macros::boxed]
    pub async fn feature_registry(&self, project: &str) -> Result<Registry> {
        self.get(&format!("{}/features/registry", project_path(project)))
            .await
    }

    /// One registry object at `version` (the newest when None).
    #[qanat_macros::boxed]
    pub async fn feature_object(
        &self,
        project: &str,
        kind: ObjectKind,
        name: &str,
        version: Option<i64>,
    ) -> Result<RegisteredObject> {
        let mut path = format!(
            "{}/features/objects/{}/{}",
            project_path(project),
            kind,
            seg(name)
        );
        if let Some(v) = version {
            path.push_str(&format!("?version={v}"));
        }
        self.get(&path).await
    }

    /// Every version of one registry object, newest first.
    #[qanat_macros::boxed]
    pub async fn feature_history(
        &self,
        project: &str,
        kind: ObjectKind,
        name: &str,
    ) -> Result<ObjectHistory> {
        self.get(&format!(
            "{}/features/objects/{}/{}/versions",
            project_path(project),
            kind,
            seg(name)
        ))
        .await
    }

    /// Builds a training set as a new dataset version (editors).
    #[qanat_macros::boxed]
    pub async fn training_set(
        &self,
        project: &str,
        req: &TrainingSetRequest,
    ) -> Result<TrainingSet> {
        let path = format!("{}/features/training-sets", project_path(project));
        self.with_body(Method::POST, &path, req).await
    }

    /// Materializes views into the online store (editors).
    #[qanat_macros::boxed]
    pub async fn materialize(
        &self,
        project: &str,
        req: &MaterializeRequest,
    ) -> Result<Vec<Materialized>> {
        let path = format!("{}/features/materialize", project_path(project));
        self.with_body(Method::POST, &path, req).await
    }

    /// This server's recent materialization runs in `project`, newest first.
    #[qanat_macros::boxed]
    pub async fn materializations(&self, project: &str) -> Result<MaterializationRuns> {
        self.get(&format!(
            "{}/features/materializations",
            project_path(project)
        ))
        .await
    }

    /// One materialization run, with each view's progress.
    #[qanat_macros::boxed]
    pub async fn materialization(&self, project: &str, run_id: &str) -> Result<MaterializationRun> {
        self.get(&format!(
            "{}/features/materializations/{}",
            project_path(project),
            seg(run_id)
        ))
        .await
    }

    /// How fresh each view's online values are.
    #[qanat_macros::boxed]
    pub async fn freshness(&self, project: &str) -> Result<FreshnessList> {
        self.get(&format!("{}/features/freshness", project_path(project)))
            .await
    }

    /// The consumers of the project's stream sources.
    #[qanat_macros::boxed]
    pub async fn feature_streams(&self, project: &str) -> Result<StreamList> {
        self.get(&format!("{}/features/streams", project_path(project)))
            .await
    }
}
