//! Logged models (MLflow 3): what `mlflow.<flavor>.log_model` creates before it uploads
//! the model's files, plus a run's inputs (datasets, models) and outputs (models).
//!
//! A logged model belongs to an experiment of a project; its files live under
//! `<experiment artifact location>/models/<model_id>/artifacts`, so they go through the
//! same proxied, encrypted artifact store as run artifacts.

use std::collections::BTreeMap;

use qanat_core::ObjectRef;
use qanat_governance::Project;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::model::{
    DatasetInput, LoggedModel, LoggedModelData, LoggedModelInfo, Metric, ModelInput, ModelOutput,
    Param, Registration, RunInputs, RunOutputs, Tag, LOGGED_MODEL_STATUSES,
};
use crate::search::{Bind, LOGGED_MODELS};
use crate::store::{
    check_key, check_max_results, check_run_id, metric_from, next_page_token, now_ms,
    parse_experiment_id, parse_page_token, placeholders, stored, values_list, Page,
    ROWS_PER_INSERT,
};
use crate::{Error, Result, Tracking};

/// What a logged model is created with.
#[derive(Debug, Default)]
pub struct NewLoggedModel {
    pub experiment_id: String,
    pub name: Option<String>,
    pub model_type: Option<String>,
    pub source_run_id: Option<String>,
    pub params: Vec<Param>,
    pub tags: Vec<Tag>,
    pub creator: String,
}

/// A dataset input to record, with the Qanat dataset version it names when its source
/// is a Qanat dataset (resolved by the caller, which knows the data layer).
#[derive(Debug)]
pub struct ResolvedInput {
    pub input: DatasetInput,
    /// (dataset id, version id, lineage node such as `dataset:tx@3`).
    pub qanat: Option<(String, String, ObjectRef)>,
}

/// One order_by entry of a logged-model search.
#[derive(Debug, Clone)]
pub struct ModelOrder {
    pub field_name: String,
    pub ascending: bool,
}

fn check_model_id(id: &str) -> Result<()> {
    let hex = id.strip_prefix("m-").unwrap_or("");
    if hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "logged model id '{id}' is not of the form m-<32 hexadecimal characters>"
        )))
    }
}

/// `LOGGED_MODEL_READY`, `READY` or MLflow's enum number.
pub fn parse_logged_model_status(s: &str) -> Result<&'static str> {
    let by_name = LOGGED_MODEL_STATUSES
        .iter()
        .find(|n| **n == s || n.strip_prefix("LOGGED_MODEL_") == Some(s));
    let by_number = match s {
        "1" => Some(&LOGGED_MODEL_STATUSES[0]),
        "2" => Some(&LOGGED_MODEL_STATUSES[1]),
        "3" => Some(&LOGGED_MODEL_STATUSES[2]),
        _ => None,
    };
    by_name.or(by_number).copied().ok_or_else(|| {
        Error::invalid(format!(
            "logged model status '{s}' is not one of {}",
            LOGGED_MODEL_STATUSES.join(", ")
        ))
    })
}

