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

/// What one thread decodes at a time when files are read in parallel: a whole file,
/// or one row group of a Parquet file.
#[derive(Debug, Clone, Copy)]
struct Piece {
    file: usize,
    row_group: Option<usize>,
}

/// What a decoding thread sends for its piece: a batch, the end of the piece
/// (`Ok(None)`), or an error.
type PieceMsg = Result<Option<RecordBatch>>;

/// Batches decoded by several threads at once, a piece each, handed over in the
/// order [`Batches`] gives them.
pub(crate) struct ParallelBatches {
    pieces: std::vec::IntoIter<std::sync::mpsc::Receiver<PieceMsg>>,
    current: Option<std::sync::mpsc::Receiver<PieceMsg>>,
}

impl ParallelBatches {
    /// Stops reading: the decoding threads end at their next batch.
    fn stop(&mut self) {
        self.pieces = Vec::new().into_iter();
        self.current = None;
    }
}

impl Iterator for ParallelBatches {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if let Some(rx) = &self.current {
                match rx.recv() {
                    Ok(Ok(Some(b))) => return Some(Ok(b)),
                    Ok(Ok(None)) => self.current = None,
                    Ok(Err(e)) => {
                        self.stop();
                        return Some(Err(e));
                    }
                    // Its thread stopped without saying the piece was done (a panic):
                    // rows would be missing.
                    Err(_) => {
                        self.stop();
                        return Some(Err(Error::Corrupt(
                            "a thread decoding the source's files stopped".into(),
                        )));
                    }
                }
            }
            self.current = Some(self.pieces.next()?);
        }
    }
}

impl Batches {
    pub(crate) fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn open(&self, i: usize) -> Result<FileBatches> {
        open(&self.files[i], &self.schemas[i], None)
    }

    /// A file's batch over the union schema.
    fn align(&self, batch: RecordBatch) -> Result<RecordBatch> {
        align(&self.schema, batch)
    }

    /// The same batches in the same order, decoded by up to `threads` threads at once
    /// (a Parquet file's row groups in parallel, a CSV file whole), each passed
    /// through `map` on its decoding thread. Memory stays bounded: a thread ahead of
    /// the reader waits once it holds two batches.
    pub(crate) fn parallel(
        self,
        threads: usize,
        map: impl Fn(RecordBatch) -> Result<RecordBatch> + Send + Sync + 'static,
    ) -> Result<ParallelBatches> {
        let mut pieces = Vec::new();
        for (i, f) in self.files.iter().enumerate() {
            if f.parquet {
                let bad = |e: &dyn std::fmt::Display| {
                    Error::invalid(format!("{} cannot be read: {e}", f.name))
                };
                let file = std::fs::File::open(&f.path).map_err(|e| bad(&e))?;
                let groups =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                        .map_err(|e| bad(&e))?
                        .metadata()
                        .num_row_groups();
                pieces.extend((0..groups).map(|g| Piece {
                    file: i,
                    row_group: Some(g),
                }));
            } else {
                pieces.push(Piece {
                    file: i,
                    row_group: None,
                });
            }
        }
        let (senders, receivers): (Vec<_>, Vec<_>) = pieces
            .iter()
            .map(|_| std::sync::mpsc::sync_channel::<PieceMsg>(2))
            .unzip();
        let threads = threads.clamp(1, pieces.len().max(1));
        let work = Arc::new(Work {
            files: self.files,
            schemas: self.schemas,
            schema: self.schema,
            pieces,
            senders: std::sync::Mutex::new(senders.into_iter().map(Some).collect()),
            next: std::sync::atomic::AtomicUsize::new(0),
            map: Box::new(map),
        });
        for _ in 0..threads {
            let work = work.clone();
            std::thread::Builder::new()
                .name("qanat-decode".into())
                .spawn(move || work.run())
                .map_err(|e| Error::Corrupt(format!("starting a decoding thread: {e}")))?;
        }
        Ok(ParallelBatches {
            pieces: receivers.into_iter(),
            current: None,
        })
    }
}

/// Maps a decoded batch on its decoding thread.
type BatchMap = Box<dyn Fn(RecordBatch) -> Result<RecordBatch> + Send + Sync>;

