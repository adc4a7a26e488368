//! Reading a feature view's rows: its source at the version the view was made from —
//! a dataset version's files, project files, the offline store of pushed and streamed
//! rows, or a sql source's query over other sources — through the view's
//! transformation when it has one.
//!
//! Files are staged on local disk ([`crate::staging`]) and read in bounded batches;
//! only the results of SQL are held in memory as a whole.

use futures::StreamExt;
use qanat_core::{DomainError, ErrorKind, Kind, ObjectRef};
use qanat_governance::Project;
use qanat_store::ObjectKey;

use arrow_array::RecordBatch;

use crate::definitions::{ObjectKind, SourceDef, SourceType};
use crate::error::{Error, Result};
use crate::staging::Staged;
use crate::training_set::ViewPart;
use crate::Features;

/// The rows of a source or view: files still on disk, or a query's result.
pub(crate) enum Rows {
    Files(Staged),
    Table {
        batch: RecordBatch,
        datasets: Vec<qanat_core::ObjectRef>,
    },
}

impl Rows {
    /// The dataset versions the rows came from (lineage).
    pub(crate) fn datasets(&self) -> &[qanat_core::ObjectRef] {
        match self {
            Rows::Files(s) => &s.datasets,
            Rows::Table { datasets, .. } => datasets,
        }
    }

    /// About how many bytes the rows take in memory. Blocking.
    pub(crate) fn estimated_bytes(&self) -> Result<u64> {
        match self {
            Rows::Files(s) => s.estimated_bytes(),
            Rows::Table { batch, .. } => Ok(batch.get_array_memory_size() as u64),
        }
    }

    /// The rows' columns. Blocking.
    pub(crate) fn schema(&self) -> Result<arrow_schema::SchemaRef> {
        match self {
            Rows::Files(s) => Ok(s.batches()?.schema()),
            Rows::Table { batch, .. } => Ok(batch.schema()),
        }
    }

    /// Every row as one batch. Blocking: call it off the async runtime.
    pub(crate) fn read_all(&self) -> Result<RecordBatch> {
        match self {
            Rows::Files(s) => s.read_all(),
            Rows::Table { batch, .. } => Ok(batch.clone()),
        }
    }

    /// The rows a bounded batch at a time, in the order of [`Rows::batches`], decoded
    /// by up to `threads` threads at once and passed through `map` on them. Blocking:
    /// call it off the async runtime.
    pub(crate) fn batches_parallel(
        &self,
        threads: usize,
        map: impl Fn(RecordBatch) -> Result<RecordBatch> + Send + Sync + 'static,
    ) -> Result<Box<dyn Iterator<Item = Result<RecordBatch>> + Send>> {
        match self {
            Rows::Files(s) => Ok(Box::new(s.batches()?.parallel(threads, map)?)),
            Rows::Table { batch, .. } => Ok(Box::new(std::iter::once(map(batch.clone())))),
        }
    }

    /// The rows a bounded batch at a time. Blocking: call it off the async runtime.
    pub(crate) fn batches(&self) -> Result<Box<dyn Iterator<Item = Result<RecordBatch>> + Send>> {
        match self {
            Rows::Files(s) => Ok(Box::new(s.batches()?)),
            Rows::Table { batch, .. } => Ok(Box::new(std::iter::once(Ok(batch.clone())))),
        }
    }
}

impl Features {
    /// A view version's rows: its source's at the version the view was made from,
    /// through the view's transformation when it has one.
    pub(crate) async fn view_rows(&self, project: &Project, part: &ViewPart) -> Result<Rows> {
        let rows = self
            .source_rows(project, part.source.name.as_str(), part.source_version)
            .await?;
        match &part.def.transformation {
            None => Ok(rows),
            Some(t) => {
                let datasets = rows.datasets().to_vec();
                let batch = crate::sql::run(
                    vec![("source".to_string(), rows)],
                    t.clone(),
                    format!("feature view {}", part.name),
                    self.sql_limits(),
                )
                .await?;
                Ok(Rows::Table { batch, datasets })
            }
        }
    }

