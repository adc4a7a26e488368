//! Erasure of one data subject's rows from a dataset: a new version without them, and
//! the old versions' chunks that held them destroyed (their data keys first:
//! crypto-shredding), recorded in lineage and in `dataset_erasures` under the
//! request's id.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Range;

use bytes::Bytes;
use qanat_core::{Kind, ObjectRef};
use qanat_governance::Project;
use qanat_store::now_micros;
use sqlx::Row;

use crate::erase::{self, Found, Subject};
use crate::store::{chunk_key, profiles_key, table_profile_key, Lineage, VersionRef};
use crate::stored_file::StoredFileHandle;
use crate::tabular::TableFormat;
use crate::{
    AlsoUnreadable, ChunkId, Dataset, DatasetVersion, ErasedFile, Erasure, ErasureRequest, Error,
    FileEntry, FileProfile, Manifest, Result,
};

use qanat_store::format_micros as rfc3339;

/// Values one request may name in all.
const MAX_VALUES: usize = 1000;

fn validate(req: &ErasureRequest) -> Result<()> {
    let id = &req.request_id;
    if id.is_empty()
        || id.len() > 128
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'))
    {
        return Err(Error::invalid(
            "request_id",
            format!(
                "'{}' is not a request id: 1 to 128 letters, digits, '.', '_', '-' or ':' (e.g. DSR-2026-0042)",
                id.escape_debug()
            ),
        ));
    }
    if req.matches.is_empty() {
        return Err(Error::invalid(
            "match",
            "name at least one column and the subject's values in it (e.g. email=a@example.ae)",
        ));
    }
    let mut total = 0;
    for m in &req.matches {
        if m.column.is_empty() || m.column.len() > 1024 || m.column.chars().any(char::is_control) {
            return Err(Error::invalid(
                "match",
                format!("'{}' is not a column name", m.column.escape_debug()),
            ));
        }
        if m.values.is_empty() || m.values.iter().any(|v| v.trim().is_empty()) {
            return Err(Error::invalid(
                "match",
                format!(
                    "column '{}' needs one or more values, none of them empty (an empty value would match every row without one)",
                    m.column.escape_debug()
                ),
            ));
        }
        total += m.values.len();
    }
    if total > MAX_VALUES {
        return Err(Error::invalid(
            "match",
            format!("{total} values; one request names at most {MAX_VALUES}"),
        ));
    }
    if req.reason.len() > 4096 {
        return Err(Error::invalid("reason", "at most 4096 bytes"));
    }
    Ok(())
}

/// Where a file's scan result is kept: files are the same in many versions.
fn scan_key(f: &FileEntry) -> String {
    format!("{}:{}", f.blake3, f.path)
}

