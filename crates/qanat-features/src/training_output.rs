//! Writing a training set: the point-in-time join of staged entity rows with each
//! view's rows, streamed to a Parquet file — in memory when the inputs fit the join's
//! memory budget, partitioned on disk when they do not.
//!
//! The partitioned join keeps the rule of [`crate::point_in_time`] exactly: a feature
//! row can only be picked by entity rows with the same key, so both sides are split by
//! a hash of the (type-normalized) key into partitions that each fit in memory, and
//! each partition is joined by the same engine. Every entity row carries its position
//! (`__row`); each partition's results go to buckets of consecutive positions, so the
//! last pass reads the entity rows once more in order, and for each bucket the view
//! results sorted back by position — the output has the entity rows' order and memory
//! stays at one partition or one bucket at a time.

use std::collections::BTreeMap;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::error::{Error, Result};
use crate::point_in_time::{entity_time, join, key_family, ViewSide};
use crate::sources::Rows;
use crate::staging::Staged;
use crate::training_set::{typed, ViewPart};

/// The position column the partitioned join carries.
const ROW: &str = "__row";

/// What the caller sees: PII features to hide, and how.
pub(crate) struct Pseudonyms<'a> {
    pub(crate) hide: Vec<String>,
    pub(crate) mac: &'a (dyn Fn(&[u8]) -> String + Sync),
}

/// The written training set's shape.
pub(crate) struct Written {
    pub(crate) rows: u64,
    pub(crate) columns: Vec<String>,
}

/// Joins and writes the training set to `out`. `budget`: bytes the join may hold.
/// Blocking: call it off the async runtime.
pub(crate) fn write(
    entities: &Staged,
    timestamp: &str,
    views: &[(ViewPart, Rows)],
    budget: u64,
    pii: &Pseudonyms<'_>,
    out: &Path,
) -> Result<Written> {
    let estimate = entities.estimated_bytes()?
        + views
            .iter()
            .map(|(_, r)| r.estimated_bytes())
            .sum::<Result<u64>>()?;
    // The in-memory join holds the inputs, their typed copies and the output: about
    // twice the inputs.
    let mut sink = Sink::new(out)?;
    if estimate.saturating_mul(2) <= budget {
        let entity = entities.read_all()?;
        check_entity_keys(&entity, views)?;
        let typed_views: Vec<RecordBatch> = views
            .iter()
            .map(|(p, r)| typed(&r.read_all()?, p))
            .collect::<Result<_>>()?;
        let joined = join_views(&entity, timestamp, views, &typed_views)?;
        sink.write(joined, pii)?;
    } else {
        // At most 256 partitions: each (view, partition) is an open spill file while the
        // inputs are split.
        let partitions = estimate
            .saturating_mul(2)
            .div_ceil(budget.max(1))
            .clamp(2, 256);
        tracing::info!(
            estimate,
            budget,
            partitions,
            "training set: inputs over the join's memory budget, joined in partitions on disk"
        );
        partitioned(
            entities,
            timestamp,
            views,
            budget,
            partitions as usize,
            pii,
            &mut sink,
        )?;
    }
    sink.finish()
}

fn check_entity_keys(entity: &RecordBatch, views: &[(ViewPart, Rows)]) -> Result<()> {
    for (p, _) in views {
        for k in &p.keys {
            if entity.column_by_name(k).is_none() {
                return Err(Error::invalid(format!(
                    "the entity rows have no column '{k}', a join key of feature view {}",
                    p.name
                )));
            }
        }
    }
    Ok(())
}

fn side<'a>(p: &ViewPart, rows: &'a RecordBatch) -> ViewSide<'a> {
    ViewSide {
        rows,
        keys: p.keys.clone(),
        event_timestamp: p.source.timestamp_field.clone(),
        created_timestamp: p.source.created_timestamp_field.clone(),
        features: p
            .features
            .iter()
            .map(|(f, n, _)| (f.clone(), n.clone()))
            .collect(),
        ttl: p.def.ttl,
    }
}

