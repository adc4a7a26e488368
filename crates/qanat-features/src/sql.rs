//! SQL over feature sources, run by DataFusion: `sql` sources (a query over other
//! sources of the repo, each named as a table) and feature view transformations (a
//! query over the view's source, named `source`).
//!
//! Staged source files are tables DataFusion streams a batch at a time (so a filter or
//! a projection over a large source stays in bounded memory); the results of other
//! queries are in-memory tables. The query runs off the async runtime on a runtime of
//! its own, and its errors are the caller's (400), naming the object whose SQL failed.
//!
//! A user's SQL is untrusted: it may only be one query ([`check_query_only`], at
//! `apply`, and DataFusion's own `SQLOptions` when it runs: no DDL, no DML, no `COPY`,
//! no `SET`), its operators share a memory pool of [`Limits::memory`] bytes (sorts and
//! aggregates spill to disk, anything else fails the query), its result may not
//! exceed that either, and it is cancelled after [`Limits::time`].

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::datasource::{MemTable, TableProvider};
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::TableReference;

use crate::error::{Error, Result};
use crate::sources::Rows;
use crate::staging::Staged;

/// Staged files as one partition DataFusion reads batch by batch.
#[derive(Debug)]
struct StagedPartition {
    staged: Staged,
    schema: SchemaRef,
}

impl PartitionStream for StagedPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let batches: Box<dyn Iterator<Item = datafusion::error::Result<RecordBatch>> + Send> =
            match self.staged.batches() {
                Ok(b) => Box::new(b.map(|r| r.map_err(|e| DataFusionError::External(Box::new(e))))),
                Err(e) => Box::new(std::iter::once(Err(DataFusionError::External(Box::new(e))))),
            };
        Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            futures::stream::iter(batches),
        ))
    }
}

fn table(rows: Rows) -> Result<Arc<dyn TableProvider>> {
    Ok(match rows {
        Rows::Files(staged) => {
            let schema = staged.batches()?.schema();
            let part = StagedPartition {
                staged,
                schema: schema.clone(),
            };
            Arc::new(
                StreamingTable::try_new(schema, vec![Arc::new(part)])
                    .map_err(|e| Error::Corrupt(format!("a staged table: {e}")))?,
            )
        }
        Rows::Table { batch, .. } => Arc::new(
            MemTable::try_new(batch.schema(), vec![vec![batch]])
                .map_err(|e| Error::Corrupt(format!("a table: {e}")))?,
        ),
    })
}

/// How long one user query may run.
pub(crate) const TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// What one user query may use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Bytes its operators may hold (the pool) and its result may be.
    pub memory: u64,
    pub time: std::time::Duration,
}

/// Refuses anything but one query (`SELECT`, `WITH … SELECT`, `VALUES`): DDL, DML,
/// `COPY … TO`, `EXPLAIN`, `SET` and every other statement. The message says what to
/// write instead.
pub(crate) fn check_query_only(sql: &str) -> std::result::Result<(), String> {
    use datafusion::sql::parser::{DFParser, Statement};
    use datafusion::sql::sqlparser::ast::Statement as Sql;
    let mut statements = DFParser::parse_sql(sql).map_err(|e| e.to_string())?;
    if statements.len() != 1 {
        return Err(format!(
            "it holds {} statements: write one query (SELECT …)",
            statements.len()
        ));
    }
    match statements.pop_front() {
        Some(Statement::Statement(s)) if matches!(*s, Sql::Query(_)) => Ok(()),
        Some(other) => {
            let text = other.to_string();
            let verb = text.split_whitespace().next().unwrap_or("").to_uppercase();
            Err(format!(
                "only a query (SELECT …) may run here; {verb} statements are refused"
            ))
        }
        None => Err("it is empty: write a query (SELECT …)".into()),
    }
}

/// Runs `sql` over `tables` (name, rows) and returns its result as one batch. `what`
/// names the query's owner in errors (`source driver_daily`).
pub(crate) async fn run(
    tables: Vec<(String, Rows)>,
    sql: String,
    what: String,
    limits: Limits,
) -> Result<RecordBatch> {
    tokio::task::spawn_blocking(move || {
        // The query runs on workers of its own, and its clock on this thread: a plan
        // busy computing cannot keep its time limit from firing. Past it, the query's
        // tasks are aborted (they stop at their next yield) and the runtime is left
        // to wind down in the background.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
            .thread_name("qanat-sql")
            .enable_all()
            .build()
            .map_err(|e| Error::Corrupt(format!("a runtime for {what}'s sql: {e}")))?;
        let named = what.clone();
        let task = rt.spawn(async move { query(tables, &sql, &named, limits).await });
        let abort = task.abort_handle();
        let out = rt.block_on(tokio::time::timeout(limits.time, task));
        rt.shutdown_background();
        match out {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(Error::Corrupt(format!("{what}: the sql query stopped: {e}"))),
            Err(_) => {
                abort.abort();
                Err(Error::invalid(format!(
                    "{what}: sql: the query ran over its time limit of {} and was cancelled; narrow it (filter, aggregate) or split it",
                    humantime::format_duration(limits.time)
                )))
            }
        }
    })
    .await
    .map_err(|e| Error::Corrupt(format!("a sql query stopped: {e}")))?
}

