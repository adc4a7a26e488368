//! Tabular awareness: for CSV and Parquet files, the schema (Arrow types), row count and
//! a per-column profile; and the check of a dataset's declared schema.
//!
//! Profiles stream: CSV is read front to back (schema inferred from the first rows),
//! Parquet through random reads of its footer and column chunks. Every value is seen
//! once; memory is bounded by a fixed reservoir (quantiles), a fixed HyperLogLog
//! (distinct counts) and a capped category table (top values).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, Schema};

use crate::{Error, Result};

/// Rows read to infer a CSV schema.
const INFER_ROWS: usize = 10_000;
const BATCH_ROWS: usize = 8192;
/// Values kept for quantiles.
const RESERVOIR: usize = 10_000;
/// Distinct values tracked for top categories.
const CATEGORY_CAP: usize = 50_000;
const TOP: usize = 10;
const HLL_BITS: u32 = 12;
/// Example rows kept per violation.
const EXAMPLES: usize = 5;

pub use qanat_types::data::tabular::{
    confirmed_kinds, declared_pii, protected_columns, redact_profile, undeclared_pii, Category,
    ColumnProfile, ColumnSpec, DatasetSchema, FileProfile, SchemaViolation, TableFormat,
    TableProfile,
};

/// HyperLogLog with 2^12 registers.
struct Hll {
    regs: Vec<u8>,
}

impl Hll {
    fn new() -> Self {
        Hll {
            regs: vec![0; 1 << HLL_BITS],
        }
    }

    fn add<T: Hash + ?Sized>(&mut self, v: &T) {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        v.hash(&mut h);
        let x = h.finish();
        let idx = (x >> (64 - HLL_BITS)) as usize;
        let rank = ((x << HLL_BITS) | (1 << (HLL_BITS - 1))).leading_zeros() as u8 + 1;
        if rank > self.regs[idx] {
            self.regs[idx] = rank;
        }
    }

    fn estimate(&self) -> u64 {
        let m = self.regs.len() as f64;
        let sum: f64 = self.regs.iter().map(|r| 2f64.powi(-(*r as i32))).sum();
        let raw = 0.7213 / (1.0 + 1.079 / m) * m * m / sum;
        let zeros = self.regs.iter().filter(|r| **r == 0).count();
        let est = if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            raw
        };
        est.round() as u64
    }
}

/// Running statistics of one column.
struct Acc {
    name: String,
    data_type: DataType,
    count: u64,
    nulls: u64,
    null_rows: Vec<u64>,
    // numeric (Welford)
    n: u64,
    mean: f64,
    m2: f64,
    min_f: Option<f64>,
    max_f: Option<f64>,
    reservoir: Vec<f64>,
    seen_numbers: u64,
    rng: u64,
    // text
    min_s: Option<String>,
    max_s: Option<String>,
    categories: HashMap<String, u64>,
    hll: Hll,
    // personal data
    pii: qanat_core::pii::ColumnScan,
}

impl Acc {
    fn new(name: &str, data_type: &DataType) -> Self {
        Acc {
            name: name.to_string(),
            data_type: data_type.clone(),
            count: 0,
            nulls: 0,
            null_rows: Vec::new(),
            n: 0,
            mean: 0.0,
            m2: 0.0,
            min_f: None,
            max_f: None,
            reservoir: Vec::new(),
            seen_numbers: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
            min_s: None,
            max_s: None,
            categories: HashMap::new(),
            hll: Hll::new(),
            pii: qanat_core::pii::ColumnScan::new(name),
        }
    }

    fn number(&mut self, x: f64) {
        if x.is_nan() {
            return;
        }
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
        self.min_f = Some(self.min_f.map_or(x, |m| m.min(x)));
        self.max_f = Some(self.max_f.map_or(x, |m| m.max(x)));
        self.hll.add(&x.to_bits());
        // Reservoir sampling (Algorithm R) with a fixed-seed xorshift: reproducible.
        self.seen_numbers += 1;
        if self.reservoir.len() < RESERVOIR {
            self.reservoir.push(x);
        } else {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let j = self.rng % self.seen_numbers;
            if (j as usize) < RESERVOIR {
                self.reservoir[j as usize] = x;
            }
        }
    }

    fn text(&mut self, s: &str) {
        self.pii.add_sampled(s);
        self.hll.add(s);
        if self.min_s.as_deref().is_none_or(|m| s < m) {
            self.min_s = Some(s.to_string());
        }
        if self.max_s.as_deref().is_none_or(|m| s > m) {
            self.max_s = Some(s.to_string());
        }
        self.category(s);
    }

    fn category(&mut self, s: &str) {
        if let Some(c) = self.categories.get_mut(s) {
            *c += 1;
        } else if self.categories.len() < CATEGORY_CAP {
            self.categories.insert(s.to_string(), 1);
        }
    }