fn join_views(
    entity: &RecordBatch,
    timestamp: &str,
    views: &[(ViewPart, Rows)],
    typed_views: &[RecordBatch],
) -> Result<RecordBatch> {
    let sides: Vec<ViewSide<'_>> = views
        .iter()
        .zip(typed_views)
        .map(|((p, _), rows)| side(p, rows))
        .collect();
    let keys: Vec<Vec<String>> = views.iter().map(|(p, _)| p.keys.clone()).collect();
    join(entity, timestamp, &keys, &sides)
}

/// The Parquet file the training set goes to, a batch at a time, with PII hidden.
struct Sink {
    writer: Option<parquet::arrow::ArrowWriter<File>>,
    file: Option<File>,
    rows: u64,
    columns: Vec<String>,
}

impl Sink {
    fn new(out: &Path) -> Result<Sink> {
        let file =
            File::create(out).map_err(|e| Error::Corrupt(format!("the training set file: {e}")))?;
        Ok(Sink {
            writer: None,
            file: Some(file),
            rows: 0,
            columns: Vec::new(),
        })
    }

    fn write(&mut self, mut batch: RecordBatch, pii: &Pseudonyms<'_>) -> Result<()> {
        for name in &pii.hide {
            batch = crate::training_set::pseudonymize(&batch, name, pii.mac)?;
        }
        let bad =
            |e: &dyn std::fmt::Display| Error::Corrupt(format!("writing the training set: {e}"));
        if self.writer.is_none() {
            let props = parquet::file::properties::WriterProperties::builder()
                .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
                .build();
            let file = self.file.take().ok_or_else(|| bad(&"no file"))?;
            self.writer = Some(
                parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props))
                    .map_err(|e| bad(&e))?,
            );
            self.columns = batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
        }
        if let Some(w) = &mut self.writer {
            w.write(&batch).map_err(|e| bad(&e))?;
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    fn finish(self) -> Result<Written> {
        let Some(w) = self.writer else {
            return Err(Error::invalid(
                "the entity rows are empty: a training set needs at least one",
            ));
        };
        w.close()
            .map_err(|e| Error::Corrupt(format!("writing the training set: {e}")))?;
        Ok(Written {
            rows: self.rows,
            columns: self.columns,
        })
    }
}

/// Key columns in one comparable type each (integers as int64, text as utf8), as the
/// join compares them, so equal keys hash alike on both sides.
fn normalized(batch: &RecordBatch, keys: &[String], side: &str) -> Result<Vec<ArrayRef>> {
    keys.iter()
        .map(|k| {
            let c = batch
                .column_by_name(k)
                .ok_or_else(|| Error::invalid(format!("{side} have no column '{k}'")))?;
            let to = key_family(c.data_type()).unwrap_or_else(|| c.data_type().clone());
            arrow_cast::cast(c.as_ref(), &to)
                .map_err(|e| Error::invalid(format!("join key {k}: {e}")))
        })
        .collect()
}

/// Each row's partition: a hash of its key; rows with a null key go to partition 0
/// (they match nothing there either).
fn partition_of(batch: &RecordBatch, keys: &[String], side: &str, n: usize) -> Result<Vec<u32>> {
    let cols = normalized(batch, keys, side)?;
    let converter = arrow_row::RowConverter::new(
        cols.iter()
            .map(|c| arrow_row::SortField::new(c.data_type().clone()))
            .collect(),
    )
    .map_err(|e| Error::invalid(format!("join keys: {e}")))?;
    let rows = converter
        .convert_columns(&cols)
        .map_err(|e| Error::invalid(format!("join keys: {e}")))?;
    Ok((0..batch.num_rows())
        .map(|i| {
            if cols.iter().any(|c| c.is_null(i)) {
                return 0;
            }
            let mut h = std::hash::DefaultHasher::new();
            rows.row(i).as_ref().hash(&mut h);
            (h.finish() % n as u64) as u32
        })
        .collect())
}

/// Spill files: one Arrow IPC file per (group, part), opened on first write.
struct Spill {
    dir: PathBuf,
    name: &'static str,
    writers: BTreeMap<(usize, usize), FileWriter<File>>,
}

