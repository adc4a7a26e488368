//! Purging: what was deleted (experiments, runs) and has outlived the retention period
//! goes for good, as `mlflow gc` does; and every row of a project being purged.
//!
//! Rows only: the artifacts of purged runs and experiments are objects, deleted by the
//! caller under the prefixes [`Purged`] names.

use std::collections::HashSet;

use qanat_governance::Project;
use serde::Serialize;
use sqlx::Row;

use crate::{Result, Tracking};

/// What a purge removed.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct Purged {
    /// Ids of the experiments removed, with all their runs and logged models.
    pub experiments: Vec<String>,
    /// `(experiment id, run id)` of every run removed.
    pub runs: Vec<(String, String)>,
    /// Deleted experiments and runs kept past their retention because a registered
    /// model version still comes from them (delete the version to let them go).
    pub kept_for_registry: u64,
}

/// Run-keyed tables, children of `runs`.
const RUN_TABLES: [&str; 7] = [
    "run_params",
    "run_tags",
    "metrics",
    "latest_metrics",
    "run_model_outputs",
    "run_dataset_inputs",
    "run_model_inputs",
];

/// Logged-model-keyed tables, children of `logged_models`.
const MODEL_TABLES: [&str; 3] = [
    "logged_model_tags",
    "logged_model_params",
    "logged_model_metrics",
];

/// Registered-model-keyed tables, children of `registered_models`.
const REGISTRY_TABLES: [&str; 5] = [
    "model_version_tags",
    "registered_model_aliases",
    "model_alias_history",
    "model_versions",
    "registered_model_tags",
];

const IN_BATCH: usize = 500;

impl Tracking {
    /// Removes the experiments deleted at or before `before_ms` (with all their runs
    /// and logged models) and the runs deleted at or before it, except what a
    /// registered model version still comes from.
    #[qanat_macros::boxed]
    pub async fn purge_deleted(&self, project: &Project, before_ms: i64) -> Result<Purged> {
        let pid = &project.id;
        let reader = self.meta.reader();
        let mut experiments: HashSet<i64> = sqlx::query(
            "SELECT experiment_id FROM experiments WHERE project_id = $1 AND lifecycle_stage = 'deleted' AND last_update_time <= $2",
        )
        .bind(pid)
        .bind(before_ms)
        .fetch_all(reader)
        .await?
        .iter()
        .map(|r| r.try_get("experiment_id"))
        .collect::<std::result::Result<_, _>>()?;
        // Every run of the project: a purged experiment takes all of its runs.
        let all_runs: Vec<(i64, String, Option<i64>)> = sqlx::query(
            "SELECT experiment_id, run_id, CASE WHEN lifecycle_stage = 'deleted' THEN deleted_time END AS deleted_time FROM runs WHERE project_id = $1",
        )
        .bind(pid)
        .fetch_all(reader)
        .await?
        .iter()
        .map(|r| Ok((r.try_get("experiment_id")?, r.try_get("run_id")?, r.try_get("deleted_time")?)))
        .collect::<std::result::Result<_, sqlx::Error>>()?;

        // What the registry still points at.
        let mut needed_runs = HashSet::new();
        let mut needed_models = HashSet::new();
        for r in sqlx::query(
            "SELECT mv.run_id, mv.model_id FROM model_versions mv JOIN registered_models rm ON rm.id = mv.registered_model_id WHERE rm.project_id = $1",
        )
        .bind(pid)
        .fetch_all(reader)
        .await?
        {
            if let Some(run) = r.try_get::<Option<String>, _>("run_id")? {
                needed_runs.insert(run);
            }
            if let Some(model) = r.try_get::<Option<String>, _>("model_id")? {
                needed_models.insert(model);
            }
        }
        let mut pinned: HashSet<i64> = HashSet::new();
        for (exp, run, _) in &all_runs {
            if experiments.contains(exp) && needed_runs.contains(run) {
                pinned.insert(*exp);
            }
        }
        for r in
            sqlx::query("SELECT model_id, experiment_id FROM logged_models WHERE project_id = $1")
                .bind(pid)
                .fetch_all(reader)
                .await?
        {
            let exp: i64 = r.try_get("experiment_id")?;
            if experiments.contains(&exp)
                && needed_models.contains(&r.try_get::<String, _>("model_id")?)
            {
                pinned.insert(exp);
            }
        }
        experiments.retain(|e| !pinned.contains(e));
        let mut kept = pinned.len() as u64;
        let mut runs = Vec::new();
        for (exp, run, deleted_time) in all_runs {
            let due = experiments.contains(&exp) || deleted_time.is_some_and(|t| t <= before_ms);
            if !due {
                continue;
            }
            if needed_runs.contains(&run) {
                // Counted once with its experiment when that is what keeps it.
                kept += u64::from(!pinned.contains(&exp));
                continue;
            }
            runs.push((exp, run));
        }

        let mut tx = self.meta.writer().begin().await?;
        let run_ids: Vec<&str> = runs.iter().map(|(_, r)| r.as_str()).collect();
        for batch in run_ids.chunks(IN_BATCH) {
            let list = placeholders(batch.len());
            for table in RUN_TABLES.iter().chain(&["runs"]) {
                let sql = format!("DELETE FROM {table} WHERE run_id IN ({list})");
                let mut q = sqlx::query(&sql);
                for id in batch {
                    q = q.bind(*id);
                }
                q.execute(&mut *tx).await?;
            }
        }
        for exp in &experiments {
            for table in MODEL_TABLES {
                sqlx::query(&format!(
                    "DELETE FROM {table} WHERE model_id IN (SELECT model_id FROM logged_models WHERE project_id = $1 AND experiment_id = $2)"
                ))
                .bind(pid)
                .bind(exp)
                .execute(&mut *tx)
                .await?;
            }
            for table in ["logged_models", "experiment_tags", "experiments"] {
                sqlx::query(&format!(
                    "DELETE FROM {table} WHERE project_id = $1 AND experiment_id = $2"
                ))
                .bind(pid)
                .bind(exp)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        let mut experiments: Vec<String> = experiments.iter().map(i64::to_string).collect();
        experiments.sort();
        Ok(Purged {
            experiments,
            runs: runs.into_iter().map(|(e, r)| (e.to_string(), r)).collect(),
            kept_for_registry: kept,
        })
    }

    /// Removes every tracking and registry row of a project (being purged).
    #[qanat_macros::boxed]
    pub async fn purge_project(&self, project_id: &str) -> Result<()> {
        let mut tx = self.meta.writer().begin().await?;
        let children = |table: &str, key: &str, parent: &str, parent_key: &str| {
            format!("DELETE FROM {table} WHERE {key} IN (SELECT {parent_key} FROM {parent} WHERE project_id = $1)")
        };
        let mut statements: Vec<String> = Vec::new();
        for t in RUN_TABLES {
            statements.push(children(t, "run_id", "runs", "run_id"));
        }
        for t in MODEL_TABLES {
            statements.push(children(t, "model_id", "logged_models", "model_id"));
        }
        for t in REGISTRY_TABLES {
            statements.push(children(
                t,
                "registered_model_id",
                "registered_models",
                "id",
            ));
        }
        for t in [
            "runs",
            "logged_models",
            "registered_models",
            "experiment_tags",
            "experiments",
        ] {
            statements.push(format!("DELETE FROM {t} WHERE project_id = $1"));
        }
        for sql in &statements {
            sqlx::query(sql).bind(project_id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

fn placeholders(n: usize) -> String {
    (1..=n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}
