//! A project's encrypted object area, and the storage locations it may use.

use qanat_types::store::wire::{LocationParam, LocationView, ObjectListParams, ObjectView};
use reqwest::Method;

use crate::{key_path, project_path, Body, ByteStream, Client, Result};

fn object_path(project: &str, key: &str) -> String {
    format!("{}/objects/{}", project_path(project), key_path(key))
}

impl Client {
    /// Stores an object of `len` bytes from `body` (streamed; encrypted at rest). The
    /// project's residency policy is checked against the location first.
    pub async fn put_object(
        &self,
        project: &str,
        key: &str,
        at: &LocationParam,
        len: u64,
        body: impl Into<Body>,
    ) -> Result<ObjectView> {
        let path = object_path(project, key);
        let rb = self
            .request(Method::PUT, &path)
            .query(at)
            .header(reqwest::header::CONTENT_LENGTH, len)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(body);
        self.json(rb, &path).await
    }

    /// An object's bytes, verified by the server as they stream out.
    #[qanat_macros::boxed]
    pub async fn get_object(
        &self,
        project: &str,
        key: &str,
        at: &LocationParam,
    ) -> Result<ByteStream> {
        let path = object_path(project, key);
        self.download(self.request(Method::GET, &path).query(at))
            .await
    }

    /// Deletes an object and its data key.
    #[qanat_macros::boxed]
    pub async fn delete_object(&self, project: &str, key: &str, at: &LocationParam) -> Result<()> {
        let path = object_path(project, key);
        self.send(self.request(Method::DELETE, &path).query(at))
            .await
            .map(|_| ())
    }

    /// A project's objects.
    #[qanat_macros::boxed]
    pub async fn objects(
        &self,
        project: &str,
        params: &ObjectListParams,
    ) -> Result<Vec<ObjectView>> {
        let path = format!("{}/objects", project_path(project));
        self.get_query(&path, params).await
    }

    /// The configured storage locations and their regions.
    #[qanat_macros::boxed]
    pub async fn locations(&self) -> Result<Vec<LocationView>> {
        self.get("/api/v1/storage/locations").await
    }
}
