//! Datasets, their versions and tags, and the chunk registry, over the metadata store
//! and the encrypted object storage.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use futures::stream::{self, Stream, StreamExt, TryStreamExt};
use qanat_core::{ObjectRef, ProjectId};
use qanat_governance::{check_residency, Project};
use qanat_store::{now_micros, LocationInfo, MetaStore, ObjectKey, ObjectStorage};
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::stored_file::StoredFileHandle;
use crate::tabular::TableFormat;
use crate::{
    ChunkId, ChunkRef, Classification, Dataset, DatasetVersion, Error, FileEntry, FileProfile,
    GcReport, Manifest, NewDataset, PackStored, Result, SchemaViolation, MAX_CHUNK,
};

const IN_BATCH: usize = 500;

/// Which version of a dataset: `latest`, a number (`3` or `v3`) or a tag; parsed by
/// [`qanat_core::Selector`], the one parser of references.
pub use qanat_core::Selector as VersionRef;

fn validate_name(what: &'static str, name: &str) -> Result<()> {
    qanat_core::Name::parse_as(what, name)
        .map(|_| ())
        .map_err(|e| Error::invalid(what, e.rule()))
}

use qanat_store::format_micros as rfc3339;

/// Column names declared as personal data: non-empty, no control characters, each
/// once, at most 1,000.
fn validate_pii_columns(columns: &[String]) -> Result<Vec<String>> {
    if columns.len() > 1000 {
        return Err(Error::invalid(
            "pii_columns",
            format!("{} columns; at most 1000 may be declared", columns.len()),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(columns.len());
    for c in columns {
        if c.is_empty() || c.len() > 1024 || c.chars().any(char::is_control) {
            return Err(Error::invalid(
                "pii_columns",
                format!("'{}' is not a column name (empty, over 1024 bytes, or with control characters)", c.escape_debug()),
            ));
        }
        if !out.contains(c) {
            out.push(c.clone());
        }
    }
    Ok(out)
}

/// Refreshes `last_used_at` on those of `ids` that are stored and not claimed by a gc,
/// holding them against gc for its grace period. Returns how many it held.
async fn hold_chunks(
    conn: &mut sqlx::AnyConnection,
    ds: &Dataset,
    ids: &[ChunkId],
    now: i64,
) -> Result<u64> {
    let mut held = 0;
    for batch in ids.chunks(IN_BATCH) {
        let list: Vec<String> = (0..batch.len()).map(|i| format!("${}", i + 4)).collect();
        let sql = format!(
            "UPDATE dataset_chunks SET last_used_at = $1 WHERE project_id = $2 AND location = $3 AND deleting = 0 AND chunk_id IN ({})",
            list.join(", ")
        );
        let mut q = sqlx::query(&sql)
            .bind(now)
            .bind(&ds.project_id)
            .bind(&ds.location);
        for id in batch {
            q = q.bind(id.to_hex());
        }
        held += q.execute(&mut *conn).await?.rows_affected();
    }
    Ok(held)
}

pub(crate) fn chunk_key(project_id: &ProjectId, id: &ChunkId) -> Result<ObjectKey> {
    let hex = id.to_hex();
    Ok(format!("projects/{project_id}/chunks/{}/{hex}", &hex[..2]).parse()?)
}

pub(crate) fn manifest_key(project_id: &ProjectId, manifest_id: &str) -> Result<ObjectKey> {
    Ok(format!("projects/{project_id}/manifests/{manifest_id}").parse()?)
}

pub(crate) fn table_profile_key(
    project_id: &ProjectId,
    blake3: &str,
    format: TableFormat,
) -> Result<ObjectKey> {
    // v2: a ragged CSV's profile says so (RAGGED), where an earlier one did not.
    Ok(format!("projects/{project_id}/table-profiles/{blake3}.v2.{format:?}").parse()?)
}

pub(crate) fn profiles_key(project_id: &ProjectId, manifest_id: &str) -> Result<ObjectKey> {
    Ok(format!("projects/{project_id}/profiles/{manifest_id}").parse()?)
}

/// The dataset service.
#[derive(Clone, Debug)]
pub struct Datasets {
    pub(crate) meta: MetaStore,
    pub(crate) storage: ObjectStorage,
    /// Where a push with undeclared personal data is reported
    /// (`undeclared_pii.created`), in the version's own transaction.
    outbox: Option<qanat_events::Outbox>,
    /// Pseudonymized copies being written at once (each reads a whole table and
    /// writes it to a temporary file): readers without the PII permission queue here
    /// rather than fill the disk or the cores.
    rewrites: std::sync::Arc<tokio::sync::Semaphore>,
}

/// Pseudonymized copies written at once.
const REWRITES: usize = 2;

impl Datasets {
    pub fn new(meta: MetaStore, storage: ObjectStorage) -> Self {
        Datasets {
            meta,
            storage,
            outbox: None,
            rewrites: std::sync::Arc::new(tokio::sync::Semaphore::new(REWRITES)),
        }
    }

    /// Reports pushes with undeclared personal data as events.
    pub fn with_outbox(mut self, outbox: qanat_events::Outbox) -> Self {
        self.outbox = Some(outbox);
        self
    }

    /// Residency: the location must be allowed by the project and, if the dataset
    /// narrows it, by the dataset.
    fn check_location(&self, project: &Project, ds: &Dataset) -> Result<LocationInfo> {
        let loc = self.storage.location(&ds.location)?;
        check_residency(project, &loc)?;
        if let Some(allowed) = &ds.allowed_regions {
            if !allowed.iter().any(|r| r == loc.region.as_str()) {
                return Err(qanat_governance::Error::Residency {
                    project: format!("{} (dataset {})", project.name, ds.name),
                    location: loc.name.clone(),
                    region: loc.region.to_string(),
                    allowed: allowed.clone(),
                }
                .into());
            }
        }
        Ok(loc)
    }

    /// Creates a dataset in `project`.
    #[qanat_macros::boxed]
    pub async fn create(
        &self,
        project: &Project,
        new: NewDataset,
        creator: &str,
    ) -> Result<Dataset> {
        validate_name("dataset name", &new.name)?;
        if let Some(schema) = &new.schema {
            schema.validate()?;
        }
        let pii_columns = validate_pii_columns(&new.pii_columns)?;
        let location = new
            .location
            .unwrap_or_else(|| self.storage.default_location().to_string());
        let loc = self.storage.location(&location)?;
        if let Some(regions) = &new.allowed_regions {
            for r in regions {
                let _: qanat_store::Region = r.parse()?;
                if !project.allowed_regions.contains(r) {
                    return Err(Error::invalid(
                        "allowed regions",
                        format!(
                            "region '{r}' is not allowed by project '{}' ({:?}); a dataset may only narrow its project's policy",
                            project.name, project.allowed_regions
                        ),
                    ));
                }
            }
        }
        let probe = Dataset {
            id: String::new(),
            project_id: project.id.clone(),
            name: new.name.clone(),
            description: String::new(),
            owner: String::new(),
            classification: Classification::Internal,
            allowed_regions: new.allowed_regions.clone(),
            tags: BTreeMap::new(),
            location: loc.name.clone(),
            schema: None,
            pii_columns: Vec::new(),
            created_at: String::new(),
            created_by: String::new(),
            latest_version: None,
            deleted_at: None,
        };
        self.check_location(project, &probe)?;
        let id = format!("ds_{}", uuid::Uuid::new_v4().simple());
        let res = sqlx::query(
            "INSERT INTO datasets (id, project_id, name, description, owner, classification, allowed_regions, tags, location, schema, created_at, created_by, pii_columns) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        )
        .bind(&id)
        .bind(&project.id)
        .bind(&new.name)
        .bind(&new.description)
        .bind(new.owner.as_deref().unwrap_or(creator))
        .bind(new.classification.unwrap_or(Classification::Internal).as_str())
        .bind(new.allowed_regions.as_ref().map(|r| serde_json::to_string(r).unwrap_or_default()))
        .bind(serde_json::to_string(&new.tags).unwrap_or_else(|_| "{}".into()))
        .bind(&loc.name)
        .bind(new.schema.as_ref().map(|s| serde_json::to_string(s).unwrap_or_default()))
        .bind(now_micros())
        .bind(creator)
        .bind(serde_json::to_string(&pii_columns).unwrap_or_else(|_| "[]".into()))
        .execute(self.meta.writer())
        .await;
        match res {
            Ok(_) => {}
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                if self.find(project, &new.name, Some(true)).await.is_ok() {
                    return Err(Error::already_exists(
                        "dataset",
                        format!(
                            "{} (deleted: the name stays taken until gc purges it after the retention period; `qanat data restore {}` brings it back)",
                            new.name, new.name
                        ),
                    ));
                }
                return Err(Error::already_exists("dataset", new.name));
            }
            Err(e) => return Err(e.into()),
        }
        self.get(project, &new.name).await
    }

    /// Declares which columns hold personal data (the whole list), beside the schema's
    /// `pii: true` ones.
    #[qanat_macros::boxed]
    pub async fn set_pii_columns(
        &self,
        project: &Project,
        ds: &Dataset,
        columns: &[String],
    ) -> Result<Dataset> {
        let columns = validate_pii_columns(columns)?;
        sqlx::query("UPDATE datasets SET pii_columns = $1 WHERE id = $2")
            .bind(serde_json::to_string(&columns).unwrap_or_else(|_| "[]".into()))
            .bind(&ds.id)
            .execute(self.meta.writer())
            .await?;
        self.get(project, &ds.name).await
    }

    fn from_row(row: &AnyRow) -> Result<Dataset> {
        let regions: Option<String> = row.try_get("allowed_regions")?;
        let tags: String = row.try_get("tags")?;
        let schema: Option<String> = row.try_get("schema")?;
        let pii: String = row.try_get("pii_columns")?;
        Ok(Dataset {
            id: row.try_get("id")?,
            project_id: row.try_get("project_id")?,
            name: row.try_get("name")?,
            description: row.try_get("description")?,
            owner: row.try_get("owner")?,
            classification: row.try_get::<String, _>("classification")?.parse()?,
            allowed_regions: regions
                .map(|r| serde_json::from_str(&r))
                .transpose()
                .map_err(|e| Error::invalid("stored regions", e.to_string()))?,
            tags: serde_json::from_str(&tags)
                .map_err(|e| Error::invalid("stored tags", e.to_string()))?,
            location: row.try_get("location")?,
            schema: schema
                .map(|s| serde_json::from_str(&s))
                .transpose()
                .map_err(|e| Error::invalid("stored schema", e.to_string()))?,
            pii_columns: serde_json::from_str(&pii)
                .map_err(|e| Error::invalid("stored PII columns", e.to_string()))?,
            created_at: rfc3339(row.try_get("created_at")?),
            created_by: row.try_get("created_by")?,
            latest_version: row.try_get("latest_version")?,
            deleted_at: row.try_get::<Option<i64>, _>("deleted_at")?.map(rfc3339),
        })
    }

    const SELECT: &'static str = "SELECT d.*, (SELECT MAX(v.version) FROM dataset_versions v WHERE v.dataset_id = d.id) AS latest_version FROM datasets d";

    /// One dataset of a project.
    #[qanat_macros::boxed]
    pub async fn get(&self, project: &Project, name: &str) -> Result<Dataset> {
        self.find(project, name, Some(false)).await
    }

    /// A dataset by name: live (`Some(false)`), deleted (`Some(true)`) or either.
    async fn find(&self, project: &Project, name: &str, deleted: Option<bool>) -> Result<Dataset> {
        let state = match deleted {
            Some(false) => " AND d.deleted_at IS NULL",
            Some(true) => " AND d.deleted_at IS NOT NULL",
            None => "",
        };
        let row = sqlx::query(&format!(
            "{} WHERE d.project_id = $1 AND d.name = $2{state}",
            Self::SELECT
        ))
        .bind(&project.id)
        .bind(name)
        .fetch_optional(self.meta.reader())
        .await?
        .ok_or_else(|| {
            let what = if deleted == Some(true) {
                "deleted dataset"
            } else {
                "dataset"
            };
            Error::not_found(what, format!("{}/{name}", project.name))
        })?;
        Self::from_row(&row)
    }

    /// Every dataset of a project.
    #[qanat_macros::boxed]
    pub async fn list(&self, project: &Project) -> Result<Vec<Dataset>> {
        self.list_where(project, " AND d.deleted_at IS NULL").await
    }

    /// The deleted datasets of a project that `gc` has not purged yet.
    #[qanat_macros::boxed]
    pub async fn list_deleted(&self, project: &Project) -> Result<Vec<Dataset>> {
        self.list_where(project, " AND d.deleted_at IS NOT NULL")
            .await
    }

    async fn list_where(&self, project: &Project, state: &str) -> Result<Vec<Dataset>> {
        let rows = sqlx::query(&format!(
            "{} WHERE d.project_id = $1{state} ORDER BY d.name",
            Self::SELECT
        ))
        .bind(&project.id)
        .fetch_all(self.meta.reader())
        .await?;
        rows.iter().map(Self::from_row).collect()
    }

    /// Deletes a dataset: it disappears from every listing and read at once, while its
    /// versions and bytes stay until `gc` purges them after the retention period
    /// (until then [`Self::restore`] brings it back, and its name stays taken).
    #[qanat_macros::boxed]
    pub async fn delete(&self, project: &Project, name: &str, by: &str) -> Result<Dataset> {
        self.set_deleted(project, name, Some(by)).await?;
        self.find(project, name, Some(true)).await
    }

    /// Brings back a deleted dataset that `gc` has not purged yet.
    #[qanat_macros::boxed]
    pub async fn restore(&self, project: &Project, name: &str) -> Result<Dataset> {
        self.set_deleted(project, name, None).await?;
        self.get(project, name).await
    }

    /// Marks a live dataset deleted by `by`, or (`None`) a deleted one live again.
    async fn set_deleted(&self, project: &Project, name: &str, by: Option<&str>) -> Result<()> {
        let (from, what) = match by {
            Some(_) => ("IS NULL", "dataset"),
            None => ("IS NOT NULL", "deleted dataset"),
        };
        let done = sqlx::query(&format!(
            "UPDATE datasets SET deleted_at = $1, deleted_by = $2 WHERE project_id = $3 AND name = $4 AND deleted_at {from}"
        ))
        .bind(by.map(|_| now_micros()))
        .bind(by)
        .bind(&project.id)
        .bind(name)
        .execute(self.meta.writer())
        .await?
        .rows_affected();
        if done == 0 {
            return Err(Error::not_found(what, format!("{}/{name}", project.name)));
        }
        Ok(())
    }

    /// Removes every dataset row of a project being purged: datasets, versions, tags,
    /// the chunk registry and lineage. Its objects are deleted by the caller.
    #[qanat_macros::boxed]
    pub async fn purge_project(&self, project_id: &str) -> Result<()> {
        let mut tx = self.meta.writer().begin().await?;
        for sql in [
            "DELETE FROM dataset_tags WHERE dataset_id IN (SELECT id FROM datasets WHERE project_id = $1)",
            "DELETE FROM dataset_versions WHERE dataset_id IN (SELECT id FROM datasets WHERE project_id = $1)",
            "DELETE FROM datasets WHERE project_id = $1",
            "DELETE FROM dataset_chunks WHERE project_id = $1",
            "DELETE FROM lineage_edges WHERE project_id = $1",
            "DELETE FROM dataset_erasures WHERE project_id = $1",
            "DELETE FROM erased_chunks WHERE project_id = $1",
        ] {
            sqlx::query(sql).bind(project_id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Removes a deleted dataset for good: its versions, tags, lineage as a child, and
    /// the manifests and profiles no other version uses. Its chunks are left to the
    /// chunk sweep of [`Self::gc`], which frees those nothing references any more.
    async fn purge(&self, project: &Project, ds: &Dataset) -> Result<()> {
        let manifests: Vec<String> =
            sqlx::query("SELECT DISTINCT manifest_id FROM dataset_versions WHERE dataset_id = $1")
                .bind(&ds.id)
                .fetch_all(self.meta.reader())
                .await?
                .iter()
                .map(|r| r.try_get("manifest_id"))
                .collect::<std::result::Result<_, _>>()?;
        let child = format!(
            "{}@",
            ObjectRef::unversioned(qanat_core::Kind::Dataset, ds.name.as_str())
        );
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query(
            "DELETE FROM lineage_edges WHERE project_id = $1 AND substr(child, 1, CAST($2 AS INTEGER)) = $3",
        )
        .bind(&project.id)
        .bind(child.chars().count() as i64)
        .bind(&child)
        .execute(&mut *tx)
        .await?;
        for table in ["dataset_tags", "dataset_versions"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE dataset_id = $1"))
                .bind(&ds.id)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("DELETE FROM datasets WHERE id = $1 AND deleted_at IS NOT NULL")
            .bind(&ds.id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        for m in manifests {
            self.drop_manifest_if_unused(project, ds, &m).await?;
        }
        Ok(())
    }

    /// Deletes a manifest and its profiles once no version of the project names it.
    async fn drop_manifest_if_unused(
        &self,
        project: &Project,
        ds: &Dataset,
        manifest_id: &str,
    ) -> Result<()> {
        let still_used = sqlx::query(
            "SELECT 1 FROM dataset_versions v JOIN datasets d ON d.id = v.dataset_id WHERE d.project_id = $1 AND v.manifest_id = $2 LIMIT 1",
        )
        .bind(&project.id)
        .bind(manifest_id)
        .fetch_optional(self.meta.reader())
        .await?
        .is_some();
        if still_used {
            return Ok(());
        }
        for key in [
            manifest_key(&project.id, manifest_id)?,
            profiles_key(&project.id, manifest_id)?,
        ] {
            match self.storage.delete(&ds.location, &key).await {
                Ok(()) | Err(qanat_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Removes the versions of `ds` pushed before `before` that are neither its
    /// latest nor tagged, remembering each (a read of one says it expired); returns
    /// how many. Their chunks are left to the sweep.
    async fn expire_versions(
        &self,
        project: &Project,
        ds: &Dataset,
        before: i64,
        days: u32,
    ) -> Result<u64> {
        let Some(latest) = ds.latest_version else {
            return Ok(0);
        };
        let rows = sqlx::query(
            "SELECT version, manifest_id, created_at FROM dataset_versions v WHERE dataset_id = $1 AND created_at < $2 AND version < $3 \
             AND NOT EXISTS (SELECT 1 FROM dataset_tags t WHERE t.dataset_id = v.dataset_id AND t.version = v.version) ORDER BY version",
        )
        .bind(&ds.id)
        .bind(before)
        .bind(latest)
        .fetch_all(self.meta.reader())
        .await?;
        let now = now_micros();
        let mut n = 0;
        for row in rows {
            let version: i64 = row.try_get("version")?;
            let manifest_id: String = row.try_get("manifest_id")?;
            let mut tx = self.meta.writer().begin().await?;
            sqlx::query(
                "INSERT INTO dataset_versions_expired (dataset_id, version, manifest_id, created_at, expired_at, days) VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (dataset_id, version) DO NOTHING",
            )
            .bind(&ds.id)
            .bind(version)
            .bind(&manifest_id)
            .bind(row.try_get::<i64, _>("created_at")?)
            .bind(now)
            .bind(i64::from(days))
            .execute(&mut *tx)
            .await?;
            // A tag added since the select keeps the version.
            let gone = sqlx::query(
                "DELETE FROM dataset_versions WHERE dataset_id = $1 AND version = $2 \
                 AND NOT EXISTS (SELECT 1 FROM dataset_tags t WHERE t.dataset_id = $1 AND t.version = $2)",
            )
            .bind(&ds.id)
            .bind(version)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if gone == 0 {
                continue; // dropping the transaction forgets the expiry row too
            }
            tx.commit().await?;
            n += 1;
            self.drop_manifest_if_unused(project, ds, &manifest_id)
                .await?;
        }
        Ok(n)
    }

    /// Which of `ids` are not stored yet for this dataset's project and location. The
    /// ones that are stored get their `last_used_at` refreshed: a push that relies on
    /// them holds them against `gc` for its grace period.
    #[qanat_macros::boxed]
    pub async fn missing_chunks(&self, ds: &Dataset, ids: &[ChunkId]) -> Result<Vec<ChunkId>> {
        let mut present = HashSet::new();
        let mut writer = self.meta.writer().acquire().await?;
        hold_chunks(&mut writer, ds, ids, now_micros()).await?;
        drop(writer);
        for batch in ids.chunks(IN_BATCH) {
            let select = format!(
                "SELECT chunk_id FROM dataset_chunks WHERE project_id = $1 AND location = $2 AND deleting = 0 AND chunk_id IN ({})",
                (0..batch.len()).map(|i| format!("${}", i + 3)).collect::<Vec<_>>().join(", ")
            );
            let mut q = sqlx::query(&select).bind(&ds.project_id).bind(&ds.location);
            for id in batch {
                q = q.bind(id.to_hex());
            }
            for row in q.fetch_all(self.meta.reader()).await? {
                present.insert(row.try_get::<String, _>("chunk_id")?);
            }
        }
        let mut seen = HashSet::new();
        Ok(ids
            .iter()
            .filter(|id| !present.contains(&id.to_hex()) && seen.insert(**id))
            .copied()
            .collect())
    }

    /// Stores one chunk after checking that its bytes hash to `id`. Returns whether it
    /// was new (false: it was already stored, nothing written).
    #[qanat_macros::boxed]
    pub async fn put_chunk(
        &self,
        project: &Project,
        ds: &Dataset,
        id: ChunkId,
        data: Bytes,
    ) -> Result<bool> {
        Ok(self
            .put_chunks(project, ds, vec![(id, data)])
            .await?
            .new_chunks
            == 1)
    }

    /// Stores a pack of chunks after checking that each one's bytes hash to its id.
    /// Chunks already stored are only held (their `last_used_at` refreshed); the new
    /// ones are written concurrently, with their data keys and their rows recorded in
    /// one transaction each, so a pack costs two durable commits however many chunks
    /// it carries. A chunk a gc is deleting makes the whole pack `Busy` (retry it).
    #[qanat_macros::boxed]
    pub async fn put_chunks(
        &self,
        project: &Project,
        ds: &Dataset,
        chunks: Vec<(ChunkId, Bytes)>,
    ) -> Result<PackStored> {
        if let Some((_, d)) = chunks
            .iter()
            .find(|(_, d)| d.is_empty() || d.len() > MAX_CHUNK as usize)
        {
            return Err(Error::invalid(
                "chunk",
                format!("a chunk is 1..={MAX_CHUNK} bytes, got {}", d.len()),
            ));
        }
        // Hashing megabytes is CPU work: keep it off the async workers.
        let chunks = tokio::task::spawn_blocking(move || {
            for (id, data) in &chunks {
                if ChunkId::of(data) != *id {
                    return Err(Error::invalid(
                        "chunk",
                        format!("the bytes do not hash to {id}"),
                    ));
                }
            }
            Ok(chunks)
        })
        .await
        .map_err(|e| Error::Io(std::io::Error::other(format!("chunk verification: {e}"))))??;
        self.check_location(project, ds)?;
        let count = chunks.len();
        let mut unique: BTreeMap<ChunkId, Bytes> = chunks.into_iter().collect();
        let ids: Vec<ChunkId> = unique.keys().copied().collect();

        // Hold what is already stored; find what a gc has claimed.
        let now = now_micros();
        let mut held = HashSet::new();
        let mut claimed = Vec::new();
        let mut tx = self.meta.writer().begin().await?;
        hold_chunks(&mut tx, ds, &ids, now).await?;
        for batch in ids.chunks(IN_BATCH) {
            let select = format!(
                "SELECT chunk_id, deleting FROM dataset_chunks WHERE project_id = $1 AND location = $2 AND chunk_id IN ({})",
                (0..batch.len())
                    .map(|i| format!("${}", i + 3))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let mut q = sqlx::query(&select).bind(&ds.project_id).bind(&ds.location);
            for id in batch {
                q = q.bind(id.to_hex());
            }
            for row in q.fetch_all(&mut *tx).await? {
                let id: ChunkId = row.try_get::<String, _>("chunk_id")?.parse()?;
                if row.try_get::<i64, _>("deleting")? == 0 {
                    held.insert(id);
                } else {
                    claimed.push(id);
                }
            }
        }
        tx.commit().await?;
        if let Some(id) = claimed.first() {
            return Err(Error::Busy(format!(
                "chunk {id} is being garbage-collected; upload it again in a moment"
            )));
        }
        unique.retain(|id, _| !held.contains(id));
        if unique.is_empty() {
            return Ok(PackStored {
                chunks: count,
                new_chunks: 0,
                new_bytes: 0,
            });
        }

        let objects = unique
            .iter()
            .map(|(id, data)| Ok((chunk_key(&ds.project_id, id)?, data.clone())))
            .collect::<Result<Vec<_>>>()?;
        let new_bytes = self.storage.put_many(&ds.location, &objects).await?;
        let mut tx = self.meta.writer().begin().await?;
        for (id, data) in &unique {
            sqlx::query(
                "INSERT INTO dataset_chunks (project_id, location, chunk_id, size, stored_at, last_used_at) VALUES ($1, $2, $3, $4, $5, $5) \
                 ON CONFLICT (project_id, location, chunk_id) DO NOTHING",
            )
            .bind(&ds.project_id)
            .bind(&ds.location)
            .bind(id.to_hex())
            .bind(data.len() as i64)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(PackStored {
            chunks: count,
            new_chunks: unique.len(),
            new_bytes,
        })
    }

    /// Resolves a dataset reference (a tag, `latest`, `vN` or `N`) to the canonical
    /// `dataset:NAME@N` that lineage records.
    #[qanat_macros::boxed]
    pub async fn canonical_ref(
        &self,
        project: &Project,
        reference: &qanat_core::ObjectRef,
    ) -> Result<qanat_core::ObjectRef> {
        if reference.kind != qanat_core::Kind::Dataset {
            return Err(Error::invalid(
                "lineage reference",
                format!(
                    "'{reference}' is not a dataset reference: use dataset:<name>@<version|tag>"
                ),
            ));
        }
        let ds = self.get(project, &reference.name).await?;
        let v = self.resolve(&ds, &reference.selector_or_latest()).await?;
        Ok(qanat_core::ObjectRef::version(
            qanat_core::Kind::Dataset,
            ds.name,
            v.version,
        ))
    }

    /// Makes a new version visible: every chunk must be stored; the manifest is written
    /// first and the version row (with its lineage edges) last, in one transaction.
    #[qanat_macros::boxed]
    pub async fn commit(
        &self,
        project: &Project,
        ds: &Dataset,
        manifest: Manifest,
        message: &str,
        author: &str,
        derived_from: &[ObjectRef],
    ) -> Result<DatasetVersion> {
        let lineage = Lineage {
            derived_from,
            edges: &[],
            stored: None,
            on_top_of: None,
        };
        self.commit_counted(project, ds, manifest, message, author, lineage)
            .await
    }

    /// Writes files made on the server (a training set), local files of any size, as a
    /// new version of `ds`: each is cut into chunks off the async runtime and stored a
    /// pack (about 32 MiB) at a time, then committed as [`Self::commit`] does, with
    /// `edges` (parent, relation) recorded beside its dataset parents in the same
    /// transaction. Memory stays at about two packs whatever the files' size.
    #[allow(clippy::too_many_arguments)]
    #[qanat_macros::boxed]
    pub async fn commit_files(
        &self,
        project: &Project,
        ds: &Dataset,
        files: Vec<(String, std::path::PathBuf)>,
        message: &str,
        author: &str,
        derived_from: &[ObjectRef],
        edges: &[(ObjectRef, String)],
    ) -> Result<DatasetVersion> {
        let mut manifest = Manifest::default();
        for (path, local) in files {
            manifest.files.push(
                self.store_local_file(project, ds, path.as_bytes(), local, 0o644)
                    .await?,
            );
        }
        let lineage = Lineage {
            derived_from,
            edges,
            stored: None,
            on_top_of: None,
        };
        self.commit_counted(project, ds, manifest, message, author, lineage)
            .await
    }

    /// Cuts a local file into chunks off the async runtime, stores them a pack (about
    /// 32 MiB) at a time, and returns its manifest entry as `path`. Memory stays at
    /// about two packs whatever the file's size.
    pub(crate) async fn store_local_file(
        &self,
        project: &Project,
        ds: &Dataset,
        path: &[u8],
        local: std::path::PathBuf,
        mode: u32,
    ) -> Result<FileEntry> {
        // The chunker reads the file on a blocking thread and hands over packs.
        type Pack = Vec<(ChunkId, Bytes)>;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Pack>>(1);
        let reader =
            tokio::task::spawn_blocking(move || -> Result<(Vec<ChunkRef>, String, u64)> {
                let file = std::fs::File::open(&local).map_err(Error::Io)?;
                let mut hasher = blake3::Hasher::new();
                let (mut refs, mut pack, mut pack_bytes, mut size) =
                    (Vec::new(), Vec::new(), 0usize, 0u64);
                for chunk in crate::chunking::chunks(std::io::BufReader::new(file)) {
                    let chunk = chunk.map_err(Error::Io)?;
                    hasher.update(&chunk.data);
                    size += chunk.data.len() as u64;
                    refs.push(ChunkRef {
                        id: chunk.id,
                        size: chunk.data.len() as u64,
                    });
                    pack_bytes += chunk.data.len();
                    pack.push((chunk.id, chunk.data));
                    if pack_bytes >= 32 << 20 {
                        pack_bytes = 0;
                        if tx.blocking_send(Ok(std::mem::take(&mut pack))).is_err() {
                            break; // the receiver failed; its error is returned
                        }
                    }
                }
                if !pack.is_empty() {
                    let _ = tx.blocking_send(Ok(pack));
                }
                Ok((refs, hasher.finalize().to_hex().to_string(), size))
            });
        while let Some(pack) = rx.recv().await {
            self.put_chunks(project, ds, pack?).await?;
        }
        let (refs, hash, size) = reader
            .await
            .map_err(|e| Error::Io(std::io::Error::other(format!("chunking stopped: {e}"))))??;
        Ok(FileEntry::new(path, size, mode, hash, refs))
    }

    /// [`Self::commit`], with the bytes this version stored first when the caller
    /// knows them (a copy knows exactly which chunks it wrote); otherwise they are the
    /// bytes of chunks that the parent version does not have.
    pub(crate) async fn commit_counted(
        &self,
        project: &Project,
        ds: &Dataset,
        mut manifest: Manifest,
        message: &str,
        author: &str,
        lineage: Lineage<'_>,
    ) -> Result<DatasetVersion> {
        let Lineage {
            derived_from,
            edges,
            stored,
            on_top_of,
        } = lineage;
        manifest.normalize()?;
        let mut sources = Vec::with_capacity(derived_from.len());
        for r in derived_from {
            sources.push(self.canonical_ref(project, r).await?);
        }
        self.check_location(project, ds)?;
        let distinct = manifest.distinct_chunks();
        let ids: Vec<ChunkId> = distinct.iter().map(|c| c.id).collect();
        let missing = self.missing_chunks(ds, &ids).await?;
        if let Some(first) = missing.first() {
            return Err(Error::MissingChunks {
                count: missing.len(),
                example: first.to_hex(),
            });
        }
        self.check_chunk_sizes(ds, &distinct).await?;
        let parent = ds.latest_version;
        let parent_chunks: HashSet<ChunkId> = match parent {
            Some(p) => {
                let pv = self.resolve(ds, &VersionRef::Version(p)).await?;
                self.manifest(ds, &pv)
                    .await?
                    .distinct_chunks()
                    .into_iter()
                    .map(|c| c.id)
                    .collect()
            }
            None => HashSet::new(),
        };
        let new_bytes: u64 = stored.unwrap_or_else(|| {
            distinct
                .iter()
                .filter(|c| !parent_chunks.contains(&c.id))
                .map(|c| c.size)
                .sum()
        });
        let manifest_id = manifest.id();
        let profiles = self.profile_files(ds, &manifest).await?;
        if let Some((path, why)) = profiles.iter().find_map(|fp| {
            let e = fp.error.as_deref()?;
            let at = e.find(crate::tabular::RAGGED)?;
            Some((&fp.path, &e[at + crate::tabular::RAGGED.len()..]))
        }) {
            return Err(Error::invalid(
                "dataset push",
                format!("{path}: {why}; nothing was stored as a version"),
            ));
        }
        let declared = crate::tabular::declared_pii(ds.schema.as_ref(), &ds.pii_columns);
        let undeclared = crate::tabular::undeclared_pii(&profiles, &declared);
        if project.require_pii_declared && !undeclared.is_empty() {
            return Err(Error::UndeclaredPii {
                project: project.name.clone(),
                dataset: ds.name.clone(),
                found: undeclared,
            });
        }
        if let Some(schema) = &ds.schema {
            let mut violations = Vec::new();
            for fp in &profiles {
                match (&fp.profile, &fp.error) {
                    (Some(p), _) => violations.extend(schema.check(&fp.path, p)),
                    (None, Some(e)) => violations.push(SchemaViolation {
                        file: fp.path.clone(),
                        column: "*".into(),
                        problem: format!("cannot be read as a table: {e}"),
                        examples: vec![],
                    }),
                    (None, None) => {}
                }
            }
            if !violations.is_empty() {
                // A refusal is read by whoever pushed; values of personal data stay
                // out of it.
                for v in &mut violations {
                    let protected = profiles.iter().any(|fp| {
                        fp.path == v.file
                            && fp.profile.as_ref().is_some_and(|p| {
                                crate::tabular::protected_columns(p, &declared).contains(&v.column)
                            })
                    });
                    if protected || declared.contains(&v.column) {
                        v.examples.retain(|e| e.starts_with("row "));
                    }
                }
                return Err(Error::SchemaViolation(violations));
            }
        }
        self.storage
            .put_bytes(
                &ds.location,
                &manifest_key(&ds.project_id, &manifest_id)?,
                Bytes::from(manifest.canonical()),
            )
            .await?;
        if !profiles.is_empty() {
            let json = serde_json::to_vec(&profiles)
                .map_err(|e| Error::invalid("profiles", e.to_string()))?;
            self.storage
                .put_bytes(
                    &ds.location,
                    &profiles_key(&ds.project_id, &manifest_id)?,
                    Bytes::from(json),
                )
                .await?;
        }

        // Two commits racing on PostgreSQL may pick the same number; the primary key
        // stops the second, which takes the next number.
        for _ in 0..5 {
            let mut tx = self.meta.writer().begin().await?;
            let next: i64 = sqlx::query("SELECT COALESCE(MAX(version), 0) + 1 AS next FROM dataset_versions WHERE dataset_id = $1")
                .bind(&ds.id)
                .fetch_one(&mut *tx)
                .await?
                .try_get("next")?;
            if let Some(base) = on_top_of {
                if next != base + 1 {
                    return Err(Error::Conflict(format!(
                        "dataset {} got version {} while this one was being made from version {base}; nothing was stored as a version: send the request again",
                        ds.name,
                        next - 1
                    )));
                }
            }
            // Hold every chunk in the same transaction as the version row: a gc that
            // claimed one first leaves the count short and the commit fails cleanly;
            // a gc that comes later sees a fresh last_used_at and leaves them alone.
            let now = now_micros();
            let held = hold_chunks(&mut tx, ds, &ids, now).await?;
            if held != ids.len() as u64 {
                return Err(Error::MissingChunks {
                    count: ids.len() - held as usize,
                    example: "(removed by a concurrent gc)".into(),
                });
            }
            let res = sqlx::query(
                "INSERT INTO dataset_versions (dataset_id, version, manifest_id, parent, message, author, producer, file_count, total_size, new_bytes, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            )
            .bind(&ds.id)
            .bind(next)
            .bind(&manifest_id)
            .bind(parent)
            .bind(message)
            .bind(author)
            .bind(ObjectRef::user(author).to_string())
            .bind(manifest.files.len() as i64)
            .bind(manifest.total_size() as i64)
            .bind(new_bytes as i64)
            .bind(now_micros())
            .execute(&mut *tx)
            .await;
            match res {
                Ok(_) => {
                    let mut parents: Vec<(ObjectRef, &str)> = Vec::new();
                    if let Some(p) = parent {
                        parents.push((ObjectRef::dataset(ds.name.as_str(), p), "previous_version"));
                    }
                    parents.extend(sources.iter().map(|s| (s.clone(), "derived_from")));
                    parents.extend(edges.iter().map(|(p, r)| (p.clone(), r.as_str())));
                    parents.push((ObjectRef::user(author), "produced_by"));
                    let child = ObjectRef::dataset(ds.name.as_str(), next);
                    qanat_governance::lineage::record_edges(
                        &mut tx,
                        &ds.project_id,
                        &child,
                        &parents,
                    )
                    .await?;
                    let reported = match (&self.outbox, undeclared.is_empty()) {
                        (Some(outbox), false) => {
                            let data = serde_json::json!({
                                "dataset": ds.name,
                                "version": next,
                                "author": author,
                                "columns": undeclared,
                            });
                            outbox
                                .record(
                                    &mut tx,
                                    &ds.project_id,
                                    &project.name,
                                    qanat_events::EventType::UNDECLARED_PII_CREATED,
                                    data,
                                )
                                .await
                                .map_err(|e| {
                                    Error::Busy(format!("recording the undeclared-PII event: {e}"))
                                })?
                                > 0
                        }
                        _ => false,
                    };
                    tx.commit().await?;
                    if reported {
                        if let Some(outbox) = &self.outbox {
                            outbox.wake();
                        }
                    }
                    let mut v = self.resolve(ds, &VersionRef::Version(next)).await?;
                    v.undeclared_pii = undeclared;
                    return Ok(v);
                }
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::invalid(
            "commit",
            "too many concurrent pushes to this dataset; retry",
        ))
    }

    fn version_from_row(ds: &Dataset, row: &AnyRow, tags: Vec<String>) -> Result<DatasetVersion> {
        Ok(DatasetVersion {
            dataset: ds.name.clone(),
            version: row.try_get("version")?,
            manifest_id: row.try_get("manifest_id")?,
            parent: row.try_get("parent")?,
            message: row.try_get("message")?,
            author: row.try_get("author")?,
            producer: row.try_get("producer")?,
            file_count: row.try_get("file_count")?,
            total_size: row.try_get("total_size")?,
            new_bytes: row.try_get("new_bytes")?,
            created_at: rfc3339(row.try_get("created_at")?),
            tags,
            undeclared_pii: Vec::new(),
        })
    }

    async fn tags_of(&self, ds: &Dataset) -> Result<BTreeMap<i64, Vec<String>>> {
        let rows =
            sqlx::query("SELECT tag, version FROM dataset_tags WHERE dataset_id = $1 ORDER BY tag")
                .bind(&ds.id)
                .fetch_all(self.meta.reader())
                .await?;
        let mut out: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for r in rows {
            out.entry(r.try_get("version")?)
                .or_default()
                .push(r.try_get("tag")?);
        }
        Ok(out)
    }

    /// Every version, newest first.
    #[qanat_macros::boxed]
    pub async fn versions(&self, ds: &Dataset) -> Result<Vec<DatasetVersion>> {
        let mut tags = self.tags_of(ds).await?;
        let rows = sqlx::query(
            "SELECT * FROM dataset_versions WHERE dataset_id = $1 ORDER BY version DESC",
        )
        .bind(&ds.id)
        .fetch_all(self.meta.reader())
        .await?;
        rows.iter()
            .map(|r| {
                let v: i64 = r.try_get("version")?;
                Self::version_from_row(ds, r, tags.remove(&v).unwrap_or_default())
            })
            .collect()
    }

    /// Resolves `latest`, a number or a tag.
    #[qanat_macros::boxed]
    pub async fn resolve(&self, ds: &Dataset, r: &VersionRef) -> Result<DatasetVersion> {
        let number = match r {
            VersionRef::Version(n) => Some(*n),
            VersionRef::Latest => ds.latest_version,
            VersionRef::Label(t) => {
                sqlx::query("SELECT version FROM dataset_tags WHERE dataset_id = $1 AND tag = $2")
                    .bind(&ds.id)
                    .bind(t.as_str())
                    .fetch_optional(self.meta.reader())
                    .await?
                    .map(|r| r.try_get::<i64, _>("version"))
                    .transpose()?
            }
        };
        let not_found = || Error::not_found("dataset version", format!("{}@{r}", ds.name));
        let n = number.ok_or_else(not_found)?;
        let row =
            sqlx::query("SELECT * FROM dataset_versions WHERE dataset_id = $1 AND version = $2")
                .bind(&ds.id)
                .bind(n)
                .fetch_optional(self.meta.reader())
                .await?;
        let Some(row) = row else {
            let expired = sqlx::query(
                "SELECT expired_at, days FROM dataset_versions_expired WHERE dataset_id = $1 AND version = $2",
            )
            .bind(&ds.id)
            .bind(n)
            .fetch_optional(self.meta.reader())
            .await?;
            return Err(match expired {
                Some(e) => Error::Expired {
                    what: format!("version {n} of dataset {}", ds.name),
                    at: rfc3339(e.try_get("expired_at")?),
                    days: e.try_get("days")?,
                },
                None => not_found(),
            });
        };
        let tags = self.tags_of(ds).await?.remove(&n).unwrap_or_default();
        Self::version_from_row(ds, &row, tags)
    }

    /// A version's manifest, checked against its content address.
    #[qanat_macros::boxed]
    pub async fn manifest(&self, ds: &Dataset, v: &DatasetVersion) -> Result<Manifest> {
        let bytes = self
            .storage
            .get_bytes(&ds.location, &manifest_key(&ds.project_id, &v.manifest_id)?)
            .await?;
        if blake3::hash(&bytes).to_hex().as_str() != v.manifest_id {
            return Err(qanat_store::Error::Integrity {
                key: format!("manifest {}", v.manifest_id),
                reason: "content does not match its address".into(),
            }
            .into());
        }
        serde_json::from_slice(&bytes).map_err(|e| Error::invalid("stored manifest", e.to_string()))
    }

    /// A file's bytes, chunk by chunk, each verified against its BLAKE3 id before any
    /// of it is handed on (a chunk comes as the pieces it was decrypted in, never
    /// copied into one buffer).
    pub fn file_stream(
        &self,
        ds: &Dataset,
        entry: FileEntry,
    ) -> impl Stream<Item = Result<Bytes>> + Send + 'static {
        let storage = self.storage.clone();
        let meta = self.meta.clone();
        let ds = ds.clone();
        let what = format!("file {} of dataset {}", entry.path, ds.name);
        stream::iter(entry.chunks)
            .map(move |c| {
                let storage = storage.clone();
                let meta = meta.clone();
                let ds = ds.clone();
                let what = what.clone();
                async move {
                    let parts: Vec<Bytes> = match storage
                        .get(&ds.location, &chunk_key(&ds.project_id, &c.id)?)
                        .await
                    {
                        Ok(s) => s.try_collect().await?,
                        // A chunk an erasure destroyed says so.
                        Err(e @ qanat_store::Error::NotFound { .. }) => {
                            return Err(Self::erased(&meta, &ds, &what, &c.id)
                                .await
                                .unwrap_or(e.into()))
                        }
                        Err(e) => return Err(e.into()),
                    };
                    let mut hasher = blake3::Hasher::new();
                    let mut len = 0u64;
                    for p in &parts {
                        hasher.update(p);
                        len += p.len() as u64;
                    }
                    if ChunkId(*hasher.finalize().as_bytes()) != c.id || len != c.size {
                        return Err(qanat_store::Error::Integrity {
                            key: format!("chunk {}", c.id),
                            reason: "content does not match its address".into(),
                        }
                        .into());
                    }
                    Ok(stream::iter(parts.into_iter().map(Ok::<Bytes, Error>)))
                }
            })
            .buffered(2)
            .try_flatten()
    }

    /// Names a version; tags are immutable (409 if the tag exists).
    #[qanat_macros::boxed]
    pub async fn tag(&self, ds: &Dataset, tag: &str, version: i64) -> Result<DatasetVersion> {
        validate_name("tag", tag)?;
        if matches!(
            tag.parse::<VersionRef>()?,
            VersionRef::Version(_) | VersionRef::Latest
        ) {
            return Err(Error::invalid(
                "tag",
                format!("'{tag}' would read as a version number"),
            ));
        }
        self.resolve(ds, &VersionRef::Version(version)).await?;
        // Only while the version exists: a gc removing it past retention meanwhile
        // leaves no tag naming nothing.
        let res = sqlx::query(
            "INSERT INTO dataset_tags (dataset_id, tag, version, created_at) SELECT $1, $2, $3, $4 \
             WHERE EXISTS (SELECT 1 FROM dataset_versions WHERE dataset_id = $1 AND version = $3)",
        )
        .bind(&ds.id)
        .bind(tag)
        .bind(version)
        .bind(now_micros())
        .execute(self.meta.writer())
        .await;
        match res {
            Ok(done) if done.rows_affected() == 0 => {
                self.resolve(ds, &VersionRef::Version(version)).await?;
                Err(Error::Conflict(format!(
                    "version {version} of {} changed while it was being tagged; tag it again",
                    ds.name
                )))
            }
            Ok(_) => self.resolve(ds, &VersionRef::Version(version)).await,
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                Err(Error::already_exists("tag", format!("{}@{tag}", ds.name)))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the chunks no version of the project references and no push has used
    /// for `grace`. Safe against concurrent pushes (see the `dataset_chunks` comment in
    /// the migration): a chunk is claimed only if unused since the cutoff, a commit
    /// holds its chunks in its own transaction, and a claimed chunk counts as missing.
    #[qanat_macros::boxed]
    pub async fn gc(
        &self,
        project: &Project,
        grace: std::time::Duration,
        retention: std::time::Duration,
    ) -> Result<GcReport> {
        let now = now_micros();
        let cutoff = now - i64::try_from(grace.as_micros()).unwrap_or(i64::MAX);
        // 0. Datasets deleted longer ago than the retention period go for good.
        let purge_before = now - i64::try_from(retention.as_micros()).unwrap_or(i64::MAX);
        let mut datasets_purged = 0;
        for ds in self.list_deleted(project).await? {
            let deleted = ds
                .deleted_at
                .as_deref()
                .and_then(|t| qanat_store::parse_micros(t).ok())
                .unwrap_or(now);
            if deleted <= purge_before {
                self.purge(project, &ds).await?;
                datasets_purged += 1;
            }
        }
        // 0b. Versions past the project's retention (not a dataset's latest, not
        // tagged) go, so the sweep below frees the chunks only they held.
        let mut versions_expired = 0;
        if let Some(days) = project.dataset_version_days {
            let before = now - i64::from(days) * 86_400_000_000;
            for ds in self.list(project).await? {
                versions_expired += self.expire_versions(project, &ds, before, days).await?;
            }
        }
        // 1. What is referenced, per location (deleted datasets not purged yet too:
        // they can still be restored).
        let mut referenced: HashSet<(String, ChunkId)> = HashSet::new();
        let mut versions = 0u64;
        let live = self.list(project).await?;
        for ds in live.into_iter().chain(self.list_deleted(project).await?) {
            for v in self.versions(&ds).await? {
                versions += 1;
                for c in self.manifest(&ds, &v).await?.distinct_chunks() {
                    referenced.insert((ds.location.clone(), c.id));
                }
            }
        }
        // 2. Candidates: unreferenced and unused since the cutoff.
        let rows = sqlx::query(
            "SELECT location, chunk_id, size FROM dataset_chunks WHERE project_id = $1 AND deleting = 0 AND last_used_at < $2",
        )
        .bind(&project.id)
        .bind(cutoff)
        .fetch_all(self.meta.reader())
        .await?;
        let mut report = GcReport {
            datasets_purged,
            dataset_versions_expired: versions_expired,
            versions_scanned: versions,
            chunks_referenced: referenced.len() as u64,
            ..GcReport::default()
        };
        for row in rows {
            let location: String = row.try_get("location")?;
            let id: ChunkId = row.try_get::<String, _>("chunk_id")?.parse()?;
            if referenced.contains(&(location.clone(), id)) {
                continue;
            }
            // 3. Claim, delete the object, delete the row.
            let claimed = sqlx::query(
                "UPDATE dataset_chunks SET deleting = 1 WHERE project_id = $1 AND location = $2 AND chunk_id = $3 AND deleting = 0 AND last_used_at < $4",
            )
            .bind(&project.id)
            .bind(&location)
            .bind(id.to_hex())
            .bind(cutoff)
            .execute(self.meta.writer())
            .await?
            .rows_affected();
            if claimed == 0 {
                continue;
            }
            match self
                .storage
                .delete(&location, &chunk_key(&project.id, &id)?)
                .await
            {
                Ok(()) | Err(qanat_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    // Release the claim so the chunk stays usable; report the failure.
                    sqlx::query("UPDATE dataset_chunks SET deleting = 0 WHERE project_id = $1 AND location = $2 AND chunk_id = $3")
                        .bind(&project.id)
                        .bind(&location)
                        .bind(id.to_hex())
                        .execute(self.meta.writer())
                        .await?;
                    return Err(e.into());
                }
            }
            sqlx::query("DELETE FROM dataset_chunks WHERE project_id = $1 AND location = $2 AND chunk_id = $3 AND deleting = 1")
                .bind(&project.id)
                .bind(&location)
                .bind(id.to_hex())
                .execute(self.meta.writer())
                .await?;
            report.chunks_deleted += 1;
            report.bytes_freed += row.try_get::<i64, _>("size")? as u64;
        }
        Ok(report)
    }

    /// Refuses a manifest whose chunk sizes disagree with the stored chunks (the
    /// server hashed every chunk on upload, so the registry's sizes are the truth).
    async fn check_chunk_sizes(&self, ds: &Dataset, chunks: &[ChunkRef]) -> Result<()> {
        for batch in chunks.chunks(IN_BATCH) {
            let list: Vec<String> = (0..batch.len()).map(|i| format!("${}", i + 3)).collect();
            let sql = format!(
                "SELECT chunk_id, size FROM dataset_chunks WHERE project_id = $1 AND location = $2 AND chunk_id IN ({})",
                list.join(", ")
            );
            let mut q = sqlx::query(&sql).bind(&ds.project_id).bind(&ds.location);
            for c in batch {
                q = q.bind(c.id.to_hex());
            }
            let mut stored = std::collections::HashMap::new();
            for row in q.fetch_all(self.meta.reader()).await? {
                stored.insert(
                    row.try_get::<String, _>("chunk_id")?,
                    row.try_get::<i64, _>("size")?,
                );
            }
            for c in batch {
                if let Some(size) = stored.get(&c.id.to_hex()) {
                    if *size as u64 != c.size {
                        return Err(Error::invalid(
                            "manifest",
                            format!(
                                "chunk {} is {size} bytes, the manifest says {}",
                                c.id, c.size
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Copies version `version` of `src` into `dst` (same project) as a new version of
    /// `dst`: chunks `dst`'s location lacks are read from `src`'s (verified) and
    /// written to `dst`'s, after the residency check of the destination. The new
    /// version records `derived_from` the source.
    #[qanat_macros::boxed]
    pub async fn copy_version(
        &self,
        project: &Project,
        src: &Dataset,
        version: &VersionRef,
        dst: &Dataset,
        message: &str,
        author: &str,
    ) -> Result<DatasetVersion> {
        self.check_location(project, dst)?;
        let v = self.resolve(src, version).await?;
        let manifest = self.manifest(src, &v).await?;
        // The copy's personal data stays declared: the destination takes on the
        // source's declared columns (it may declare more).
        let inherited = crate::tabular::declared_pii(src.schema.as_ref(), &src.pii_columns);
        let dst = &if inherited.iter().all(|c| dst.pii_columns.contains(c)) {
            dst.clone()
        } else {
            let mut all = dst.pii_columns.clone();
            all.extend(
                inherited
                    .into_iter()
                    .filter(|c| !dst.pii_columns.contains(c)),
            );
            self.set_pii_columns(project, dst, &all).await?
        };
        let ids: Vec<ChunkId> = manifest.distinct_chunks().iter().map(|c| c.id).collect();
        // Chunks are shared within a project and location: only those the destination's
        // location lacks are written, and the version reports exactly those bytes.
        let mut added = 0u64;
        for id in self.missing_chunks(dst, &ids).await? {
            let data = self
                .storage
                .get_bytes(&src.location, &chunk_key(&src.project_id, &id)?)
                .await?;
            let len = data.len() as u64;
            if self.put_chunk(project, dst, id, data).await? {
                added += len;
            }
        }
        let source = ObjectRef::dataset(src.name.as_str(), v.version);
        let lineage = Lineage {
            derived_from: &[source],
            edges: &[],
            stored: Some(added),
            on_top_of: None,
        };
        self.commit_counted(project, dst, manifest, message, author, lineage)
            .await
    }

    /// The personal-data columns of each table of version `v`, by path: the columns
    /// the dataset declares that the table has, and those its profile confirms. A
    /// table that could not be profiled (a type change past the rows types are
    /// inferred from, bytes that are not UTF-8) gets every declared column: the
    /// rewriter finds them by name, so protection does not depend on a profile.
    #[qanat_macros::boxed]
    pub async fn pii_columns(
        &self,
        ds: &Dataset,
        v: &DatasetVersion,
    ) -> Result<BTreeMap<String, ProtectedTable>> {
        let declared = crate::tabular::declared_pii(ds.schema.as_ref(), &ds.pii_columns);
        Ok(self
            .profiles(ds, v)
            .await?
            .into_iter()
            .filter_map(|fp| {
                let (columns, profiled) = match &fp.profile {
                    Some(p) => (crate::tabular::protected_columns(p, &declared), true),
                    None => (declared.clone(), false),
                };
                (!columns.is_empty()).then_some((fp.path, ProtectedTable { columns, profiled }))
            })
            .collect())
    }

    /// File `entry` of `ds` with `columns` pseudonymized (see [`crate::protect`]),
    /// written to a temporary file that is removed when the result is dropped.
    #[qanat_macros::boxed]
    pub async fn pseudonymized_file(
        &self,
        ds: &Dataset,
        entry: &FileEntry,
        columns: Vec<String>,
    ) -> Result<Pseudonymized> {
        let purpose = crate::protect::purpose(&ds.project_id);
        self.pseudonymized_file_for(ds, entry, columns, purpose)
            .await
    }

    /// [`Self::pseudonymized_file`] with the pseudonyms keyed for `purpose` (the
    /// inference log's, for a drift reference that must match it).
    #[qanat_macros::boxed]
    pub async fn pseudonymized_file_for(
        &self,
        ds: &Dataset,
        entry: &FileEntry,
        columns: Vec<String>,
        purpose: String,
    ) -> Result<Pseudonymized> {
        self.check_not_erased(ds, entry).await?;
        let Some(format) = TableFormat::of(&entry.path) else {
            return Err(Error::invalid(
                "file",
                format!("{} is not a table; it cannot be pseudonymized", entry.path),
            ));
        };
        let handle = StoredFileHandle::new(
            self.storage.clone(),
            &ds.location,
            &ds.project_id,
            entry,
            tokio::runtime::Handle::current(),
        );
        let keyring = self.storage.keyring().clone();
        let _turn = self
            .rewrites
            .acquire()
            .await
            .map_err(|e| Error::Busy(format!("pseudonymizing: {e}")))?;
        tokio::task::spawn_blocking(move || -> Result<Pseudonymized> {
            let file = tempfile::NamedTempFile::new().map_err(Error::Io)?;
            let mut out = Hashing {
                inner: std::io::BufWriter::with_capacity(
                    1 << 20,
                    file.as_file().try_clone().map_err(Error::Io)?,
                ),
                hasher: blake3::Hasher::new(),
                size: 0,
            };
            let mac = |v: &[u8]| keyring.mac(&purpose, v).1;
            let found = match format {
                TableFormat::Csv => crate::protect::csv(handle.reader(), &mut out, &columns, &mac)?,
                TableFormat::Parquet => crate::protect::parquet(handle, &mut out, &columns, &mac)?,
            };
            std::io::Write::flush(&mut out.inner).map_err(Error::Io)?;
            Ok(Pseudonymized {
                size: out.size,
                blake3: out.hasher.finalize().to_hex().to_string(),
                columns: found,
                file,
            })
        })
        .await
        .map_err(|e| {
            Error::Io(std::io::Error::other(format!(
                "pseudonymizing stopped: {e}"
            )))
        })?
    }

    /// Profiles every CSV and Parquet file of `manifest` (schema, rows, column stats),
    /// reading them back from their stored chunks on blocking threads.
    async fn profile_files(&self, ds: &Dataset, manifest: &Manifest) -> Result<Vec<FileProfile>> {
        let mut out = Vec::new();
        for f in &manifest.files {
            let Some(format) = TableFormat::of(&f.path) else {
                continue;
            };
            // A profile depends only on the bytes and the format: files that did not
            // change since an earlier version reuse it instead of being read again.
            let cache_key = table_profile_key(&ds.project_id, &f.blake3, format)?;
            let cached = match self.storage.get_bytes(&ds.location, &cache_key).await {
                Ok(bytes) => serde_json::from_slice::<
                    std::result::Result<crate::TableProfile, String>,
                >(&bytes)
                .ok(),
                Err(qanat_store::Error::NotFound { .. }) => None,
                Err(e) => return Err(e.into()),
            };
            let result = match cached {
                Some(r) => r,
                None => {
                    let handle = StoredFileHandle::new(
                        self.storage.clone(),
                        &ds.location,
                        &ds.project_id,
                        f,
                        tokio::runtime::Handle::current(),
                    );
                    let computed = tokio::task::spawn_blocking(move || match format {
                        TableFormat::Csv => crate::tabular::profile_csv(|| Ok(handle.reader())),
                        TableFormat::Parquet => crate::tabular::profile_parquet(handle),
                    })
                    .await
                    .map_err(|e| {
                        Error::invalid("profile", format!("profiling thread failed: {e}"))
                    })?;
                    let r = computed.map_err(|e| e.to_string());
                    if let Ok(json) = serde_json::to_vec(&r) {
                        self.storage
                            .put_bytes(&ds.location, &cache_key, Bytes::from(json))
                            .await?;
                    }
                    r
                }
            };
            out.push(match result {
                Ok(p) => FileProfile {
                    path: f.path.clone(),
                    profile: Some(p),
                    error: None,
                },
                Err(e) => FileProfile {
                    path: f.path.clone(),
                    profile: None,
                    error: Some(e),
                },
            });
        }
        Ok(out)
    }

    /// The tabular profiles stored with a version (empty when it has no tables).
    #[qanat_macros::boxed]
    pub async fn profiles(&self, ds: &Dataset, v: &DatasetVersion) -> Result<Vec<FileProfile>> {
        match self
            .storage
            .get_bytes(&ds.location, &profiles_key(&ds.project_id, &v.manifest_id)?)
            .await
        {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| Error::invalid("stored profiles", e.to_string())),
            Err(qanat_store::Error::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Where a new version comes from: its dataset parents, other edges
/// (parent, relation) recorded with them, and the bytes it stored when the caller
/// knows them.
pub(crate) struct Lineage<'a> {
    pub(crate) derived_from: &'a [ObjectRef],
    pub(crate) edges: &'a [(ObjectRef, String)],
    pub(crate) stored: Option<u64>,
    /// Commit only if the dataset's newest version is still this one (an erasure's
    /// version is made from the version it scanned): a conflict otherwise.
    pub(crate) on_top_of: Option<i64>,
}

/// A table's personal-data columns.
#[derive(Debug, Clone)]
pub struct ProtectedTable {
    pub columns: Vec<String>,
    /// Whether they come from its profile (every one of them is in the table); if
    /// not, they are the dataset's declared columns, which it may not all have.
    pub profiled: bool,
}

/// A table file rewritten with its personal data pseudonymized.
pub struct Pseudonymized {
    /// Removed when dropped.
    pub file: tempfile::NamedTempFile,
    pub size: u64,
    pub blake3: String,
    /// The columns rewritten.
    pub columns: Vec<String>,
}

/// A writer that hashes and counts what goes through it.
struct Hashing<W> {
    inner: W,
    hasher: blake3::Hasher,
    size: u64,
}

impl<W: std::io::Write> std::io::Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
