//! Profiles of whole tables — CSV or Parquet files, or any stream of Arrow batches —
//! and the drift between two of them.
//!
//! A reference is read twice: once for each numeric column's range (its bins; a
//! Parquet file's own statistics give it without reading the data), once to profile
//! it. A current table is read once, on the reference's bins. Memory is
//! the profiles plus one batch: it does not grow with the rows. Within a batch the
//! columns are profiled in parallel.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Array, Float64Array, RecordBatch, StringArray};
use arrow_cast::cast::{cast_with_options, CastOptions};
use arrow_schema::{ArrowError, DataType, SchemaRef};
use qanat_model::profile::TableProfile;
use rayon::prelude::*;

use crate::drift::{self, Choice, DatasetDrift};
use crate::profile::{Bins, CategoricalProfile, ColumnProfile, NumericProfile};

/// Rows per batch read from a file.
const BATCH_ROWS: usize = 65_536;
/// Rows a CSV file's schema is inferred from.
const INFER_ROWS: usize = 10_000;

/// What reading or profiling a table can fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // The cause is in the message, not chained: it would print twice.
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{path}: {message}")]
    Format { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}

type Batches = Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send>;

/// A CSV (with a header row) or Parquet file, read as Arrow batches.
#[derive(Debug, Clone)]
pub struct TableFile {
    path: PathBuf,
    parquet: bool,
}

