//! The inference log: every answered request (or a sample of them) — who asked, the
//! inputs, the outputs, the version that answered, latency and queue time — and every
//! shadow's answer beside it. Monitoring reads it (issue 19); so do auditors, since it
//! is the record of who read which model with what.
//!
//! Records leave the request path through a bounded channel. A writer task batches
//! them (up to 4,096, or what arrived within a second) and writes one Parquet file per
//! deployment and batch to the project's artifact storage (encrypted at rest like
//! every object): `projects/<id>/inference-log/<deployment>/<yyyy-mm-dd>/<time>-<id>.parquet`.
//! When the writer falls behind, new records are dropped and counted rather than
//! queued without bound or slowing requests. Inputs a deployment names as PII are
//! written as keyed pseudonyms (HMAC under the keyring), so they still group and join
//! but cannot be read back.

use qanat_core::pii::PiiKind;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{
    Array, ArrayRef, RecordBatch, StringArray, TimestampMicrosecondArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use qanat_store::{ObjectKey, ObjectStorage};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::tensor::Elem;
pub use qanat_types::serving::{LogRecord, LogSpec, LogStats};

use crate::{Error, Result};

/// The most records waiting for the writer.
const QUEUE: usize = 16_384;
/// The most bytes of inputs and outputs waiting for the writer.
const QUEUE_BYTES: usize = 64 << 20;
/// The most records in one file.
const BATCH: usize = 4_096;
/// How often the writer collects records while a batch is open: at 20,000 requests a
/// second a tick takes ~100 (the queue holds 16,384).
const TICK: Duration = Duration::from_millis(5);

struct Pending {
    project_id: String,
    record: LogRecord,
}

/// The log's front: what requests hand records to.
#[derive(Clone)]
pub struct InferenceLog {
    tx: mpsc::Sender<Pending>,
    stats: Arc<Counters>,
}

#[derive(Default)]
struct Counters {
    written: AtomicU64,
    dropped: AtomicU64,
    files: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicUsize,
}

impl std::fmt::Debug for InferenceLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InferenceLog").finish_non_exhaustive()
    }
}

