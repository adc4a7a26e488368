//! The model registry: registered models (per project), their numbered versions,
//! stages, tags and aliases, with every alias move kept in a history so a promotion can
//! be rolled back.
//!
//! A version's files are its logged model's (`models:/m-…`), or a run's artifacts
//! (`runs:/<run>/<path>`), or a path in the project's proxied artifact store
//! (`mlflow-artifacts:/…`): always bytes in Qanat's encrypted storage, never an
//! outside location.

use std::collections::BTreeMap;

use qanat_core::{Kind, ObjectRef};
use qanat_governance::{append_audit_in, AuditRecord, Project};
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::model::{ModelAlias, ModelVersion, RegisteredModel, Tag, STAGES};
use crate::search::{Bind, MODEL_VERSIONS, REGISTERED_MODELS};
use crate::store::{
    check_key, check_max_results, check_run_id, next_page_token, now_ms, parse_page_token,
    placeholders, Page,
};
use crate::AliasMove;
use crate::{Error, Result, Tracking};
use qanat_events::EventType;
use serde_json::{json, Value};

/// The version tag naming the version a version was made from (`model:fraud@3`),
/// which registration turns into a `derived_from` lineage edge. Optimization sets it.
pub const DERIVED_FROM_TAG: &str = "qanat.derived_from";

/// `{key: value}` of tags, as webhook payloads carry them.
fn tag_map(tags: &[Tag]) -> Value {
    Value::Object(
        tags.iter()
            .map(|t| (t.key.clone(), Value::String(t.value.clone())))
            .collect(),
    )
}

impl Tracking {
    /// Queues `event`'s deliveries inside the change's transaction `tx`, commits it
    /// and wakes the outbox: the change and its event land together or not at all.
    async fn commit_with_event(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::Any>,
        project: &Project,
        event: EventType,
        data: Value,
    ) -> Result<()> {
        self.outbox
            .record(&mut tx, &project.id, &project.name, event, data)
            .await?;
        tx.commit().await?;
        self.outbox.wake();
        Ok(())
    }
}

/// Refuses a source path that climbs out of where it points (`..`, `.`), also when
/// percent-encoded (`..%2f`, `%252e%252e`), or that carries a control character
/// (`%00`): the path is decoded before it is checked, as it will be before use.
fn check_source_path(source: &str, path: &str) -> Result<()> {
    let mut decoded = path.to_string();
    for _ in 0..4 {
        let next = percent_encoding::percent_decode_str(&decoded)
            .decode_utf8_lossy()
            .into_owned();
        if next == decoded {
            break;
        }
        decoded = next;
    }
    if decoded.chars().any(char::is_control)
        || decoded.split(['/', '\\']).any(|s| s == ".." || s == ".")
    {
        return Err(Error::invalid(format!(
            "Invalid model version source: '{source}'. If supplying a source as an http, https, local file path, ftp, objectstore, or mlflow-artifacts uri, an absolute path must be provided without relative path references present."
        )));
    }
    Ok(())
}

/// A version created, moved to another stage or deleted changes its registered
/// model's `last_updated_timestamp`, as on MLflow.
async fn touch_registered(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    registered_model_id: &str,
    now: i64,
) -> Result<()> {
    sqlx::query("UPDATE registered_models SET last_update_time = $1 WHERE id = $2")
        .bind(now)
        .bind(registered_model_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// What a model version is created from.
#[derive(Debug, Default)]
pub struct NewModelVersion {
    pub name: String,
    pub source: String,
    pub run_id: Option<String>,
    pub model_id: Option<String>,
    pub run_link: Option<String>,
    pub description: Option<String>,
    pub tags: Vec<Tag>,
    pub user: String,
}

const DELETED: &str = "Deleted_Internal";

fn check_model_name(name: &str) -> Result<&str> {
    let n = name.trim();
    if n.is_empty() {
        return Err(Error::invalid("a registered model needs a non-empty name"));
    }
    if n.len() > 256
        || n.contains('/')
        || n.contains(':')
        || n.contains('@')
        || n.chars().any(char::is_control)
    {
        return Err(Error::invalid(format!(
            "invalid registered model name {n:?}: at most 256 characters, without '/', ':', '@' or control characters"
        )));
    }
    Ok(n)
}

/// MLflow's alias rule: letters, digits, `_` and `-`; not `latest` or `v<number>`
/// (those already mean something in `models:/` URIs).
fn check_alias(alias: &str) -> Result<()> {
    let lower = alias.to_ascii_lowercase();
    let version_like =
        lower.len() > 1 && lower.starts_with('v') && lower[1..].bytes().all(|b| b.is_ascii_digit());
    if alias.is_empty()
        || alias.len() > 255
        || !alias
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        || lower == "latest"
        || version_like
    {
        return Err(Error::invalid(format!(
            "invalid alias '{alias}': use letters, digits, '_' and '-', and not 'latest' or 'v<number>'"
        )));
    }
    Ok(())
}

fn parse_version(v: &str) -> Result<i64> {
    v.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            // MLflow's wording.
            Error::invalid(format!(
                "Parameter 'version' must be an integer, got '{v}'."
            ))
        })
}

/// A stage by any capitalisation (`production` → `Production`).
fn parse_stage(s: &str) -> Result<&'static str> {
    STAGES
        .iter()
        .find(|n| n.eq_ignore_ascii_case(s.trim()))
        .copied()
        .ok_or_else(|| Error::invalid(format!("stage '{s}' is not one of {}", STAGES.join(", "))))
}