impl Spill {
    fn new(dir: &Path, name: &'static str) -> Spill {
        Spill {
            dir: dir.to_path_buf(),
            name,
            writers: BTreeMap::new(),
        }
    }

    fn path(&self, group: usize, part: usize) -> PathBuf {
        self.dir.join(format!("{}-{group}-{part}.arrow", self.name))
    }

    /// Writes the rows of `batch` whose `of[i] == part`, for every part.
    fn scatter(&mut self, group: usize, batch: &RecordBatch, of: &[u32]) -> Result<()> {
        let mut by: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (i, p) in of.iter().enumerate() {
            by.entry(*p).or_default().push(i as u32);
        }
        for (part, idx) in by {
            let idx = UInt32Array::from(idx);
            let cols: Vec<ArrayRef> = batch
                .columns()
                .iter()
                .map(|c| arrow_select::take::take(c.as_ref(), &idx, None))
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| Error::Corrupt(format!("spilling: {e}")))?;
            let piece = RecordBatch::try_new(batch.schema(), cols)
                .map_err(|e| Error::Corrupt(format!("spilling: {e}")))?;
            self.write(group, part as usize, &piece)?;
        }
        Ok(())
    }

    fn write(&mut self, group: usize, part: usize, batch: &RecordBatch) -> Result<()> {
        let bad = |e: &dyn std::fmt::Display| Error::Corrupt(format!("spilling: {e}"));
        if !self.writers.contains_key(&(group, part)) {
            let f = File::create(self.path(group, part)).map_err(|e| bad(&e))?;
            let w = FileWriter::try_new(f, &batch.schema()).map_err(|e| bad(&e))?;
            self.writers.insert((group, part), w);
        }
        if let Some(w) = self.writers.get_mut(&(group, part)) {
            w.write(batch).map_err(|e| bad(&e))?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        for w in self.writers.values_mut() {
            w.finish()
                .map_err(|e| Error::Corrupt(format!("spilling: {e}")))?;
        }
        self.writers.clear();
        Ok(())
    }

    /// A spilled (group, part) as one batch of `schema` (empty when nothing went
    /// there).
    fn read(&self, group: usize, part: usize, schema: &SchemaRef) -> Result<RecordBatch> {
        let path = self.path(group, part);
        if !path.exists() {
            return Ok(RecordBatch::new_empty(schema.clone()));
        }
        let bad = |e: &dyn std::fmt::Display| Error::Corrupt(format!("reading a spill: {e}"));
        let f = File::open(&path).map_err(|e| bad(&e))?;
        let reader = FileReader::try_new(f, None).map_err(|e| bad(&e))?;
        let batches: Vec<RecordBatch> = reader
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bad(&e))?;
        arrow_select::concat::concat_batches(schema, &batches).map_err(|e| bad(&e))
    }
}

fn with_row(batch: &RecordBatch, first: u64, keep: &[String], ts: &str) -> Result<RecordBatch> {
    let mut fields = vec![Field::new(ROW, DataType::UInt64, false)];
    let n = batch.num_rows() as u64;
    let mut cols: Vec<ArrayRef> = vec![Arc::new(UInt64Array::from_iter_values(first..first + n))];
    for name in keep.iter().map(String::as_str).chain(std::iter::once(ts)) {
        if fields.iter().any(|f| f.name() == name) {
            continue;
        }
        let c = batch
            .column_by_name(name)
            .ok_or_else(|| Error::invalid(format!("the entity rows have no column '{name}'")))?;
        fields.push(Field::new(name, c.data_type().clone(), true));
        cols.push(c.clone());
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| Error::Corrupt(format!("entity rows: {e}")))
}

