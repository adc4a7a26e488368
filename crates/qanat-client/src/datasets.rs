//! Datasets (`/api/v1/projects/{project}/datasets/…`).

use qanat_data::{Dataset, DatasetVersion};

use crate::{seg, Client, Error};

impl Client {
    /// `GET /api/v1/projects/{project}/datasets`: the project's datasets.
    pub async fn datasets(&self, project: &str) -> Result<Vec<Dataset>, Error> {
        self.get(&format!("/api/v1/projects/{}/datasets", seg(project)))
            .await
    }

    /// `GET …/datasets/{dataset}/versions`: a dataset's versions, newest first.
    pub async fn dataset_versions(
        &self,
        project: &str,
        dataset: &str,
    ) -> Result<Vec<DatasetVersion>, Error> {
        self.get(&format!(
            "/api/v1/projects/{}/datasets/{}/versions",
            seg(project),
            seg(dataset)
        ))
        .await
    }
}