impl crate::Datasets {
    /// Erases the rows of one data subject from `ds` (see the module). Sending the
    /// same request again finishes one that stopped part-way; a finished one is 409.
    #[qanat_macros::boxed]
    pub async fn erase(
        &self,
        project: &Project,
        ds: &Dataset,
        req: &ErasureRequest,
        by: &str,
    ) -> Result<Erasure> {
        validate(req)?;
        if let Some(done) = self.erasure(project, ds, &req.request_id).await? {
            if done.completed_at.is_some() {
                return Err(Error::already_exists(
                    "erasure",
                    format!(
                        "{} of dataset {} (finished {}; use another request id for another erasure)",
                        req.request_id,
                        ds.name,
                        done.completed_at.as_deref().unwrap_or_default()
                    ),
                ));
            }
            self.shred_recorded(project, ds, &req.request_id).await?;
            return self
                .erasure(project, ds, &req.request_id)
                .await?
                .ok_or_else(|| Error::not_found("erasure", req.request_id.clone()));
        }
        let subject = Subject::new(&req.matches);

        // 1. Every table of every version, each distinct file scanned once. A file an
        // earlier erasure made unreadable cannot be scanned: every chunk it has left
        // counts as holding the rows (those a readable file shares are kept below).
        let versions = self.versions(ds).await?;
        let mut manifests: Vec<(DatasetVersion, Manifest)> = Vec::with_capacity(versions.len());
        let mut scans: HashMap<String, Found> = HashMap::new();
        let mut broken: HashSet<String> = HashSet::new();
        for v in versions {
            let m = self.manifest(ds, &v).await?;
            for f in &m.files {
                if scans.contains_key(&scan_key(f)) || broken.contains(&scan_key(f)) {
                    continue;
                }
                if !self.erased_chunks_of(ds, f).await?.is_empty() {
                    broken.insert(scan_key(f));
                    continue;
                }
                let Some(format) = TableFormat::of(&f.path) else {
                    continue;
                };
                let found = self.scan(ds, f, format, &subject).await?;
                scans.insert(scan_key(f), found);
            }
            manifests.push((v, m));
        }
        let columns: BTreeSet<&String> = scans.values().flat_map(|f| &f.columns).collect();
        if columns.is_empty() {
            return Err(Error::invalid(
                "match",
                format!(
                    "no table (CSV or Parquet) of any version of dataset '{}' has a column named {}; nothing was erased",
                    ds.name,
                    subject
                        .columns()
                        .iter()
                        .map(|c| format!("'{}'", c.escape_debug()))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            ));
        }
        let hit = |f: &FileEntry| scans.get(&scan_key(f)).is_some_and(|s| s.rows > 0);
        let erasure_ref = ObjectRef::unversioned(Kind::Erasure, req.request_id.as_str());

        // 2. The latest version again, without the rows, committed only on top of the
        // version scanned (a push or another erasure in between: 409, send it again).
        // A run that stopped after this commit finds its version by the lineage edge.
        let mut new_version = self.version_made_by(ds, &erasure_ref).await?;
        let mut rows_removed = 0;
        match (new_version, manifests.first()) {
            (Some(v), _) => {
                // Rows removed: those of the version it was made from.
                let parent = manifests
                    .iter()
                    .find(|(x, _)| x.version == v)
                    .and_then(|(x, _)| x.parent);
                if let Some((_, m)) = manifests.iter().find(|(x, _)| Some(x.version) == parent) {
                    rows_removed = m
                        .files
                        .iter()
                        .filter_map(|f| scans.get(&scan_key(f)))
                        .map(|s| s.rows)
                        .sum();
                }
            }
            (None, Some((latest, m))) if m.files.iter().any(hit) => {
                let mut next = Manifest::default();
                for f in &m.files {
                    if hit(f) {
                        let found = &scans[&scan_key(f)];
                        rows_removed += found.rows;
                        let local = self.rewrite_without(ds, f, found, &subject).await?;
                        next.files.push(
                            self.store_local_file(
                                project,
                                ds,
                                &f.path_bytes()?,
                                local.path().to_path_buf(),
                                f.mode,
                            )
                            .await?,
                        );
                    } else {
                        next.files.push(f.clone());
                    }
                }
                let message = format!(
                    "erasure {}: {rows_removed} row(s) removed from version {}",
                    req.request_id, latest.version
                );
                let edges = [(erasure_ref.clone(), "erasure".to_string())];
                let v = self
                    .commit_counted(
                        project,
                        &Dataset {
                            latest_version: Some(latest.version),
                            ..ds.clone()
                        },
                        next.clone(),
                        &message,
                        by,
                        Lineage {
                            derived_from: &[],
                            edges: &edges,
                            stored: None,
                            on_top_of: Some(latest.version),
                        },
                    )
                    .await?;
                new_version = Some(v.version);
                manifests.insert(0, (v, next));
            }
            _ => {}
        }

        // 3. The chunks that held the rows, in every version: those of a matching CSV
        // file around the rows, every chunk of a matching Parquet file and of a file
        // an earlier erasure broke — but none that a file without the rows holds (the
        // new version's, and every readable file with no match: their bytes hold none
        // of the subject's).
        let kept: HashSet<ChunkId> = manifests
            .iter()
            .flat_map(|(_, m)| &m.files)
            .filter(|f| !hit(f) && !broken.contains(&scan_key(f)))
            .flat_map(|f| f.chunks.iter().map(|c| c.id))
            .collect();
        let mut shred: BTreeMap<ChunkId, u64> = BTreeMap::new();
        let mut files = Vec::new();
        for (v, m) in &manifests {
            for f in &m.files {
                let touched = if hit(f) {
                    let sizes: Vec<u64> = f.chunks.iter().map(|c| c.size).collect();
                    erase::chunks_touched(&sizes, scans[&scan_key(f)].ranges.as_deref())
                } else if broken.contains(&scan_key(f)) {
                    (0..f.chunks.len()).collect()
                } else {
                    continue;
                };
                let mut n = 0;
                for i in touched {
                    let c = &f.chunks[i];
                    if !kept.contains(&c.id) {
                        shred.insert(c.id, c.size);
                        n += 1;
                    }
                }
                if hit(f) {
                    files.push(ErasedFile {
                        version: v.version,
                        path: f.path.clone(),
                        rows: scans[&scan_key(f)].rows,
                        chunks_shredded: n,
                    });
                }
            }
        }

        // 4. What else read those chunks (chunks are shared within a project).
        let also = self.also_reading(project, ds, &shred).await?;

        // 5. The record, the lineage and the claim on the chunks, in one transaction;
        // then the chunks go, then the profiles that quoted their values.
        let now = now_micros();
        let mut tx = self.meta.writer().begin().await?;
        let cols: Vec<&String> = columns.into_iter().collect();
        sqlx::query(
            "INSERT INTO dataset_erasures (project_id, dataset_id, request_id, dataset, columns, reason, requested_by, created_at, completed_at, new_version, rows_removed, files, chunks_shredded, bytes_shredded, also_unreadable) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, $9, $10, $11, $12, $13, $14)",
        )
        .bind(&ds.project_id)
        .bind(&ds.id)
        .bind(&req.request_id)
        .bind(ds.name.as_str())
        .bind(serde_json::to_string(&cols).unwrap_or_default())
        .bind(&req.reason)
        .bind(by)
        .bind(now)
        .bind(new_version)
        .bind(rows_removed as i64)
        .bind(serde_json::to_string(&files).unwrap_or_default())
        .bind(shred.len() as i64)
        .bind(shred.values().sum::<u64>() as i64)
        .bind(serde_json::to_string(&also).unwrap_or_default())
        .execute(&mut *tx)
        .await?;
        for (id, size) in &shred {
            sqlx::query(
                "INSERT INTO erased_chunks (project_id, location, chunk_id, request_id, size, erased_at) VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (project_id, location, chunk_id) DO UPDATE SET request_id = excluded.request_id, erased_at = excluded.erased_at",
            )
            .bind(&ds.project_id)
            .bind(&ds.location)
            .bind(id.to_hex())
            .bind(&req.request_id)
            .bind(*size as i64)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE dataset_chunks SET deleting = 1 WHERE project_id = $1 AND location = $2 AND chunk_id = $3",
            )
            .bind(&ds.project_id)
            .bind(&ds.location)
            .bind(id.to_hex())
            .execute(&mut *tx)
            .await?;
        }
        let erased: BTreeSet<i64> = files.iter().map(|f| f.version).collect();
        let parents: Vec<(ObjectRef, &str)> = erased
            .iter()
            .map(|v| (ObjectRef::dataset(ds.name.as_str(), *v), "erased_from"))
            .chain(std::iter::once((ObjectRef::user(by), "requested_by")))
            .collect();
        qanat_governance::lineage::record_edges(&mut tx, &ds.project_id, &erasure_ref, &parents)
            .await?;
        tx.commit().await?;
        self.shred_recorded(project, ds, &req.request_id).await?;
        self.erasure(project, ds, &req.request_id)
            .await?
            .ok_or_else(|| Error::not_found("erasure", req.request_id.clone()))
    }