    fn add(&mut self, array: &dyn Array, first_row: u64) {
        self.count += array.len() as u64;
        // Logical nulls: a column with no value at all reads as Arrow's Null type, whose
        // array has no validity buffer (null_count 0) although every row is null.
        let missing = array.logical_null_count();
        self.nulls += missing as u64;
        if missing > 0 && self.null_rows.len() < EXAMPLES {
            for i in 0..array.len() {
                if array.is_null(i) || array.data_type() == &DataType::Null {
                    self.null_rows.push(first_row + i as u64);
                    if self.null_rows.len() == EXAMPLES {
                        break;
                    }
                }
            }
        }
        macro_rules! numbers {
            ($t:ty) => {
                for v in array.as_primitive::<$t>().iter().flatten() {
                    self.number(v as f64);
                }
            };
        }
        match array.data_type() {
            DataType::Int8 => numbers!(Int8Type),
            DataType::Int16 => numbers!(Int16Type),
            DataType::Int32 => numbers!(Int32Type),
            DataType::Int64 => {
                // Identifiers read as numbers (a CSV column of Emirates IDs, card or
                // phone numbers) are scanned as the digits they are.
                for v in array.as_primitive::<Int64Type>().iter().flatten() {
                    if v >= 1_000_000 && self.pii.wants_more() {
                        self.pii.add_sampled(&v.to_string());
                    }
                    self.number(v as f64);
                }
            }
            DataType::UInt8 => numbers!(UInt8Type),
            DataType::UInt16 => numbers!(UInt16Type),
            DataType::UInt32 => numbers!(UInt32Type),
            DataType::UInt64 => {
                for v in array.as_primitive::<UInt64Type>().iter().flatten() {
                    if v >= 1_000_000 && self.pii.wants_more() {
                        self.pii.add_sampled(&v.to_string());
                    }
                    self.number(v as f64);
                }
            }
            DataType::Float32 => numbers!(Float32Type),
            DataType::Float64 => {
                // A column of identifiers with a missing value reads as floats
                // (`784199012345676.0`): whole numbers are scanned as their digits.
                for v in array.as_primitive::<Float64Type>().iter().flatten() {
                    if v.fract() == 0.0
                        && (1e6..9.007_199_254_740_992e15).contains(&v.abs())
                        && self.pii.wants_more()
                    {
                        self.pii.add_sampled(&(v as i64).to_string());
                    }
                    self.number(v);
                }
            }
            DataType::Date32 => numbers!(Date32Type),
            DataType::Date64 => numbers!(Date64Type),
            DataType::Timestamp(unit, _) => match unit {
                arrow_schema::TimeUnit::Second => numbers!(TimestampSecondType),
                arrow_schema::TimeUnit::Millisecond => numbers!(TimestampMillisecondType),
                arrow_schema::TimeUnit::Microsecond => numbers!(TimestampMicrosecondType),
                arrow_schema::TimeUnit::Nanosecond => numbers!(TimestampNanosecondType),
            },
            DataType::Boolean => {
                for v in array.as_boolean().iter().flatten() {
                    let s = if v { "true" } else { "false" };
                    self.hll.add(s);
                    self.category(s);
                }
            }
            DataType::Utf8 => {
                for v in array.as_string::<i32>().iter().flatten() {
                    self.text(v);
                }
            }
            DataType::LargeUtf8 => {
                for v in array.as_string::<i64>().iter().flatten() {
                    self.text(v);
                }
            }
            _ => {}
        }
    }

    fn finish(mut self) -> ColumnProfile {
        let numeric = self.n > 0;
        let quantiles = numeric.then(|| {
            self.reservoir.sort_by(|a, b| a.total_cmp(b));
            let q = |p: f64| {
                let idx = ((self.reservoir.len() - 1) as f64 * p).round() as usize;
                self.reservoir[idx]
            };
            [
                ("p01", 0.01),
                ("p05", 0.05),
                ("p25", 0.25),
                ("p50", 0.5),
                ("p75", 0.75),
                ("p95", 0.95),
                ("p99", 0.99),
            ]
            .into_iter()
            .map(|(k, p)| (k.to_string(), q(p)))
            .collect()
        });
        let mut top: Vec<Category> = self
            .categories
            .into_iter()
            .map(|(value, count)| Category { value, count })
            .collect();
        top.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.value.cmp(&b.value)));
        top.truncate(TOP);
        ColumnProfile {
            name: self.name,
            data_type: format!("{:?}", self.data_type)
                .split('(')
                .next()
                .unwrap_or("")
                .to_string(),
            nulls: self.nulls,
            null_fraction: if self.count == 0 {
                0.0
            } else {
                self.nulls as f64 / self.count as f64
            },
            min: if numeric {
                self.min_f.map(|v| v.to_string())
            } else {
                self.min_s
            },
            max: if numeric {
                self.max_f.map(|v| v.to_string())
            } else {
                self.max_s
            },
            mean: numeric.then_some(self.mean),
            std: (self.n > 1).then(|| (self.m2 / (self.n - 1) as f64).sqrt()),
            quantiles,
            distinct_estimate: self.hll.estimate(),
            top,
            null_rows: self.null_rows,
            pii: self.pii.findings(),
        }
    }
}