fn version_from(row: &AnyRow) -> Result<ModelVersion> {
    Ok(ModelVersion {
        name: row.try_get("name")?,
        version: row.try_get::<i64, _>("version")?.to_string(),
        creation_timestamp: row.try_get("creation_time")?,
        last_updated_timestamp: row.try_get("last_update_time")?,
        user_id: row.try_get("user_id")?,
        current_stage: row.try_get("current_stage")?,
        description: row.try_get("description")?,
        source: row.try_get("source")?,
        run_id: row.try_get("run_id")?,
        run_link: row.try_get("run_link")?,
        status: row.try_get("status")?,
        status_message: row.try_get("status_message")?,
        tags: Vec::new(),
        aliases: Vec::new(),
        model_id: row.try_get("model_id")?,
        storage_location: row.try_get("storage_location")?,
    })
}

const VERSION_COLUMNS: &str = "rm.name, mv.registered_model_id, mv.version, mv.creation_time, mv.last_update_time, mv.user_id, mv.current_stage, mv.description, mv.source, mv.run_id, mv.run_link, mv.status, mv.status_message, mv.model_id, mv.storage_location";

/// Tags and aliases of one registered model's versions, by version number.
type VersionExtras = (Vec<(i64, Tag)>, Vec<(i64, String)>);

struct ModelRow {
    id: String,
    model: RegisteredModel,
}

impl Tracking {
    async fn model_row_by_name(&self, project: &Project, name: &str) -> Result<ModelRow> {
        let row = sqlx::query(
            "SELECT id, name, description, creation_time, last_update_time FROM registered_models WHERE project_id = $1 AND name = $2",
        )
        .bind(&project.id)
        .bind(name)
        .fetch_optional(self.meta.reader())
        .await?
        .ok_or_else(|| Error::not_found("registered model", name))?;
        Ok(ModelRow {
            id: row.try_get("id")?,
            model: RegisteredModel {
                name: row.try_get("name")?,
                creation_timestamp: row.try_get("creation_time")?,
                last_updated_timestamp: row.try_get("last_update_time")?,
                description: row.try_get("description")?,
                latest_versions: Vec::new(),
                tags: Vec::new(),
                aliases: Vec::new(),
            },
        })
    }

    #[qanat_macros::boxed]
    pub async fn create_registered_model(
        &self,
        project: &Project,
        name: &str,
        description: Option<&str>,
        tags: &[Tag],
    ) -> Result<RegisteredModel> {
        let name = check_model_name(name)?;
        for t in tags {
            check_key("tag", &t.key)?;
        }
        let now = now_ms();
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut tx = self.meta.writer().begin().await?;
        name_free(&mut tx, project, name).await?;
        sqlx::query(
            "INSERT INTO registered_models (id, project_id, name, description, creation_time, last_update_time) VALUES ($1, $2, $3, $4, $5, $5)",
        )
        .bind(&id)
        .bind(&project.id)
        .bind(name)
        .bind(description.unwrap_or_default())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        for t in tags {
            upsert_model_tag(&mut tx, &id, t).await?;
        }
        let data = json!({"name": name, "tags": tag_map(tags), "description": description});
        self.commit_with_event(tx, project, EventType::REGISTERED_MODEL_CREATED, data)
            .await?;
        self.registered_model(project, name).await
    }

    /// A registered model with its tags, aliases and newest version per stage.
    #[qanat_macros::boxed]
    pub async fn registered_model(&self, project: &Project, name: &str) -> Result<RegisteredModel> {
        let row = self.model_row_by_name(project, name).await?;
        let mut all = self.complete_registered(vec![(row.id, row.model)]).await?;
        all.pop()
            .ok_or_else(|| Error::not_found("registered model", name))
    }

    async fn complete_registered(
        &self,
        rows: Vec<(String, RegisteredModel)>,
    ) -> Result<Vec<RegisteredModel>> {
        let ids: Vec<String> = rows.iter().map(|(id, _)| id.clone()).collect();
        let mut tags: BTreeMap<String, Vec<Tag>> = BTreeMap::new();
        let mut aliases: BTreeMap<String, Vec<ModelAlias>> = BTreeMap::new();
        let mut latest_rows: Vec<(String, ModelVersion)> = Vec::new();
        for batch in ids.chunks(500) {
            let list = placeholders(1, batch.len());
            for r in self.rows_for(&format!("SELECT registered_model_id, key, value FROM registered_model_tags WHERE registered_model_id IN ({list}) ORDER BY key"), batch).await?
            {
                tags.entry(r.try_get("registered_model_id")?).or_default().push(Tag {
                    key: r.try_get("key")?,
                    value: r.try_get("value")?,
                });
            }
            for r in self.rows_for(&format!("SELECT registered_model_id, alias, version FROM registered_model_aliases WHERE registered_model_id IN ({list}) ORDER BY alias"), batch).await?
            {
                aliases.entry(r.try_get("registered_model_id")?).or_default().push(ModelAlias {
                    alias: r.try_get("alias")?,
                    version: r.try_get::<i64, _>("version")?.to_string(),
                });
            }
            // The newest version of each stage.
            let sql = format!(
                "SELECT {VERSION_COLUMNS} FROM model_versions mv JOIN registered_models rm ON rm.id = mv.registered_model_id \
                 WHERE mv.registered_model_id IN ({list}) AND mv.current_stage <> '{DELETED}' AND mv.version = \
                 (SELECT MAX(x.version) FROM model_versions x WHERE x.registered_model_id = mv.registered_model_id AND x.current_stage = mv.current_stage) \
                 ORDER BY mv.version"
            );
            for r in self.rows_for(&sql, batch).await? {
                latest_rows.push((r.try_get("registered_model_id")?, version_from(&r)?));
            }
        }
        // With their tags and aliases, as `get_model_version` shows them (MLflow's
        // latest versions are the same objects).
        let owners: Vec<String> = latest_rows.iter().map(|(id, _)| id.clone()).collect();
        let mut latest: BTreeMap<String, Vec<ModelVersion>> = BTreeMap::new();
        for (id, v) in owners
            .into_iter()
            .zip(self.complete_versions(latest_rows).await?)
        {
            latest.entry(id).or_default().push(v);
        }
        Ok(rows
            .into_iter()
            .map(|(id, mut m)| {
                m.tags = tags.remove(&id).unwrap_or_default();
                m.aliases = aliases.remove(&id).unwrap_or_default();
                m.latest_versions = latest.remove(&id).unwrap_or_default();
                m
            })
            .collect())
    }

