//! Personal data kept from readers without the project's PII permission: a table's
//! personal-data columns rewritten as keyed pseudonyms.
//!
//! A pseudonym is `pii:` and the first 32 hex digits of an HMAC of the value's text
//! under the project's key (the same as feature pseudonyms: a customer id hidden in a
//! dataset and in a training set is the same pseudonym, so they still join and group,
//! but the value cannot be read back without the key). Empty and null values stay
//! empty. A column whose values have no text form (a struct, a list) is masked: all
//! null.
//!
//! Both formats are rewritten as they are read, a block of rows at a time: memory
//! stays bounded whatever the file's size.

use std::io::{Read, Write};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use crate::{Error, Result};

/// What the project's pseudonyms are keyed for: the same purpose as feature
/// pseudonyms, so both agree.
pub fn purpose(project_id: &qanat_core::ProjectId) -> String {
    format!("features.pii.{project_id}")
}

/// The keyed MAC of a value, in hex.
pub type Mac<'a> = &'a (dyn Fn(&[u8]) -> String + Sync);

/// The pseudonym of a value.
pub fn pseudonym(mac: Mac<'_>, value: &[u8]) -> String {
    let hex = mac(value);
    format!("pii:{}", &hex[..hex.len().min(32)])
}

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Io(std::io::Error::other(format!(
        "pseudonymizing a {what} file: {e}"
    )))
}

/// Copies a CSV file with the fields of `columns` (by header name) pseudonymized;
/// returns the columns it found. Quoting is rewritten as needed; every other field
/// keeps its bytes.
pub fn csv<R: Read, W: Write>(
    input: R,
    output: W,
    columns: &[String],
    mac: Mac<'_>,
) -> Result<Vec<String>> {
    let mut reader = ::csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(input);
    let mut writer = ::csv::WriterBuilder::new()
        .flexible(true)
        .from_writer(output);
    let mut record = ::csv::ByteRecord::new();
    if !reader
        .read_byte_record(&mut record)
        .map_err(|e| failed("CSV", e))?
    {
        return Ok(Vec::new());
    }
    let hide: Vec<usize> = record
        .iter()
        .enumerate()
        .filter(|(_, h)| columns.iter().any(|c| c.as_bytes() == *h))
        .map(|(i, _)| i)
        .collect();
    let found: Vec<String> = hide
        .iter()
        .map(|i| String::from_utf8_lossy(&record[*i]).into_owned())
        .collect();
    writer
        .write_byte_record(&record)
        .map_err(|e| failed("CSV", e))?;
    let mut out = ::csv::ByteRecord::new();
    while reader
        .read_byte_record(&mut record)
        .map_err(|e| failed("CSV", e))?
    {
        out.clear();
        for (i, field) in record.iter().enumerate() {
            if hide.contains(&i) && !field.is_empty() {
                out.push_field(pseudonym(mac, field).as_bytes());
            } else {
                out.push_field(field);
            }
        }
        writer
            .write_byte_record(&out)
            .map_err(|e| failed("CSV", e))?;
    }
    writer.flush().map_err(|e| failed("CSV", e))?;
    Ok(found)
}

/// Copies a Parquet file with `columns` pseudonymized (as text); returns the columns
/// it found.
pub fn parquet<R: parquet::file::reader::ChunkReader + 'static, W: Write + Send>(
    input: R,
    output: W,
    columns: &[String],
    mac: Mac<'_>,
) -> Result<Vec<String>> {
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(input)
        .map_err(|e| failed("Parquet", e))?
        .with_batch_size(8192);
    let schema = builder.schema().clone();
    let hide: Vec<usize> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| columns.iter().any(|c| c == f.name()))
        .map(|(i, _)| i)
        .collect();
    let found: Vec<String> = hide
        .iter()
        .map(|i| schema.field(*i).name().clone())
        .collect();
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if hide.contains(&i) {
                Field::new(f.name(), DataType::Utf8, true)
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    let out_schema = Arc::new(Schema::new(fields));
    let reader = builder.build().map_err(|e| failed("Parquet", e))?;
    let mut writer = parquet::arrow::ArrowWriter::try_new(output, out_schema.clone(), None)
        .map_err(|e| failed("Parquet", e))?;
    for batch in reader {
        let batch = batch.map_err(|e| failed("Parquet", e))?;
        let mut cols: Vec<ArrayRef> = batch.columns().to_vec();
        for &i in &hide {
            cols[i] = hidden(cols[i].as_ref(), mac);
        }
        let batch =
            RecordBatch::try_new(out_schema.clone(), cols).map_err(|e| failed("Parquet", e))?;
        writer.write(&batch).map_err(|e| failed("Parquet", e))?;
    }
    writer.close().map_err(|e| failed("Parquet", e))?;
    Ok(found)
}