impl TableFile {
    /// The file at `path`: Parquet when its name ends in `.parquet` or `.pq`, else CSV.
    pub fn new(path: impl Into<PathBuf>) -> TableFile {
        let path = path.into();
        let parquet = matches!(
            path.extension()
                .and_then(|e| e.to_str())
                .map(str::to_ascii_lowercase)
                .as_deref(),
            Some("parquet" | "pq")
        );
        TableFile { path, parquet }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open(&self) -> Result<File, Error> {
        File::open(&self.path).map_err(|err| Error::Io {
            path: self.path.clone(),
            err,
        })
    }

    fn format(&self, e: impl std::fmt::Display) -> Error {
        Error::Format {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    /// Each column's [min, max] from a Parquet file's own statistics, when every row
    /// group has them for it (what a reference's first pass would otherwise read the
    /// whole file for); `None` for a column without them, and for CSV.
    fn ranges_from_statistics(&self, names: &[&str]) -> Result<Vec<Option<(f64, f64)>>, Error> {
        use parquet::file::statistics::Statistics;
        if !self.parquet {
            return Ok(vec![None; names.len()]);
        }
        let builder =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(self.open()?)
                .map_err(|e| self.format(e))?;
        let schema = builder.schema().clone();
        let meta = builder.metadata().clone();
        let descr = meta.file_metadata().schema_descr();
        Ok(names
            .iter()
            .map(|name| {
                // Signed types only: an unsigned column's statistics order as signed.
                let field = schema.field_with_name(name).ok()?;
                if !matches!(
                    field.data_type(),
                    DataType::Int8
                        | DataType::Int16
                        | DataType::Int32
                        | DataType::Int64
                        | DataType::Float32
                        | DataType::Float64
                ) {
                    return None;
                }
                let leaf = (0..descr.num_columns())
                    .find(|i| descr.column(*i).path().string() == **name)?;
                let mut range = (f64::INFINITY, f64::NEG_INFINITY);
                for rg in meta.row_groups() {
                    let (lo, hi) = match rg.column(leaf).statistics()? {
                        Statistics::Int32(s) => {
                            (f64::from(*s.min_opt()?), f64::from(*s.max_opt()?))
                        }
                        Statistics::Int64(s) => (*s.min_opt()? as f64, *s.max_opt()? as f64),
                        Statistics::Float(s) => {
                            (f64::from(*s.min_opt()?), f64::from(*s.max_opt()?))
                        }
                        Statistics::Double(s) => (*s.min_opt()?, *s.max_opt()?),
                        _ => return None,
                    };
                    if !(lo.is_finite() && hi.is_finite()) {
                        return None;
                    }
                    range = (range.0.min(lo), range.1.max(hi));
                }
                (range.0 <= range.1).then_some(range)
            })
            .collect())
    }

    /// The file's schema and its batches, from the start.
    fn batches(&self) -> Result<(SchemaRef, Batches), Error> {
        if self.parquet {
            let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                self.open()?,
            )
            .map_err(|e| self.format(e))?;
            let schema = builder.schema().clone();
            let reader = builder
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(|e| self.format(e))?;
            Ok((schema, Box::new(reader)))
        } else {
            let format = arrow_csv::reader::Format::default().with_header(true);
            let (schema, _) = format
                .infer_schema(self.open()?, Some(INFER_ROWS))
                .map_err(|e| self.format(e))?;
            let schema = Arc::new(schema);
            let reader = arrow_csv::ReaderBuilder::new(schema.clone())
                .with_header(true)
                .with_batch_size(BATCH_ROWS)
                .build(self.open()?)
                .map_err(|e| self.format(e))?;
            Ok((schema, Box::new(reader)))
        }
    }

    /// Profiles the file's rows into `columns`, matched by name (a column the file
    /// lacks is left as it is); the number of rows read. A Parquet file is read by
    /// several readers at once, each decoding its own share of the columns (decoding
    /// is most of the work); CSV is parsed once and its columns profiled in parallel,
    /// from `opened` when the caller has its batches from the start already.
    fn profile(
        &self,
        columns: &mut [(String, ColumnProfile)],
        opened: Option<(SchemaRef, Batches)>,
    ) -> Result<u64, Error> {
        if !self.parquet || columns.len() < 2 {
            let (schema, batches) = match opened {
                Some(o) => o,
                None => self.batches()?,
            };
            return profile_into(&schema, batches, columns);
        }
        use arrow_array::RecordBatchReader;
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        use parquet::arrow::ProjectionMask;
        let share = columns
            .len()
            .div_ceil(rayon::current_num_threads().max(1) * 2);
        let rows: Vec<u64> = columns
            .par_chunks_mut(share)
            .map(|part| {
                let builder = ParquetRecordBatchReaderBuilder::try_new(self.open()?)
                    .map_err(|e| self.format(e))?;
                let roots: Vec<usize> = part
                    .iter()
                    .filter_map(|(name, _)| builder.schema().index_of(name).ok())
                    .collect();
                let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
                let reader = builder
                    .with_projection(mask)
                    .with_batch_size(BATCH_ROWS)
                    .build()
                    .map_err(|e| self.format(e))?;
                let schema = reader.schema();
                let mut rows = 0u64;
                for batch in reader {
                    let batch =
                        batch.map_err(|e| Error::Invalid(format!("reading a batch: {e}")))?;
                    for (name, profile) in part.iter_mut() {
                        if let Ok(i) = schema.index_of(name) {
                            add_column(profile, batch.column(i).as_ref())?;
                        }
                    }
                    rows += batch.num_rows() as u64;
                }
                Ok(rows)
            })
            .collect::<Result<_, Error>>()?;
        match rows.first() {
            Some(n) if rows.iter().all(|r| r == n) => Ok(*n),
            Some(_) => Err(self.format("the columns' readers counted different rows")),
            None => Ok(0),
        }
    }
}

/// Whether an Arrow type is profiled as numbers, as categories, or not at all
/// (dates, nested types: compared by neither).
fn numeric(t: &DataType) -> Option<bool> {
    match t {
        t if t.is_numeric() => Some(true),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Boolean => {
            Some(false)
        }
        DataType::Dictionary(_, v) => numeric(v),
        _ => None,
    }
}

/// Casting that turns what does not convert into nulls (a numeric column that reads
/// as text in the current file: its non-numbers are nulls, and the null rate shows it).
fn lenient() -> CastOptions<'static> {
    CastOptions {
        safe: true,
        ..CastOptions::default()
    }
}

fn as_f64(col: &dyn Array) -> Result<Float64Array, Error> {
    let cast = cast_with_options(col, &DataType::Float64, &lenient())
        .map_err(|e| Error::Invalid(format!("a column does not convert to numbers: {e}")))?;
    cast.as_any()
        .downcast_ref::<Float64Array>()
        .cloned()
        .ok_or_else(|| Error::Invalid("a numeric column did not cast to f64".into()))
}

fn as_text(col: &dyn Array) -> Result<StringArray, Error> {
    let cast = cast_with_options(col, &DataType::Utf8, &lenient())
        .map_err(|e| Error::Invalid(format!("a column does not convert to text: {e}")))?;
    cast.as_any()
        .downcast_ref::<StringArray>()
        .cloned()
        .ok_or_else(|| Error::Invalid("a categorical column did not cast to text".into()))
}

/// Adds one column of a batch to its profile.
fn add_column(profile: &mut ColumnProfile, col: &dyn Array) -> Result<(), Error> {
    match profile {
        ColumnProfile::Numeric(p) => {
            let values = as_f64(col)?;
            if values.null_count() == 0 {
                p.add_slice(values.values());
            } else {
                let present: Vec<f64> = values.iter().flatten().collect();
                p.add_slice(&present);
                p.nulls += values.null_count() as u64;
            }
        }
        ColumnProfile::Categorical(p) => {
            for v in as_text(col)?.iter() {
                p.add(v);
            }
        }
    }
    Ok(())
}

/// Profiles every batch of `batches` into `columns`, matched by name.
fn profile_into(
    schema: &SchemaRef,
    batches: Batches,
    columns: &mut [(String, ColumnProfile)],
) -> Result<u64, Error> {
    // Each profile's column index in this file.
    let at: Vec<Option<usize>> = columns
        .iter()
        .map(|(name, _)| schema.index_of(name).ok())
        .collect();
    let mut rows = 0u64;
    for batch in batches {
        let batch = batch.map_err(|e| Error::Invalid(format!("reading a batch: {e}")))?;
        let n = batch.num_rows() as u64;
        columns
            .par_iter_mut()
            .zip(&at)
            .try_for_each(|((_, profile), i)| match i {
                Some(i) => add_column(profile, batch.column(*i).as_ref()),
                None => Ok(()),
            })?;
        rows += n;
    }
    Ok(rows)
}

/// The reference's profile: every numeric or categorical column, numeric ones on bins
/// spanning their own range.
pub fn reference(file: &TableFile) -> Result<TableProfile, Error> {
    reference_where(file, |_| true)
}

/// The reference's profile of the numeric or categorical columns `keep` accepts.
pub fn reference_where(
    file: &TableFile,
    keep: impl Fn(&str) -> bool,
) -> Result<TableProfile, Error> {
    let (schema, batches) = file.batches()?;
    let kinds: Vec<(String, bool)> = schema
        .fields()
        .iter()
        .filter(|f| keep(f.name()))
        .filter_map(|f| numeric(f.data_type()).map(|n| (f.name().clone(), n)))
        .collect();
    if kinds.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: no numeric or text columns to profile",
            file.path.display()
        )));
    }
    // Each numeric column's range: from a Parquet file's statistics where it has
    // them, else from a first pass over the columns that lack them.
    let names: Vec<&str> = kinds.iter().map(|(n, _)| n.as_str()).collect();
    let known = file.ranges_from_statistics(&names)?;
    let mut ranges: Vec<(f64, f64)> = known
        .iter()
        .map(|r| r.unwrap_or((f64::INFINITY, f64::NEG_INFINITY)))
        .collect();
    let scan: Vec<bool> = kinds
        .iter()
        .zip(&known)
        .map(|((_, is_numeric), k)| *is_numeric && k.is_none())
        .collect();
    if scan.iter().any(|s| *s) {
        for batch in batches {
            let batch = batch.map_err(|e| file.format(e))?;
            kinds
                .par_iter()
                .zip(ranges.par_iter_mut())
                .zip(scan.par_iter())
                .filter(|(_, s)| **s)
                .try_for_each(|(((name, _), range), _)| {
                    let col = batch.column_by_name(name).ok_or_else(|| {
                        Error::Invalid(format!("column '{name}' vanished mid-file"))
                    })?;
                    let values = as_f64(col.as_ref())?;
                    for x in values.iter().flatten().filter(|x| x.is_finite()) {
                        range.0 = range.0.min(x);
                        range.1 = range.1.max(x);
                    }
                    Ok::<(), Error>(())
                })?;
        }
    }
    let mut columns: Vec<(String, ColumnProfile)> = kinds
        .into_iter()
        .zip(ranges)
        .map(|((name, is_numeric), (lo, hi))| {
            let profile = if is_numeric {
                let bins = if lo <= hi {
                    Bins::spanning(lo, hi)
                } else {
                    Bins::spanning(0.0, 0.0)
                };
                ColumnProfile::Numeric(NumericProfile::new(bins))
            } else {
                ColumnProfile::Categorical(CategoricalProfile::default())
            };
            (name, profile)
        })
        .collect();
    let rows = file.profile(&mut columns, None)?;
    Ok(TableProfile::of(rows, columns))
}

