//! The online store: the newest row of each entity of each view, for low-latency reads.
//! `redb` (embedded, a file next to the metadata) by default, Redis when configured;
//! both pass the same tests.
//!
//! One record per (project, view, entity key): the row's event time, its created time
//! and its feature values. A write replaces a record only when it is not older — by
//! (event time, created time) — than the one stored, so writes are idempotent and
//! out-of-order delivery (a replayed stream, a materialization of an older window)
//! never moves a value back in time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{ReadableDatabase, ReadableTable};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// One entity's newest row of a view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OnlineRow {
    /// Event time, microseconds since the epoch (UTC).
    #[serde(rename = "e")]
    pub event_ts: i64,
    /// Created time (0 when the source has none).
    #[serde(rename = "c")]
    pub created_ts: i64,
    /// Feature values by name (null for a null value).
    #[serde(rename = "v")]
    pub values: Map<String, Value>,
}

impl OnlineRow {
    fn newer_or_same(&self, other: &OnlineRow) -> bool {
        (self.event_ts, self.created_ts) >= (other.event_ts, other.created_ts)
    }
}

/// What a write did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WriteCount {
    /// Records written (new, or newer than the stored one).
    pub written: u64,
    /// Rows older than what was stored, left out.
    pub stale: u64,
}

/// Where online features live, chosen by URL: `redb://<path>` or `redis://host:port/db`.
#[derive(Clone)]
pub enum OnlineStore {
    Redb(Arc<RedbStore>),
    Redis(RedisStore),
}

impl std::fmt::Debug for OnlineStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OnlineStore::Redb(r) => write!(f, "OnlineStore::Redb({})", r.path.display()),
            OnlineStore::Redis(_) => f.write_str("OnlineStore::Redis"),
        }
    }
}

impl OnlineStore {
    /// Opens the store a URL names (creating a redb file when absent).
    #[qanat_macros::boxed]
    pub async fn open(url: &str) -> Result<OnlineStore> {
        if let Some(path) = url.strip_prefix("redb://") {
            let path = PathBuf::from(path);
            let store = tokio::task::spawn_blocking(move || RedbStore::open(&path))
                .await
                .map_err(|e| Error::Corrupt(format!("opening the online store: {e}")))??;
            Ok(OnlineStore::Redb(Arc::new(store)))
        } else if url.starts_with("redis://") || url.starts_with("rediss://") {
            Ok(OnlineStore::Redis(RedisStore::connect(url).await?))
        } else {
            Err(Error::invalid(format!(
                "online store '{}': use redb://<path> or redis://host:port/db",
                qanat_store::redact_url(url)
            )))
        }
    }

    /// The backend's name, for metrics and messages.
    pub fn backend(&self) -> &'static str {
        match self {
            OnlineStore::Redb(_) => "redb",
            OnlineStore::Redis(_) => "redis",
        }
    }

    /// Writes rows (entity key, row) of one view, each only if not older than the
    /// stored one.
    #[qanat_macros::boxed]
    pub async fn write(
        &self,
        project: &str,
        view: &str,
        rows: Vec<(String, OnlineRow)>,
    ) -> Result<WriteCount> {
        if rows.is_empty() {
            return Ok(WriteCount::default());
        }
        match self {
            OnlineStore::Redb(r) => {
                let r = r.clone();
                let prefix = record_prefix(project, view);
                tokio::task::spawn_blocking(move || r.write(&prefix, rows))
                    .await
                    .map_err(|e| Error::Corrupt(format!("online write: {e}")))?
            }
            OnlineStore::Redis(r) => r.write(project, view, rows).await,
        }
    }

    /// The stored rows of `keys` (None where an entity has none).
    #[qanat_macros::boxed]
    pub async fn read(
        &self,
        project: &str,
        view: &str,
        keys: &[String],
    ) -> Result<Vec<Option<OnlineRow>>> {
        match self {
            OnlineStore::Redb(r) => {
                // Reads are short: done inline rather than through spawn_blocking,
                // whose hand-off costs more than a redb lookup.
                let prefix = record_prefix(project, view);
                r.read(&prefix, keys)
            }
            OnlineStore::Redis(r) => r.read(project, view, keys).await,
        }
    }
}

/// `project/view/` : records of one view sort together.
fn record_prefix(project: &str, view: &str) -> String {
    format!("{project}/{view}/")
}

const RECORDS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("online_features");

/// The embedded backend: one redb file.
pub struct RedbStore {
    db: redb::Database,
    path: PathBuf,
}

fn redb_err(e: impl std::fmt::Display) -> Error {
    Error::Unavailable(format!("online store (redb): {e}"))
}