async fn query(
    tables: Vec<(String, Rows)>,
    sql: &str,
    what: &str,
    limits: Limits,
) -> Result<RecordBatch> {
    use futures::StreamExt;
    let bad = |e: &dyn std::fmt::Display| Error::invalid(format!("{what}: sql: {e}"));
    check_query_only(sql).map_err(|e| bad(&e))?;
    let config = SessionConfig::new()
        .with_target_partitions(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
        .with_memory_limit(usize::try_from(limits.memory).unwrap_or(usize::MAX), 1.0)
        .build_arc()
        .map_err(|e| Error::Corrupt(format!("{what}: a memory pool: {e}")))?;
    let ctx = SessionContext::new_with_config_rt(config, runtime);
    for (name, rows) in tables {
        ctx.register_table(TableReference::bare(name.as_str()), table(rows)?)
            .map_err(|e| Error::Corrupt(format!("{what}: table {name}: {e}")))?;
    }
    let options = datafusion::execution::context::SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let df = ctx
        .sql_with_options(sql, options)
        .await
        .map_err(|e| bad(&e))?;
    let schema = Arc::new(df.schema().as_arrow().clone());
    let mut stream = df.execute_stream().await.map_err(|e| bad(&e))?;
    let mut batches = Vec::new();
    let mut bytes = 0u64;
    while let Some(b) = stream.next().await {
        let b = b.map_err(|e| bad(&e))?;
        bytes = bytes.saturating_add(b.get_array_memory_size() as u64);
        if bytes > limits.memory {
            return Err(bad(&format!(
                "its result is over the query memory limit of {} MiB (features.join_memory); aggregate or filter it",
                limits.memory >> 20
            )));
        }
        batches.push(b);
    }
    arrow_select::concat::concat_batches(&schema, &batches)
        .map_err(|e| Error::Corrupt(format!("{what}: sql result: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Int64Array};

    fn rows(values: &[i64]) -> Rows {
        let batch = RecordBatch::try_from_iter([(
            "trips",
            Arc::new(Int64Array::from(values.to_vec())) as arrow_array::ArrayRef,
        )])
        .expect("batch");
        Rows::Table {
            batch,
            datasets: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_query_reads_its_sources_as_tables() {
        let out = run(
            vec![("rides-src".into(), rows(&[1, 5, 7]))],
            "SELECT trips * 2 AS double FROM \"rides-src\" WHERE trips > 1 ORDER BY trips".into(),
            "source t".into(),
            LIMITS,
        )
        .await
        .expect("query");
        let col = out.column_by_name("double").expect("double");
        let col = col.as_any().downcast_ref::<Int64Array>().expect("int64");
        assert_eq!(col.values().to_vec(), vec![10, 14]);
    }

    #[tokio::test]
    async fn a_bad_query_is_the_callers_error_naming_the_object() {
        let e = run(
            vec![("source".into(), rows(&[1]))],
            "SELECT nope FROM source".into(),
            "feature view v".into(),
            LIMITS,
        )
        .await
        .expect_err("refused");
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        assert!(e.to_string().contains("feature view v: sql:"), "{e}");
    }

    const LIMITS: Limits = Limits {
        memory: 64 << 20,
        time: std::time::Duration::from_secs(60),
    };

    #[test]
    fn only_one_query_may_run() {
        for ok in [
            "SELECT 1",
            "WITH a AS (SELECT 1 AS x) SELECT x FROM a",
            "VALUES (1)",
        ] {
            assert!(check_query_only(ok).is_ok(), "{ok}");
        }
        for (bad, says) in [
            ("COPY (SELECT 1) TO '/tmp/x' STORED AS CSV", "COPY"),
            ("CREATE TABLE t AS SELECT 1", "CREATE"),
            (
                "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/passwd'",
                "CREATE",
            ),
            ("INSERT INTO source VALUES (1)", "INSERT"),
            ("DROP TABLE source", "DROP"),
            ("SET datafusion.execution.batch_size = 1", "SET"),
            ("EXPLAIN SELECT 1", "EXPLAIN"),
            ("SELECT 1; SELECT 2", "2 statements"),
        ] {
            let e = check_query_only(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[tokio::test]
    async fn a_query_past_its_memory_or_time_is_stopped_with_a_clear_error() {
        let big = run(
            vec![("source".into(), rows(&[1]))],
            "SELECT a.value * b.value AS v FROM generate_series(1, 100000) a CROSS JOIN generate_series(1, 1000) b".into(),
            "source huge".into(),
            Limits {
                memory: 8 << 20,
                time: std::time::Duration::from_secs(60),
            },
        )
        .await
        .expect_err("over the pool");
        assert!(matches!(big, Error::Invalid(_)), "{big}");
        assert!(big.to_string().contains("source huge: sql:"), "{big}");
        let slow = run(
            vec![("source".into(), rows(&[1]))],
            "SELECT sum(a.value * b.value) AS s FROM generate_series(1, 100000) a CROSS JOIN generate_series(1, 100000) b".into(),
            "source slow".into(),
            Limits {
                memory: 1 << 30,
                time: std::time::Duration::from_millis(300),
            },
        )
        .await
        .expect_err("over its time");
        assert!(
            big.to_string().contains("memory") || big.to_string().contains("Resources exhausted"),
            "{big}"
        );
        assert!(slow.to_string().contains("time limit"), "{slow}");
    }
}