/// A current table's profile on the reference's columns and bins. Columns the file
/// lacks are left out (the comparison says so); columns the reference lacks are not
/// profiled.
pub fn current(file: &TableFile, reference: &TableProfile) -> Result<TableProfile, Error> {
    let (schema, batches) = file.batches()?;
    let mut columns: Vec<(String, ColumnProfile)> = reference
        .columns
        .iter()
        .filter(|(name, _)| schema.index_of(name).is_ok())
        .map(|(name, r)| {
            let empty = match r {
                ColumnProfile::Numeric(p) => ColumnProfile::Numeric(NumericProfile::new(p.bins)),
                ColumnProfile::Categorical(_) => {
                    ColumnProfile::Categorical(CategoricalProfile::default())
                }
            };
            (name.clone(), empty)
        })
        .collect();
    let rows = file.profile(&mut columns, Some((schema, batches)))?;
    Ok(TableProfile::of(rows, columns))
}

/// The drift of `current` from `reference`, column by column; a column the current
/// table lacks is reported as missing, never as drift.
pub fn compare(
    reference: &TableProfile,
    current: &TableProfile,
    choices: &BTreeMap<String, Choice>,
) -> DatasetDrift {
    let found: BTreeMap<&str, &ColumnProfile> = current
        .columns
        .iter()
        .map(|(n, p)| (n.as_str(), p))
        .collect();
    let mut pairs = Vec::new();
    let mut missing = Vec::new();
    for (name, r) in &reference.columns {
        match found.get(name.as_str()) {
            Some(c) => pairs.push((name.clone(), r.clone(), (*c).clone())),
            None => missing.push(drift::missing(name, r, current.rows)),
        }
    }
    let mut out = drift::dataset(&pairs, choices);
    out.by_column.extend(missing);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{reference_of, Values};
    use std::io::Write;

    fn csv(dir: &Path, name: &str, text: &str) -> TableFile {
        let path = dir.join(name);
        let mut f = File::create(&path).expect("create");
        f.write_all(text.as_bytes()).expect("write");
        TableFile::new(path)
    }

    #[test]
    fn a_csv_reference_and_a_drifted_current_compare_column_by_column() {
        let dir = std::env::temp_dir().join(format!("qanat-monitor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut r = String::from("x,kind,gone\n");
        let mut c = String::from("x,kind\n");
        for i in 0..400 {
            r.push_str(&format!("{},{},1\n", i % 100, ["a", "b", "c"][i % 3]));
            let x = if i % 10 == 0 {
                "NA".to_string()
            } else {
                format!("{}", i % 100 + 40)
            };
            c.push_str(&format!("{x},{}\n", ["a", "b", "c"][i % 3]));
        }
        let rf = csv(&dir, "ref.csv", &r);
        let cf = csv(&dir, "cur.csv", &c);
        let reference = reference(&rf).expect("reference");
        assert_eq!(reference.rows, 400);
        let current = current(&cf, &reference).expect("current");
        let d = compare(&reference, &current, &BTreeMap::new());
        let by: BTreeMap<&str, &drift::ColumnDrift> =
            d.by_column.iter().map(|c| (c.column.as_str(), c)).collect();
        assert!(by["x"].drifted, "{:?}", by["x"]);
        assert!((by["x"].quality.current_null_rate - 0.1).abs() < 1e-12);
        assert!(!by["kind"].drifted, "{:?}", by["kind"]);
        assert!(by["gone"]
            .note
            .as_deref()
            .is_some_and(|n| n.contains("missing")));
        assert!(!by["gone"].drifted);
        assert_eq!((d.columns, d.drifted_columns), (2, 1));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_parquet_reference_takes_its_ranges_from_statistics_and_profiles_as_csv_does() {
        use arrow_array::{Float64Array, Int64Array};
        let dir = std::env::temp_dir().join(format!("qanat-monitor-pq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let xs: Vec<Option<f64>> = (0..5000)
            .map(|i| (i % 7 != 0).then(|| f64::from(i % 1000) * 0.25 - 40.0))
            .collect();
        let ns: Vec<i64> = (0..5000).map(|i| (i * 37) % 901 - 300).collect();
        let batch = RecordBatch::try_from_iter([
            (
                "x",
                Arc::new(Float64Array::from(xs.clone())) as Arc<dyn Array>,
            ),
            (
                "n",
                Arc::new(Int64Array::from(ns.clone())) as Arc<dyn Array>,
            ),
        ])
        .expect("batch");
        let path = dir.join("ref.parquet");
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_size(1000)
            .build();
        let mut w = parquet::arrow::ArrowWriter::try_new(
            File::create(&path).expect("create"),
            batch.schema(),
            Some(props),
        )
        .expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
        let pq = TableFile::new(&path);
        let ranges = pq.ranges_from_statistics(&["x", "n"]).expect("statistics");
        assert_eq!(ranges, vec![Some((-40.0, 209.75)), Some((-300.0, 600.0))]);
        let mut text = String::from("x,n\n");
        for (x, n) in xs.iter().zip(&ns) {
            text.push_str(&format!(
                "{},{n}\n",
                x.map_or(String::new(), |x| x.to_string())
            ));
        }
        let from_csv = reference(&csv(&dir, "ref.csv", &text)).expect("csv");
        let from_parquet = reference(&pq).expect("parquet");
        assert_eq!(from_csv.rows, from_parquet.rows);
        for ((name, a), (_, b)) in from_csv.columns.iter().zip(&from_parquet.columns) {
            let (ColumnProfile::Numeric(a), ColumnProfile::Numeric(b)) = (a, b) else {
                panic!("{name} is numeric");
            };
            assert_eq!(
                (a.bins, &a.counts, a.count, a.nulls),
                (b.bins, &b.counts, b.count, b.nulls),
                "{name}"
            );
            assert!(
                (a.mean - b.mean).abs() < 1e-9 && (a.std() - b.std()).abs() < 1e-9,
                "{name}"
            );
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_profile_of_columns_in_memory_equals_the_profile_of_the_same_file() {
        let dir = std::env::temp_dir().join(format!("qanat-monitor-mem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let xs: Vec<f64> = (0..300)
            .map(|i| {
                if i % 9 == 0 {
                    f64::NAN
                } else {
                    f64::from(i % 50)
                }
            })
            .collect();
        let ks: Vec<Option<String>> = (0..300)
            .map(|i| (i % 11 != 0).then(|| ["u", "v"][i % 2].to_string()))
            .collect();
        let mut text = String::from("x,k\n");
        for (x, k) in xs.iter().zip(&ks) {
            let x = if x.is_nan() {
                String::new()
            } else {
                x.to_string()
            };
            text.push_str(&format!("{x},{}\n", k.clone().unwrap_or_default()));
        }
        let from_file = reference(&csv(&dir, "t.csv", &text)).expect("reference");
        let in_memory = reference_of(&[
            ("x".into(), Values::Numeric(&xs)),
            ("k".into(), Values::Text(&ks)),
        ]);
        assert_eq!(in_memory.rows, 300);
        let (ColumnProfile::Numeric(a), ColumnProfile::Numeric(b)) =
            (&from_file.columns[0].1, &in_memory.columns[0].1)
        else {
            panic!("x is numeric");
        };
        assert_eq!(
            (a.bins, &a.counts, a.count, a.nulls),
            (b.bins, &b.counts, b.count, b.nulls)
        );
        let (ColumnProfile::Categorical(a), ColumnProfile::Categorical(b)) =
            (&from_file.columns[1].1, &in_memory.columns[1].1)
        else {
            panic!("k is categorical");
        };
        // CSV reads an empty field as null, as the text column's None.
        assert_eq!(a, b);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn an_unreadable_file_names_its_path() {
        let e = reference(&TableFile::new("/nonexistent/ref.csv")).expect_err("no file");
        assert!(e.to_string().contains("/nonexistent/ref.csv"), "{e}");
    }
}