#[allow(clippy::too_many_arguments)]
fn partitioned(
    entities: &Staged,
    timestamp: &str,
    views: &[(ViewPart, Rows)],
    budget: u64,
    parts: usize,
    pii: &Pseudonyms<'_>,
    sink: &mut Sink,
) -> Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("qanat-join-")
        .tempdir()
        .map_err(|e| Error::Corrupt(format!("a spill directory: {e}")))?;
    // Rows per bucket of results: what the budget holds at about 1 KiB a row.
    let bucket_rows = (budget / 1024).clamp(1024, 1 << 20);
    let mut entity_spill = Spill::new(dir.path(), "entity");
    let mut view_spill = Spill::new(dir.path(), "view");
    let mut total = 0u64;
    let mut entity_schemas: Vec<Option<SchemaRef>> = vec![None; views.len()];
    for batch in entities.batches()? {
        let batch = batch?;
        if total == 0 {
            check_entity_keys(&batch, views)?;
        }
        for (v, (p, _)) in views.iter().enumerate() {
            let rows = with_row(&batch, total, &p.keys, timestamp)?;
            entity_schemas[v].get_or_insert_with(|| rows.schema());
            let of = partition_of(&rows, &p.keys, "the entity rows", parts)?;
            entity_spill.scatter(v, &rows, &of)?;
        }
        total += batch.num_rows() as u64;
    }
    entity_spill.finish()?;
    let mut view_schemas: Vec<Option<SchemaRef>> = vec![None; views.len()];
    for (v, (p, rows)) in views.iter().enumerate() {
        for batch in rows.batches()? {
            let batch = typed(&batch?, p)?;
            view_schemas[v].get_or_insert_with(|| batch.schema());
            let of = partition_of(&batch, &p.keys, "the feature rows", parts)?;
            view_spill.scatter(v, &batch, &of)?;
        }
        if view_schemas[v].is_none() {
            // No rows at all: an empty side, so every entity row gets nulls.
            let empty = RecordBatch::new_empty(rows.schema()?);
            view_schemas[v] = Some(typed(&empty, p)?.schema());
        }
    }
    view_spill.finish()?;

    // Join partition by partition; results to buckets of positions.
    let mut results = Spill::new(dir.path(), "result");
    let mut result_schemas: Vec<Option<SchemaRef>> = vec![None; views.len()];
    for (v, (p, _)) in views.iter().enumerate() {
        let (Some(es), Some(vs)) = (&entity_schemas[v], &view_schemas[v]) else {
            continue;
        };
        for part in 0..parts {
            let e = entity_spill.read(v, part, es)?;
            if e.num_rows() == 0 {
                continue;
            }
            let f = view_spill.read(v, part, vs)?;
            let joined = join(&e, timestamp, std::slice::from_ref(&p.keys), &[side(p, &f)])?;
            let mut keep = vec![ROW.to_string()];
            keep.extend(p.features.iter().map(|(_, n, _)| n.clone()));
            let idx: Vec<usize> = keep
                .iter()
                .map(|n| {
                    joined
                        .schema()
                        .index_of(n)
                        .map_err(|e| Error::Corrupt(format!("{e}")))
                })
                .collect::<Result<_>>()?;
            let out = joined
                .project(&idx)
                .map_err(|e| Error::Corrupt(format!("partition results: {e}")))?;
            result_schemas[v].get_or_insert_with(|| out.schema());
            let rows = out
                .column(0)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(|| Error::Corrupt("positions are not u64".into()))?;
            let of: Vec<u32> = rows
                .values()
                .iter()
                .map(|r| (r / bucket_rows) as u32)
                .collect();
            results.scatter(v, &out, &of)?;
        }
    }
    results.finish()?;
    drop(entity_spill);
    drop(view_spill);

    // The entity rows once more, in order, with each view's results for their bucket.
    let mut loaded: Vec<Option<(u64, RecordBatch)>> = vec![None; views.len()];
    let mut position = 0u64;
    for batch in entities.batches()? {
        let batch = batch?;
        let mut offset = 0usize;
        while offset < batch.num_rows() {
            let bucket = position / bucket_rows;
            let bucket_end = (bucket + 1) * bucket_rows;
            let len = ((bucket_end - position) as usize).min(batch.num_rows() - offset);
            let piece = batch.slice(offset, len);
            let mut fields: Vec<Field> = piece
                .schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            let mut cols: Vec<ArrayRef> = piece.columns().to_vec();
            if let Ok(i) = piece.schema().index_of(timestamp) {
                let t = entity_time(&piece, timestamp)?;
                fields[i] = Field::new(timestamp, t.data_type().clone(), false);
                cols[i] = t;
            }
            for (v, (p, _)) in views.iter().enumerate() {
                let Some(rs) = &result_schemas[v] else {
                    return Err(Error::Corrupt(format!(
                        "no results for feature view {}",
                        p.name
                    )));
                };
                if loaded[v].as_ref().is_none_or(|(b, _)| *b != bucket) {
                    loaded[v] = Some((
                        bucket,
                        sorted_by_position(results.read(v, bucket as usize, rs)?)?,
                    ));
                }
                let Some((_, r)) = &loaded[v] else { continue };
                let start = (position - bucket * bucket_rows) as usize;
                if start + len > r.num_rows() {
                    return Err(Error::Corrupt(format!(
                        "feature view {}: {} results for bucket {bucket}, row {} wanted",
                        p.name,
                        r.num_rows(),
                        start + len
                    )));
                }
                let r = r.slice(start, len);
                for (i, f) in r.schema().fields().iter().enumerate().skip(1) {
                    fields.push(f.as_ref().clone());
                    cols.push(r.column(i).clone());
                }
            }
            let out = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
                .map_err(|e| Error::invalid(format!("the training set: {e}")))?;
            sink.write(out, pii)?;
            offset += len;
            position += len as u64;
        }
    }
    Ok(())
}