/// The pieces of a parallel read, shared by its threads.
struct Work {
    files: Vec<StagedFile>,
    /// Each file's own columns, and their union (each batch is aligned to it).
    schemas: Vec<SchemaRef>,
    schema: SchemaRef,
    pieces: Vec<Piece>,
    /// Each piece's channel, taken by the thread that decodes it.
    senders: std::sync::Mutex<Vec<Option<std::sync::mpsc::SyncSender<PieceMsg>>>>,
    next: std::sync::atomic::AtomicUsize,
    map: BatchMap,
}

impl Work {
    /// Takes pieces in order until none is left or the reader has gone.
    fn run(&self) {
        loop {
            let p = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(piece) = self.pieces.get(p) else {
                return;
            };
            let Some(tx) = self
                .senders
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get_mut(p)
                .and_then(Option::take)
            else {
                return;
            };
            let file = &self.files[piece.file];
            let sent = match open(file, &self.schemas[piece.file], piece.row_group) {
                Err(e) => {
                    let _ = tx.send(Err(e));
                    false
                }
                Ok(batches) => {
                    let mut ok = true;
                    for batch in batches {
                        let batch = batch
                            .and_then(|batch| align(&self.schema, batch))
                            .and_then(|batch| (self.map)(batch));
                        let failed = batch.is_err();
                        if tx.send(batch.map(Some)).is_err() || failed {
                            ok = false;
                            break;
                        }
                    }
                    ok && tx.send(Ok(None)).is_ok()
                }
            };
            if !sent {
                return; // the reader has stopped reading, or was sent an error
            }
        }
    }
}

/// Opens a staged file (`schema`: its own columns, which a CSV file is read with),
/// or only row group `row_group` of a Parquet file, for reading in bounded batches.
fn open(f: &StagedFile, schema: &SchemaRef, row_group: Option<usize>) -> Result<FileBatches> {
    let bad = |e: &dyn std::fmt::Display| Error::invalid(format!("{} cannot be read: {e}", f.name));
    let file = std::fs::File::open(&f.path).map_err(|e| bad(&e))?;
    let name = f.name.clone();
    let wrap =
        move |e: &dyn std::fmt::Display| Error::invalid(format!("{name} cannot be read: {e}"));
    if f.parquet {
        let mut builder =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(|e| bad(&e))?
                .with_batch_size(BATCH_ROWS);
        if let Some(g) = row_group {
            builder = builder.with_row_groups(vec![g]);
        }
        let reader = builder.build().map_err(|e| bad(&e))?;
        Ok(Box::new(reader.map(move |b| b.map_err(|e| wrap(&e)))))
    } else {
        let reader = arrow_csv::ReaderBuilder::new(schema.clone())
            .with_header(true)
            .with_batch_size(BATCH_ROWS)
            .build(file)
            .map_err(|e| bad(&e))?;
        Ok(Box::new(reader.map(move |b| b.map_err(|e| wrap(&e)))))
    }
}