impl InferenceLog {
    /// Starts the writer on the current runtime; it flushes every `every`.
    pub fn start(storage: ObjectStorage, every: Duration) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let stats = Arc::new(Counters::default());
        tokio::spawn(write_loop(storage, rx, stats.clone(), every));
        InferenceLog { tx, stats }
    }

    /// Hands `record` to the writer, or drops and counts it when the writer is behind.
    pub fn record(&self, project_id: &str, record: LogRecord) {
        let size = record.inputs.len() + record.outputs.len();
        if self.stats.bytes.load(Ordering::Relaxed) + size > QUEUE_BYTES {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.stats.bytes.fetch_add(size, Ordering::Relaxed);
        let pending = Pending {
            project_id: project_id.to_string(),
            record,
        };
        if self.tx.try_send(pending).is_err() {
            self.stats.bytes.fetch_sub(size, Ordering::Relaxed);
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn stats(&self) -> LogStats {
        LogStats {
            written: self.stats.written.load(Ordering::Relaxed),
            dropped: self.stats.dropped.load(Ordering::Relaxed),
            files: self.stats.files.load(Ordering::Relaxed),
            failed_writes: self.stats.failed.load(Ordering::Relaxed),
        }
    }
}

/// A request's inputs as `{name: [values]}`, the inputs named in `pii` replaced by
/// `pii:<keyed hash>` of each value — and, declared or not, those whose name says they
/// hold people's names, passport numbers or birth dates, and every text value that
/// is itself an identifier (an email address, a phone number, an Emirates ID, an IBAN
/// or a card number with its check digit, an IP address): personal data found in a
/// request is not written to the log in clear.
pub fn inputs_json<'a>(
    inputs: impl Iterator<Item = &'a crate::oip::RequestInput>,
    pii: &[String],
    mac: &dyn Fn(&[u8]) -> String,
) -> String {
    inputs_json_found(inputs, pii, mac).0
}

/// [`inputs_json`], with the undeclared inputs in which personal data was found and
/// its kinds (what the log record keeps as `pii_found`).
pub fn inputs_json_found<'a>(
    inputs: impl Iterator<Item = &'a crate::oip::RequestInput>,
    pii: &[String],
    mac: &dyn Fn(&[u8]) -> String,
) -> (String, BTreeMap<String, Vec<String>>) {
    // As a JSON object would hold them: keys sorted, the last of a repeated name kept
    // (reversed, a stable sort puts a name's last input first; dedup keeps that).
    let mut by_name: Vec<(&str, &crate::oip::RequestInput)> =
        inputs.map(|i| (i.name.as_str(), i)).collect();
    by_name.reverse();
    by_name.sort_by(|a, b| a.0.cmp(b.0));
    by_name.dedup_by(|later, first| later.0 == first.0);
    let masks = name_kinds(by_name.iter().map(|(n, _)| *n));
    let mut found: BTreeMap<String, std::collections::BTreeSet<&'static str>> = BTreeMap::new();
    let mut out = String::with_capacity(64 + 32 * by_name.len());
    out.push('{');
    for (i, ((name, input), mask)) in by_name.into_iter().zip(masks).enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_str(&mut out, name);
        out.push_str(":[");
        let declared = pii.iter().any(|p| p == name);
        // The kinds a name alone tells (values cannot show them).
        if !declared && mask != 0 {
            found
                .entry(name.to_string())
                .or_default()
                .extend(kinds_of(mask).map(|k| k.as_str()));
        }
        let hide = declared || mask != 0;
        for (j, v) in input.elements().enumerate() {
            if j > 0 {
                out.push(',');
            }
            // Numbers and booleans, the common case, are written as they are.
            match v {
                Elem::Bool(b) if !hide => {
                    out.push_str(if b { "true" } else { "false" });
                    continue;
                }
                Elem::Int(i) if !hide => {
                    let _ = write!(out, "{i}");
                    continue;
                }
                Elem::UInt(u) if !hide => {
                    let _ = write!(out, "{u}");
                    continue;
                }
                Elem::Float(x) if !hide && x.is_finite() => {
                    // The shortest form that reads back as the same f64, with a
                    // `.0` on whole numbers, as JSON writers print them (ryu: a third
                    // of the time of the standard library's shortest form).
                    out.push_str(ryu::Buffer::new().format_finite(x));
                    continue;
                }
                _ => {}
            }
            let v = match v {
                Elem::Null => Value::Null,
                Elem::Text(s) if hide => Value::from(format!("pii:{}", &mac(s.as_bytes())[..32])),
                Elem::Text(s) => {
                    let kinds = qanat_core::pii::matching_kinds(&s);
                    if kinds.is_empty() {
                        Value::from(s.as_ref())
                    } else {
                        found
                            .entry(name.to_string())
                            .or_default()
                            .extend(kinds.iter().map(|k| k.as_str()));
                        Value::from(format!("pii:{}", &mac(s.as_bytes())[..32]))
                    }
                }
                other if hide => {
                    Value::from(format!("pii:{}", &mac(other.to_string().as_bytes())[..32]))
                }
                other => other.to_json(),
            };
            out.push_str(&v.to_string());
        }
        out.push(']');
    }
    out.push('}');
    let found = found
        .into_iter()
        .map(|(k, v)| (k, v.into_iter().map(str::to_string).collect()))
        .collect();
    (out, found)
}

/// `s` as a JSON string: as it is between quotes when nothing in it needs escaping
/// (an input's name, nearly always), else as serde_json writes it.
fn push_json_str(out: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&Value::from(s).to_string());
    }
}

/// The kinds in a [`name_kinds`] mask.
fn kinds_of(mask: u16) -> impl Iterator<Item = PiiKind> {
    PiiKind::ALL
        .into_iter()
        .enumerate()
        .filter(move |(i, _)| mask & (1 << i) != 0)
        .map(|(_, k)| k)
}

