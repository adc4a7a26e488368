//! Finding and removing one data subject's rows in a table (see
//! [`crate::Datasets::erase`]).
//!
//! A CSV file is scanned once for the byte ranges of the rows that match, and the copy
//! without them is every other byte as it was: unchanged rows keep their bytes, so the
//! new version shares all chunks but those around the erased rows. A Parquet file is
//! rewritten from its record batches (its bytes are compressed pages; which chunk holds
//! which row is not known, so every chunk of an affected Parquet file is erased).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::ops::Range;

use arrow_array::{Array, BooleanArray, StringArray};
use arrow_schema::DataType;

use crate::{ErasureMatch, Error, Result};

/// The values to erase, by column name.
#[derive(Debug, Clone, Default)]
pub struct Subject {
    by_column: BTreeMap<String, BTreeSet<Vec<u8>>>,
}

impl Subject {
    pub fn new(matches: &[ErasureMatch]) -> Self {
        let mut by_column: BTreeMap<String, BTreeSet<Vec<u8>>> = BTreeMap::new();
        for m in matches {
            by_column
                .entry(m.column.clone())
                .or_default()
                .extend(m.values.iter().map(|v| v.trim().as_bytes().to_vec()));
        }
        Subject { by_column }
    }

    pub fn columns(&self) -> Vec<String> {
        self.by_column.keys().cloned().collect()
    }

    fn values(&self, column: &[u8]) -> Option<&BTreeSet<Vec<u8>>> {
        let name = std::str::from_utf8(column).ok()?;
        let name = name.strip_prefix('\u{feff}').unwrap_or(name);
        self.by_column.get(name)
    }
}

/// What a scan found in one table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// The request's columns the table has.
    pub columns: Vec<String>,
    /// Rows that matched.
    pub rows: u64,
    /// Byte ranges of the matching rows (CSV); `None` when only the whole file can be
    /// said to hold them (Parquet).
    pub ranges: Option<Vec<Range<u64>>>,
}

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Io(std::io::Error::other(format!(
        "erasing from a {what} file: {e}"
    )))
}

/// Scans a CSV file (first row: the header) for rows whose field in a request's column
/// is one of its values (trimmed).
pub fn scan_csv<R: Read>(input: R, subject: &Subject) -> Result<Found> {
    let mut reader = ::csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(input);
    let mut record = ::csv::ByteRecord::new();
    if !reader
        .read_byte_record(&mut record)
        .map_err(|e| failed("CSV", e))?
    {
        return Ok(Found::default());
    }
    let watch: Vec<(usize, &BTreeSet<Vec<u8>>)> = record
        .iter()
        .enumerate()
        .filter_map(|(i, h)| subject.values(h).map(|v| (i, v)))
        .collect();
    let columns: Vec<String> = watch
        .iter()
        .map(|(i, _)| {
            let h = String::from_utf8_lossy(&record[*i]).into_owned();
            h.strip_prefix('\u{feff}').map(str::to_string).unwrap_or(h)
        })
        .collect();
    if watch.is_empty() {
        return Ok(Found::default());
    }
    let mut ranges: Vec<Range<u64>> = Vec::new();
    let mut open: Option<u64> = None;
    let mut rows = 0;
    loop {
        let more = reader
            .read_byte_record(&mut record)
            .map_err(|e| failed("CSV", e))?;
        // A row spans from where the reader started it to the next row's start: its
        // line ending, and any blank lines before it, go with it.
        let start = if more {
            record.position().map(|p| p.byte())
        } else {
            Some(reader.position().byte())
        };
        if let (Some(from), Some(to)) = (open.take(), start) {
            ranges.push(from..to);
        }
        if !more {
            break;
        }
        let hit = watch.iter().any(|(i, values)| {
            record
                .get(*i)
                .is_some_and(|f| values.contains(f.trim_ascii()))
        });
        if hit {
            rows += 1;
            open = start;
        }
    }
    // Adjacent rows make one range.
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => merged.push(r),
        }
    }
    Ok(Found {
        columns,
        rows,
        ranges: Some(merged),
    })
}