/// A batch over the union of the files' columns (null where its file has none).
fn align(schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch);
    }
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| {
            batch
                .column_by_name(f.name())
                .cloned()
                .unwrap_or_else(|| arrow_array::new_null_array(f.data_type(), batch.num_rows()))
        })
        .collect();
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| Error::Corrupt(format!("aligning a batch: {e}")))
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

    /// Stages `bytes` as file `name` (Parquet when it ends in `.parquet`), in one piece.
    async fn stage(s: &mut Staged, name: &str, bytes: impl Into<bytes::Bytes>) {
        let piece = futures::stream::iter(vec![Ok::<_, Error>(bytes.into())]);
        s.add(name, name.ends_with(".parquet"), piece)
            .await
            .unwrap_or_else(|e| panic!("staging {name}: {e}"));
    }

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
            stage(&mut s, name, parquet_bytes(b)).await;
        }
        stage(&mut s, "more.csv", &b"driver_id,speed\n8,1.5\n"[..]).await;
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
        stage(&mut bad, "a.csv", &b"x\n1\n"[..]).await;
        stage(&mut bad, "b.csv", &b"x\nnope\n"[..]).await;
        let e = bad.read_all().expect_err("two types");
        assert!(
            e.to_string()
                .contains("column 'x' is Int64 in a.csv but Utf8 in b.csv"),
            "{e}"
        );
    }

    /// Parquet bytes of `batch` in row groups of `group_rows` rows.
    fn parquet_groups(batch: &RecordBatch, group_rows: usize) -> bytes::Bytes {
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_size(group_rows)
            .build();
        let mut out = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), Some(props))
            .expect("writer");
        w.write(batch).expect("write");
        w.close().expect("close");
        bytes::Bytes::from(out)
    }

    #[tokio::test]
    async fn parallel_reads_give_the_batches_in_order_and_stop_at_an_error() {
        let ids = |from: i64, n: i64| -> ArrayRef {
            Arc::new(Int64Array::from((from..from + n).collect::<Vec<i64>>()))
        };
        let a = RecordBatch::try_from_iter([("driver_id", ids(0, 200_000))]).expect("a");
        let b = RecordBatch::try_from_iter([
            ("driver_id", ids(200_000, 70_001)),
            (
                "speed",
                Arc::new(Float64Array::from(vec![0.5; 70_001])) as ArrayRef,
            ),
        ])
        .expect("b");
        let mut s = Staged::new().expect("staged");
        for (name, bytes) in [
            ("a.parquet", parquet_groups(&a, 30_000)),
            ("b.parquet", parquet_groups(&b, 7_000)),
        ] {
            stage(&mut s, name, bytes).await;
        }
        stage(
            &mut s,
            "c.csv",
            &b"driver_id,speed\n270001,1.5\n270002,2.5\n"[..],
        )
        .await;
        let ids_of = |batches: &[RecordBatch]| -> Vec<i64> {
            batches
                .iter()
                .flat_map(|b| {
                    let c = b.column_by_name("driver_id").expect("ids");
                    let c = c.as_any().downcast_ref::<Int64Array>().expect("int64");
                    c.values().to_vec()
                })
                .collect()
        };
        let one: Vec<RecordBatch> = s
            .batches()
            .expect("batches")
            .collect::<Result<_>>()
            .expect("read");
        for threads in [1, 2, 3, 16] {
            let many: Vec<RecordBatch> = s
                .batches()
                .expect("batches")
                .parallel(threads, |b| {
                    // Runs on the decoding threads: a column added to each batch.
                    let n = b.num_rows();
                    let mut cols = b.columns().to_vec();
                    cols.push(Arc::new(Int64Array::from(vec![1; n])) as ArrayRef);
                    let mut fields: Vec<Field> = b
                        .schema()
                        .fields()
                        .iter()
                        .map(|f| f.as_ref().clone())
                        .collect();
                    fields.push(Field::new("one", arrow_schema::DataType::Int64, false));
                    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
                        .map_err(|e| Error::Corrupt(e.to_string()))
                })
                .expect("parallel")
                .collect::<Result<_>>()
                .expect("read");
            assert_eq!(ids_of(&many), ids_of(&one), "{threads} threads");
            assert_eq!(ids_of(&many), (0..270_003).collect::<Vec<i64>>());
            assert!(many
                .iter()
                .all(|b| b.num_rows() <= BATCH_ROWS && b.num_columns() == 3));
            let speed_nulls: usize = many.iter().map(|b| b.column(1).null_count()).sum();
            assert_eq!(speed_nulls, 200_000, "{threads} threads");
        }
        // A batch that fails stops the read there, with its error.
        let mut seen = 0;
        let mut failed = None;
        for b in s
            .batches()
            .expect("batches")
            .parallel(2, |b| {
                let last = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("ids")
                    .value(b.num_rows() - 1);
                if last >= 250_000 {
                    Err(Error::invalid(format!("refused at {last}")))
                } else {
                    Ok(b)
                }
            })
            .expect("parallel")
        {
            match b {
                Ok(b) => seen += b.num_rows(),
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            }
        }
        assert!((200_000..250_000).contains(&seen), "{seen}");
        assert!(failed.expect("an error").contains("refused at"));
    }
}