fn random_model_name() -> String {
    format!("model-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

fn info_from(row: &AnyRow) -> Result<LoggedModelInfo> {
    Ok(LoggedModelInfo {
        model_id: row.try_get("model_id")?,
        experiment_id: row.try_get::<i64, _>("experiment_id")?.to_string(),
        name: row.try_get("name")?,
        creation_timestamp_ms: row.try_get("creation_time")?,
        last_updated_timestamp_ms: row.try_get("last_update_time")?,
        artifact_uri: row.try_get("artifact_location")?,
        status: row.try_get("status")?,
        model_type: row.try_get("model_type")?,
        source_run_id: row.try_get("source_run_id")?,
        status_message: row.try_get("status_message")?,
        tags: Vec::new(),
        registrations: Vec::new(),
        creator: row.try_get("creator")?,
        lifecycle_stage: row.try_get("lifecycle_stage")?,
    })
}

const MODEL_COLUMNS: &str = "lm.model_id, lm.experiment_id, lm.name, lm.creation_time, lm.last_update_time, lm.artifact_location, lm.status, lm.model_type, lm.source_run_id, lm.status_message, lm.creator, lm.lifecycle_stage";

/// Appends `name`/`version` to the logged model's `mlflow.modelVersions` tag (a JSON
/// list, spelled as MLflow's client writes it), inside a registration's transaction.
pub(crate) async fn note_registration(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    model_id: &str,
    name: &str,
    version: i64,
) -> Result<()> {
    const KEY: &str = "mlflow.modelVersions";
    let before: Option<String> =
        sqlx::query("SELECT value FROM logged_model_tags WHERE model_id = $1 AND key = $2")
            .bind(model_id)
            .bind(KEY)
            .fetch_optional(&mut **tx)
            .await?
            .map(|r| r.try_get("value"))
            .transpose()?;
    let mut entries: Vec<serde_json::Value> = before
        .and_then(|b| serde_json::from_str(&b).ok())
        .unwrap_or_default();
    let same = |e: &serde_json::Value| {
        e["name"].as_str() == Some(name)
            && (e["version"].as_i64() == Some(version)
                || e["version"].as_str() == Some(&version.to_string()))
    };
    if entries.iter().any(same) {
        return Ok(());
    }
    entries.push(serde_json::json!({"name": name, "version": version}));
    // Python's `json.dumps` spacing, as MLflow's client writes and reads this tag.
    let text = format!(
        "[{}]",
        entries
            .iter()
            .map(|e| match e.as_object() {
                Some(o) => format!(
                    "{{{}}}",
                    o.iter()
                        .map(|(k, v)| format!("{}: {v}", serde_json::Value::String(k.clone())))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => e.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    upsert_key_values(tx, "logged_model_tags", model_id, &[(KEY, &text)]).await
}

async fn upsert_key_values(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    table: &str,
    model_id: &str,
    items: &[(&str, &str)],
) -> Result<()> {
    for (k, v) in items {
        sqlx::query(&format!(
            "INSERT INTO {table} (model_id, key, value) VALUES ($1, $2, $3) \
             ON CONFLICT (model_id, key) DO UPDATE SET value = excluded.value"
        ))
        .bind(model_id)
        .bind(*k)
        .bind(*v)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Params are immutable, as on runs: the same value again is accepted.
async fn insert_params(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    model_id: &str,
    params: &[Param],
) -> Result<()> {
    for p in params {
        check_key("param", &p.key)?;
        let old =
            sqlx::query("SELECT value FROM logged_model_params WHERE model_id = $1 AND key = $2")
                .bind(model_id)
                .bind(&p.key)
                .fetch_optional(&mut **tx)
                .await?;
        match old {
            Some(r) => {
                let v: String = r.try_get("value")?;
                if v != p.value {
                    return Err(Error::invalid(format!(
                        "param '{}' of model {model_id} was already logged with value '{v}'; params are immutable (tried '{}')",
                        p.key, p.value
                    )));
                }
            }
            None => {
                sqlx::query(
                    "INSERT INTO logged_model_params (model_id, key, value) VALUES ($1, $2, $3)",
                )
                .bind(model_id)
                .bind(&p.key)
                .bind(&p.value)
                .execute(&mut **tx)
                .await?;
            }
        }
    }
    Ok(())
}

/// Records metric points logged for a model (log-batch entries with a `model_id`), many
/// per statement as for runs.
pub(crate) async fn insert_model_metrics(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    run_id: &str,
    metrics: &[&Metric],
) -> Result<()> {
    let rows: Vec<(&Metric, &str)> = metrics
        .iter()
        // An empty id means none, as in `check_metric_models`.
        .filter_map(|m| {
            m.model_id
                .as_deref()
                .filter(|id| !id.is_empty())
                .map(|id| (*m, id))
        })
        .collect();
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let q = format!(
            "INSERT INTO logged_model_metrics (model_id, key, value, is_nan, timestamp, step, run_id, dataset_name, dataset_digest) \
             VALUES {} ON CONFLICT DO NOTHING",
            values_list(tx, chunk.len(), 9)
        );
        let mut query = sqlx::query(&q);
        for (m, model_id) in chunk {
            let (v, nan) = stored(m);
            query = query
                .bind(*model_id)
                .bind(&m.key)
                .bind(v)
                .bind(nan)
                .bind(m.timestamp)
                .bind(m.step)
                .bind(run_id)
                .bind(m.dataset_name.as_deref().unwrap_or_default())
                .bind(m.dataset_digest.as_deref().unwrap_or_default());
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

impl Tracking {
    /// Creates a logged model (status pending until finalized).
    #[qanat_macros::boxed]
    pub async fn create_logged_model(
        &self,
        project: &Project,
        new: NewLoggedModel,
    ) -> Result<LoggedModel> {
        let exp = self.experiment(project, &new.experiment_id).await?;
        if exp.lifecycle_stage != "active" {
            return Err(Error::invalid(format!(
                "experiment {} is deleted; restore it to log models to it",
                exp.experiment_id
            )));
        }
        // As MLflow, the source run id is stored as given; lineage links it only when
        // this project has that run.
        let run_known = match new.source_run_id.as_deref().filter(|r| !r.is_empty()) {
            Some(run) => {
                check_run_id(run)?;
                self.run_row(project, run).await.is_ok()
            }
            None => false,
        };
        for t in &new.tags {
            check_key("tag", &t.key)?;
        }
        let model_id = format!("m-{}", uuid::Uuid::new_v4().simple());
        let name = new
            .name
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(random_model_name);
        let location = format!(
            "{}/models/{model_id}/artifacts",
            exp.artifact_location.trim_end_matches('/')
        );
        let now = now_ms();
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query(
            "INSERT INTO logged_models (model_id, project_id, experiment_id, name, artifact_location, status, status_message, lifecycle_stage, model_type, source_run_id, creator, creation_time, last_update_time) \
             VALUES ($1, $2, $3, $4, $5, 'LOGGED_MODEL_PENDING', NULL, 'active', $6, $7, $8, $9, $9)",
        )
        .bind(&model_id)
        .bind(&project.id)
        .bind(parse_experiment_id(&exp.experiment_id)?)
        .bind(&name)
        .bind(&location)
        .bind(new.model_type.filter(|t| !t.is_empty()))
        .bind(new.source_run_id.clone().filter(|r| !r.is_empty()))
        .bind(&new.creator)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        insert_params(&mut tx, &model_id, &new.params).await?;
        let tags: Vec<(&str, &str)> = new
            .tags
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_str()))
            .collect();
        upsert_key_values(&mut tx, "logged_model_tags", &model_id, &tags).await?;
        if let Some(run) = new
            .source_run_id
            .as_deref()
            .filter(|r| run_known && !r.is_empty())
        {
            qanat_governance::lineage::record_edges(
                &mut tx,
                &project.id,
                &ObjectRef::logged_model(model_id.as_str()),
                &[(ObjectRef::run(run), "output_of")],
            )
            .await?;
        }
        tx.commit().await?;
        self.logged_model(project, &model_id, false).await
    }

    async fn model_row(
        &self,
        project: &Project,
        model_id: &str,
        allow_deleted: bool,
    ) -> Result<LoggedModelInfo> {
        check_model_id(model_id)?;
        let row = sqlx::query(&format!(
            "SELECT {MODEL_COLUMNS} FROM logged_models lm WHERE lm.model_id = $1 AND lm.project_id = $2"
        ))
        .bind(model_id)
        .bind(&project.id)
        .fetch_optional(self.meta.reader())
        .await?
        .ok_or_else(|| Error::not_found("logged model", model_id))?;
        let info = info_from(&row)?;
        if info.lifecycle_stage != "active" && !allow_deleted {
            return Err(Error::not_found("logged model", model_id));
        }
        Ok(info)
    }

    #[qanat_macros::boxed]
    pub async fn logged_model(
        &self,
        project: &Project,
        model_id: &str,
        allow_deleted: bool,
    ) -> Result<LoggedModel> {
        let info = self.model_row(project, model_id, allow_deleted).await?;
        let mut all = self.complete_models(vec![info]).await?;
        all.pop()
            .ok_or_else(|| Error::not_found("logged model", model_id))
    }

    /// Adds tags, params, metrics and registrations to model rows (a few queries for
    /// any number of models).
    async fn complete_models(&self, infos: Vec<LoggedModelInfo>) -> Result<Vec<LoggedModel>> {
        let ids: Vec<String> = infos.iter().map(|i| i.model_id.clone()).collect();
        let mut tags: BTreeMap<String, Vec<Tag>> = BTreeMap::new();
        let mut params: BTreeMap<String, Vec<Param>> = BTreeMap::new();
        let mut metrics: BTreeMap<String, Vec<Metric>> = BTreeMap::new();
        let mut regs: BTreeMap<String, Vec<Registration>> = BTreeMap::new();
        for batch in ids.chunks(500) {
            let list = placeholders(1, batch.len());
            for r in self.rows_for(&format!("SELECT model_id, key, value FROM logged_model_tags WHERE model_id IN ({list}) ORDER BY key"), batch).await?
            {
                tags.entry(r.try_get("model_id")?).or_default().push(Tag {
                    key: r.try_get("key")?,
                    value: r.try_get("value")?,
                });
            }
            for r in self.rows_for(&format!("SELECT model_id, key, value FROM logged_model_params WHERE model_id IN ({list}) ORDER BY key"), batch).await?
            {
                params.entry(r.try_get("model_id")?).or_default().push(Param {
                    key: r.try_get("key")?,
                    value: r.try_get("value")?,
                });
            }
            for r in self.rows_for(&format!("SELECT model_id, key, value, is_nan, timestamp, step, run_id, dataset_name, dataset_digest FROM logged_model_metrics WHERE model_id IN ({list}) ORDER BY key, step, timestamp"), batch).await?
            {
                let id: String = r.try_get("model_id")?;
                let mut m = metric_from(&r)?;
                let ds: String = r.try_get("dataset_name")?;
                let digest: String = r.try_get("dataset_digest")?;
                m.dataset_name = (!ds.is_empty()).then_some(ds);
                m.dataset_digest = (!digest.is_empty()).then_some(digest);
                m.run_id = Some(r.try_get("run_id")?);
                m.model_id = Some(id.clone());
                metrics.entry(id).or_default().push(m);
            }
            for r in self.rows_for(&format!("SELECT mv.model_id, rm.name, mv.version FROM model_versions mv JOIN registered_models rm ON rm.id = mv.registered_model_id WHERE mv.model_id IN ({list}) AND mv.current_stage <> 'Deleted_Internal' ORDER BY rm.name, mv.version"), batch).await?
            {
                regs.entry(r.try_get("model_id")?).or_default().push(Registration {
                    name: r.try_get("name")?,
                    version: r.try_get::<i64, _>("version")?.to_string(),
                });
            }
        }
        Ok(infos
            .into_iter()
            .map(|mut info| {
                info.tags = tags.remove(&info.model_id).unwrap_or_default();
                info.registrations = regs.remove(&info.model_id).unwrap_or_default();
                LoggedModel {
                    data: LoggedModelData {
                        params: params.remove(&info.model_id).unwrap_or_default(),
                        metrics: metrics.remove(&info.model_id).unwrap_or_default(),
                    },
                    info,
                }
            })
            .collect())
    }

    /// Marks a logged model ready (its files are uploaded) or failed.
    #[qanat_macros::boxed]
    pub async fn finalize_logged_model(
        &self,
        project: &Project,
        model_id: &str,
        status: &str,
    ) -> Result<LoggedModel> {
        let status = parse_logged_model_status(status)?;
        self.model_row(project, model_id, false).await?;
        sqlx::query(
            "UPDATE logged_models SET status = $1, last_update_time = $2 WHERE model_id = $3",
        )
        .bind(status)
        .bind(now_ms())
        .bind(model_id)
        .execute(self.meta.writer())
        .await?;
        self.logged_model(project, model_id, false).await
    }

    #[qanat_macros::boxed]
    pub async fn set_logged_model_tags(
        &self,
        project: &Project,
        model_id: &str,
        tags: &[Tag],
    ) -> Result<()> {
        for t in tags {
            check_key("tag", &t.key)?;
        }
        self.model_row(project, model_id, false).await?;
        let items: Vec<(&str, &str)> = tags
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_str()))
            .collect();
        let mut tx = self.meta.writer().begin().await?;
        upsert_key_values(&mut tx, "logged_model_tags", model_id, &items).await?;
        touch_model(&mut tx, model_id).await?;
        tx.commit().await?;
        Ok(())
    }

    #[qanat_macros::boxed]
    pub async fn delete_logged_model_tag(
        &self,
        project: &Project,
        model_id: &str,
        key: &str,
    ) -> Result<()> {
        self.model_row(project, model_id, false).await?;
        let gone = sqlx::query("DELETE FROM logged_model_tags WHERE model_id = $1 AND key = $2")
            .bind(model_id)
            .bind(key)
            .execute(self.meta.writer())
            .await?
            .rows_affected();
        if gone == 0 {
            return Err(Error::not_found("logged model tag", key));
        }
        Ok(())
    }

    #[qanat_macros::boxed]
    pub async fn log_logged_model_params(
        &self,
        project: &Project,
        model_id: &str,
        params: &[Param],
    ) -> Result<()> {
        if params.len() > crate::store::MAX_BATCH_PARAMS {
            return Err(Error::invalid(format!(
                "at most {} params per request; got {}",
                crate::store::MAX_BATCH_PARAMS,
                params.len()
            )));
        }
        self.model_row(project, model_id, false).await?;
        let mut tx = self.meta.writer().begin().await?;
        insert_params(&mut tx, model_id, params).await?;
        touch_model(&mut tx, model_id).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Soft-deletes a logged model (it disappears from gets and searches; registry
    /// versions that point at it keep working from its files).
    #[qanat_macros::boxed]
    pub async fn delete_logged_model(&self, project: &Project, model_id: &str) -> Result<()> {
        self.model_row(project, model_id, false).await?;
        sqlx::query(
            "UPDATE logged_models SET lifecycle_stage = 'deleted', last_update_time = $1 WHERE model_id = $2",
        )
        .bind(now_ms())
        .bind(model_id)
        .execute(self.meta.writer())
        .await?;
        Ok(())
    }

    /// Logged models of some experiments matching `filter` (MLflow's syntax over
    /// `name`, `model_id`, `status`, `source_run_id`, `model_type`, times, `metrics.`,
    /// `params.`, `tags.`), newest first unless ordered.
    #[qanat_macros::boxed]
    pub async fn search_logged_models(
        &self,
        project: &Project,
        experiment_ids: &[String],
        filter: Option<&str>,
        order_by: &[ModelOrder],
        max_results: Option<i64>,
        page_token: Option<&str>,
    ) -> Result<Page<LoggedModel>> {
        let max = check_max_results(max_results, 100)?;
        let offset = parse_page_token(page_token)?;
        if experiment_ids.is_empty() {
            return Err(Error::invalid(
                "experiment_ids must name at least one experiment",
            ));
        }
        let exps = experiment_ids
            .iter()
            .map(|e| parse_experiment_id(e))
            .collect::<Result<Vec<_>>>()?;
        let order_text: Vec<String> = order_by
            .iter()
            .map(|o| {
                format!(
                    "{} {}",
                    quote_field(&o.field_name),
                    if o.ascending { "ASC" } else { "DESC" }
                )
            })
            .collect();
        let head = format!(
            "SELECT {MODEL_COLUMNS} FROM logged_models lm WHERE lm.project_id = $1 AND lm.experiment_id IN ({}) AND lm.lifecycle_stage = 'active'",
            placeholders(2, exps.len())
        );
        let leading: Vec<Bind> = std::iter::once(Bind::Text(project.id.to_string()))
            .chain(exps.iter().map(|e| Bind::Int(*e)))
            .collect();
        let (rows, more) = self
            .search_page(
                &LOGGED_MODELS,
                &head,
                leading,
                filter,
                &order_text,
                max,
                offset,
            )
            .await?;
        let infos = rows.iter().map(info_from).collect::<Result<Vec<_>>>()?;
        Ok(Page {
            items: self.complete_models(infos).await?,
            next_page_token: more.then(|| next_page_token(offset + max)),
        })
    }

    // ---- run inputs and outputs ----

    /// `runs/outputs`: the run produced these models.
    #[qanat_macros::boxed]
    pub async fn log_outputs(
        &self,
        project: &Project,
        run_id: &str,
        models: &[ModelOutput],
    ) -> Result<()> {
        let info = self.run_row(project, run_id).await?;
        for m in models {
            self.model_row(project, &m.model_id, false).await?;
        }
        let mut tx = self.meta.writer().begin().await?;
        for m in models {
            sqlx::query(
                "INSERT INTO run_model_outputs (run_id, model_id, step) VALUES ($1, $2, $3) \
                 ON CONFLICT (run_id, model_id) DO UPDATE SET step = excluded.step",
            )
            .bind(&info.run_id)
            .bind(&m.model_id)
            .bind(m.step)
            .execute(&mut *tx)
            .await?;
            qanat_governance::lineage::record_edges(
                &mut tx,
                &project.id,
                &ObjectRef::logged_model(m.model_id.as_str()),
                &[(ObjectRef::run(info.run_id.as_str()), "output_of")],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// `runs/log-inputs`: datasets (and models) the run read. A dataset that is a Qanat
    /// dataset version becomes a lineage edge run → dataset version.
    #[qanat_macros::boxed]
    pub async fn log_inputs(
        &self,
        project: &Project,
        run_id: &str,
        datasets: &[ResolvedInput],
        models: &[ModelInput],
    ) -> Result<()> {
        let info = self.run_row(project, run_id).await?;
        crate::store::check_active(&info)?;
        for d in datasets {
            let ds = &d.input.dataset;
            if ds.name.is_empty() || ds.digest.is_empty() {
                return Err(Error::invalid(
                    "every dataset input needs a name and a digest",
                ));
            }
            for t in &d.input.tags {
                check_key("input tag", &t.key)?;
            }
        }
        for m in models {
            self.model_row(project, &m.model_id, false).await?;
        }
        let now = now_ms();
        let mut tx = self.meta.writer().begin().await?;
        for d in datasets {
            let ds = &d.input.dataset;
            let tags = serde_json::to_string(&d.input.tags)
                .map_err(|e| Error::invalid(format!("input tags: {e}")))?;
            let (qd, qv, node) = match &d.qanat {
                Some((a, b, c)) => (Some(a.clone()), Some(b.clone()), Some(c.clone())),
                None => (None, None, None),
            };
            sqlx::query(
                "INSERT INTO run_dataset_inputs (run_id, name, digest, source_type, source, schema_json, profile, tags_json, qanat_dataset, qanat_version, created_time) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (run_id, name, digest) DO UPDATE SET tags_json = excluded.tags_json",
            )
            .bind(&info.run_id)
            .bind(&ds.name)
            .bind(&ds.digest)
            .bind(&ds.source_type)
            .bind(&ds.source)
            .bind(ds.schema.clone())
            .bind(ds.profile.clone())
            .bind(tags)
            .bind(qd)
            .bind(qv)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            if let Some(node) = node {
                qanat_governance::lineage::record_edges(
                    &mut tx,
                    &project.id,
                    &ObjectRef::run(info.run_id.as_str()),
                    &[(node, "trained_on")],
                )
                .await?;
            }
        }
        for m in models {
            sqlx::query(
                "INSERT INTO run_model_inputs (run_id, model_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            )
            .bind(&info.run_id)
            .bind(&m.model_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The Qanat dataset version version `version` of model `name` was trained on:
    /// among the dataset inputs its run logged with a `qanat://` source, the one
    /// tagged `mlflow.data.context = training`, else the only one. `None` when the
    /// version names no run (nor a logged model with one), or its run logged no such
    /// input, or several with none marked as the training set.
    #[qanat_macros::boxed]
    pub async fn training_dataset(
        &self,
        project: &Project,
        name: &str,
        version: &str,
    ) -> Result<Option<(String, i64)>> {
        let v = self.model_version(project, name, version).await?;
        let mut run_id = v.run_id.filter(|r| !r.is_empty());
        if let (None, Some(model_id)) = (&run_id, v.model_id.as_deref()) {
            run_id = sqlx::query("SELECT source_run_id FROM logged_models WHERE model_id = $1")
                .bind(model_id)
                .fetch_optional(self.meta.reader())
                .await?
                .and_then(|r| {
                    r.try_get::<Option<String>, _>("source_run_id")
                        .ok()
                        .flatten()
                });
        }
        let Some(run_id) = run_id else {
            return Ok(None);
        };
        let rows = sqlx::query(
            "SELECT qanat_dataset, qanat_version, tags_json FROM run_dataset_inputs \
             WHERE run_id = $1 AND qanat_dataset IS NOT NULL ORDER BY created_time, name",
        )
        .bind(&run_id)
        .fetch_all(self.meta.reader())
        .await?;
        let mut found = Vec::with_capacity(rows.len());
        for r in rows {
            let tags: Vec<Tag> =
                serde_json::from_str(&r.try_get::<String, _>("tags_json")?).unwrap_or_default();
            let training = tags
                .iter()
                .any(|t| t.key == "mlflow.data.context" && t.value == "training");
            let version: String = r.try_get("qanat_version")?;
            let Ok(version) = version.parse::<i64>() else {
                continue;
            };
            found.push((training, r.try_get::<String, _>("qanat_dataset")?, version));
        }
        let training: Vec<_> = found.iter().filter(|f| f.0).cloned().collect();
        Ok(match (training.as_slice(), found.as_slice()) {
            ([one], _) | ([], [one]) => Some((one.1.clone(), one.2)),
            _ => None,
        })
    }

    /// Inputs and outputs of several runs.
    pub(crate) async fn run_io(
        &self,
        ids: &[String],
    ) -> Result<BTreeMap<String, (RunInputs, RunOutputs)>> {
        let mut out: BTreeMap<String, (RunInputs, RunOutputs)> = BTreeMap::new();
        for batch in ids.chunks(500) {
            let list = placeholders(1, batch.len());
            for r in self.rows_for(&format!("SELECT run_id, name, digest, source_type, source, schema_json, profile, tags_json FROM run_dataset_inputs WHERE run_id IN ({list}) ORDER BY created_time, name"), batch).await?
            {
                let tags: String = r.try_get("tags_json")?;
                out.entry(r.try_get("run_id")?).or_default().0.dataset_inputs.push(DatasetInput {
                    tags: serde_json::from_str(&tags).unwrap_or_default(),
                    dataset: crate::model::Dataset {
                        name: r.try_get("name")?,
                        digest: r.try_get("digest")?,
                        source_type: r.try_get("source_type")?,
                        source: r.try_get("source")?,
                        schema: r.try_get("schema_json")?,
                        profile: r.try_get("profile")?,
                    },
                });
            }
            for r in self.rows_for(&format!("SELECT run_id, model_id FROM run_model_inputs WHERE run_id IN ({list}) ORDER BY model_id"), batch).await?
            {
                out.entry(r.try_get("run_id")?).or_default().0.model_inputs.push(ModelInput {
                    model_id: r.try_get("model_id")?,
                });
            }
            for r in self.rows_for(&format!("SELECT run_id, model_id, step FROM run_model_outputs WHERE run_id IN ({list}) ORDER BY step, model_id"), batch).await?
            {
                out.entry(r.try_get("run_id")?).or_default().1.model_outputs.push(ModelOutput {
                    model_id: r.try_get("model_id")?,
                    step: r.try_get("step")?,
                });
            }
        }
        Ok(out)
    }

    /// Checks that metrics logged for models name models of this project.
    pub(crate) async fn check_metric_models(
        &self,
        project: &Project,
        metrics: &[Metric],
    ) -> Result<()> {
        let mut seen = std::collections::BTreeSet::new();
        for m in metrics {
            if let Some(id) = m.model_id.as_deref().filter(|i| !i.is_empty()) {
                if seen.insert(id) {
                    self.model_row(project, id, false).await?;
                }
            }
        }
        Ok(())
    }
}

async fn touch_model(tx: &mut sqlx::Transaction<'_, sqlx::Any>, model_id: &str) -> Result<()> {
    sqlx::query("UPDATE logged_models SET last_update_time = $1 WHERE model_id = $2")
        .bind(now_ms())
        .bind(model_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// An order_by field name for the search parser: keys with odd characters quoted.
fn quote_field(f: &str) -> String {
    match f.split_once('.') {
        Some((kind, key)) if !key.chars().all(|c| c.is_alphanumeric() || c == '_') => {
            format!("{kind}.`{key}`")
        }
        _ => f.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_by_name_short_name_and_number() {
        assert_eq!(
            parse_logged_model_status("LOGGED_MODEL_READY").expect("name"),
            "LOGGED_MODEL_READY"
        );
        assert_eq!(
            parse_logged_model_status("READY").expect("short"),
            "LOGGED_MODEL_READY"
        );
        assert_eq!(
            parse_logged_model_status("3").expect("number"),
            "LOGGED_MODEL_UPLOAD_FAILED"
        );
        assert!(parse_logged_model_status("DONE").is_err());
        assert!(check_model_id("m-0123456789abcdef0123456789abcdef").is_ok());
        assert!(check_model_id("m-../../etc").is_err());
        assert_eq!(quote_field("metrics.val loss"), "metrics.`val loss`");
        assert_eq!(quote_field("name"), "name");
    }
}