/// The kinds of personal data that each name alone tells (those its values cannot
/// show), as masks over [`PiiKind::ALL`], remembered per name: a deployment's inputs
/// are the same few names on every request, and reading a name's words is most of what
/// logging a row costs. One look at the shared table serves a request's names.
fn name_kinds<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Vec<u16> {
    use std::collections::HashMap;
    use std::sync::{OnceLock, RwLock};
    /// Enough for every input of every deployment a server holds; past it, names are
    /// read each time rather than remembered without bound.
    const REMEMBERED: usize = 4096;
    const UNKNOWN: u16 = u16::MAX;
    static KINDS: OnceLock<RwLock<HashMap<String, u16>>> = OnceLock::new();
    let kinds = KINDS.get_or_init(Default::default);
    let mut masks: Vec<u16> = match kinds.read() {
        Ok(m) => names
            .clone()
            .map(|n| m.get(n).copied().unwrap_or(UNKNOWN))
            .collect(),
        Err(_) => names.clone().map(|_| UNKNOWN).collect(),
    };
    if masks.contains(&UNKNOWN) {
        let mut learned = Vec::new();
        for (mask, name) in masks.iter_mut().zip(names) {
            if *mask == UNKNOWN {
                *mask = qanat_core::pii::kinds_by_name(name)
                    .into_iter()
                    .filter(|k| !k.by_content())
                    .filter_map(|k| PiiKind::ALL.iter().position(|a| *a == k))
                    .fold(0, |m, i| m | (1 << i));
                learned.push((name, *mask));
            }
        }
        if let Ok(mut m) = kinds.write() {
            for (name, mask) in learned {
                if m.len() < REMEMBERED {
                    m.insert(name.to_string(), mask);
                }
            }
        }
    }
    masks
}

/// A response's outputs as `{name: data}`.
pub fn outputs_json(response: &crate::oip::InferResponse) -> String {
    let out: Map<String, Value> = response
        .outputs
        .iter()
        .map(|o| (o.name.clone(), o.data.clone()))
        .collect();
    Value::Object(out).to_string()
}

async fn write_loop(
    storage: ObjectStorage,
    mut rx: mpsc::Receiver<Pending>,
    stats: Arc<Counters>,
    every: Duration,
) {
    let mut closed = false;
    while !closed {
        let mut batch = Vec::with_capacity(64);
        if rx.recv_many(&mut batch, BATCH).await == 0 {
            return;
        }
        // The rest of the batch is collected every TICK, not as each record comes: a
        // wake-up per record (a task switch, often a thread's) was a share of every
        // logged request's cost.
        let deadline = tokio::time::Instant::now() + every;
        loop {
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            let now = tokio::time::Instant::now();
            if closed || batch.len() >= BATCH || now >= deadline {
                break;
            }
            tokio::time::sleep_until(deadline.min(now + TICK)).await;
        }
        let size: usize = batch
            .iter()
            .map(|p| p.record.inputs.len() + p.record.outputs.len())
            .sum();
        let mut groups: BTreeMap<(String, String), Vec<LogRecord>> = BTreeMap::new();
        for p in batch {
            groups
                .entry((p.project_id, p.record.deployment.clone()))
                .or_default()
                .push(p.record);
        }
        for ((project_id, deployment), records) in groups {
            let n = records.len() as u64;
            match write_file(&storage, &project_id, &deployment, records).await {
                Ok(()) => {
                    stats.written.fetch_add(n, Ordering::Relaxed);
                    stats.files.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    stats.failed.fetch_add(1, Ordering::Relaxed);
                    stats.dropped.fetch_add(n, Ordering::Relaxed);
                    tracing::warn!(deployment = %deployment, error = %e, records = n, "the inference log could not write a batch; its records are dropped");
                }
            }
        }
        stats.bytes.fetch_sub(size, Ordering::Relaxed);
    }
}

fn prefix(project_id: &str, deployment: &str) -> String {
    format!("projects/{project_id}/inference-log/{deployment}")
}

