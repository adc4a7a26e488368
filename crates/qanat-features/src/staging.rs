//! A source's files staged on local disk, read back a batch at a time.
//!
//! Sources live in (encrypted, possibly remote) object storage. Before a view's rows
//! are used, each of its Parquet/CSV files is streamed — decrypted chunk by chunk — into
//! a private temporary directory (0700, removed when the last handle drops). From there
//! they are read in batches of bounded size: materialization keeps only the newest row
//! per key as it goes, so its memory follows the number of entities, not of rows; SQL
//! reads the files through DataFusion's own readers; the point-in-time join, which
//! needs every row of a view at once, reads them whole.
//!
//! The files of one source are read as one table over the union of their columns: a
//! column missing from a file (a view that gained a feature, a partition written before
//! a column existed) is null there; the same column with two types is an error naming
//! both.

use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema, SchemaRef};
use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

use crate::error::{Error, Result};

/// Rows per batch read from a staged file.
pub(crate) const BATCH_ROWS: usize = 64 * 1024;

/// One staged file.
#[derive(Debug, Clone)]
pub(crate) struct StagedFile {
    /// The name it is known by in errors (its path in the dataset or project).
    pub(crate) name: String,
    pub(crate) path: PathBuf,
    pub(crate) parquet: bool,
}

/// The staged files of one source, and the dataset versions they came from (lineage).
#[derive(Debug, Clone)]
pub(crate) struct Staged {
    dir: Arc<tempfile::TempDir>,
    pub(crate) files: Vec<StagedFile>,
    pub(crate) datasets: Vec<qanat_core::ObjectRef>,
}

impl Staged {
    /// An empty staging directory.
    pub(crate) fn new() -> Result<Staged> {
        let dir = tempfile::Builder::new()
            .prefix("qanat-features-")
            .tempdir()
            .map_err(|e| Error::Corrupt(format!("a staging directory: {e}")))?;
        Ok(Staged {
            dir: Arc::new(dir),
            files: Vec::new(),
            datasets: Vec::new(),
        })
    }

    /// Streams `bytes` into a new staged file known as `name`.
    pub(crate) async fn add<E>(
        &mut self,
        name: &str,
        parquet: bool,
        mut bytes: impl Stream<Item = std::result::Result<bytes::Bytes, E>> + Unpin,
    ) -> Result<()>
    where
        Error: From<E>,
    {
        let path = self.dir.path().join(format!(
            "{:05}.{}",
            self.files.len(),
            if parquet { "parquet" } else { "csv" }
        ));
        let mut f = tokio::fs::File::create(&path)
            .await
            .map_err(|e| Error::Corrupt(format!("staging {name}: {e}")))?;
        while let Some(chunk) = bytes.next().await {
            f.write_all(&chunk?)
                .await
                .map_err(|e| Error::Corrupt(format!("staging {name}: {e}")))?;
        }
        f.flush()
            .await
            .map_err(|e| Error::Corrupt(format!("staging {name}: {e}")))?;
        self.files.push(StagedFile {
            name: name.to_string(),
            path,
            parquet,
        });
        Ok(())
    }

    /// Every file's rows, one bounded batch at a time, over the union of the files'
    /// columns. Blocking: call it off the async runtime.
    pub(crate) fn batches(&self) -> Result<Batches> {
        let schemas: Vec<SchemaRef> = self.files.iter().map(file_schema).collect::<Result<_>>()?;
        let schema = union(&self.files, &schemas)?;
        Ok(Batches {
            files: self.files.clone(),
            schemas,
            schema,
            next_file: 0,
            current: None,
        })
    }