/// Copies `input` without the bytes in `ranges` (sorted, disjoint), as
/// [`scan_csv`] found them.
pub fn copy_without<R: Read, W: Write>(
    mut input: R,
    mut output: W,
    ranges: &[Range<u64>],
) -> Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let (mut at, mut written) = (0u64, 0u64);
    let mut next = ranges.iter().peekable();
    loop {
        let n = input.read(&mut buf).map_err(Error::Io)?;
        if n == 0 {
            break;
        }
        let end = at + n as u64;
        let mut from = at;
        while from < end {
            // Skip a range that covers `from`, else copy up to the next range.
            while next.peek().is_some_and(|r| r.end <= from) {
                next.next();
            }
            match next.peek() {
                Some(r) if r.start <= from => from = r.end.min(end),
                Some(r) => {
                    let to = r.start.min(end);
                    output
                        .write_all(&buf[(from - at) as usize..(to - at) as usize])
                        .map_err(Error::Io)?;
                    written += to - from;
                    from = to;
                }
                None => {
                    output
                        .write_all(&buf[(from - at) as usize..n])
                        .map_err(Error::Io)?;
                    written += end - from;
                    from = end;
                }
            }
        }
        at = end;
    }
    output.flush().map_err(Error::Io)?;
    Ok(written)
}

/// Scans a Parquet file, and writes it without the matching rows to `output` when one
/// is given (same schema, same column types).
pub fn parquet<R: parquet::file::reader::ChunkReader + 'static, W: Write + Send>(
    input: R,
    output: Option<W>,
    subject: &Subject,
) -> Result<Found> {
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(input)
        .map_err(|e| failed("Parquet", e))?
        .with_batch_size(8192);
    let schema = builder.schema().clone();
    let watch: Vec<(usize, &BTreeSet<Vec<u8>>)> = schema
        .fields()
        .iter()
        .enumerate()
        .filter_map(|(i, f)| subject.values(f.name().as_bytes()).map(|v| (i, v)))
        .collect();
    let columns: Vec<String> = watch
        .iter()
        .map(|(i, _)| schema.field(*i).name().clone())
        .collect();
    if watch.is_empty() {
        return Ok(Found::default());
    }
    // The copy is compressed as the original was (its first column chunk says how).
    let props = builder
        .metadata()
        .row_groups()
        .first()
        .and_then(|rg| rg.columns().first())
        .map(|c| {
            parquet::file::properties::WriterProperties::builder()
                .set_compression(c.compression())
                .build()
        });
    let reader = builder.build().map_err(|e| failed("Parquet", e))?;
    let mut writer = match output {
        Some(w) => Some(
            parquet::arrow::ArrowWriter::try_new(w, schema.clone(), props)
                .map_err(|e| failed("Parquet", e))?,
        ),
        None => None,
    };
    let mut rows = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| failed("Parquet", e))?;
        let mut hit = vec![false; batch.num_rows()];
        for (i, values) in &watch {
            let text = arrow_cast::cast(batch.column(*i), &DataType::Utf8).map_err(|e| {
                failed(
                    "Parquet",
                    format!("column {}: {e}", schema.field(*i).name()),
                )
            })?;
            let text = text
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| failed("Parquet", "a column cast to text is not text"))?;
            for (row, v) in text.iter().enumerate() {
                if v.is_some_and(|v| values.contains(v.trim().as_bytes())) {
                    hit[row] = true;
                }
            }
        }
        rows += hit.iter().filter(|h| **h).count() as u64;
        if let Some(w) = writer.as_mut() {
            let keep: BooleanArray = hit.iter().map(|h| Some(!h)).collect();
            let kept = arrow_select::filter::filter_record_batch(&batch, &keep)
                .map_err(|e| failed("Parquet", e))?;
            if kept.num_rows() > 0 {
                w.write(&kept).map_err(|e| failed("Parquet", e))?;
            }
        }
    }
    if let Some(w) = writer {
        w.close().map_err(|e| failed("Parquet", e))?;
    }
    Ok(Found {
        columns,
        rows,
        ranges: None,
    })
}