impl RedbStore {
    fn open(path: &Path) -> Result<RedbStore> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(redb_err)?;
        }
        let db = redb::Database::create(path).map_err(redb_err)?;
        // The table exists from the start, so reads never race its creation.
        let tx = db.begin_write().map_err(redb_err)?;
        tx.open_table(RECORDS).map_err(redb_err)?;
        tx.commit().map_err(redb_err)?;
        Ok(RedbStore {
            db,
            path: path.to_path_buf(),
        })
    }

    fn write(&self, prefix: &str, rows: Vec<(String, OnlineRow)>) -> Result<WriteCount> {
        let mut count = WriteCount::default();
        let tx = self.db.begin_write().map_err(redb_err)?;
        {
            let mut table = tx.open_table(RECORDS).map_err(redb_err)?;
            for (key, row) in rows {
                let k = format!("{prefix}{key}");
                let stored = table
                    .get(k.as_str())
                    .map_err(redb_err)?
                    .and_then(|v| serde_json::from_slice::<OnlineRow>(v.value()).ok());
                if stored.is_some_and(|s| !row.newer_or_same(&s)) {
                    count.stale += 1;
                    continue;
                }
                let bytes = serde_json::to_vec(&row).map_err(|e| Error::Corrupt(e.to_string()))?;
                table
                    .insert(k.as_str(), bytes.as_slice())
                    .map_err(redb_err)?;
                count.written += 1;
            }
        }
        tx.commit().map_err(redb_err)?;
        Ok(count)
    }

    fn read(&self, prefix: &str, keys: &[String]) -> Result<Vec<Option<OnlineRow>>> {
        let tx = self.db.begin_read().map_err(redb_err)?;
        let table = tx.open_table(RECORDS).map_err(redb_err)?;
        keys.iter()
            .map(|key| {
                let k = format!("{prefix}{key}");
                match table.get(k.as_str()).map_err(redb_err)? {
                    None => Ok(None),
                    Some(v) => serde_json::from_slice(v.value())
                        .map(Some)
                        .map_err(|e| Error::Corrupt(format!("online record {k}: {e}"))),
                }
            })
            .collect()
    }
}

/// The scale-out backend: one Redis hash per record (`e`, `c`, `v`), written by a Lua
/// script that compares times first, so the check and the write are one atomic step.
#[derive(Clone)]
pub struct RedisStore {
    conn: redis::aio::ConnectionManager,
    write_script: Arc<redis::Script>,
}

fn redis_err(e: redis::RedisError) -> Error {
    Error::Unavailable(format!("online store (redis): {e}"))
}

/// KEYS: the records; ARGV: event, created, values (JSON) per record, in order.
/// Returns how many were written.
const WRITE_IF_NEWER: &str = r#"
local written = 0
for i, key in ipairs(KEYS) do
  local e = tonumber(ARGV[3 * i - 2])
  local c = tonumber(ARGV[3 * i - 1])
  local old = redis.call('HMGET', key, 'e', 'c')
  local stale = false
  if old[1] then
    local oe = tonumber(old[1])
    local oc = tonumber(old[2]) or 0
    stale = oe > e or (oe == e and oc > c)
  end
  if not stale then
    redis.call('HSET', key, 'e', ARGV[3 * i - 2], 'c', ARGV[3 * i - 1], 'v', ARGV[3 * i])
    written = written + 1
  end
end
return written
"#;

impl RedisStore {
    async fn connect(url: &str) -> Result<RedisStore> {
        let client = redis::Client::open(url).map_err(redis_err)?;
        let conn = redis::aio::ConnectionManager::new(client)
            .await
            .map_err(redis_err)?;
        Ok(RedisStore {
            conn,
            write_script: Arc::new(redis::Script::new(WRITE_IF_NEWER)),
        })
    }

    fn key(project: &str, view: &str, key: &str) -> String {
        format!("qanat:features:{project}:{view}:{key}")
    }

    async fn write(
        &self,
        project: &str,
        view: &str,
        rows: Vec<(String, OnlineRow)>,
    ) -> Result<WriteCount> {
        let mut count = WriteCount::default();
        let mut conn = self.conn.clone();
        for chunk in rows.chunks(500) {
            let mut inv = self.write_script.prepare_invoke();
            for (key, row) in chunk {
                inv.key(Self::key(project, view, key));
                inv.arg(row.event_ts).arg(row.created_ts).arg(
                    serde_json::to_string(&row.values)
                        .map_err(|e| Error::Corrupt(e.to_string()))?,
                );
            }
            let written: u64 = inv.invoke_async(&mut conn).await.map_err(redis_err)?;
            count.written += written;
            count.stale += chunk.len() as u64 - written;
        }
        Ok(count)
    }