    /// About how many bytes the rows take in memory: Parquet's uncompressed size from
    /// its footer, a CSV file's length. Blocking.
    pub(crate) fn estimated_bytes(&self) -> Result<u64> {
        let mut total = 0u64;
        for f in &self.files {
            let bad = |e: &dyn std::fmt::Display| {
                Error::invalid(format!("{} cannot be read: {e}", f.name))
            };
            let len = std::fs::metadata(&f.path).map_err(|e| bad(&e))?.len();
            total += if f.parquet {
                let file = std::fs::File::open(&f.path).map_err(|e| bad(&e))?;
                let b =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                        .map_err(|e| bad(&e))?;
                let size: i64 = b
                    .metadata()
                    .row_groups()
                    .iter()
                    .map(|g| g.total_byte_size())
                    .sum();
                u64::try_from(size).unwrap_or(len).max(len)
            } else {
                len
            };
        }
        Ok(total)
    }

    /// Every row at once (the point-in-time join needs a view whole). Blocking.
    pub(crate) fn read_all(&self) -> Result<RecordBatch> {
        let batches = self.batches()?;
        let schema = batches.schema.clone();
        let all: Vec<RecordBatch> = batches.collect::<Result<_>>()?;
        arrow_select::concat::concat_batches(&schema, &all)
            .map_err(|e| Error::invalid(format!("the rows do not combine: {e}")))
    }
}

/// A reader of one file's batches.
type FileBatches = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

/// The batches of staged files (see [`Staged::batches`]).
pub(crate) struct Batches {
    files: Vec<StagedFile>,
    schemas: Vec<SchemaRef>,
    schema: SchemaRef,
    next_file: usize,
    current: Option<FileBatches>,
}

impl Batches {
    pub(crate) fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn open(&self, i: usize) -> Result<FileBatches> {
        let f = &self.files[i];
        let bad =
            |e: &dyn std::fmt::Display| Error::invalid(format!("{} cannot be read: {e}", f.name));
        let file = std::fs::File::open(&f.path).map_err(|e| bad(&e))?;
        let name = f.name.clone();
        let wrap =
            move |e: &dyn std::fmt::Display| Error::invalid(format!("{name} cannot be read: {e}"));
        if f.parquet {
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                    .map_err(|e| bad(&e))?
                    .with_batch_size(BATCH_ROWS)
                    .build()
                    .map_err(|e| bad(&e))?;
            Ok(Box::new(reader.map(move |b| b.map_err(|e| wrap(&e)))))
        } else {
            let reader = arrow_csv::ReaderBuilder::new(self.schemas[i].clone())
                .with_header(true)
                .with_batch_size(BATCH_ROWS)
                .build(file)
                .map_err(|e| bad(&e))?;
            Ok(Box::new(reader.map(move |b| b.map_err(|e| wrap(&e)))))
        }
    }

    /// A file's batch over the union schema.
    fn align(&self, batch: RecordBatch) -> Result<RecordBatch> {
        if batch.schema().fields() == self.schema.fields() {
            return Ok(batch);
        }
        let columns: Vec<ArrayRef> =
            self.schema
                .fields()
                .iter()
                .map(|f| {
                    batch.column_by_name(f.name()).cloned().unwrap_or_else(|| {
                        arrow_array::new_null_array(f.data_type(), batch.num_rows())
                    })
                })
                .collect();
        RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| Error::Corrupt(format!("aligning a batch: {e}")))
    }
}