/// The indexes of the chunks (of sizes `sizes`, in order) that overlap `ranges`; all
/// of them when `ranges` is `None`.
pub fn chunks_touched(sizes: &[u64], ranges: Option<&[Range<u64>]>) -> Vec<usize> {
    let Some(ranges) = ranges else {
        return (0..sizes.len()).collect();
    };
    let mut out = Vec::new();
    let mut start = 0u64;
    for (i, size) in sizes.iter().enumerate() {
        let end = start + size;
        if ranges.iter().any(|r| r.start < end && start < r.end) {
            out.push(i);
        }
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn subject(column: &str, values: &[&str]) -> Subject {
        Subject::new(&[ErasureMatch {
            column: column.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        }])
    }

    #[test]
    fn a_csv_loses_exactly_the_matching_rows_and_keeps_every_other_byte() {
        let input = "id,email,note\r\n1,a@x.ae,\"multi\nline\"\r\n2,b@x.ae,y\r\n\r\n3, a@x.ae ,z\r\n4,c@x.ae,w";
        let s = subject("email", &["a@x.ae"]);
        let found = scan_csv(input.as_bytes(), &s).expect("scans");
        assert_eq!(found.columns, vec!["email".to_string()]);
        assert_eq!(found.rows, 2, "a value with spaces around it matches too");
        let ranges = found.ranges.expect("ranges");
        let mut out = Vec::new();
        copy_without(input.as_bytes(), &mut out, &ranges).expect("copies");
        let text = String::from_utf8(out).expect("utf8");
        // A blank line before an erased row goes with it.
        assert_eq!(text, "id,email,note\r\n2,b@x.ae,y\r\n4,c@x.ae,w");
        // The last row, without a line ending, goes too (a CRLF row ends at its CR for
        // the reader: the file then ends "\r", which readers take as a line end).
        let s = subject("email", &["c@x.ae"]);
        let found = scan_csv(input.as_bytes(), &s).expect("scans");
        let mut out = Vec::new();
        copy_without(input.as_bytes(), &mut out, &found.ranges.expect("ranges")).expect("copies");
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            "id,email,note\r\n1,a@x.ae,\"multi\nline\"\r\n2,b@x.ae,y\r\n\r\n3, a@x.ae ,z\r"
        );
    }

    #[test]
    fn a_table_without_the_column_or_the_value_is_not_touched() {
        let input = "id,phone\n1,0501234567\n";
        let none = scan_csv(input.as_bytes(), &subject("email", &["a@x.ae"])).expect("scans");
        assert_eq!(none, Found::default());
        let miss = scan_csv(input.as_bytes(), &subject("phone", &["0500000000"])).expect("scans");
        assert_eq!(miss.rows, 0);
        assert_eq!(miss.ranges, Some(vec![]));
        assert_eq!(chunks_touched(&[10, 10], Some(&[])), Vec::<usize>::new());
    }

    #[test]
    fn chunks_overlapping_a_range_are_the_ones_touched() {
        let sizes = [100, 100, 100, 100];
        let one = |r: Range<u64>| chunks_touched(&sizes, Some(std::slice::from_ref(&r)));
        assert_eq!(one(150..160), vec![1]);
        assert_eq!(one(190..210), vec![1, 2]);
        assert_eq!(one(100..200), vec![1]);
        assert_eq!(chunks_touched(&sizes, None), vec![0, 1, 2, 3]);
        // Copy across buffer edges: a range that spans reads.
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut out = Vec::new();
        copy_without(
            &data[..],
            &mut out,
            &[5..10, 1_048_570..1_048_600, 2_999_990..3_000_000],
        )
        .expect("copies");
        let mut want = data.clone();
        want.truncate(2_999_990);
        want.drain(1_048_570..1_048_600);
        want.drain(5..10);
        assert_eq!(out, want);
    }

    #[test]
    fn a_parquet_file_is_rewritten_without_the_rows_in_its_own_types() {
        use arrow_array::{Int64Array, RecordBatch};
        use arrow_schema::{Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("customer_id", DataType::Int64, false),
            Field::new("spend", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![7, 8, 7, 9])),
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3), Some(4)])),
            ],
        )
        .expect("batch");
        let mut file = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut file, schema, None).expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
        let s = subject("customer_id", &["7"]);
        let counted =
            parquet::<_, Vec<u8>>(bytes::Bytes::from(file.clone()), None, &s).expect("scans");
        assert_eq!(counted.rows, 2);
        assert_eq!(counted.ranges, None);
        let mut out = Vec::new();
        parquet(bytes::Bytes::from(file), Some(&mut out), &s).expect("rewrites");
        let back: Vec<RecordBatch> =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                bytes::Bytes::from(out),
            )
            .expect("reads")
            .build()
            .expect("reader")
            .collect::<std::result::Result<_, _>>()
            .expect("batches");
        let ids = back[0]
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("still integers");
        assert_eq!(ids.values(), &[8, 9]);
        assert!(back[0].column(1).is_null(0));
    }
}