fn schema() -> Arc<Schema> {
    let text = |n: &str, null: bool| Field::new(n, DataType::Utf8, null);
    Arc::new(Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        text("request_id", false),
        text("inference_id", true),
        text("actor", false),
        text("deployment", false),
        text("model", false),
        text("version", false),
        text("role", false),
        Field::new("rows", DataType::UInt32, false),
        Field::new("latency_us", DataType::UInt64, false),
        Field::new("queue_us", DataType::UInt64, false),
        text("inputs", false),
        text("outputs", false),
        text("pii_found", true),
    ]))
}

fn to_batch(records: &[LogRecord]) -> Result<RecordBatch> {
    let text = |f: &dyn Fn(&LogRecord) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(records.iter().map(f)))
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(records.iter().map(|r| r.time))
                .with_timezone("UTC"),
        ),
        text(&|r| &r.request_id),
        Arc::new(StringArray::from_iter(
            records.iter().map(|r| r.inference_id.as_deref()),
        )),
        text(&|r| &r.actor),
        text(&|r| &r.deployment),
        text(&|r| &r.model),
        text(&|r| &r.version),
        text(&|r| &r.role),
        Arc::new(UInt32Array::from_iter_values(
            records.iter().map(|r| r.rows),
        )),
        Arc::new(UInt64Array::from_iter_values(
            records.iter().map(|r| r.latency_us),
        )),
        Arc::new(UInt64Array::from_iter_values(
            records.iter().map(|r| r.queue_us),
        )),
        text(&|r| &r.inputs),
        text(&|r| &r.outputs),
        Arc::new(StringArray::from_iter(records.iter().map(|r| {
            (!r.pii_found.is_empty())
                .then(|| serde_json::to_string(&r.pii_found).unwrap_or_default())
        }))),
    ];
    RecordBatch::try_new(schema(), columns)
        .map_err(|e| Error::Internal(format!("an inference log batch: {e}")))
}

async fn write_file(
    storage: &ObjectStorage,
    project_id: &str,
    deployment: &str,
    records: Vec<LogRecord>,
) -> Result<()> {
    let first = records.first().map_or(0, |r| r.time);
    let bytes = tokio::task::spawn_blocking(move || -> Result<Vec<u8>> {
        let batch = to_batch(&records)?;
        let props = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .build();
        let mut out = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), Some(props))
            .map_err(|e| Error::Internal(format!("an inference log file: {e}")))?;
        w.write(&batch)
            .and_then(|()| w.close().map(|_| ()))
            .map_err(|e| Error::Internal(format!("an inference log file: {e}")))?;
        Ok(out)
    })
    .await
    .map_err(|e| Error::Internal(format!("the inference log writer stopped: {e}")))??;
    let day = qanat_store::format_micros(first);
    let key = format!(
        "{}/{}/{first:016}-{}.parquet",
        prefix(project_id, deployment),
        day.get(..10).unwrap_or("unknown"),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let key: ObjectKey = key.parse()?;
    let location = storage.default_location().to_string();
    storage
        .put_bytes(&location, &key, bytes::Bytes::from(bytes))
        .await?;
    Ok(())
}

/// The newest `limit` records of `deployment` in project `project_id`, newest first.
#[qanat_macros::boxed]
pub async fn read(
    storage: &ObjectStorage,
    project_id: &str,
    deployment: &str,
    limit: usize,
) -> Result<Vec<LogRecord>> {
    let location = storage.default_location().to_string();
    let prefix: ObjectKey = prefix(project_id, deployment).parse()?;
    let mut files = storage.list(&location, Some(&prefix)).await?;
    // Keys sort by day, then by the first record's time.
    files.reverse();
    let mut out = Vec::new();
    for f in files {
        if out.len() >= limit {
            break;
        }
        let key: ObjectKey = f.key.parse()?;
        let bytes = storage.get_bytes(&location, &key).await?;
        let mut records = tokio::task::spawn_blocking(move || decode(bytes))
            .await
            .map_err(|e| Error::Internal(format!("reading the inference log: {e}")))??;
        records.sort_by_key(|r| std::cmp::Reverse(r.time));
        out.extend(records);
    }
    out.truncate(limit);
    Ok(out)
}