    /// A source version's rows; a sql source's are its query's result over the
    /// sources it reads, each at the version it was made from.
    fn source_rows<'a>(
        &'a self,
        project: &'a Project,
        name: &'a str,
        version: i64,
    ) -> futures::future::BoxFuture<'a, Result<Rows>> {
        Box::pin(async move {
            let o = self
                .object(project, ObjectKind::Source, name, Some(version))
                .await?;
            let def: SourceDef = serde_json::from_value(o.definition)
                .map_err(|e| Error::Corrupt(format!("source {name}: {e}")))?;
            let Some(sql) = def
                .sql
                .clone()
                .filter(|_| def.source_type == SourceType::Sql)
            else {
                return Ok(Rows::Files(self.stage_source(project, &def).await?));
            };
            let mut tables = Vec::new();
            let mut datasets = Vec::new();
            for d in o.depends_on.iter().filter(|d| d.kind == ObjectKind::Source) {
                let rows = self.source_rows(project, &d.name, d.version).await?;
                datasets.extend(rows.datasets().iter().cloned());
                tables.push((d.name.clone(), rows));
            }
            let batch =
                crate::sql::run(tables, sql, format!("source {name}"), self.sql_limits()).await?;
            Ok(Rows::Table { batch, datasets })
        })
    }

    /// What one user query may use: the join's memory budget, and a time limit.
    fn sql_limits(&self) -> crate::sql::Limits {
        crate::sql::Limits {
            memory: self.join_memory,
            time: crate::sql::TIME_LIMIT,
        }
    }

    /// A (non-sql) source's files, staged.
    async fn stage_source(&self, project: &Project, source: &SourceDef) -> Result<Staged> {
        match source.source_type {
            SourceType::Dataset => {
                let d = source.dataset.as_deref().unwrap_or_default();
                let r = ObjectRef::parse_of(Kind::Dataset, d)
                    .map_err(|e| Error::invalid(format!("source {}: {e}", source.name)))?;
                self.stage_dataset(project, &r).await
            }
            SourceType::File => {
                let path = source.path.as_deref().unwrap_or_default().trim_matches('/');
                let location = self.storage.default_location().to_string();
                let base = format!("projects/{}/files/{path}", project.id);
                let key: ObjectKey = base.parse().map_err(|e| {
                    Error::invalid(format!("source {}: path '{path}': {e}", source.name))
                })?;
                let mut files = Vec::new();
                if table_format(path).is_some() {
                    files.push((path.to_string(), key));
                } else {
                    for o in self.storage.list(&location, Some(&key)).await? {
                        let rel = o
                            .key
                            .rsplit_once("/files/")
                            .map(|x| x.1.to_string())
                            .unwrap_or_default();
                        if table_format(&rel).is_some() {
                            let k: ObjectKey =
                                o.key.parse().map_err(|e| Error::Corrupt(format!("{e}")))?;
                            files.push((rel, k));
                        }
                    }
                }
                if files.is_empty() {
                    return Err(Error::invalid(format!(
                        "source {}: no .parquet or .csv file at '{path}' in the project's files (qanat objects put)",
                        source.name
                    )));
                }
                let mut staged = Staged::new()?;
                for (name, k) in files {
                    let bytes = self.storage.get(&location, &k).await.map_err(|e| {
                        if e.kind() == ErrorKind::NotFound {
                            Error::invalid(format!(
                                "source {}: the file '{name}' is missing",
                                source.name
                            ))
                        } else {
                            Error::Store(e)
                        }
                    })?;
                    let parquet = table_format(&name) == Some("parquet");
                    staged.add(&name, parquet, bytes).await?;
                }
                Ok(staged)
            }
            SourceType::Push | SourceType::Stream => self.stage_offline(project, source).await,
            SourceType::Sql => Err(Error::Corrupt(format!(
                "source {} is a sql source: read it with its version (source_rows)",
                source.name
            ))),
        }
    }

    /// Every table file (Parquet, CSV) of a dataset version, staged.
    pub(crate) async fn stage_dataset(&self, project: &Project, r: &ObjectRef) -> Result<Staged> {
        let ds = self.datasets.get(project, &r.name).await?;
        let v = self.datasets.resolve(&ds, &r.selector_or_latest()).await?;
        let manifest = self.datasets.manifest(&ds, &v).await?;
        let mut staged = Staged::new()?;
        for f in manifest.files {
            let Some(format) = table_format(&f.path) else {
                continue;
            };
            let name = f.path.clone();
            let stream = self.datasets.file_stream(&ds, f).boxed();
            staged.add(&name, format == "parquet", stream).await?;
        }
        if staged.files.is_empty() {
            return Err(Error::invalid(format!(
                "{} holds no .parquet or .csv file",
                qanat_core::ObjectRef::dataset(ds.name.as_str(), v.version)
            )));
        }
        staged
            .datasets
            .push(qanat_core::ObjectRef::dataset(ds.name.as_str(), v.version));
        Ok(staged)
    }
}

pub(crate) fn table_format(path: &str) -> Option<&'static str> {
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".parquet") {
        Some("parquet")
    } else if lower.ends_with(".csv") {
        Some("csv")
    } else {
        None
    }
}