impl Iterator for Batches {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if let Some(it) = &mut self.current {
                match it.next() {
                    Some(Ok(b)) => return Some(self.align(b)),
                    Some(Err(e)) => return Some(Err(e)),
                    None => self.current = None,
                }
            }
            if self.next_file >= self.files.len() {
                return None;
            }
            let i = self.next_file;
            self.next_file += 1;
            match self.open(i) {
                Ok(it) => self.current = Some(it),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// A staged file's columns: Parquet's from its footer, CSV's inferred from its first
/// 10,000 rows.
fn file_schema(f: &StagedFile) -> Result<SchemaRef> {
    let bad = |e: &dyn std::fmt::Display| Error::invalid(format!("{} cannot be read: {e}", f.name));
    let file = std::fs::File::open(&f.path).map_err(|e| bad(&e))?;
    if f.parquet {
        let b = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| bad(&e))?;
        Ok(b.schema().clone())
    } else {
        let format = arrow_csv::reader::Format::default().with_header(true);
        let (schema, _) = format
            .infer_schema(std::io::BufReader::new(file), Some(10_000))
            .map_err(|e| bad(&e))?;
        Ok(Arc::new(schema))
    }
}

/// The union of the files' columns, in the order they first appear.
fn union(files: &[StagedFile], schemas: &[SchemaRef]) -> Result<SchemaRef> {
    let mut fields: Vec<(Field, &str)> = Vec::new();
    for (f, s) in files.iter().zip(schemas) {
        for field in s.fields() {
            match fields.iter().find(|(g, _)| g.name() == field.name()) {
                None => fields.push((field.as_ref().clone().with_nullable(true), &f.name)),
                Some((g, first)) if g.data_type() != field.data_type() => {
                    return Err(Error::invalid(format!(
                        "column '{}' is {} in {first} but {} in {}: a source's files must agree on each column's type",
                        field.name(),
                        g.data_type(),
                        field.data_type(),
                        f.name
                    )))
                }
                Some(_) => {}
            }
        }
    }
    Ok(Arc::new(Schema::new(
        fields.into_iter().map(|(f, _)| f).collect::<Vec<_>>(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Float64Array, Int64Array};

    fn parquet_bytes(batch: &RecordBatch) -> bytes::Bytes {
        bytes::Bytes::from(crate::training_set::write_parquet(batch).expect("parquet"))
    }

    #[tokio::test]
    async fn staged_files_read_as_one_table_over_their_columns_in_bounded_batches() {
        let old = RecordBatch::try_from_iter([(
            "driver_id",
            Arc::new(Int64Array::from((0..100_000).collect::<Vec<i64>>())) as ArrayRef,
        )])
        .expect("old");
        let new = RecordBatch::try_from_iter([
            ("driver_id", Arc::new(Int64Array::from(vec![7])) as ArrayRef),
            ("speed", Arc::new(Float64Array::from(vec![3.5])) as ArrayRef),
        ])
        .expect("new");
        let mut s = Staged::new().expect("staged");
        for (name, b) in [("old.parquet", &old), ("new.parquet", &new)] {
            let chunks = futures::stream::iter(vec![Ok::<_, Error>(parquet_bytes(b))]);
            s.add(name, true, chunks).await.expect("add");
        }
        s.add(
            "more.csv",
            false,
            futures::stream::iter(vec![Ok::<_, Error>(bytes::Bytes::from_static(
                b"driver_id,speed\n8,1.5\n",
            ))]),
        )
        .await
        .expect("csv");
        let batches: Vec<RecordBatch> = s
            .batches()
            .expect("batches")
            .collect::<Result<_>>()
            .expect("read");
        assert!(batches.iter().all(|b| b.num_rows() <= BATCH_ROWS));
        let all = s.read_all().expect("all");
        assert_eq!(all.num_rows(), 100_002);
        let speed = all.column_by_name("speed").expect("speed");
        assert_eq!(speed.null_count(), 100_000);

        let mut bad = Staged::new().expect("staged");
        bad.add(
            "a.csv",
            false,
            futures::stream::iter(vec![Ok::<_, Error>(bytes::Bytes::from_static(b"x\n1\n"))]),
        )
        .await
        .expect("a");
        bad.add(
            "b.csv",
            false,
            futures::stream::iter(vec![Ok::<_, Error>(bytes::Bytes::from_static(
                b"x\nnope\n",
            ))]),
        )
        .await
        .expect("b");
        let e = bad.read_all().expect_err("two types");
        assert!(
            e.to_string()
                .contains("column 'x' is Int64 in a.csv but Utf8 in b.csv"),
            "{e}"
        );
    }
}