fn sorted_by_position(batch: RecordBatch) -> Result<RecordBatch> {
    let idx = arrow_ord::sort::sort_to_indices(batch.column(0).as_ref(), None, None)
        .map_err(|e| Error::Corrupt(format!("sorting results: {e}")))?;
    let cols: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c.as_ref(), &idx, None))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::Corrupt(format!("sorting results: {e}")))?;
    RecordBatch::try_new(batch.schema(), cols)
        .map_err(|e| Error::Corrupt(format!("sorting results: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{
        Float64Array, Int32Array, Int64Array, StringArray, TimestampMicrosecondArray,
    };
    use proptest::prelude::*;

    fn part(name: &str, key: &str, ttl: &str, pii: bool) -> ViewPart {
        let def: crate::definitions::FeatureViewDef = serde_json::from_value(serde_json::json!({
            "name": name, "entities": ["e"], "source": "s", "ttl": ttl,
            "schema": [{"name": "x", "type": "float64"}, {"name": "tag", "type": "string"}]
        }))
        .expect("view");
        let source: crate::definitions::SourceDef = serde_json::from_value(serde_json::json!({
            "name": "s", "type": "file", "path": "p.parquet", "timestamp_field": "ts",
            "created_timestamp_field": "created"
        }))
        .expect("source");
        ViewPart {
            name: name.into(),
            version: 1,
            def,
            source,
            source_version: 1,
            keys: vec![key.into()],
            features: vec![
                ("x".into(), format!("{name}__x"), false),
                ("tag".into(), format!("{name}__tag"), pii),
            ],
        }
    }

    fn micros(v: Vec<Option<i64>>) -> ArrayRef {
        Arc::new(TimestampMicrosecondArray::from(v).with_timezone("UTC"))
    }

    type Rows3 = Vec<(Option<i32>, Option<i64>, Option<i64>)>;

    fn feature_rows(rows: &Rows3, key: &str) -> crate::sources::Rows {
        let batch = RecordBatch::try_from_iter([
            (
                key,
                Arc::new(Int64Array::from(
                    rows.iter().map(|r| r.0.map(i64::from)).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
            ("ts", micros(rows.iter().map(|r| r.1).collect())),
            ("created", micros(rows.iter().map(|r| r.2).collect())),
            (
                "x",
                Arc::new(Float64Array::from(
                    (0..rows.len()).map(|i| i as f64).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
            (
                "tag",
                Arc::new(StringArray::from(
                    (0..rows.len()).map(|i| format!("t{i}")).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
        ])
        .expect("features");
        crate::sources::Rows::Table {
            batch,
            datasets: Vec::new(),
        }
    }

    async fn staged_entities(rows: &[(Option<i32>, i64)]) -> Staged {
        // The entity key is int32 here and int64 on the feature side: the partitions
        // must still agree.
        let batch = RecordBatch::try_from_iter([
            (
                "driver",
                Arc::new(Int32Array::from(
                    rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
            ("ts", micros(rows.iter().map(|r| Some(r.1)).collect())),
        ])
        .expect("entities");
        let mut s = Staged::new().expect("staged");
        let bytes =
            bytes::Bytes::from(crate::training_set::write_parquet(&batch).expect("parquet"));
        s.add(
            "entities.parquet",
            true,
            futures::stream::iter(vec![Ok::<_, Error>(bytes)]),
        )
        .await
        .expect("stage");
        s
    }

    fn read(path: &Path) -> RecordBatch {
        let f = File::open(path).expect("out");
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
            .expect("parquet")
            .build()
            .expect("reader");
        let b: Vec<RecordBatch> = r.map(|b| b.expect("batch")).collect();
        arrow_select::concat::concat_batches(&b[0].schema(), &b).expect("concat")
    }

    fn case() -> impl Strategy<Value = (Vec<(Option<i32>, i64)>, Rows3, Rows3)> {
        let key = prop_oneof![9 => (0i32..7).prop_map(Some), 1 => Just(None)];
        let entity = proptest::collection::vec((key.clone(), 0i64..30), 1..60);
        let feature = proptest::collection::vec(
            (
                key,
                prop_oneof![9 => (0i64..30).prop_map(Some), 1 => Just(None)],
                prop_oneof![2 => (0i64..3).prop_map(Some), 1 => Just(None)],
            ),
            0..80,
        );
        (entity, feature.clone(), feature)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]

        #[test]
        fn the_partitioned_join_writes_what_the_in_memory_join_writes((entity, a, b) in case()) {
            let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            let staged = rt.block_on(staged_entities(&entity));
            let views = vec![
                (part("a", "driver", "0", false), feature_rows(&a, "driver")),
                (part("b", "driver", "5s", true), feature_rows(&b, "driver")),
            ];
            let mac = |v: &[u8]| format!("{:064x}", v.len());
            let pii = Pseudonyms { hide: vec!["b__tag".into()], mac: &mac };
            let dir = tempfile::tempdir().expect("dir");
            let (memory, disk) = (dir.path().join("m.parquet"), dir.path().join("d.parquet"));
            write(&staged, "ts", &views, 1 << 30, &pii, &memory).expect("in memory");
            // 1 byte: as many partitions as allowed, buckets of 1024 rows.
            write(&staged, "ts", &views, 1, &pii, &disk).expect("partitioned");
            prop_assert_eq!(read(&memory), read(&disk));
        }
    }

    #[test]
    fn the_partitioned_join_keeps_entity_order_across_buckets() {
        // 3,000 entity rows: three buckets of 1,024 positions, one staged batch cut at
        // each bucket's end.
        let entity: Vec<(Option<i32>, i64)> = (0..3000)
            .map(|i: i32| (Some(i * 7 % 13), i64::from(i * 31 % 97)))
            .collect();
        let a: Rows3 = (0..2000)
            .map(|i| {
                (
                    Some(i * 5 % 13),
                    Some(i64::from(i * 17 % 90)),
                    Some(i64::from(i % 3)),
                )
            })
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let staged = rt.block_on(staged_entities(&entity));
        let views = vec![(
            part("a", "driver", "20s", false),
            feature_rows(&a, "driver"),
        )];
        let mac = |v: &[u8]| format!("{:064x}", v.len());
        let pii = Pseudonyms {
            hide: vec![],
            mac: &mac,
        };
        let dir = tempfile::tempdir().expect("dir");
        let (memory, disk) = (dir.path().join("m.parquet"), dir.path().join("d.parquet"));
        write(&staged, "ts", &views, 1 << 30, &pii, &memory).expect("in memory");
        let w = write(&staged, "ts", &views, 1, &pii, &disk).expect("partitioned");
        assert_eq!(w.rows, 3000);
        let (m, d) = (read(&memory), read(&disk));
        assert!(
            m.column_by_name("a__x").expect("x").null_count() < 3000,
            "some rows match"
        );
        assert_eq!(m, d);
    }
}
