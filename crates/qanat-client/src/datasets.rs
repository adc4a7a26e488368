//! Datasets: create and list them; push (which chunks are missing, upload them, commit a
//! manifest); pull (a version's manifest, then its files); log, tags, diff, copy, gc;
//! and the lineage graph every domain records into.

use bytes::Bytes;
use qanat_core::ObjectRef;
use qanat_types::data::wire::{
    ChunkIds, ChunkStored, CommitVersion, CopyBody, DiffParams, DiffView, GcBody, ListDatasets,
    MissingChunks, TagBody, VersionWithManifest,
};
use qanat_types::data::{
    pack, ChunkId, Dataset, DatasetVersion, GcReport, NewDataset, PackStored, UpdateDataset,
    VersionRef,
};
use qanat_types::governance::wire::LineageParams;
use qanat_types::governance::LineageGraph;
use reqwest::Method;

use crate::{project_path, seg, Body, ByteStream, Client, Result};

fn dataset_path(project: &str, dataset: &str) -> String {
    format!("{}/datasets/{}", project_path(project), seg(dataset))
}

impl Client {
    /// Creates a dataset (editors).
    #[qanat_macros::boxed]
    pub async fn create_dataset(&self, project: &str, dataset: &NewDataset) -> Result<Dataset> {
        let path = format!("{}/datasets", project_path(project));
        self.with_body(Method::POST, &path, dataset).await
    }

    /// A project's datasets.
    #[qanat_macros::boxed]
    pub async fn datasets(&self, project: &str) -> Result<Vec<Dataset>> {
        self.get(&format!("{}/datasets", project_path(project)))
            .await
    }

    /// A project's deleted datasets that `gc` has not purged yet.
    #[qanat_macros::boxed]
    pub async fn deleted_datasets(&self, project: &str) -> Result<Vec<Dataset>> {
        let path = format!("{}/datasets", project_path(project));
        self.get_query(&path, &ListDatasets { deleted: true }).await
    }

    /// Deletes a dataset (project admins); `gc` purges it after the retention period.
    #[qanat_macros::boxed]
    pub async fn delete_dataset(&self, project: &str, dataset: &str) -> Result<Dataset> {
        let path = dataset_path(project, dataset);
        self.json(self.request(Method::DELETE, &path), &path).await
    }

    /// Brings back a deleted dataset (project admins).
    #[qanat_macros::boxed]
    pub async fn restore_dataset(&self, project: &str, dataset: &str) -> Result<Dataset> {
        let path = format!("{}/restore", dataset_path(project, dataset));
        self.json(self.request(Method::POST, &path), &path).await
    }

    /// One dataset.
    #[qanat_macros::boxed]
    pub async fn dataset(&self, project: &str, dataset: &str) -> Result<Dataset> {
        self.get(&dataset_path(project, dataset)).await
    }

    /// Which of `ids` the server does not store yet (part of a push; at most 10000).
    #[qanat_macros::boxed]
    pub async fn missing_chunks(
        &self,
        project: &str,
        dataset: &str,
        ids: &[ChunkId],
    ) -> Result<Vec<ChunkId>> {
        let path = format!("{}/chunks/missing", dataset_path(project, dataset));
        let body = ChunkIds { ids: ids.to_vec() };
        let answer: MissingChunks = self.with_body(Method::POST, &path, &body).await?;
        Ok(answer.missing)
    }

    /// Uploads one chunk; its bytes must hash to `id`.
    #[qanat_macros::boxed]
    pub async fn put_chunk(
        &self,
        project: &str,
        dataset: &str,
        id: &ChunkId,
        data: Bytes,
    ) -> Result<ChunkStored> {
        let path = format!("{}/chunks/{}", dataset_path(project, dataset), id.to_hex());
        let rb = self
            .request(Method::PUT, &path)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(data);
        self.json(rb, &path).await
    }

    /// Uploads chunks as one pack (see [`qanat_types::data::pack`]); the bytes stream without
    /// being copied. Every chunk must hash to its id, or nothing is stored. A 503 means
    /// a concurrent gc still holds one of them: retry shortly.
    #[qanat_macros::boxed]
    pub async fn put_pack(
        &self,
        project: &str,
        dataset: &str,
        chunks: &[(ChunkId, Bytes)],
    ) -> Result<PackStored> {
        let path = format!("{}/chunks", dataset_path(project, dataset));
        let frames: Vec<Bytes> = chunks
            .iter()
            .flat_map(|(id, data)| {
                [
                    Bytes::copy_from_slice(&pack::frame_header(id, data.len())),
                    data.clone(),
                ]
            })
            .collect();
        let len: usize = frames.iter().map(Bytes::len).sum();
        let body = futures::stream::iter(frames.into_iter().map(Ok::<_, std::io::Error>));
        let rb = self
            .request(Method::POST, &path)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .header(reqwest::header::CONTENT_LENGTH, len)
            .body(Body::wrap_stream(body));
        self.json(rb, &path).await
    }

    /// Commits a version from uploaded chunks (editors): all or nothing.
    #[qanat_macros::boxed]
    pub async fn commit_version(
        &self,
        project: &str,
        dataset: &str,
        version: &CommitVersion,
    ) -> Result<DatasetVersion> {
        let path = format!("{}/versions", dataset_path(project, dataset));
        self.with_body(Method::POST, &path, version).await
    }

