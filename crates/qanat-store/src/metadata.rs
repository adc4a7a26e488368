//! The metadata store: one `sqlx` pool pair over SQLite or PostgreSQL.
//!
//! The queries use `$1`-style placeholders, 64-bit integers, text and blobs only, so one
//! set of SQL serves both engines through `sqlx::Any` (big multi-row inserts are the one
//! exception: on SQLite they use anonymous `?`, which sqlx binds without a lookup per
//! placeholder). SQLite gets a single writer
//! connection: writers queue in the pool instead of racing for the file lock, which is
//! what turns into "database is locked" under load. Readers use their own connections,
//! which WAL lets run alongside the writer. Committed WAL pages are copied back into
//! the database file by a background checkpoint, not inside the commit of whichever
//! request crossed the threshold.

use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Executor};

use crate::migrations::Schema;
use crate::{Error, Result};

/// How often the background task checkpoints the SQLite WAL (PASSIVE: it waits for no
/// reader or writer). Left to SQLite, a checkpoint runs in the commit that makes the log
/// reach 1000 pages, with its own fsync, and that request waits for it.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);
/// The writer still checkpoints by itself past this many WAL pages (~40 MiB), so the log
/// stays bounded if the background checkpoints fall behind.
const WRITER_CHECKPOINT_PAGES: u32 = 10_000;

/// Which database engine a [`MetaStore`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl FromStr for Backend {
    type Err = Error;
    fn from_str(url: &str) -> Result<Self> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            Err(Error::invalid(
                "metadata URL",
                format!(
                    "'{}' must start with sqlite:// or postgres://",
                    redact_url(url)
                ),
            ))
        }
    }
}

/// The metadata store. Cheap to clone; clones share the pools.
#[derive(Clone, Debug)]
pub struct MetaStore {
    writer: AnyPool,
    reader: AnyPool,
    backend: Backend,
}

impl MetaStore {
    /// Connects to `url` (`sqlite://path` or `postgres://…`), creating a SQLite file if
    /// needed, and applies the migrations of every domain in `schema` that have not run
    /// yet.
    #[qanat_macros::boxed]
    pub async fn connect(url: &str, schema: &Schema) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let backend: Backend = url.parse()?;
        let store = match backend {
            Backend::Sqlite => {
                let url = if url.contains('?') {
                    url.to_string()
                } else {
                    format!("{url}?mode=rwc")
                };
                let writer = sqlite_pool(&url, 1, WRITER_CHECKPOINT_PAGES).await?;
                // Apply migrations (and switch to WAL) before the readers connect.
                schema.migrator(backend).run(&writer).await?;
                let reader = sqlite_pool(&url, 4, 0).await?;
                spawn_checkpointer(reader.clone());
                MetaStore {
                    writer,
                    reader,
                    backend,
                }
            }
            Backend::Postgres => {
                let pool = AnyPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect(url)
                    .await?;
                schema.migrator(backend).run(&pool).await?;
                MetaStore {
                    writer: pool.clone(),
                    reader: pool,
                    backend,
                }
            }
        };
        Ok(store)
    }

    /// The pool for statements that write. On SQLite it has exactly one connection.
    pub fn writer(&self) -> &AnyPool {
        &self.writer
    }

    /// The pool for read-only statements.
    pub fn reader(&self) -> &AnyPool {
        &self.reader
    }

    /// The engine behind this store.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Checks that the database answers (used by `/readyz`).
    #[qanat_macros::boxed]
    pub async fn ping(&self) -> Result<()> {
        let _: AnyRow = sqlx::query("SELECT 1").fetch_one(&self.reader).await?;
        Ok(())
    }

    /// Closes the pools, waiting for connections in use to be returned.
    #[qanat_macros::boxed]
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}

/// Checkpoints the WAL every [`CHECKPOINT_EVERY`] from a reader connection until the
/// pool closes.
fn spawn_checkpointer(pool: AnyPool) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(CHECKPOINT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if pool.is_closed() {
                break;
            }
            if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&pool)
                .await
            {
                if pool.is_closed() {
                    break;
                }
                tracing::warn!(error = %e, "background WAL checkpoint failed; the writer's own checkpoint still bounds the log");
            }
        }
    });
}

/// A pool on the SQLite file; `autocheckpoint` is the WAL size in pages at which a
/// committing connection checkpoints by itself (0: never).
async fn sqlite_pool(url: &str, max: u32, autocheckpoint: u32) -> Result<AnyPool> {
    let pool = AnyPoolOptions::new()
        .max_connections(max)
        .min_connections(1)
        .acquire_timeout(Duration::from_secs(30))
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                // WAL lets readers run beside the writer; FULL makes every acknowledged
                // commit durable; the busy timeout covers other processes (the CLI, a
                // second server) holding the lock briefly. Temporary storage in memory keeps
                // statement journals (a multi-row INSERT inside a transaction has one) off
                // disk: on a file they were ~700 extra writes per 1000-metric log-batch.
                conn.execute("PRAGMA journal_mode = WAL").await?;
                conn.execute("PRAGMA synchronous = FULL").await?;
                conn.execute("PRAGMA busy_timeout = 10000").await?;
                conn.execute("PRAGMA temp_store = MEMORY").await?;
                conn.execute(format!("PRAGMA wal_autocheckpoint = {autocheckpoint}").as_str())
                    .await?;
                conn.execute("PRAGMA foreign_keys = ON").await?;
                Ok(())
            })
        })
        .connect(url)
        .await?;
    Ok(pool)
}

/// Hides the password in a database URL so it can be logged or shown.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("REDACTED"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_password() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:REDACTED@h:5432/db"
        );
        assert_eq!(redact_url("sqlite:///x.db"), "sqlite:///x.db");
    }

    #[test]
    fn rejects_unknown_scheme() {
        assert!("mysql://x".parse::<Backend>().is_err());
    }
}