/// A column's pseudonyms (nulls and empty text stay as they are), or all nulls when
/// its values have no text form.
fn hidden(col: &dyn Array, mac: Mac<'_>) -> ArrayRef {
    match arrow_cast::cast(col, &DataType::Utf8) {
        Ok(text) => {
            let text = text.as_any().downcast_ref::<StringArray>();
            match text {
                Some(t) => Arc::new(
                    t.iter()
                        .map(|v| match v {
                            Some("") => Some(String::new()),
                            Some(v) => Some(pseudonym(mac, v.as_bytes())),
                            None => None,
                        })
                        .collect::<StringArray>(),
                ),
                None => Arc::new(StringArray::new_null(col.len())),
            }
        }
        Err(_) => Arc::new(StringArray::new_null(col.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(v: &[u8]) -> String {
        blake3::keyed_hash(&[7; 32], v).to_hex().to_string()
    }

    #[test]
    fn a_csv_column_becomes_consistent_pseudonyms_and_the_rest_is_kept() {
        let input = "id,email,note\n1,a@x.ae,\"hi, there\"\n2,,x\n3,a@x.ae,y\n";
        let mut out = Vec::new();
        let found = csv(input.as_bytes(), &mut out, &["email".into()], &mac).expect("rewrites");
        assert_eq!(found, vec!["email".to_string()]);
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "id,email,note");
        assert!(!text.contains("a@x.ae"), "{text}");
        let p1 = lines[1].split(',').nth(1).expect("field");
        let p3 = lines[3].split(',').nth(1).expect("field");
        assert!(p1.starts_with("pii:") && p1.len() == 36, "{p1}");
        assert_eq!(p1, p3, "the same value, the same pseudonym");
        assert_eq!(lines[2], "2,,x", "an empty value stays empty");
        assert!(lines[1].ends_with("\"hi, there\""), "{}", lines[1]);
    }

    #[test]
    fn a_parquet_column_becomes_pseudonyms_as_text_and_nulls_stay_null() {
        use arrow_array::Int64Array;
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("card", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(Int64Array::from(vec![
                    Some(4_111_111_111_111_111),
                    None,
                    Some(4_111_111_111_111_111),
                ])),
            ],
        )
        .expect("batch");
        let mut file = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut file, schema, None).expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
        let mut out = Vec::new();
        let found =
            parquet(bytes::Bytes::from(file), &mut out, &["card".into()], &mac).expect("rewrites");
        assert_eq!(found, vec!["card".to_string()]);
        let back: Vec<RecordBatch> =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                bytes::Bytes::from(out),
            )
            .expect("reads")
            .build()
            .expect("reader")
            .collect::<std::result::Result<_, _>>()
            .expect("batches");
        let cards = back[0]
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("text");
        assert!(cards.value(0).starts_with("pii:"));
        assert!(cards.is_null(1));
        assert_eq!(cards.value(0), cards.value(2));
        assert_eq!(
            cards.value(0),
            pseudonym(&mac, b"4111111111111111"),
            "numbers are pseudonymized from their text"
        );
        let ids = back[0]
            .column(0)
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .expect("ids kept");
        assert_eq!(ids.values(), &[1, 2, 3]);
    }
}