/// How far from a file's first record another of its records may lie: a batch holds
/// what arrived within one flush period, in roughly the order it was answered.
const FILE_SPREAD_US: i64 = 60_000_000;

/// Every record of `deployment` answered in `[start, end)` (micros), oldest first (by
/// time, then request id). Only the day folders the range touches are listed.
#[qanat_macros::boxed]
pub async fn read_between(
    storage: &ObjectStorage,
    project_id: &str,
    deployment: &str,
    start: i64,
    end: i64,
) -> Result<Vec<LogRecord>> {
    const DAY_US: i64 = 86_400_000_000;
    let location = storage.default_location().to_string();
    let mut out = Vec::new();
    let first_day = (start - FILE_SPREAD_US).div_euclid(DAY_US);
    let last_day = (end - 1).div_euclid(DAY_US);
    for day in first_day..=last_day {
        let date = qanat_store::format_micros(day * DAY_US);
        let Some(date) = date.get(..10) else { continue };
        let prefix: ObjectKey = format!("{}/{date}", prefix(project_id, deployment)).parse()?;
        for f in storage.list(&location, Some(&prefix)).await? {
            // `<first record's micros, 16 digits>-<id>.parquet`
            let first = f
                .key
                .rsplit('/')
                .next()
                .and_then(|name| name.split('-').next())
                .and_then(|t| t.parse::<i64>().ok());
            // A file is named by its batch's first record; the others may lie up to
            // the spread before it (stamped before they were queued) or after it.
            if first.is_some_and(|t| t >= end + FILE_SPREAD_US || t < start - FILE_SPREAD_US) {
                continue;
            }
            let key: ObjectKey = f.key.parse()?;
            let bytes = storage.get_bytes(&location, &key).await?;
            let records = tokio::task::spawn_blocking(move || decode(bytes))
                .await
                .map_err(|e| Error::Internal(format!("reading the inference log: {e}")))??;
            out.extend(
                records
                    .into_iter()
                    .filter(|r| r.time >= start && r.time < end),
            );
        }
    }
    out.sort_by(|a, b| (a.time, &a.request_id).cmp(&(b.time, &b.request_id)));
    Ok(out)
}