fn profile_batches(
    format: TableFormat,
    schema: &Schema,
    batches: impl Iterator<Item = std::result::Result<RecordBatch, arrow_schema::ArrowError>>,
) -> Result<TableProfile> {
    let mut accs: Vec<Acc> = schema
        .fields()
        .iter()
        .map(|f| Acc::new(f.name(), f.data_type()))
        .collect();
    let mut rows = 0u64;
    for batch in batches {
        let batch = batch.map_err(|e| Error::invalid("tabular file", e.to_string()))?;
        for (acc, col) in accs.iter_mut().zip(batch.columns()) {
            acc.add(col.as_ref(), rows);
        }
        rows += batch.num_rows() as u64;
    }
    Ok(TableProfile {
        format,
        rows,
        columns: accs.into_iter().map(Acc::finish).collect(),
    })
}

/// How the profile error of a CSV file whose rows do not all have the header's number
/// of fields begins: such a file is refused at push, not stored to fail later.
pub const RAGGED: &str = "ragged CSV: ";

/// The first row of a CSV (after its header) with another number of fields than the
/// header: its line, its fields and the header's, as the message a push refuses it with.
pub fn ragged_row<R: Read>(reader: R) -> Result<Option<String>> {
    let mut csv = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(reader);
    let mut record = csv::ByteRecord::new();
    let mut header = None;
    loop {
        let more = csv
            .read_byte_record(&mut record)
            .map_err(|e| Error::invalid("CSV file", e.to_string()))?;
        if !more {
            return Ok(None);
        }
        let fields = record.len();
        // A blank line is one empty field: not a row.
        if fields == 1 && record.get(0).is_some_and(<[u8]>::is_empty) {
            continue;
        }
        match header {
            None => header = Some(fields),
            Some(h) if h != fields => {
                let line = record.position().map_or(0, csv::Position::line);
                return Ok(Some(format!(
                    "{RAGGED}line {line} has {fields} fields but the header has {h}: every row needs one field per column (quote a value that holds a comma)"
                )));
            }
            Some(_) => {}
        }
    }
}

/// Profiles a CSV file (with a header row). `open` is called three times: to check that
/// every row has the header's fields, to infer the schema from the first rows, and to
/// read every row.
pub fn profile_csv<R: Read>(mut open: impl FnMut() -> std::io::Result<R>) -> Result<TableProfile> {
    if let Some(ragged) = ragged_row(open().map_err(Error::Io)?)? {
        return Err(Error::invalid("CSV file", ragged));
    }
    let format = arrow_csv::reader::Format::default().with_header(true);
    let (schema, _) = format
        .infer_schema(open().map_err(Error::Io)?, Some(INFER_ROWS))
        .map_err(|e| Error::invalid("CSV file", e.to_string()))?;
    let schema = Arc::new(schema);
    let reader = arrow_csv::ReaderBuilder::new(schema.clone())
        .with_header(true)
        .with_batch_size(BATCH_ROWS)
        .build(open().map_err(Error::Io)?)
        .map_err(|e| Error::invalid("CSV file", e.to_string()))?;
    profile_batches(TableFormat::Csv, &schema, reader)
}

