//! The offline store for rows that arrive rather than sit in files: rows pushed with
//! `to: offline | online_and_offline` and rows streamed from NATS are appended as
//! Parquet files in the project's (encrypted) storage, one folder per source and event
//! date:
//!
//! ```text
//! projects/<project id>/features/offline/<source>/date=2026-01-31/<blake3>.parquet
//! ```
//!
//! A file is named by the hash of its bytes, so a batch delivered twice (a stream
//! consumer that crashed before acknowledging) lands on the same file instead of a
//! second copy. Training sets read these folders as the source's rows; a row delivered
//! twice in different batches is a duplicate the point-in-time join tolerates (the same
//! event and created time give the same answer).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{Field, Schema};
use bytes::Bytes;
use qanat_governance::{check_residency, Project};
use qanat_store::ObjectKey;
use serde_json::Value;

use crate::definitions::{SourceDef, ValueType};
use crate::error::{Error, Result};
use crate::staging::Staged;
use crate::training_set::arrow_type;
use crate::values::json_column;
use crate::Features;

/// One accepted row, as the offline store keeps it: every column the source's views
/// declare (keys and features, checked), and its times.
pub(crate) struct OfflineRow {
    pub(crate) event_ts: i64,
    pub(crate) created_ts: Option<i64>,
    pub(crate) values: BTreeMap<String, Value>,
}

impl Features {
    fn offline_prefix(project: &Project, source: &str) -> String {
        format!("projects/{}/features/offline/{source}", project.id)
    }

    /// Appends rows to a source's offline store, one Parquet file per event date.
    /// `columns`: the source's columns (join keys and features) and their types.
    /// Returns the files written.
    pub(crate) async fn append_offline(
        &self,
        project: &Project,
        source: &SourceDef,
        columns: &[(String, ValueType)],
        rows: Vec<OfflineRow>,
    ) -> Result<u64> {
        let location = self.storage.default_location().to_string();
        check_residency(project, &self.storage.location(&location)?)?;
        let mut by_date: BTreeMap<String, Vec<OfflineRow>> = BTreeMap::new();
        for r in rows {
            let date = chrono::DateTime::from_timestamp_micros(r.event_ts)
                .map(|t| t.format("%Y-%m-%d").to_string())
                .unwrap_or_else(|| "1970-01-01".into());
            by_date.entry(date).or_default().push(r);
        }
        let source_def = source.clone();
        let columns = columns.to_vec();
        let files = tokio::task::spawn_blocking(move || -> Result<Vec<(String, Bytes)>> {
            by_date
                .into_iter()
                .map(|(date, rows)| Ok((date, offline_file(&source_def, &columns, &rows)?)))
                .collect()
        })
        .await
        .map_err(|e| Error::Corrupt(format!("writing offline rows stopped: {e}")))??;
        let prefix = Self::offline_prefix(project, source.name.as_str());
        let mut items = Vec::with_capacity(files.len());
        for (date, bytes) in files {
            let name = blake3::hash(&bytes).to_hex();
            let key: ObjectKey = format!("{prefix}/date={date}/{}.parquet", &name[..32])
                .parse()
                .map_err(|e| Error::Corrupt(format!("offline key: {e}")))?;
            items.push((key, bytes));
        }
        self.storage.put_many(&location, &items).await?;
        Ok(items.len() as u64)
    }

    /// A source's offline store, staged (files written by older view versions lack
    /// newer columns: they read as null there).
    pub(crate) async fn stage_offline(
        &self,
        project: &Project,
        source: &SourceDef,
    ) -> Result<Staged> {
        let location = self.storage.default_location().to_string();
        let prefix: ObjectKey = Self::offline_prefix(project, source.name.as_str())
            .parse()
            .map_err(|e| Error::Corrupt(format!("offline key: {e}")))?;
        let mut staged = Staged::new()?;
        for o in self.storage.list(&location, Some(&prefix)).await? {
            if !o.key.ends_with(".parquet") {
                continue;
            }
            let k: ObjectKey = o.key.parse().map_err(|e| Error::Corrupt(format!("{e}")))?;
            let bytes = self.storage.get(&location, &k).await?;
            staged.add(&o.key, true, bytes).await?;
        }
        if staged.files.is_empty() {
            return Err(Error::invalid(format!(
                "source {} has no offline rows yet: rows reach the offline store when pushed with \"to\": \"offline\" or \"online_and_offline\", or streamed",
                source.name
            )));
        }
        Ok(staged)
    }
}

/// One Parquet file of rows: the declared columns, then the source's timestamps.
fn offline_file(
    source: &SourceDef,
    columns: &[(String, ValueType)],
    rows: &[OfflineRow],
) -> Result<Bytes> {
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    for (name, t) in columns {
        let values: Vec<Value> = rows
            .iter()
            .map(|r| r.values.get(name).cloned().unwrap_or(Value::Null))
            .collect();
        let array =
            json_column(&values, *t).map_err(|e| Error::Corrupt(format!("column {name}: {e}")))?;
        fields.push(Field::new(name, arrow_type(*t), true));
        arrays.push(array);
    }
    let times = |pick: &dyn Fn(&OfflineRow) -> Option<i64>| -> ArrayRef {
        Arc::new(
            rows.iter()
                .map(pick)
                .collect::<arrow_array::TimestampMicrosecondArray>()
                .with_timezone("UTC"),
        )
    };
    fields.push(Field::new(
        &source.timestamp_field,
        arrow_type(ValueType::Timestamp),
        false,
    ));
    arrays.push(times(&|r| Some(r.event_ts)));
    if let Some(c) = &source.created_timestamp_field {
        fields.push(Field::new(c, arrow_type(ValueType::Timestamp), true));
        arrays.push(times(&|r| r.created_ts));
    }
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
        .map_err(|e| Error::Corrupt(format!("offline rows: {e}")))?;
    crate::training_set::write_parquet(&batch).map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;

    fn source() -> SourceDef {
        serde_json::from_value(serde_json::json!({
            "name": "rides", "type": "push", "timestamp_field": "ts"
        }))
        .expect("source")
    }

    #[tokio::test]
    async fn files_with_other_columns_read_back_as_one_table_with_nulls() {
        let row = |ts: i64, pairs: &[(&str, Value)]| OfflineRow {
            event_ts: ts,
            created_ts: None,
            values: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        };
        let old = offline_file(
            &source(),
            &[("driver_id".into(), ValueType::Int64)],
            &[row(1, &[("driver_id", Value::from(7))])],
        )
        .expect("old file");
        let new = offline_file(
            &source(),
            &[
                ("driver_id".into(), ValueType::Int64),
                ("speed".into(), ValueType::Float64),
            ],
            &[row(
                2,
                &[("driver_id", Value::from(8)), ("speed", Value::from(3.5))],
            )],
        )
        .expect("new file");
        let mut staged = Staged::new().expect("staged");
        for (i, bytes) in [old, new].into_iter().enumerate() {
            let chunks = futures::stream::iter(vec![Ok::<_, Error>(bytes)]);
            staged
                .add(&format!("{i}.parquet"), true, chunks)
                .await
                .expect("add");
        }
        let t = staged.read_all().expect("union");
        assert_eq!(t.num_rows(), 2);
        let speed = t.column_by_name("speed").expect("speed");
        assert!(speed.is_null(0));
        assert!(!speed.is_null(1));
        assert!(t.column_by_name("ts").is_some());
    }
}