    /// Destroys the chunks recorded for an erasure, scrubs the profiles of the files
    /// that held them, and marks it finished. Safe to run again.
    async fn shred_recorded(
        &self,
        project: &Project,
        ds: &Dataset,
        request_id: &str,
    ) -> Result<()> {
        let rows = sqlx::query(
            "SELECT chunk_id FROM erased_chunks WHERE project_id = $1 AND location = $2 AND request_id = $3",
        )
        .bind(&ds.project_id)
        .bind(&ds.location)
        .bind(request_id)
        .fetch_all(self.meta.reader())
        .await?;
        for row in rows {
            let id: ChunkId = row.try_get::<String, _>("chunk_id")?.parse()?;
            self.storage
                .shred(&ds.location, &chunk_key(&ds.project_id, &id)?)
                .await?;
            sqlx::query(
                "DELETE FROM dataset_chunks WHERE project_id = $1 AND location = $2 AND chunk_id = $3",
            )
            .bind(&ds.project_id)
            .bind(&ds.location)
            .bind(id.to_hex())
            .execute(self.meta.writer())
            .await?;
        }
        let record = self
            .erasure(project, ds, request_id)
            .await?
            .ok_or_else(|| Error::not_found("erasure", request_id.to_string()))?;
        self.scrub_profiles(ds, &record).await?;
        sqlx::query(
            "UPDATE dataset_erasures SET completed_at = $1 WHERE project_id = $2 AND dataset_id = $3 AND request_id = $4",
        )
        .bind(now_micros())
        .bind(&ds.project_id)
        .bind(&ds.id)
        .bind(request_id)
        .execute(self.meta.writer())
        .await?;
        Ok(())
    }