    async fn read(
        &self,
        project: &str,
        view: &str,
        keys: &[String],
    ) -> Result<Vec<Option<OnlineRow>>> {
        let mut pipe = redis::pipe();
        for k in keys {
            pipe.cmd("HMGET")
                .arg(Self::key(project, view, k))
                .arg("e")
                .arg("c")
                .arg("v");
        }
        let mut conn = self.conn.clone();
        let got: Vec<(Option<i64>, Option<i64>, Option<String>)> =
            pipe.query_async(&mut conn).await.map_err(redis_err)?;
        got.into_iter()
            .map(|(e, c, v)| match (e, v) {
                (Some(e), Some(v)) => Ok(Some(OnlineRow {
                    event_ts: e,
                    created_ts: c.unwrap_or(0),
                    values: serde_json::from_str(&v)
                        .map_err(|err| Error::Corrupt(format!("online record: {err}")))?,
                })),
                _ => Ok(None),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(e: i64, c: i64, v: f64) -> OnlineRow {
        let mut values = Map::new();
        values.insert("conv_rate".into(), serde_json::json!(v));
        values.insert("trips".into(), Value::Null);
        OnlineRow {
            event_ts: e,
            created_ts: c,
            values,
        }
    }

    /// Every backend here: redb always, Redis when `QANAT_TEST_REDIS_URL` is set (CI
    /// sets it; under CI=true it must be).
    async fn stores(dir: &Path) -> Vec<OnlineStore> {
        let mut out =
            vec![
                OnlineStore::open(&format!("redb://{}", dir.join("online.redb").display()))
                    .await
                    .expect("redb"),
            ];
        if let Some(url) = qanat_store::testing::service_var("QANAT_TEST_REDIS_URL") {
            out.push(OnlineStore::open(&url).await.expect("redis"));
        }
        out
    }

    #[tokio::test]
    async fn float_features_read_back_bit_for_bit() {
        // Values the default JSON float parser reads one ulp off (seen through the
        // online benchmark).
        let values = [0.09741962029788731, 0.10427595856918903, 1e-300, 0.1 + 0.2];
        let dir = tempfile::tempdir().expect("dir");
        for store in stores(dir.path()).await {
            let project = format!("p-{}", uuid_like());
            let rows = values
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("[{i}]"), row(1, 0, *v)))
                .collect();
            store.write(&project, "f", rows).await.expect("write");
            let keys: Vec<String> = (0..values.len()).map(|i| format!("[{i}]")).collect();
            let got = store.read(&project, "f", &keys).await.expect("read");
            for (v, r) in values.iter().zip(got) {
                let back = r.expect("row").values["conv_rate"].as_f64().expect("float");
                assert_eq!(back.to_bits(), v.to_bits(), "{}: {v}", store.backend());
            }
        }
    }

    #[tokio::test]
    async fn online_stores_keep_the_newest_row_per_entity_whatever_the_write_order() {
        let dir = tempfile::tempdir().expect("dir");
        for store in stores(dir.path()).await {
            // A fresh namespace per run: Redis outlives the test.
            let project = format!("p-{}", uuid_like());
            let w = store
                .write(
                    &project,
                    "stats",
                    vec![
                        ("[1]".into(), row(10, 0, 0.1)),
                        ("[2]".into(), row(5, 0, 0.2)),
                    ],
                )
                .await
                .expect("write");
            assert_eq!(
                w,
                WriteCount {
                    written: 2,
                    stale: 0
                },
                "{}",
                store.backend()
            );
            // Older, equal-time-but-earlier-created, and newer rows.
            let w = store
                .write(
                    &project,
                    "stats",
                    vec![
                        ("[1]".into(), row(9, 0, 0.9)),
                        ("[2]".into(), row(5, 7, 0.25)),
                        ("[3]".into(), row(1, 0, 0.3)),
                    ],
                )
                .await
                .expect("write");
            assert_eq!(
                w,
                WriteCount {
                    written: 2,
                    stale: 1
                },
                "{}",
                store.backend()
            );
            // The same write again changes nothing it should not (idempotent).
            store
                .write(&project, "stats", vec![("[2]".into(), row(5, 7, 0.25))])
                .await
                .expect("replay");
            let got = store
                .read(
                    &project,
                    "stats",
                    &["[1]".into(), "[2]".into(), "[4]".into()],
                )
                .await
                .expect("read");
            assert_eq!(got[0], Some(row(10, 0, 0.1)), "{}", store.backend());
            assert_eq!(got[1], Some(row(5, 7, 0.25)), "{}", store.backend());
            assert_eq!(got[2], None, "{}", store.backend());
            // Views and projects do not see each other's records.
            let other = store
                .read(&project, "other", &["[1]".into()])
                .await
                .expect("read");
            assert_eq!(other, vec![None]);
        }
    }

    fn uuid_like() -> String {
        format!(
            "{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        )
    }
}