    /// Registered models matching `filter` (`name = / LIKE / ILIKE`, `tags.<k>`),
    /// by name unless ordered.
    #[qanat_macros::boxed]
    pub async fn search_registered_models(
        &self,
        project: &Project,
        filter: Option<&str>,
        order_by: &[String],
        max_results: Option<i64>,
        page_token: Option<&str>,
    ) -> Result<Page<RegisteredModel>> {
        let max = check_max_results(max_results, 100)?;
        let offset = parse_page_token(page_token)?;
        let (rows, more) = self
            .search_page(
                &REGISTERED_MODELS,
                "SELECT rm.id, rm.name, rm.description, rm.creation_time, rm.last_update_time FROM registered_models rm WHERE rm.project_id = $1",
                vec![Bind::Text(project.id.to_string())],
                filter,
                order_by,
                max,
                offset,
            )
            .await?;
        let models = rows
            .iter()
            .map(|r| {
                Ok((
                    r.try_get("id")?,
                    RegisteredModel {
                        name: r.try_get("name")?,
                        creation_timestamp: r.try_get("creation_time")?,
                        last_updated_timestamp: r.try_get("last_update_time")?,
                        description: r.try_get("description")?,
                        latest_versions: Vec::new(),
                        tags: Vec::new(),
                        aliases: Vec::new(),
                    },
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Page {
            items: self.complete_registered(models).await?,
            next_page_token: more.then(|| next_page_token(offset + max)),
        })
    }

    #[qanat_macros::boxed]
    pub async fn update_registered_model(
        &self,
        project: &Project,
        name: &str,
        description: Option<&str>,
    ) -> Result<RegisteredModel> {
        let row = self.model_row_by_name(project, name).await?;
        sqlx::query(
            "UPDATE registered_models SET description = COALESCE($1, description), last_update_time = $2 WHERE id = $3",
        )
        .bind(description.map(str::to_string))
        .bind(now_ms())
        .bind(&row.id)
        .execute(self.meta.writer())
        .await?;
        self.registered_model(project, name).await
    }

    /// Renames a registered model; its versions, aliases and lineage follow.
    #[qanat_macros::boxed]
    pub async fn rename_registered_model(
        &self,
        project: &Project,
        name: &str,
        new_name: &str,
    ) -> Result<RegisteredModel> {
        let new_name = check_model_name(new_name)?;
        let row = self.model_row_by_name(project, name).await?;
        if new_name == row.model.name {
            return self.registered_model(project, name).await;
        }
        let mut tx = self.meta.writer().begin().await?;
        name_free(&mut tx, project, new_name).await?;
        sqlx::query("UPDATE registered_models SET name = $1, last_update_time = $2 WHERE id = $3")
            .bind(new_name)
            .bind(now_ms())
            .bind(&row.id)
            .execute(&mut *tx)
            .await?;
        let versions =
            sqlx::query("SELECT version FROM model_versions WHERE registered_model_id = $1")
                .bind(&row.id)
                .fetch_all(&mut *tx)
                .await?;
        for v in versions {
            let n: i64 = v.try_get("version")?;
            for col in ["child", "parent"] {
                sqlx::query(&format!(
                    "UPDATE lineage_edges SET {col} = $1 WHERE project_id = $2 AND {col} = $3"
                ))
                .bind(ObjectRef::model(new_name, n).to_string())
                .bind(&project.id)
                .bind(ObjectRef::model(row.model.name.as_str(), n).to_string())
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        self.registered_model(project, new_name).await
    }

    /// Deletes a registered model with all its versions, tags and aliases (the
    /// logged models and their files stay).
    #[qanat_macros::boxed]
    pub async fn delete_registered_model(&self, project: &Project, name: &str) -> Result<()> {
        let row = self.model_row_by_name(project, name).await?;
        let mut tx = self.meta.writer().begin().await?;
        for table in [
            "model_version_tags",
            "registered_model_aliases",
            "model_alias_history",
            "model_versions",
            "registered_model_tags",
        ] {
            sqlx::query(&format!(
                "DELETE FROM {table} WHERE registered_model_id = $1"
            ))
            .bind(&row.id)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query("DELETE FROM registered_models WHERE id = $1")
            .bind(&row.id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    #[qanat_macros::boxed]
    pub async fn set_registered_model_tag(
        &self,
        project: &Project,
        name: &str,
        tag: &Tag,
    ) -> Result<()> {
        check_key("tag", &tag.key)?;
        let row = self.model_row_by_name(project, name).await?;
        let mut tx = self.meta.writer().begin().await?;
        upsert_model_tag(&mut tx, &row.id, tag).await?;
        tx.commit().await?;
        Ok(())
    }

    #[qanat_macros::boxed]
    pub async fn delete_registered_model_tag(
        &self,
        project: &Project,
        name: &str,
        key: &str,
    ) -> Result<()> {
        let row = self.model_row_by_name(project, name).await?;
        let gone = sqlx::query(
            "DELETE FROM registered_model_tags WHERE registered_model_id = $1 AND key = $2",
        )
        .bind(&row.id)
        .bind(key)
        .execute(self.meta.writer())
        .await?
        .rows_affected();
        if gone == 0 {
            return Err(Error::not_found("registered model tag", key));
        }
        Ok(())
    }

    // ---- versions ----

    /// Where a version's files are, from its source. Only locations inside this
    /// project's tracking store are accepted.
    async fn storage_location(
        &self,
        project: &Project,
        source: &str,
        model_id: Option<&str>,
    ) -> Result<(String, Option<String>)> {
        if let Some(id) = source
            .strip_prefix("models:/")
            .filter(|r| r.starts_with("m-"))
        {
            let id = id.split('/').next().unwrap_or(id);
            let m = self.logged_model(project, id, false).await?;
            return Ok((m.info.artifact_uri, Some(m.info.model_id)));
        }
        // Another registered version (`copy_model_version`): its files, where they are.
        if let Some((name, version)) = source
            .strip_prefix("models:/")
            .filter(|r| !r.starts_with("m-"))
            .and_then(|r| r.split_once('/'))
        {
            let (_, v) = self.version_row(project, name, version).await?;
            return Ok((
                v.storage_location,
                v.model_id.or(model_id.map(str::to_string)),
            ));
        }
        if let Some(rest) = source.strip_prefix("runs:/") {
            let (run, path) = rest.split_once('/').unwrap_or((rest, ""));
            let path = path.trim_matches('/');
            check_source_path(source, path)?;
            // As MLflow: a run nobody has leaves the source as given. Another project's
            // run is not this project's to register.
            let Ok(info) = self.run_row(project, run).await else {
                self.refuse_foreign_run(project, &format!("model version source '{source}'"), run)
                    .await?;
                return Ok((source.to_string(), model_id.map(str::to_string)));
            };
            let loc = if path.is_empty() {
                info.artifact_uri
            } else {
                format!("{}/{path}", info.artifact_uri)
            };
            return Ok((loc, model_id.map(str::to_string)));
        }
        if let Some(path) = source.strip_prefix("mlflow-artifacts:") {
            check_source_path(source, path)?;
            if let Some(id) = model_id {
                self.logged_model(project, id, false).await?;
            }
            return Ok((source.to_string(), model_id.map(str::to_string)));
        }
        Err(Error::invalid(format!(
            "model version source '{source}' is outside Qanat's storage: use models:/<model_id>, runs:/<run_id>/<path> or mlflow-artifacts:/<path> (log the model to this server first)"
        )))
    }

    /// Refuses `source` when `run` is a run of a project other than `project`.
    async fn refuse_foreign_run(&self, project: &Project, source: &str, run: &str) -> Result<()> {
        let elsewhere = sqlx::query("SELECT 1 FROM runs WHERE run_id = $1 AND project_id <> $2")
            .bind(run)
            .bind(&project.id)
            .fetch_optional(self.meta.reader())
            .await?
            .is_some();
        if elsewhere {
            return Err(Error::invalid(format!(
                "{source}: run '{run}' is not in project '{}'; register a model from this project's runs (or copy the version from its own project)",
                project.name
            )));
        }
        Ok(())
    }

    /// Registers a new version (numbers are never reused). Ready at once: the files
    /// are already in Qanat's storage.
    #[qanat_macros::boxed]
    pub async fn create_model_version(
        &self,
        project: &Project,
        new: NewModelVersion,
    ) -> Result<ModelVersion> {
        for t in &new.tags {
            check_key("tag", &t.key)?;
        }
        let row = self.model_row_by_name(project, &new.name).await?;
        let derived = match new.tags.iter().find(|t| t.key == DERIVED_FROM_TAG) {
            Some(t) => Some(self.derived_from(project, &t.value).await?),
            None => None,
        };
        // As MLflow, the run id is stored as given; lineage links it only when this
        // project has that run.
        let run_known = match new.run_id.as_deref().filter(|r| !r.is_empty()) {
            Some(run) => {
                check_run_id(run)?;
                let known = self.run_row(project, run).await.is_ok();
                if !known {
                    self.refuse_foreign_run(project, "run_id", run).await?;
                }
                known
            }
            None => false,
        };
        let model_id = new.model_id.as_deref().filter(|m| !m.is_empty());
        let (location, model_id) = self
            .storage_location(project, &new.source, model_id)
            .await?;
        let run_id = match (new.run_id.filter(|r| !r.is_empty()), &model_id) {
            (Some(r), _) => Some(r),
            (None, Some(m)) => {
                self.logged_model(project, m, true)
                    .await?
                    .info
                    .source_run_id
            }
            (None, None) => None,
        };
        let now = now_ms();
        for _ in 0..5 {
            let mut tx = self.meta.writer().begin().await?;
            let next: i64 = sqlx::query(
                "SELECT COALESCE(MAX(version), 0) + 1 AS next FROM model_versions WHERE registered_model_id = $1",
            )
            .bind(&row.id)
            .fetch_one(&mut *tx)
            .await?
            .try_get("next")?;
            let res = sqlx::query(
                "INSERT INTO model_versions (registered_model_id, version, creation_time, last_update_time, description, user_id, current_stage, source, run_id, run_link, status, status_message, storage_location, model_id) \
                 VALUES ($1, $2, $3, $3, $4, $5, 'None', $6, $7, $8, 'READY', NULL, $9, $10)",
            )
            .bind(&row.id)
            .bind(next)
            .bind(now)
            .bind(new.description.clone().unwrap_or_default())
            .bind(&new.user)
            .bind(&new.source)
            .bind(run_id.clone())
            .bind(new.run_link.clone().filter(|l| !l.is_empty()))
            .bind(&location)
            .bind(model_id.clone())
            .execute(&mut *tx)
            .await;
            match res {
                Ok(_) => {}
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => continue,
                Err(e) => return Err(e.into()),
            }
            for t in &new.tags {
                upsert_version_tag(&mut tx, &row.id, next, t).await?;
            }
            sqlx::query("UPDATE registered_models SET last_update_time = $1 WHERE id = $2")
                .bind(now)
                .bind(&row.id)
                .execute(&mut *tx)
                .await?;
            let mut parents: Vec<(ObjectRef, &str)> = Vec::new();
            if let Some(m) = &model_id {
                parents.push((ObjectRef::logged_model(m.as_str()), "registers"));
                crate::models::note_registration(&mut tx, m, &row.model.name, next).await?;
            }
            if let Some(r) = run_id.as_ref().filter(|_| run_known || model_id.is_some()) {
                parents.push((ObjectRef::run(r.as_str()), "output_of"));
            }
            parents.push((ObjectRef::user(new.user.as_str()), "produced_by"));
            if let Some(source) = &derived {
                parents.push((source.clone(), "derived_from"));
            }
            qanat_governance::lineage::record_edges(
                &mut tx,
                &project.id,
                &ObjectRef::model(row.model.name.as_str(), next),
                &parents,
            )
            .await?;
            let data = json!({
                "name": row.model.name,
                "version": next.to_string(),
                "source": new.source,
                "run_id": run_id,
                "tags": tag_map(&new.tags),
                "description": new.description,
            });
            self.commit_with_event(tx, project, EventType::MODEL_VERSION_CREATED, data)
                .await?;
            return self
                .model_version(project, &row.model.name, &next.to_string())
                .await;
        }
        Err(Error::invalid(
            "too many concurrent registrations of this model; try again",
        ))
    }

    /// The lineage node of the version a `qanat.derived_from` tag names (`model:fraud@3`
    /// or `fraud@3`), which must exist in this project.
    async fn derived_from(&self, project: &Project, value: &str) -> Result<ObjectRef> {
        let r = qanat_core::ObjectRef::parse_of(qanat_core::Kind::Model, value)
            .map_err(|e| Error::invalid(format!("tag {DERIVED_FROM_TAG}: {e}")))?;
        let Some(qanat_core::Selector::Version(n)) = r.selector else {
            return Err(Error::invalid(format!(
                "tag {DERIVED_FROM_TAG} = '{value}': name the source version by number, e.g. {}",
                ObjectRef::model(r.name, 3)
            )));
        };
        self.version_row(project, &r.name, &n.to_string()).await?;
        Ok(ObjectRef::model(r.name, n))
    }

    async fn version_row(
        &self,
        project: &Project,
        name: &str,
        version: &str,
    ) -> Result<(String, ModelVersion)> {
        let n = parse_version(version)?;
        let row = sqlx::query(&format!(
            "SELECT {VERSION_COLUMNS} FROM model_versions mv JOIN registered_models rm ON rm.id = mv.registered_model_id \
             WHERE rm.project_id = $1 AND rm.name = $2 AND mv.version = $3 AND mv.current_stage <> '{DELETED}'"
        ))
        .bind(&project.id)
        .bind(name)
        .bind(n)
        .fetch_optional(self.meta.reader())
        .await?
        .ok_or_else(|| Error::not_found("model version", ObjectRef::model(name, n).to_string()))?;
        Ok((row.try_get("registered_model_id")?, version_from(&row)?))
    }

    #[qanat_macros::boxed]
    pub async fn model_version(
        &self,
        project: &Project,
        name: &str,
        version: &str,
    ) -> Result<ModelVersion> {
        let (id, v) = self.version_row(project, name, version).await?;
        let mut all = self.complete_versions(vec![(id, v)]).await?;
        all.pop().ok_or_else(|| {
            Error::not_found(
                "model version",
                ObjectRef::at(Kind::Model, name, version).to_string(),
            )
        })
    }

    async fn complete_versions(
        &self,
        rows: Vec<(String, ModelVersion)>,
    ) -> Result<Vec<ModelVersion>> {
        let mut out = Vec::with_capacity(rows.len());
        // Versions of one page usually share a model: one query per model.
        let mut by_model: BTreeMap<String, VersionExtras> = BTreeMap::new();
        for (id, _) in &rows {
            if by_model.contains_key(id) {
                continue;
            }
            let tags = sqlx::query(
                "SELECT version, key, value FROM model_version_tags WHERE registered_model_id = $1 ORDER BY key",
            )
            .bind(id)
            .fetch_all(self.meta.reader())
            .await?
            .iter()
            .map(|r| {
                Ok((
                    r.try_get::<i64, _>("version")?,
                    Tag {
                        key: r.try_get("key")?,
                        value: r.try_get("value")?,
                    },
                ))
            })
            .collect::<Result<Vec<_>>>()?;
            let aliases = sqlx::query(
                "SELECT version, alias FROM registered_model_aliases WHERE registered_model_id = $1 ORDER BY alias",
            )
            .bind(id)
            .fetch_all(self.meta.reader())
            .await?
            .iter()
            .map(|r| Ok((r.try_get::<i64, _>("version")?, r.try_get("alias")?)))
            .collect::<Result<Vec<_>>>()?;
            by_model.insert(id.clone(), (tags, aliases));
        }
        for (id, mut v) in rows {
            let n: i64 = v.version.parse().unwrap_or_default();
            if let Some((tags, aliases)) = by_model.get(&id) {
                v.tags = tags
                    .iter()
                    .filter(|(x, _)| *x == n)
                    .map(|(_, t)| t.clone())
                    .collect();
                v.aliases = aliases
                    .iter()
                    .filter(|(x, _)| *x == n)
                    .map(|(_, a)| a.clone())
                    .collect();
            }
            out.push(v);
        }
        Ok(out)
    }

    /// Every live version of a model, newest first.
    #[qanat_macros::boxed]
    pub async fn versions(&self, project: &Project, name: &str) -> Result<Vec<ModelVersion>> {
        let row = self.model_row_by_name(project, name).await?;
        let rows = sqlx::query(&format!(
            "SELECT {VERSION_COLUMNS} FROM model_versions mv JOIN registered_models rm ON rm.id = mv.registered_model_id \
             WHERE mv.registered_model_id = $1 AND mv.current_stage <> '{DELETED}' ORDER BY mv.version DESC"
        ))
        .bind(&row.id)
        .fetch_all(self.meta.reader())
        .await?;
        let versions = rows
            .iter()
            .map(|r| Ok((row.id.clone(), version_from(r)?)))
            .collect::<Result<Vec<_>>>()?;
        self.complete_versions(versions).await
    }

    #[qanat_macros::boxed]
    pub async fn update_model_version(
        &self,
        project: &Project,
        name: &str,
        version: &str,
        description: Option<&str>,
    ) -> Result<ModelVersion> {
        let (id, v) = self.version_row(project, name, version).await?;
        sqlx::query(
            "UPDATE model_versions SET description = COALESCE($1, description), last_update_time = $2 WHERE registered_model_id = $3 AND version = $4",
        )
        .bind(description.map(str::to_string))
        .bind(now_ms())
        .bind(&id)
        .bind(parse_version(&v.version)?)
        .execute(self.meta.writer())
        .await?;
        self.model_version(project, name, version).await
    }

    /// Deletes a version: it disappears (its number is not reused) and aliases that
    /// pointed at it are removed.
    #[qanat_macros::boxed]
    pub async fn delete_model_version(
        &self,
        project: &Project,
        name: &str,
        version: &str,
        user: &str,
    ) -> Result<()> {
        let (id, v) = self.version_row(project, name, version).await?;
        let n = parse_version(&v.version)?;
        let mut tx = self.meta.writer().begin().await?;
        let aliases = sqlx::query(
            "SELECT alias FROM registered_model_aliases WHERE registered_model_id = $1 AND version = $2",
        )
        .bind(&id)
        .bind(n)
        .fetch_all(&mut *tx)
        .await?;
        for a in aliases {
            let alias: String = a.try_get("alias")?;
            move_alias(&mut tx, &id, &alias, None, user, "delete").await?;
        }
        sqlx::query(
            "DELETE FROM model_version_tags WHERE registered_model_id = $1 AND version = $2",
        )
        .bind(&id)
        .bind(n)
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "UPDATE model_versions SET current_stage = '{DELETED}', last_update_time = $1 WHERE registered_model_id = $2 AND version = $3"
        ))
        .bind(now_ms())
        .bind(&id)
        .bind(n)
        .execute(&mut *tx)
        .await?;
        touch_registered(&mut tx, &id, now_ms()).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Versions matching `filter` (`name`, `run_id`, `source_path`, `version_number`,
    /// `current_stage`, `tags.<k>`); unless ordered, as MLflow orders them: the most
    /// recently updated first, then by model name and newest version.
    #[qanat_macros::boxed]
    pub async fn search_model_versions(
        &self,
        project: &Project,
        filter: Option<&str>,
        order_by: &[String],
        max_results: Option<i64>,
        page_token: Option<&str>,
    ) -> Result<Page<ModelVersion>> {
        let max = check_max_results(max_results, 10_000)?;
        let offset = parse_page_token(page_token)?;
        let head = format!(
            "SELECT {VERSION_COLUMNS} FROM model_versions mv JOIN registered_models rm ON rm.id = mv.registered_model_id \
             WHERE rm.project_id = $1 AND mv.current_stage <> '{DELETED}'"
        );
        let newest_first = ["last_updated_timestamp DESC".to_string()];
        let order_by = if order_by.is_empty() {
            &newest_first[..]
        } else {
            order_by
        };
        let (rows, more) = self
            .search_page(
                &MODEL_VERSIONS,
                &head,
                vec![Bind::Text(project.id.to_string())],
                filter,
                order_by,
                max,
                offset,
            )
            .await?;
        let versions = rows
            .iter()
            .map(|r| Ok((r.try_get("registered_model_id")?, version_from(r)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Page {
            items: self.complete_versions(versions).await?,
            next_page_token: more.then(|| next_page_token(offset + max)),
        })
    }

    /// The newest version in each of `stages` (all stages when empty).
    #[qanat_macros::boxed]
    pub async fn latest_versions(
        &self,
        project: &Project,
        name: &str,
        stages: &[String],
    ) -> Result<Vec<ModelVersion>> {
        let wanted = stages
            .iter()
            .map(|s| parse_stage(s))
            .collect::<Result<Vec<_>>>()?;
        // Newest first: the first version seen in a stage is that stage's latest.
        let mut seen = std::collections::BTreeSet::new();
        let mut out: Vec<ModelVersion> = self
            .versions(project, name)
            .await?
            .into_iter()
            .filter(|v| wanted.is_empty() || wanted.contains(&v.current_stage.as_str()))
            .filter(|v| seen.insert(v.current_stage.clone()))
            .collect();
        out.reverse();
        Ok(out)
    }

    /// Moves a version to a stage; with `archive_existing`, the model's other
    /// versions in that stage move to Archived in the same transaction.
    #[qanat_macros::boxed]
    pub async fn transition_stage(
        &self,
        project: &Project,
        name: &str,
        version: &str,
        stage: &str,
        archive_existing: bool,
    ) -> Result<ModelVersion> {
        let stage = parse_stage(stage)?;
        let (id, v) = self.version_row(project, name, version).await?;
        let n = parse_version(&v.version)?;
        let now = now_ms();
        let mut tx = self.meta.writer().begin().await?;
        if archive_existing && (stage == "Staging" || stage == "Production") {
            sqlx::query(
                "UPDATE model_versions SET current_stage = 'Archived', last_update_time = $1 \
                 WHERE registered_model_id = $2 AND current_stage = $3 AND version <> $4",
            )
            .bind(now)
            .bind(&id)
            .bind(stage)
            .bind(n)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "UPDATE model_versions SET current_stage = $1, last_update_time = $2 WHERE registered_model_id = $3 AND version = $4",
        )
        .bind(stage)
        .bind(now)
        .bind(&id)
        .bind(n)
        .execute(&mut *tx)
        .await?;
        touch_registered(&mut tx, &id, now).await?;
        tx.commit().await?;
        self.model_version(project, name, version).await
    }

    /// Where a version's files are (a `mlflow-artifacts:/` URI).
    #[qanat_macros::boxed]
    pub async fn download_uri(
        &self,
        project: &Project,
        name: &str,
        version: &str,
    ) -> Result<String> {
        Ok(self
            .version_row(project, name, version)
            .await?
            .1
            .storage_location)
    }

    #[qanat_macros::boxed]
    pub async fn set_model_version_tag(
        &self,
        project: &Project,
        name: &str,
        version: &str,
        tag: &Tag,
    ) -> Result<()> {
        check_key("tag", &tag.key)?;
        let (id, v) = self.version_row(project, name, version).await?;
        let mut tx = self.meta.writer().begin().await?;
        upsert_version_tag(&mut tx, &id, parse_version(&v.version)?, tag).await?;
        let data = json!({"name": name, "version": v.version, "key": tag.key, "value": tag.value});
        self.commit_with_event(tx, project, EventType::MODEL_VERSION_TAG_SET, data)
            .await
    }

    #[qanat_macros::boxed]
    pub async fn delete_model_version_tag(
        &self,
        project: &Project,
        name: &str,
        version: &str,
        key: &str,
    ) -> Result<()> {
        let (id, v) = self.version_row(project, name, version).await?;
        let mut tx = self.meta.writer().begin().await?;
        let gone = sqlx::query(
            "DELETE FROM model_version_tags WHERE registered_model_id = $1 AND version = $2 AND key = $3",
        )
        .bind(&id)
        .bind(parse_version(&v.version)?)
        .bind(key)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if gone == 0 {
            return Err(Error::not_found("model version tag", key));
        }
        let data = json!({"name": name, "version": v.version, "key": key});
        self.commit_with_event(tx, project, EventType::MODEL_VERSION_TAG_DELETED, data)
            .await
    }

    // ---- aliases ----

    /// Points `alias` at `version` (atomically, recorded in the alias history and, in
    /// the same transaction, in the audit log as `audit` — a request's entry or a
    /// service's, see [`AuditRecord::by_service`]). Returns the version it pointed at
    /// before, if any.
    #[qanat_macros::boxed]
    pub async fn set_alias(
        &self,
        project: &Project,
        name: &str,
        alias: &str,
        version: &str,
        reason: &str,
        audit: &AuditRecord,
    ) -> Result<Option<String>> {
        check_alias(alias)?;
        let (id, v) = self.version_row(project, name, version).await?;
        let mut tx = self.meta.writer().begin().await?;
        let before = move_alias(
            &mut tx,
            &id,
            alias,
            Some(parse_version(&v.version)?),
            &audit.actor,
            reason,
        )
        .await?;
        append_audit_in(&mut tx, audit).await?;
        let data = json!({"name": name, "alias": alias, "version": v.version});
        self.commit_with_event(tx, project, EventType::MODEL_VERSION_ALIAS_CREATED, data)
            .await?;
        Ok(before.map(|b| b.to_string()))
    }

    /// Removes `alias`, recorded in its history and in the audit log as `audit`, in
    /// one transaction.
    #[qanat_macros::boxed]
    pub async fn delete_alias(
        &self,
        project: &Project,
        name: &str,
        alias: &str,
        audit: &AuditRecord,
    ) -> Result<()> {
        let row = self.model_row_by_name(project, name).await?;
        let mut tx = self.meta.writer().begin().await?;
        let before = move_alias(&mut tx, &row.id, alias, None, &audit.actor, "delete").await?;
        if before.is_none() {
            return Err(Error::not_found("alias", format!("{name}@{alias}")));
        }
        append_audit_in(&mut tx, audit).await?;
        let data = json!({"name": name, "alias": alias});
        self.commit_with_event(tx, project, EventType::MODEL_VERSION_ALIAS_DELETED, data)
            .await
    }

    #[qanat_macros::boxed]
    pub async fn version_by_alias(
        &self,
        project: &Project,
        name: &str,
        alias: &str,
    ) -> Result<ModelVersion> {
        let row = self.model_row_by_name(project, name).await?;
        let v = sqlx::query(
            "SELECT version FROM registered_model_aliases WHERE registered_model_id = $1 AND alias = $2",
        )
        .bind(&row.id)
        .bind(alias)
        .fetch_optional(self.meta.reader())
        .await?
        .ok_or_else(|| Error::not_found("alias", format!("{name}@{alias}")))?;
        let n: i64 = v.try_get("version")?;
        self.model_version(project, name, &n.to_string()).await
    }

    /// Undoes the newest move of `alias` not undone yet (so repeated rollbacks walk back
    /// along its history), recorded
    /// in its history and in the audit log as `audit`, in one transaction: what an
    /// operator does through the API, and what the monitor does by itself with a
    /// service record. Refused, with nothing recorded, when there is nothing to go
    /// back to.
    #[qanat_macros::boxed]
    pub async fn rollback_alias(
        &self,
        project: &Project,
        name: &str,
        alias: &str,
        audit: &AuditRecord,
    ) -> Result<(Option<String>, String)> {
        let row = self.model_row_by_name(project, name).await?;
        let mut tx = self.meta.writer().begin().await?;
        let moves = sqlx::query(
            "SELECT previous_version, reason FROM model_alias_history WHERE registered_model_id = $1 AND alias = $2 ORDER BY seq DESC",
        )
        .bind(&row.id)
        .bind(alias)
        .fetch_all(&mut *tx)
        .await?;
        if moves.is_empty() {
            return Err(Error::not_found("alias history", format!("{name}@{alias}")));
        }
        // Each rollback undoes the newest move not undone yet, so repeated rollbacks
        // walk back along the history instead of flipping between two versions.
        let mut undone = 0usize;
        let mut target = None;
        for m in &moves {
            let reason: String = m.try_get("reason")?;
            if reason == "rollback" {
                undone += 1;
            } else if undone > 0 {
                undone -= 1;
            } else {
                target = Some(m.try_get::<Option<i64>, _>("previous_version")?);
                break;
            }
        }
        let Some(previous) = target.flatten() else {
            return Err(Error::invalid(format!(
                "{name}@{alias} has no earlier version to roll back to"
            )));
        };
        let alive = sqlx::query(&format!(
            "SELECT 1 FROM model_versions WHERE registered_model_id = $1 AND version = $2 AND current_stage <> '{DELETED}'"
        ))
        .bind(&row.id)
        .bind(previous)
        .fetch_optional(&mut *tx)
        .await?;
        if alive.is_none() {
            return Err(Error::invalid(format!(
                "cannot roll {name}@{alias} back: version {previous} was deleted"
            )));
        }
        let before = move_alias(
            &mut tx,
            &row.id,
            alias,
            Some(previous),
            &audit.actor,
            "rollback",
        )
        .await?;
        append_audit_in(&mut tx, audit).await?;
        // A rollback points the alias at a version again: subscribers see it as
        // MLflow shows any alias set.
        let data = json!({"name": name, "alias": alias, "version": previous.to_string()});
        self.commit_with_event(tx, project, EventType::MODEL_VERSION_ALIAS_CREATED, data)
            .await?;
        Ok((before.map(|b| b.to_string()), previous.to_string()))
    }

    /// Every move of a model's aliases, oldest first.
    #[qanat_macros::boxed]
    pub async fn alias_history(&self, project: &Project, name: &str) -> Result<Vec<AliasMove>> {
        let row = self.model_row_by_name(project, name).await?;
        let rows = sqlx::query(
            "SELECT alias, version, previous_version, changed_by, changed_time, reason FROM model_alias_history \
             WHERE registered_model_id = $1 ORDER BY alias, seq",
        )
        .bind(&row.id)
        .fetch_all(self.meta.reader())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(AliasMove {
                    alias: r.try_get("alias")?,
                    version: r
                        .try_get::<Option<i64>, _>("version")?
                        .map(|v| v.to_string()),
                    previous_version: r
                        .try_get::<Option<i64>, _>("previous_version")?
                        .map(|v| v.to_string()),
                    changed_by: r.try_get("changed_by")?,
                    changed_time: r.try_get("changed_time")?,
                    reason: r.try_get("reason")?,
                })
            })
            .collect()
    }
}

/// Sets (or, with `None`, removes) an alias inside `tx` and appends the move to the
/// history. Returns the version it pointed at before.
async fn move_alias(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    model: &str,
    alias: &str,
    to: Option<i64>,
    user: &str,
    reason: &str,
) -> Result<Option<i64>> {
    let before: Option<i64> = sqlx::query(
        "SELECT version FROM registered_model_aliases WHERE registered_model_id = $1 AND alias = $2",
    )
    .bind(model)
    .bind(alias)
    .fetch_optional(&mut **tx)
    .await?
    .map(|r| r.try_get("version"))
    .transpose()?;
    match to {
        Some(v) => {
            sqlx::query(
                "INSERT INTO registered_model_aliases (registered_model_id, alias, version) VALUES ($1, $2, $3) \
                 ON CONFLICT (registered_model_id, alias) DO UPDATE SET version = excluded.version",
            )
            .bind(model)
            .bind(alias)
            .bind(v)
            .execute(&mut **tx)
            .await?;
        }
        None => {
            sqlx::query(
                "DELETE FROM registered_model_aliases WHERE registered_model_id = $1 AND alias = $2",
            )
            .bind(model)
            .bind(alias)
            .execute(&mut **tx)
            .await?;
        }
    }
    if before.is_some() || to.is_some() {
        let seq: i64 = sqlx::query(
            "SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM model_alias_history WHERE registered_model_id = $1 AND alias = $2",
        )
        .bind(model)
        .bind(alias)
        .fetch_one(&mut **tx)
        .await?
        .try_get("seq")?;
        sqlx::query(
            "INSERT INTO model_alias_history (registered_model_id, alias, seq, version, previous_version, changed_by, changed_time, reason) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(model)
        .bind(alias)
        .bind(seq)
        .bind(to)
        .bind(before)
        .bind(user)
        .bind(now_ms())
        .bind(reason)
        .execute(&mut **tx)
        .await?;
    }
    Ok(before)
}

async fn upsert_model_tag(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    model: &str,
    t: &Tag,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO registered_model_tags (registered_model_id, key, value) VALUES ($1, $2, $3) \
         ON CONFLICT (registered_model_id, key) DO UPDATE SET value = excluded.value",
    )
    .bind(model)
    .bind(&t.key)
    .bind(&t.value)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn upsert_version_tag(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    model: &str,
    version: i64,
    t: &Tag,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO model_version_tags (registered_model_id, version, key, value) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (registered_model_id, version, key) DO UPDATE SET value = excluded.value",
    )
    .bind(model)
    .bind(version)
    .bind(&t.key)
    .bind(&t.value)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Refuses a registered-model name the project already uses (checked in the writing
/// transaction; the unique index still catches a race, as `Conflict`).
async fn name_free(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    project: &Project,
    name: &str,
) -> Result<()> {
    let taken = sqlx::query("SELECT 1 FROM registered_models WHERE project_id = $1 AND name = $2")
        .bind(&project.id)
        .bind(name)
        .fetch_optional(&mut **tx)
        .await?;
    match taken {
        Some(_) => Err(Error::already_exists("registered model", name)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_and_name_rules() {
        assert!(check_alias("champion").is_ok());
        assert!(check_alias("prod-2").is_ok());
        for bad in ["latest", "v3", "V12", "", "a b", "x/y"] {
            assert!(check_alias(bad).is_err(), "{bad}");
        }
        assert!(check_alias("v").is_ok());
        assert!(check_model_name("fraud").is_ok());
        assert!(check_model_name("a/b").is_err());
        assert_eq!(parse_stage("production").expect("stage"), "Production");
        assert!(parse_stage("Live").is_err());
        assert!(parse_version("0").is_err());
    }
}
