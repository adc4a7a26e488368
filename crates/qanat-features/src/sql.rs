//! SQL over feature sources, run by DataFusion: `sql` sources (a query over other
//! sources of the repo, each named as a table) and feature view transformations (a
//! query over the view's source, named `source`).
//!
//! Staged source files are tables DataFusion streams a batch at a time (so a filter or
//! a projection over a large source stays in bounded memory); the results of other
//! queries are in-memory tables. The query runs off the async runtime on a runtime of
//! its own, and its errors are the caller's (400), naming the object whose SQL failed.

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

/// Runs `sql` over `tables` (name, rows) and returns its result as one batch. `what`
/// names the query's owner in errors (`source driver_daily`).
pub(crate) async fn run(
    tables: Vec<(String, Rows)>,
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

async fn query(tables: Vec<(String, Rows)>, sql: &str, what: &str) -> Result<RecordBatch> {
    let bad = |e: &dyn std::fmt::Display| Error::invalid(format!("{what}: sql: {e}"));
    let config = SessionConfig::new()
        .with_target_partitions(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let ctx = SessionContext::new_with_config(config);
    for (name, rows) in tables {
        ctx.register_table(TableReference::bare(name.as_str()), table(rows)?)
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
        )
        .await
        .expect_err("refused");
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        assert!(e.to_string().contains("feature view v: sql:"), "{e}");
    }
}
