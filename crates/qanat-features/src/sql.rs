//! SQL over feature sources, run by DataFusion: `sql` sources (a query over other
//! sources of the repo, each named as a table) and feature view transformations (a
//! query over the view's source, named `source`).
//!
//! The tables are the rows the sources read, in memory; the query runs off the async
//! runtime on a runtime of its own, and its errors are the caller's (400), naming the
//! object whose SQL failed.

use std::sync::Arc;

use arrow_array::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::TableReference;

use crate::error::{Error, Result};

/// Runs `sql` over `tables` (name, rows) and returns its result as one batch. `what`
/// names the query's owner in errors (`source driver_daily`).
pub(crate) async fn run(
    tables: Vec<(String, RecordBatch)>,
    sql: String,
    what: String,
) -> Result<RecordBatch> {
    tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Corrupt(format!("a runtime for {what}'s sql: {e}")))?;
        rt.block_on(query(tables, &sql, &what))
    })
    .await
    .map_err(|e| Error::Corrupt(format!("a sql query stopped: {e}")))?
}

async fn query(tables: Vec<(String, RecordBatch)>, sql: &str, what: &str) -> Result<RecordBatch> {
    let bad = |e: &dyn std::fmt::Display| Error::invalid(format!("{what}: sql: {e}"));
    let config = SessionConfig::new()
        .with_target_partitions(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let ctx = SessionContext::new_with_config(config);
    for (name, batch) in tables {
        let table = MemTable::try_new(batch.schema(), vec![vec![batch]])
            .map_err(|e| Error::Corrupt(format!("{what}: table {name}: {e}")))?;
        ctx.register_table(TableReference::bare(name.as_str()), Arc::new(table))
            .map_err(|e| Error::Corrupt(format!("{what}: table {name}: {e}")))?;
    }
    let df = ctx.sql(sql).await.map_err(|e| bad(&e))?;
    let schema = Arc::new(df.schema().as_arrow().clone());
    let batches = df.collect().await.map_err(|e| bad(&e))?;
    arrow_select::concat::concat_batches(&schema, &batches)
        .map_err(|e| Error::Corrupt(format!("{what}: sql result: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Int64Array};

    fn table(values: &[i64]) -> RecordBatch {
        RecordBatch::try_from_iter([(
            "trips",
            Arc::new(Int64Array::from(values.to_vec())) as arrow_array::ArrayRef,
        )])
        .expect("batch")
    }

    #[tokio::test]
    async fn a_query_reads_its_sources_as_tables() {
        let out = run(
            vec![("rides-src".into(), table(&[1, 5, 7]))],
            "SELECT trips * 2 AS double FROM \"rides-src\" WHERE trips > 1 ORDER BY trips".into(),
            "source t".into(),
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
            vec![("source".into(), table(&[1]))],
            "SELECT nope FROM source".into(),
            "feature view v".into(),
        )
        .await
        .expect_err("refused");
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        assert!(e.to_string().contains("feature view v: sql:"), "{e}");
    }
}
