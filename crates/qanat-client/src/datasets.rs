//! Datasets (`/api/v1/projects/{project}/datasets/…`).

use qanat_data::wire::{ChunkIds, CommitVersion, MissingChunks, VersionWithManifest};
use qanat_data::{ChunkId, Dataset, DatasetVersion};
use reqwest::Method;

use crate::{seg, Client, Error};

impl Client {
    /// `GET /api/v1/projects/{project}/datasets`: the project's datasets.
    pub async fn datasets(&self, project: &str) -> Result<Vec<Dataset>, Error> {
        self.get(&format!("/api/v1/projects/{}/datasets", seg(project)))
            .await
    }

    /// One dataset's endpoints.
    pub fn dataset(&self, project: &str, name: &str) -> DatasetApi<'_> {
        DatasetApi {
            client: self,
            path: format!("/api/v1/projects/{}/datasets/{}", seg(project), seg(name)),
        }
    }
}

/// The endpoints of one dataset, `…/datasets/{dataset}/…`.
pub struct DatasetApi<'a> {
    client: &'a Client,
    path: String,
}

impl DatasetApi<'_> {
    /// The dataset's path, for the byte transfers that stream (chunk packs, files).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `GET …/datasets/{dataset}`.
    pub async fn get(&self) -> Result<Dataset, Error> {
        self.client.get(&self.path).await
    }

    /// `GET …/versions`: the versions, newest first.
    pub async fn versions(&self) -> Result<Vec<DatasetVersion>, Error> {
        self.client.get(&format!("{}/versions", self.path)).await
    }

    /// `GET …/versions/{version}`: a version (number, `v3`, tag or `latest`) with its
    /// manifest and profiles.
    pub async fn version(&self, version: &str) -> Result<VersionWithManifest, Error> {
        self.client
            .get(&format!("{}/versions/{}", self.path, seg(version)))
            .await
    }

    /// `POST …/chunks/missing`: which of `ids` the server still needs.
    pub async fn missing_chunks(&self, ids: &[ChunkId]) -> Result<Vec<ChunkId>, Error> {
        let body = ChunkIds { ids: ids.to_vec() };
        let reply: MissingChunks = self
            .client
            .json(
                self.client
                    .request(Method::POST, &format!("{}/chunks/missing", self.path))
                    .json(&body),
            )
            .await?;
        Ok(reply.missing)
    }

    /// `POST …/versions`: commits a version from uploaded chunks (all or nothing).
    pub async fn commit(&self, body: &CommitVersion) -> Result<DatasetVersion, Error> {
        self.client
            .json(
                self.client
                    .request(Method::POST, &format!("{}/versions", self.path))
                    .json(body),
            )
            .await
    }
}