fn decode(bytes: bytes::Bytes) -> Result<Vec<LogRecord>> {
    let bad = |e: String| Error::Internal(format!("an inference log file does not read: {e}"));
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.build())
        .map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| bad(e.to_string()))?;
        let col = |name: &str| -> Result<&ArrayRef> {
            batch
                .column_by_name(name)
                .ok_or_else(|| bad(format!("no column {name}")))
        };
        let s = |name: &str| -> Result<&StringArray> {
            col(name)?
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| bad(format!("{name} is not text")))
        };
        let u64s = |name: &str| -> Result<&UInt64Array> {
            col(name)?
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(|| bad(format!("{name} is not a count")))
        };
        let time = col("time")?
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .ok_or_else(|| bad("time is not a timestamp".into()))?;
        let rows = col("rows")?
            .as_any()
            .downcast_ref::<UInt32Array>()
            .ok_or_else(|| bad("rows is not a count".into()))?;
        let (request_id, inference_id, actor, deployment, model, version, role, inputs, outputs) = (
            s("request_id")?,
            s("inference_id")?,
            s("actor")?,
            s("deployment")?,
            s("model")?,
            s("version")?,
            s("role")?,
            s("inputs")?,
            s("outputs")?,
        );
        let (latency, queue) = (u64s("latency_us")?, u64s("queue_us")?);
        // Files written before findings were logged have no such column.
        let found = batch
            .column_by_name("pii_found")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>());
        for i in 0..batch.num_rows() {
            out.push(LogRecord {
                time: time.value(i),
                request_id: request_id.value(i).to_string(),
                inference_id: (!inference_id.is_null(i)).then(|| inference_id.value(i).to_string()),
                actor: actor.value(i).to_string(),
                deployment: deployment.value(i).to_string(),
                model: model.value(i).to_string(),
                version: version.value(i).to_string(),
                role: role.value(i).to_string(),
                rows: rows.value(i),
                latency_us: latency.value(i),
                queue_us: queue.value(i),
                inputs: inputs.value(i).to_string(),
                outputs: outputs.value(i).to_string(),
                pii_found: found
                    .filter(|f| !f.is_null(i))
                    .and_then(|f| serde_json::from_str(f.value(i)).ok())
                    .unwrap_or_default(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: i64) -> LogRecord {
        LogRecord {
            time: 1_700_000_000_000_000 + i,
            request_id: format!("r{i}"),
            inference_id: (i % 2 == 0).then(|| format!("id{i}")),
            actor: "ana".into(),
            deployment: "web".into(),
            model: "cancer".into(),
            version: "1".into(),
            role: "answer".into(),
            rows: 1,
            latency_us: 100 + i as u64,
            queue_us: 5,
            inputs: r#"{"x":[1.5]}"#.into(),
            outputs: r#"{"label":["a"]}"#.into(),
            pii_found: Default::default(),
        }
    }

    /// A log whose writer never reads: what `record` does when the writer is behind.
    fn stalled() -> (InferenceLog, mpsc::Receiver<Pending>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let log = InferenceLog {
            tx,
            stats: Arc::new(Counters::default()),
        };
        (log, rx)
    }

    #[test]
    fn a_full_queue_drops_and_counts_new_records_and_keeps_the_queued() {
        let (log, mut rx) = stalled();
        for i in 0..QUEUE as i64 + 10 {
            log.record("p", record(i));
        }
        let s = log.stats();
        assert_eq!((s.dropped, s.written), (10, 0), "{s:?}");
        // The first QUEUE records are queued, in order; the dropped are the newest.
        let first = rx.try_recv().expect("queued");
        assert_eq!(first.record.request_id, "r0");
        let mut n = 1;
        let mut last = first;
        while let Ok(p) = rx.try_recv() {
            last = p;
            n += 1;
        }
        assert_eq!(n, QUEUE);
        assert_eq!(last.record.request_id, format!("r{}", QUEUE - 1));
    }

    #[test]
    fn records_past_the_byte_budget_are_dropped_and_counted() {
        let (log, _rx) = stalled();
        let mut big = record(1);
        big.inputs = "x".repeat(QUEUE_BYTES / 4 - 1024);
        for _ in 0..4 {
            log.record("p", big.clone());
        }
        assert_eq!(log.stats().dropped, 0, "four quarters fit");
        log.record("p", big.clone());
        assert_eq!(log.stats().dropped, 1, "a fifth is over the budget");
        // A small record still fits in what is left.
        log.record("p", record(2));
        assert_eq!(log.stats().dropped, 1);
    }

    #[tokio::test]
    async fn a_batch_the_store_refuses_is_counted_as_dropped_and_failed() {
        // A store whose location's directory is replaced by a file: every write fails.
        let db = qanat_store::testing::TestDb::sqlite(&[&qanat_governance::MIGRATIONS]).await;
        let (storage, dir) = qanat_store::testing::local_storage(&db).await;
        let objects = dir.path().join("objects");
        let _ = std::fs::remove_dir_all(&objects);
        std::fs::write(&objects, b"not a directory").expect("file");
        let log = InferenceLog::start(storage, Duration::from_millis(10));
        for i in 0..3 {
            log.record("p", record(i));
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while log.stats().failed_writes == 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let s = log.stats();
        assert_eq!((s.written, s.dropped), (0, 3), "{s:?}");
        assert!(s.failed_writes >= 1, "{s:?}");
        // The byte budget is given back: the log takes records again.
        assert_eq!(log.stats.bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn records_round_trip_through_parquet() {
        let mut records: Vec<LogRecord> = (0..5).map(record).collect();
        records[1].pii_found = BTreeMap::from([("contact".to_string(), vec!["email".to_string()])]);
        let batch = to_batch(&records).expect("batch");
        let mut out = Vec::new();
        let mut w =
            parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), None).expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
        assert_eq!(decode(bytes::Bytes::from(out)).expect("decode"), records);
        // A file written before findings were logged (no such column) still reads.
        let old = batch
            .project(&(0..batch.num_columns() - 1).collect::<Vec<_>>())
            .expect("without pii_found");
        let mut out = Vec::new();
        let mut w =
            parquet::arrow::ArrowWriter::try_new(&mut out, old.schema(), None).expect("writer");
        w.write(&old).expect("write");
        w.close().expect("close");
        records[1].pii_found.clear();
        assert_eq!(decode(bytes::Bytes::from(out)).expect("decode"), records);
    }

    #[test]
    fn pii_inputs_become_keyed_pseudonyms() {
        let req: crate::oip::InferRequest = serde_json::from_value(serde_json::json!({
            "inputs": [
                {"name": "email", "datatype": "BYTES", "shape": [2], "data": ["a@x.ae", null]},
                {"name": "age", "datatype": "FP64", "shape": [2, 1], "data": [[31], [40]]},
            ]
        }))
        .expect("request");
        let mac = |v: &[u8]| format!("{:064x}", v.len());
        let text = inputs_json(req.inputs.iter(), &["email".to_string()], &mac);
        let v: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["age"], serde_json::json!([31, 40]));
        assert_eq!(v["email"][1], Value::Null);
        let hidden = v["email"][0].as_str().expect("text");
        assert!(
            hidden.starts_with("pii:") && !hidden.contains("a@x"),
            "{hidden}"
        );
        // Undeclared: an input named for people's names, and identifiers among text
        // values, are hidden all the same; other text and numbers are not.
        let req: crate::oip::InferRequest = serde_json::from_value(serde_json::json!({
            "inputs": [
                {"name": "customer_name", "datatype": "BYTES", "shape": [1], "data": ["Layla Hassan"]},
                {"name": "contact", "datatype": "BYTES", "shape": [4],
                 "data": ["b@x.ae", "784-1990-1234567-6", "gold", "AE070331234567890123456"]},
                {"name": "segment", "datatype": "BYTES", "shape": [1], "data": ["gold"]},
                {"name": "card_digits", "datatype": "INT64", "shape": [1], "data": [4111111111111111_i64]},
            ]
        }))
        .expect("request");
        let v: Value =
            serde_json::from_str(&inputs_json(req.inputs.iter(), &[], &mac)).expect("json");
        let hidden = |x: &Value| x.as_str().is_some_and(|s| s.starts_with("pii:"));
        assert!(hidden(&v["customer_name"][0]), "{v}");
        let contact = v["contact"].as_array().expect("contact");
        assert!(hidden(&contact[0]), "an email: {v}");
        assert!(
            hidden(&contact[1]),
            "an Emirates ID with its check digit: {v}"
        );
        assert_eq!(contact[2], "gold", "{v}");
        assert!(hidden(&contact[3]), "an IBAN: {v}");
        assert_eq!(v["segment"][0], "gold");
        // What was found is said, by input and kind, for what was not declared.
        let (_, found) = inputs_json_found(req.inputs.iter(), &[], &mac);
        assert_eq!(
            found,
            BTreeMap::from([
                (
                    "contact".to_string(),
                    vec![
                        "email".to_string(),
                        "emirates_id".to_string(),
                        "iban".to_string()
                    ]
                ),
                ("customer_name".to_string(), vec!["person_name".to_string()]),
            ])
        );
        let (_, found) = inputs_json_found(
            req.inputs.iter(),
            &["contact".to_string(), "customer_name".to_string()],
            &mac,
        );
        assert!(
            found.is_empty(),
            "declared inputs are not findings: {found:?}"
        );
        assert_eq!(
            v["card_digits"][0], 4111111111111111_i64,
            "numbers are not scanned"
        );
        assert!(LogSpec {
            sample: 1.5,
            pii: vec![]
        }
        .check()
        .is_err());
    }
}