    /// Profiles quote values (top values, min, max): those of the erased files go, in
    /// the table-profile cache and in each version's stored profiles.
    async fn scrub_profiles(&self, ds: &Dataset, record: &Erasure) -> Result<()> {
        let by_version: BTreeMap<i64, BTreeSet<&str>> =
            record.files.iter().fold(BTreeMap::new(), |mut acc, f| {
                acc.entry(f.version).or_default().insert(f.path.as_str());
                acc
            });
        for (version, paths) in by_version {
            let v = match self.resolve(ds, &VersionRef::Version(version)).await {
                Ok(v) => v,
                Err(e)
                    if matches!(
                        qanat_core::DomainError::kind(&e),
                        qanat_core::ErrorKind::NotFound | qanat_core::ErrorKind::Gone
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            let manifest = self.manifest(ds, &v).await?;
            for f in manifest
                .files
                .iter()
                .filter(|f| paths.contains(f.path.as_str()))
            {
                if let Some(format) = TableFormat::of(&f.path) {
                    let key = table_profile_key(&ds.project_id, &f.blake3, format)?;
                    match self.storage.shred(&ds.location, &key).await {
                        Ok(_) | Err(qanat_store::Error::NotFound { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            let mut profiles: Vec<FileProfile> = self.profiles(ds, &v).await?;
            let mut changed = false;
            for p in profiles
                .iter_mut()
                .filter(|p| paths.contains(p.path.as_str()))
            {
                if p.profile.is_some() {
                    p.profile = None;
                    p.error = Some(format!(
                        "erased by request {} on {}: the file cannot be read any more",
                        record.request_id, record.created_at
                    ));
                    changed = true;
                }
            }
            if changed {
                let json = serde_json::to_vec(&profiles)
                    .map_err(|e| Error::invalid("profiles", e.to_string()))?;
                let key = profiles_key(&ds.project_id, &v.manifest_id)?;
                // The scrubbed profiles replace the old, whose data key then goes.
                self.storage
                    .replace(&ds.location, &key, Bytes::from(json))
                    .await?;
            }
        }
        Ok(())
    }

    /// The files of other datasets and of versions of this one not scanned (none:
    /// every version is) whose manifests name one of `chunks`.
    async fn also_reading(
        &self,
        project: &Project,
        ds: &Dataset,
        chunks: &BTreeMap<ChunkId, u64>,
    ) -> Result<Vec<AlsoUnreadable>> {
        let mut out = Vec::new();
        if chunks.is_empty() {
            return Ok(out);
        }
        let others = self
            .list(project)
            .await?
            .into_iter()
            .chain(self.list_deleted(project).await?);
        for other in others.filter(|o| o.id != ds.id && o.location == ds.location) {
            for v in self.versions(&other).await? {
                for f in self.manifest(&other, &v).await?.files {
                    if f.chunks.iter().any(|c| chunks.contains_key(&c.id)) {
                        out.push(AlsoUnreadable {
                            dataset: other.name.to_string(),
                            version: v.version,
                            path: f.path.clone(),
                        });
                    }
                }
            }
        }
        Ok(out)
    }

    async fn scan(
        &self,
        ds: &Dataset,
        f: &FileEntry,
        format: TableFormat,
        subject: &Subject,
    ) -> Result<Found> {
        let handle = self.handle(ds, f);
        let subject = subject.clone();
        let path = f.path.clone();
        tokio::task::spawn_blocking(move || match format {
            TableFormat::Csv => erase::scan_csv(handle.reader(), &subject),
            TableFormat::Parquet => erase::parquet::<_, std::io::Sink>(handle, None, &subject),
        })
        .await
        .map_err(|e| Error::Io(std::io::Error::other(format!("scanning {path}: {e}"))))?
        .map_err(|e| match e {
            Error::Io(io) => Error::invalid(
                "erasure",
                format!("{path} cannot be read as a table ({io}); nothing was erased"),
            ),
            other => other,
        })
    }

    /// `f` without the rows `found` located, in a temporary file.
    async fn rewrite_without(
        &self,
        ds: &Dataset,
        f: &FileEntry,
        found: &Found,
        subject: &Subject,
    ) -> Result<tempfile::NamedTempFile> {
        let handle = self.handle(ds, f);
        let ranges: Option<Vec<Range<u64>>> = found.ranges.clone();
        let subject = subject.clone();
        tokio::task::spawn_blocking(move || -> Result<tempfile::NamedTempFile> {
            let file = tempfile::NamedTempFile::new().map_err(Error::Io)?;
            let out = std::io::BufWriter::with_capacity(
                1 << 20,
                file.as_file().try_clone().map_err(Error::Io)?,
            );
            match ranges {
                Some(r) => {
                    erase::copy_without(handle.reader(), out, &r)?;
                }
                None => {
                    erase::parquet(handle, Some(out), &subject)?;
                }
            }
            Ok(file)
        })
        .await
        .map_err(|e| Error::Io(std::io::Error::other(format!("erasing stopped: {e}"))))?
    }

    fn handle(&self, ds: &Dataset, f: &FileEntry) -> StoredFileHandle {
        StoredFileHandle::new(
            self.storage.clone(),
            &ds.location,
            &ds.project_id,
            f,
            tokio::runtime::Handle::current(),
        )
    }

    /// One erasure of `ds`, by its request id.
    #[qanat_macros::boxed]
    pub async fn erasure(
        &self,
        project: &Project,
        ds: &Dataset,
        request_id: &str,
    ) -> Result<Option<Erasure>> {
        let row = sqlx::query(
            "SELECT * FROM dataset_erasures WHERE project_id = $1 AND dataset_id = $2 AND request_id = $3",
        )
        .bind(&project.id)
        .bind(&ds.id)
        .bind(request_id)
        .fetch_optional(self.meta.reader())
        .await?;
        row.map(|r| erasure_from_row(&r)).transpose()
    }

    /// The erasures of a project (of one dataset when `dataset` is given), newest
    /// first; those of purged datasets too (the record outlives the data).
    #[qanat_macros::boxed]
    pub async fn erasures(&self, project: &Project, dataset: Option<&str>) -> Result<Vec<Erasure>> {
        let rows = match dataset {
            Some(d) => sqlx::query(
                "SELECT * FROM dataset_erasures WHERE project_id = $1 AND dataset = $2 ORDER BY created_at DESC, request_id",
            )
            .bind(&project.id)
            .bind(d),
            None => sqlx::query(
                "SELECT * FROM dataset_erasures WHERE project_id = $1 ORDER BY created_at DESC, request_id",
            )
            .bind(&project.id),
        }
        .fetch_all(self.meta.reader())
        .await?;
        rows.iter().map(erasure_from_row).collect()
    }

    /// Refuses, before a byte is sent, to read a file one of whose chunks an erasure
    /// destroyed (and nobody stored again since), saying which request did it.
    #[qanat_macros::boxed]
    pub async fn check_not_erased(&self, ds: &Dataset, f: &FileEntry) -> Result<()> {
        if let Some(id) = self.erased_chunks_of(ds, f).await?.first() {
            let what = format!("file {} of dataset {}", f.path, ds.name);
            if let Some(e) = Self::erased(&self.meta, ds, &what, id).await {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The chunks of `f` an erasure destroyed (and nobody stored again since).
    async fn erased_chunks_of(&self, ds: &Dataset, f: &FileEntry) -> Result<Vec<ChunkId>> {
        let ids: Vec<ChunkId> = f.chunks.iter().map(|c| c.id).collect();
        let mut out = Vec::new();
        for batch in ids.chunks(500) {
            let list: Vec<String> = (0..batch.len()).map(|i| format!("${}", i + 3)).collect();
            let sql = format!(
                "SELECT e.chunk_id FROM erased_chunks e WHERE e.project_id = $1 AND e.location = $2 AND e.chunk_id IN ({}) \
                 AND NOT EXISTS (SELECT 1 FROM dataset_chunks c WHERE c.project_id = e.project_id AND c.location = e.location AND c.chunk_id = e.chunk_id AND c.deleting = 0)",
                list.join(", ")
            );
            let mut q = sqlx::query(&sql).bind(&ds.project_id).bind(&ds.location);
            for id in batch {
                q = q.bind(id.to_hex());
            }
            for row in q.fetch_all(self.meta.reader()).await? {
                out.push(row.try_get::<String, _>("chunk_id")?.parse()?);
            }
        }
        Ok(out)
    }

    /// The version of `ds` an erasure wrote, by its lineage edge.
    async fn version_made_by(&self, ds: &Dataset, erasure: &ObjectRef) -> Result<Option<i64>> {
        let prefix = format!(
            "{}@",
            ObjectRef::unversioned(Kind::Dataset, ds.name.as_str())
        );
        let rows = sqlx::query(
            "SELECT child FROM lineage_edges WHERE project_id = $1 AND parent = $2 AND relation = 'erasure'",
        )
        .bind(&ds.project_id)
        .bind(erasure.to_string())
        .fetch_all(self.meta.reader())
        .await?;
        for row in rows {
            let child: String = row.try_get("child")?;
            if let Some(v) = child
                .strip_prefix(&prefix)
                .and_then(|v| v.parse::<i64>().ok())
            {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// Why a chunk a read could not find is missing, when an erasure destroyed it.
    pub(crate) async fn erased(
        meta: &qanat_store::MetaStore,
        ds: &Dataset,
        what: &str,
        id: &ChunkId,
    ) -> Option<Error> {
        let row = sqlx::query(
            "SELECT e.request_id, e.erased_at, r.new_version FROM erased_chunks e \
             LEFT JOIN dataset_erasures r ON r.project_id = e.project_id AND r.request_id = e.request_id AND r.dataset_id = $4 \
             WHERE e.project_id = $1 AND e.location = $2 AND e.chunk_id = $3",
        )
        .bind(&ds.project_id)
        .bind(&ds.location)
        .bind(id.to_hex())
        .bind(&ds.id)
        .fetch_optional(meta.reader())
        .await
        .ok()??;
        Some(Error::Erased {
            what: what.to_string(),
            request_id: row.try_get("request_id").ok()?,
            at: rfc3339(row.try_get("erased_at").ok()?),
            later: row.try_get::<Option<i64>, _>("new_version").ok().flatten(),
        })
    }
}

fn erasure_from_row(r: &sqlx::any::AnyRow) -> Result<Erasure> {
    let json = |col: &str| -> Result<String> { Ok(r.try_get::<String, _>(col)?) };
    let bad = |e: serde_json::Error| Error::invalid("stored erasure", e.to_string());
    Ok(Erasure {
        request_id: r.try_get("request_id")?,
        dataset: r.try_get("dataset")?,
        columns: serde_json::from_str(&json("columns")?).map_err(bad)?,
        reason: r.try_get("reason")?,
        requested_by: r.try_get("requested_by")?,
        created_at: rfc3339(r.try_get("created_at")?),
        completed_at: r.try_get::<Option<i64>, _>("completed_at")?.map(rfc3339),
        new_version: r.try_get("new_version")?,
        rows_removed: r.try_get::<i64, _>("rows_removed")? as u64,
        files: serde_json::from_str(&json("files")?).map_err(bad)?,
        chunks_shredded: r.try_get::<i64, _>("chunks_shredded")? as u64,
        bytes_shredded: r.try_get::<i64, _>("bytes_shredded")? as u64,
        also_unreadable: serde_json::from_str(&json("also_unreadable")?).map_err(bad)?,
    })
}