    /// A dataset's versions, newest first.
    #[qanat_macros::boxed]
    pub async fn versions(&self, project: &str, dataset: &str) -> Result<Vec<DatasetVersion>> {
        self.get(&format!("{}/versions", dataset_path(project, dataset)))
            .await
    }

    /// One version with its manifest and profiles (audited as the start of a pull).
    #[qanat_macros::boxed]
    pub async fn version(
        &self,
        project: &str,
        dataset: &str,
        version: &VersionRef,
    ) -> Result<VersionWithManifest> {
        self.get(&format!(
            "{}/versions/{}",
            dataset_path(project, dataset),
            seg(&version.to_string())
        ))
        .await
    }

    /// The bytes of file `index` (its position in the manifest) of a version.
    #[qanat_macros::boxed]
    pub async fn version_file(
        &self,
        project: &str,
        dataset: &str,
        version: &VersionRef,
        index: usize,
    ) -> Result<ByteStream> {
        let path = format!(
            "{}/versions/{}/files/{index}",
            dataset_path(project, dataset),
            seg(&version.to_string())
        );
        self.download(self.request(Method::GET, &path)).await
    }

    /// File `index` of a version as the server sends it to this caller: the
    /// manifest's bytes, or (a table with personal data, no PII permission) a
    /// pseudonymized copy, with its own BLAKE3 (`X-Qanat-Blake3`).
    #[qanat_macros::boxed]
    pub async fn version_file_served(
        &self,
        project: &str,
        dataset: &str,
        version: &VersionRef,
        index: usize,
    ) -> Result<(ByteStream, Option<String>)> {
        let path = format!(
            "{}/versions/{}/files/{index}",
            dataset_path(project, dataset),
            seg(&version.to_string())
        );
        let (stream, headers) = self
            .download_with_headers(self.request(Method::GET, &path))
            .await?;
        let blake3 = headers
            .get("x-qanat-blake3")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok((stream, blake3))
    }

    /// Declares which columns of a dataset hold personal data (editors): the whole
    /// list, beside its schema's `pii: true` columns.
    #[qanat_macros::boxed]
    pub async fn update_dataset(
        &self,
        project: &str,
        dataset: &str,
        change: &UpdateDataset,
    ) -> Result<Dataset> {
        self.with_body(Method::PATCH, &dataset_path(project, dataset), change)
            .await
    }

    /// Names `version` with `tag` (editors; tags are immutable).
    #[qanat_macros::boxed]
    pub async fn tag_version(
        &self,
        project: &str,
        dataset: &str,
        tag: &str,
        version: &VersionRef,
    ) -> Result<DatasetVersion> {
        let path = format!("{}/tags/{}", dataset_path(project, dataset), seg(tag));
        let body = TagBody {
            version: version.to_string(),
        };
        self.with_body(Method::PUT, &path, &body).await
    }

    /// What changed from version `from` to version `to`.
    #[qanat_macros::boxed]
    pub async fn diff(
        &self,
        project: &str,
        dataset: &str,
        from: &VersionRef,
        to: &VersionRef,
    ) -> Result<DiffView> {
        let path = format!("{}/diff", dataset_path(project, dataset));
        let q = DiffParams {
            from: from.to_string(),
            to: to.to_string(),
        };
        self.get_query(&path, &q).await
    }

    /// Copies a version of `dataset` into another dataset of the project (editors).
    #[qanat_macros::boxed]
    pub async fn copy_version(
        &self,
        project: &str,
        dataset: &str,
        copy: &CopyBody,
    ) -> Result<DatasetVersion> {
        let path = format!("{}/copy", dataset_path(project, dataset));
        self.with_body(Method::POST, &path, copy).await
    }

    /// Erases one data subject's rows from a dataset (project admins).
    #[qanat_macros::boxed]
    pub async fn erase(
        &self,
        project: &str,
        dataset: &str,
        request: &qanat_types::data::ErasureRequest,
    ) -> Result<qanat_types::data::Erasure> {
        let path = format!("{}/erasures", dataset_path(project, dataset));
        self.with_body(Method::POST, &path, request).await
    }

    /// A dataset's erasures, newest first.
    #[qanat_macros::boxed]
    pub async fn erasures(
        &self,
        project: &str,
        dataset: &str,
    ) -> Result<Vec<qanat_types::data::Erasure>> {
        self.get(&format!("{}/erasures", dataset_path(project, dataset)))
            .await
    }

    /// Deletes chunks no version references (maintainers).
    #[qanat_macros::boxed]
    pub async fn gc(&self, project: &str, options: &GcBody) -> Result<GcReport> {
        let path = format!("{}/gc", project_path(project));
        self.with_body(Method::POST, &path, options).await
    }

    /// Where `reference` came from: its upstream graph, `depth` levels up.
    #[qanat_macros::boxed]
    pub async fn lineage(
        &self,
        project: &str,
        reference: &ObjectRef,
        depth: Option<usize>,
    ) -> Result<LineageGraph> {
        let path = format!("{}/lineage", project_path(project));
        let q = LineageParams {
            reference: reference.to_string(),
            depth,
        };
        self.get_query(&path, &q).await
    }
}
