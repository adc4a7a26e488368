//! A training table in memory: the CSV and Parquet files of a dataset version read into
//! named columns, each either numeric (f64, NaN where a value is missing) or text
//! (categories; `None` where missing). Files must agree on their columns.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Schema};

pub use qanat_core::TableFormat;

use crate::{Error, Result};

/// Rows read to infer a CSV file's column types.
const INFER_ROWS: usize = 10_000;
const BATCH_ROWS: usize = 8192;

/// One column's values.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// Numbers (integers, floats and booleans as 0/1); NaN is missing.
    Numeric(Vec<f64>),
    /// Text; `None` is missing.
    Text(Vec<Option<String>>),
    /// A type training cannot use (dates, decimals, lists): its Arrow type and length.
    /// Refused only when a model names it.
    Unsupported(String, usize),
}

impl Values {
    pub fn len(&self) -> usize {
        match self {
            Values::Numeric(v) => v.len(),
            Values::Text(v) => v.len(),
            Values::Unsupported(_, n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `numeric` or `text`, for messages and the model's signature.
    pub fn kind(&self) -> &'static str {
        match self {
            Values::Numeric(_) => "numeric",
            Values::Text(_) => "text",
            Values::Unsupported(..) => "unsupported",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub values: Values,
}

/// Named columns of equal length.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    pub columns: Vec<Column>,
}

impl Table {
    pub fn rows(&self) -> usize {
        self.columns.first().map_or(0, |c| c.values.len())
    }

    pub fn column(&self, name: &str) -> Result<&Column> {
        self.columns.iter().find(|c| c.name == name).ok_or_else(|| {
            Error::invalid(format!(
                "column '{name}' is not in the data; its columns are: {}",
                self.names().join(", ")
            ))
        })
    }

    pub fn names(&self) -> Vec<&str> {
        self.columns.iter().map(|c| c.name.as_str()).collect()
    }

    /// Reads every `.csv` and `.parquet` file under `dir` (sorted by path, so the row
    /// order is the same on every run).
    pub fn read_dir(dir: &Path) -> Result<Table> {
        let mut files = Vec::new();
        walk(dir, &mut files)?;
        files.sort();
        let files: Vec<PathBuf> = files
            .into_iter()
            .filter(|f| format_of(f).is_some())
            .collect();
        if files.is_empty() {
            return Err(Error::invalid(format!(
                "no CSV or Parquet file in the input ({}): push a dataset whose files end in .csv or .parquet",
                dir.display()
            )));
        }
        let mut table: Option<Table> = None;
        for f in &files {
            let t = Table::read_file(f)?;
            table = Some(match table {
                None => t,
                Some(acc) => acc.append(t, f)?,
            });
        }
        table.ok_or_else(|| Error::invalid("no rows in the input"))
    }

    /// Reads one CSV (with a header row) or Parquet file.
    pub fn read_file(path: &Path) -> Result<Table> {
        let io = |e: std::io::Error| Error::invalid(format!("{}: {e}", path.display()));
        let bad = |e: String| Error::invalid(format!("{}: {e}", path.display()));
        match format_of(path) {
            Some(TableFormat::Csv) => {
                let format = arrow_csv::reader::Format::default().with_header(true);
                let (schema, _) = format
                    .infer_schema(std::fs::File::open(path).map_err(io)?, Some(INFER_ROWS))
                    .map_err(|e| bad(e.to_string()))?;
                let schema = Arc::new(schema);
                let reader = arrow_csv::ReaderBuilder::new(schema.clone())
                    .with_header(true)
                    .with_batch_size(BATCH_ROWS)
                    .build(std::fs::File::open(path).map_err(io)?)
                    .map_err(|e| bad(e.to_string()))?;
                from_batches(&schema, reader.map(|b| b.map_err(|e| e.to_string()))).map_err(bad)
            }
            Some(TableFormat::Parquet) => {
                let file = std::fs::File::open(path).map_err(io)?;
                let builder =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                        .map_err(|e| bad(e.to_string()))?;
                let schema = builder.schema().clone();
                let reader = builder
                    .with_batch_size(BATCH_ROWS)
                    .build()
                    .map_err(|e| bad(e.to_string()))?;
                from_batches(&schema, reader.map(|b| b.map_err(|e| e.to_string()))).map_err(bad)
            }
            None => Err(bad("not a CSV or Parquet file".into())),
        }
    }

    /// This table's rows followed by `other`'s (same column names, in any order; a
    /// column numeric in one file and text in another becomes text).
    fn append(mut self, other: Table, file: &Path) -> Result<Table> {
        let mine: Vec<&str> = self.names();
        let theirs: Vec<&str> = other.names();
        let mut a = mine.clone();
        let mut b = theirs.clone();
        a.sort_unstable();
        b.sort_unstable();
        if a != b {
            return Err(Error::invalid(format!(
                "{} has columns {} but the files before it have {}: every file of the input must have the same columns",
                file.display(),
                theirs.join(", "),
                mine.join(", ")
            )));
        }
        let mut other = other;
        for col in &mut self.columns {
            let pos = other
                .columns
                .iter()
                .position(|c| c.name == col.name)
                .ok_or_else(|| Error::invalid("column vanished"))?;
            let theirs =
                std::mem::replace(&mut other.columns[pos].values, Values::Numeric(Vec::new()));
            col.values = match (
                std::mem::replace(&mut col.values, Values::Numeric(Vec::new())),
                theirs,
            ) {
                (Values::Numeric(mut x), Values::Numeric(y)) => {
                    x.extend(y);
                    Values::Numeric(x)
                }
                (Values::Unsupported(t, n), y) | (y, Values::Unsupported(t, n)) => {
                    Values::Unsupported(t, n + y.len())
                }
                (x, y) => {
                    let mut t = as_text(x);
                    t.extend(as_text(y));
                    Values::Text(t)
                }
            };
        }
        Ok(self)
    }
}

fn as_text(v: Values) -> Vec<Option<String>> {
    match v {
        Values::Text(t) => t,
        Values::Unsupported(_, n) => vec![None; n],
        Values::Numeric(n) => n
            .into_iter()
            .map(|x| {
                if x.is_nan() {
                    None
                } else {
                    Some(x.to_string())
                }
            })
            .collect(),
    }
}

fn format_of(p: &Path) -> Option<TableFormat> {
    TableFormat::of(p.file_name()?.to_str()?)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| Error::invalid(format!("reading the input {}: {e}", dir.display())))?;
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

fn from_batches(
    schema: &Schema,
    batches: impl Iterator<Item = std::result::Result<RecordBatch, String>>,
) -> std::result::Result<Table, String> {
    let mut columns: Vec<Column> = schema
        .fields()
        .iter()
        .map(|f| Column {
            name: f.name().clone(),
            values: if numeric(f.data_type()) {
                Values::Numeric(Vec::new())
            } else if text(f.data_type()) {
                Values::Text(Vec::new())
            } else {
                Values::Unsupported(f.data_type().to_string(), 0)
            },
        })
        .collect();
    for batch in batches {
        let batch = batch?;
        for (i, col) in columns.iter_mut().enumerate() {
            let a = batch.column(i);
            match &mut col.values {
                Values::Numeric(v) => push_numeric(a.as_ref(), v)?,
                Values::Text(v) => push_text(a.as_ref(), v)?,
                Values::Unsupported(_, n) => *n += a.len(),
            }
        }
    }
    Ok(Table { columns })
}

fn text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

fn numeric(t: &DataType) -> bool {
    t.is_numeric() || matches!(t, DataType::Boolean | DataType::Null)
}

fn push_numeric(a: &dyn Array, out: &mut Vec<f64>) -> std::result::Result<(), String> {
    macro_rules! prim {
        ($t:ty) => {{
            let p = a.as_primitive::<$t>();
            for i in 0..p.len() {
                out.push(if p.is_null(i) {
                    f64::NAN
                } else {
                    p.value(i) as f64
                });
            }
        }};
    }
    match a.data_type() {
        DataType::Int8 => prim!(Int8Type),
        DataType::Int16 => prim!(Int16Type),
        DataType::Int32 => prim!(Int32Type),
        DataType::Int64 => prim!(Int64Type),
        DataType::UInt8 => prim!(UInt8Type),
        DataType::UInt16 => prim!(UInt16Type),
        DataType::UInt32 => prim!(UInt32Type),
        DataType::UInt64 => prim!(UInt64Type),
        DataType::Float32 => prim!(Float32Type),
        DataType::Float64 => prim!(Float64Type),
        DataType::Boolean => {
            let b = a.as_boolean();
            for i in 0..b.len() {
                out.push(if b.is_null(i) {
                    f64::NAN
                } else if b.value(i) {
                    1.0
                } else {
                    0.0
                });
            }
        }
        DataType::Null => out.extend(std::iter::repeat_n(f64::NAN, a.len())),
        other => {
            return Err(format!(
                "a column of type {other} cannot be read as numbers"
            ))
        }
    }
    Ok(())
}

fn push_text(a: &dyn Array, out: &mut Vec<Option<String>>) -> std::result::Result<(), String> {
    out.extend(arrow_cast_to_string(a)?);
    Ok(())
}

/// Text of each value; other types (dates, decimals, lists) are refused.
fn arrow_cast_to_string(a: &dyn Array) -> std::result::Result<Vec<Option<String>>, String> {
    match a.data_type() {
        DataType::Utf8 => {
            let s = a.as_string::<i32>();
            Ok((0..s.len())
                .map(|i| (!s.is_null(i)).then(|| s.value(i).to_string()))
                .collect())
        }
        DataType::LargeUtf8 => {
            let s = a.as_string::<i64>();
            Ok((0..s.len())
                .map(|i| (!s.is_null(i)).then(|| s.value(i).to_string()))
                .collect())
        }
        DataType::Utf8View => {
            let s = a.as_string_view();
            Ok((0..s.len())
                .map(|i| (!s.is_null(i)).then(|| s.value(i).to_string()))
                .collect())
        }
        other => Err(format!(
            "a column of type {other} cannot be used for training; cast it to a number or text first"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_files_are_read_into_numeric_and_text_columns() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.csv"), "x,y,label\n1,2.5,yes\n2,,no\n").expect("write");
        std::fs::create_dir(dir.path().join("more")).expect("mkdir");
        std::fs::write(dir.path().join("more/b.csv"), "label,x,y\nyes,3,4\n").expect("write");
        std::fs::write(dir.path().join("notes.txt"), "ignored").expect("write");
        let t = Table::read_dir(dir.path()).expect("read");
        assert_eq!(t.rows(), 3);
        assert_eq!(
            t.column("x").expect("x").values,
            Values::Numeric(vec![1.0, 2.0, 3.0])
        );
        match &t.column("y").expect("y").values {
            Values::Numeric(v) => assert!(v[1].is_nan() && v[2] == 4.0),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            t.column("label").expect("label").values,
            Values::Text(vec![
                Some("yes".into()),
                Some("no".into()),
                Some("yes".into())
            ])
        );
        let e = t.column("nope").expect_err("unknown");
        assert!(e.to_string().contains("x, y, label"), "{e}");
    }

    #[test]
    fn files_with_other_columns_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.csv"), "x,y\n1,2\n").expect("write");
        std::fs::write(dir.path().join("b.csv"), "x,z\n1,2\n").expect("write");
        let e = Table::read_dir(dir.path()).expect_err("mismatch");
        assert!(e.to_string().contains("same columns"), "{e}");
        let empty = tempfile::tempdir().expect("tempdir");
        assert!(Table::read_dir(empty.path()).is_err());
    }
}