/// Profiles a Parquet file through any random-access reader.
pub fn profile_parquet<R: parquet::file::reader::ChunkReader + 'static>(
    reader: R,
) -> Result<TableProfile> {
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(reader)
        .map_err(|e| Error::invalid("Parquet file", e.to_string()))?;
    let schema = builder.schema().clone();
    let batches = builder
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| Error::invalid("Parquet file", e.to_string()))?;
    profile_batches(TableFormat::Parquet, &schema, batches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_with_no_values_is_all_nulls() {
        let p = csv("a,b\n1,\n2,\n");
        let b = p.columns.iter().find(|c| c.name == "b").expect("b");
        assert_eq!((b.nulls, b.null_fraction), (2, 1.0), "{b:?}");
        assert_eq!(b.null_rows, vec![0, 1]);
    }

    #[test]
    fn a_row_of_other_width_than_the_header_is_found_with_its_line() {
        let ragged = |t: &str| ragged_row(t.as_bytes()).expect("read");
        assert_eq!(ragged("a,b\n1,2\n\n\"x\ny\",3\n"), None);
        let said = ragged("a,b\n1,2\n\"x\ny\",3\n4,5,6\n").expect("ragged");
        assert!(
            said.starts_with(RAGGED) && said.contains("line 5 has 3 fields but the header has 2"),
            "{said}"
        );
        let said = ragged("a,b,c\n1,2\n").expect("short row");
        assert!(
            said.contains("line 2 has 2 fields but the header has 3"),
            "{said}"
        );
        let e =
            profile_csv(|| Ok(std::io::Cursor::new(b"a,b\n1,2,3\n".to_vec()))).expect_err("ragged");
        assert!(e.to_string().contains(RAGGED), "{e}");
    }

    fn csv(text: &str) -> TableProfile {
        let bytes = text.as_bytes().to_vec();
        profile_csv(|| Ok(std::io::Cursor::new(bytes.clone()))).expect("profile")
    }

    #[test]
    fn csv_schema_rows_and_stats() {
        let mut text = String::from("id,amount,label,flag\n");
        for i in 0..1000 {
            let label = if i % 10 == 0 { "fraud" } else { "ok" };
            let amount = if i == 7 {
                String::new()
            } else {
                format!("{}.5", i)
            };
            text.push_str(&format!("{i},{amount},{label},{}\n", i % 2 == 0));
        }
        let p = csv(&text);
        assert_eq!(p.rows, 1000);
        let col = |n: &str| p.columns.iter().find(|c| c.name == n).expect("column");
        assert_eq!(col("id").data_type, "Int64");
        assert_eq!(col("amount").data_type, "Float64");
        assert_eq!(col("label").data_type, "Utf8");
        assert_eq!(col("flag").data_type, "Boolean");
        assert_eq!(col("amount").nulls, 1);
        assert_eq!(col("amount").null_rows, vec![7]);
        assert_eq!(col("id").min.as_deref(), Some("0"));
        assert_eq!(col("id").max.as_deref(), Some("999"));
        assert!((col("id").mean.expect("mean") - 499.5).abs() < 1e-9);
        let q = col("id").quantiles.clone().expect("quantiles");
        assert!((q["p50"] - 500.0).abs() <= 1.0);
        let d = col("id").distinct_estimate as f64;
        assert!((d - 1000.0).abs() < 60.0, "distinct estimate {d}");
        assert_eq!(
            col("label").top[0],
            Category {
                value: "ok".into(),
                count: 900
            }
        );
        assert_eq!(col("label").distinct_estimate, 2);
    }

    #[test]
    fn declared_schema_reports_what_is_wrong() {
        let p = csv("id,amount,extra\n1,2.5,x\n2,,y\n");
        let schema = DatasetSchema {
            columns: vec![
                ColumnSpec {
                    name: "id".into(),
                    data_type: "Int64".into(),
                    nullable: false,
                    pii: false,
                },
                ColumnSpec {
                    name: "amount".into(),
                    data_type: "Float64".into(),
                    nullable: false,
                    pii: false,
                },
                ColumnSpec {
                    name: "customer".into(),
                    data_type: "Utf8".into(),
                    nullable: true,
                    pii: true,
                },
            ],
        };
        schema.validate().expect("valid schema");
        let v = schema.check("t.csv", &p);
        let problems: Vec<(&str, &str)> = v
            .iter()
            .map(|x| (x.column.as_str(), x.problem.as_str()))
            .collect();
        assert!(
            problems
                .iter()
                .any(|(c, p)| *c == "amount" && p.contains("null")),
            "{problems:?}"
        );
        assert!(v
            .iter()
            .any(|x| x.column == "amount" && x.examples == vec!["row 1".to_string()]));
        assert!(problems
            .iter()
            .any(|(c, p)| *c == "customer" && p.contains("missing")));
        assert!(problems
            .iter()
            .any(|(c, p)| *c == "extra" && p.contains("not in the declared schema")));
        assert!(!problems.iter().any(|(c, _)| *c == "id"));

        let strict = DatasetSchema {
            columns: vec![ColumnSpec {
                name: "id".into(),
                data_type: "Boolean".into(),
                nullable: true,
                pii: false,
            }],
        };
        let p = csv("id\n1\n2\n");
        assert!(strict
            .check("t.csv", &p)
            .iter()
            .any(|x| x.problem.contains("Int64")));
    }

    #[test]
    fn bad_schemas_are_refused() {
        let bad = DatasetSchema {
            columns: vec![ColumnSpec {
                name: "x".into(),
                data_type: "Decimal".into(),
                nullable: true,
                pii: false,
            }],
        };
        assert!(bad.validate().is_err());
        assert!(DatasetSchema { columns: vec![] }.validate().is_err());
    }
}
