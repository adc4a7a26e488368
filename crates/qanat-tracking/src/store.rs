//! The tracking store.

use std::collections::BTreeMap;

use base64::Engine;
use qanat_core::ProjectId;
use qanat_governance::{commit_audited, AuditRecord, Project};
use qanat_store::MetaStore;
use rand::seq::SliceRandom;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::cursor::{Cursor, Part as CursorPart};
use crate::model::{
    Experiment, Metric, MetricValue, Param, Run, RunData, RunInfo, Tag, ViewType, RUN_STATUSES,
};
use crate::{Error, Result};

/// MLflow's limits on what one log-batch may carry.
pub const MAX_BATCH_METRICS: usize = 1000;
pub const MAX_BATCH_PARAMS: usize = 100;
pub const MAX_BATCH_TAGS: usize = 100;
pub const MAX_BATCH_ITEMS: usize = 1000;
const MAX_KEY: usize = 250;
/// The run tag naming its user: always the authenticated caller, never the client's word.
const USER_TAG: &str = "mlflow.user";
const MAX_PARAM_VALUE: usize = 6000;
const MAX_TAG_VALUE: usize = 8000;
const MAX_RESULTS: i64 = 50_000;
/// Rows per multi-row INSERT (at most 6 binds each, well under every engine's limit).
pub(crate) const ROWS_PER_INSERT: usize = 200;

/// Tracking over the metadata store.
#[derive(Clone, Debug)]
pub struct Tracking {
    pub(crate) meta: MetaStore,
    pub(crate) limits: RunLimits,
    /// Where registry changes record their events (webhooks, NATS).
    pub(crate) outbox: qanat_events::Outbox,
}

/// How much one run may hold, so that no run grows without bound (a run with 32k
/// params once made `runs/get` answer 16 MB). Exceeding a cap is refused with MLflow's
/// `INVALID_PARAMETER_VALUE`, like its per-request batch limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    pub max_params: i64,
    pub max_tags: i64,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_params: 1000,
            max_tags: 1000,
        }
    }
}

/// What a run is created with.
#[derive(Debug, Default)]
pub struct NewRun {
    pub experiment_id: String,
    pub user_id: String,
    pub run_name: Option<String>,
    pub start_time: Option<i64>,
    pub tags: Vec<Tag>,
}

/// A run's mutable attributes (end_run, rename).
#[derive(Debug, Default)]
pub struct RunUpdate {
    pub status: Option<String>,
    pub end_time: Option<i64>,
    pub run_name: Option<String>,
}

/// What one log-batch carries.
#[derive(Debug, Default)]
pub struct Batch {
    pub metrics: Vec<Metric>,
    pub params: Vec<Param>,
    pub tags: Vec<Tag>,
}

/// One page of results and the token for the next.
#[derive(Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_page_token: Option<String>,
}

pub(crate) fn now_ms() -> i64 {
    qanat_store::now_micros() / 1000
}

pub(crate) fn parse_experiment_id(id: &str) -> Result<i64> {
    id.parse::<i64>()
        .ok()
        .filter(|v| *v >= 0)
        .ok_or_else(|| Error::invalid(format!("experiment id '{id}' is not a number")))
}

/// A run id as MLflow takes one: any text without control characters, at most 256
/// bytes (Qanat's own are 32 hex characters; an id it never issued is simply not found).
pub(crate) fn check_run_id(id: &str) -> Result<()> {
    if !id.is_empty() && id.len() <= 256 && !id.chars().any(char::is_control) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "run id '{}' is empty, longer than 256 bytes or holds a control character",
            id.escape_debug()
        )))
    }
}

/// MLflow's rule for metric, param and tag names: letters, digits, `_ - . / :` and
/// spaces; not absolute; no `..` component; at most 250 characters.
/// A free-text name (an experiment's, a run's): anything but control characters —
/// NUL cannot be stored by PostgreSQL, and escapes would reach terminals and logs.
pub(crate) fn check_text_name(what: &str, name: &str) -> Result<()> {
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(Error::invalid(format!(
            "{what} {name:?} holds the control character {c:?}: names are printable text"
        )));
    }
    Ok(())
}

pub(crate) fn check_key(what: &str, key: &str) -> Result<()> {
    let ok_chars = key
        .chars()
        .all(|c| c.is_alphanumeric() || "_-./: ".contains(c));
    if key.is_empty() || !ok_chars {
        return Err(Error::invalid(format!(
            "invalid {what} name '{key}': use letters, digits, underscores, dashes, periods, spaces, colons and slashes"
        )));
    }
    if key.starts_with('/') || key.split('/').any(|p| p == "..") {
        return Err(Error::invalid(format!(
            "invalid {what} name '{key}': it must be a relative path without '..'"
        )));
    }
    if key.len() > MAX_KEY {
        return Err(Error::invalid(format!(
            "{what} name '{}…' is longer than {MAX_KEY} characters",
            &key[..40]
        )));
    }
    Ok(())
}

pub(crate) fn next_page_token(offset: i64) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{{\"offset\": {offset}}}"))
}

pub(crate) fn parse_page_token(token: Option<&str>) -> Result<i64> {
    let Some(t) = token.filter(|t| !t.is_empty()) else {
        return Ok(0);
    };
    base64::engine::general_purpose::STANDARD
        .decode(t)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["offset"].as_i64())
        .filter(|o| *o >= 0)
        .ok_or_else(|| Error::invalid(format!("invalid page token '{t}'")))
}

pub(crate) fn check_max_results(max: Option<i64>, default: i64) -> Result<i64> {
    let m = max.unwrap_or(default);
    if m <= 0 || m > MAX_RESULTS {
        return Err(Error::invalid(format!(
            "Invalid value {m} for parameter 'max_results' supplied. It must be between 1 and {MAX_RESULTS}"
        )));
    }
    Ok(m)
}

/// A readable random run name, as MLflow gives runs started without one.
fn random_run_name() -> String {
    const ADJ: [&str; 12] = [
        "amber", "brisk", "calm", "deft", "eager", "fleet", "gentle", "hardy", "keen", "lucid",
        "nimble", "quiet",
    ];
    const NOUN: [&str; 12] = [
        "falcon", "dune", "oasis", "palm", "qanat", "reef", "sand", "star", "tide", "wadi", "wind",
        "oryx",
    ];
    let mut rng = rand::thread_rng();
    format!(
        "{}-{}-{}",
        ADJ.choose(&mut rng).copied().unwrap_or("calm"),
        NOUN.choose(&mut rng).copied().unwrap_or("dune"),
        rand::Rng::gen_range(&mut rng, 1..1000)
    )
}

fn experiment_from(row: &AnyRow) -> Result<Experiment> {
    Ok(Experiment {
        experiment_id: row.try_get::<i64, _>("experiment_id")?.to_string(),
        name: row.try_get("name")?,
        artifact_location: row.try_get("artifact_location")?,
        lifecycle_stage: row.try_get("lifecycle_stage")?,
        last_update_time: row.try_get("last_update_time")?,
        creation_time: row.try_get("creation_time")?,
        tags: Vec::new(),
    })
}

fn run_info_from(row: &AnyRow) -> Result<RunInfo> {
    let run_id: String = row.try_get("run_id")?;
    Ok(RunInfo {
        run_uuid: run_id.clone(),
        run_id,
        run_name: row.try_get("run_name")?,
        experiment_id: row.try_get::<i64, _>("experiment_id")?.to_string(),
        user_id: row.try_get("user_id")?,
        status: row.try_get("status")?,
        start_time: row.try_get("start_time")?,
        end_time: row.try_get("end_time")?,
        artifact_uri: row.try_get("artifact_uri")?,
        lifecycle_stage: row.try_get("lifecycle_stage")?,
    })
}

pub(crate) fn metric_from(row: &AnyRow) -> Result<Metric> {
    let nan: i64 = row.try_get("is_nan")?;
    Ok(Metric {
        key: row.try_get("key")?,
        value: MetricValue(if nan == 1 {
            f64::NAN
        } else {
            row.try_get("value")?
        }),
        timestamp: row.try_get("timestamp")?,
        step: row.try_get("step")?,
        ..Metric::default()
    })
}

pub(crate) fn is_sqlite(conn: &sqlx::AnyConnection) -> bool {
    conn.backend_name().eq_ignore_ascii_case("sqlite")
}

/// `rows` groups of `cols` placeholders for a multi-row `VALUES` list, bound in order.
/// SQLite gets anonymous `?`: sqlx resolves each numbered `$N` by walking SQLite's list of
/// named parameters, which costs O(n²) binds on a statement of a thousand of them (it was
/// 40% of a 1000-metric log-batch). PostgreSQL only knows `$N`.
pub(crate) fn values_list(conn: &sqlx::AnyConnection, rows: usize, cols: usize) -> String {
    let sqlite = is_sqlite(conn);
    let mut out = String::with_capacity(rows * cols * 6);
    let mut n = 0;
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        out.push('(');
        for c in 0..cols {
            if c > 0 {
                out.push_str(", ");
            }
            n += 1;
            if sqlite {
                out.push('?');
            } else {
                out.push('$');
                out.push_str(&n.to_string());
            }
        }
        out.push(')');
    }
    out
}

pub(crate) fn placeholders(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `sql` with `binds` bound to its placeholders, in order.
fn bound<'q>(
    sql: &'q str,
    binds: &'q [crate::search::Bind],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    use crate::search::Bind;
    let mut q = sqlx::query(sql);
    for b in binds {
        q = match b {
            Bind::Text(t) => q.bind(t.as_str()),
            Bind::Num(n) => q.bind(*n),
            Bind::Int(i) => q.bind(*i),
        };
    }
    q
}

/// Writes go to active runs only: a deleted run is restored first (MLflow's rule and
/// wording).
pub(crate) fn check_active(info: &RunInfo) -> Result<()> {
    if info.lifecycle_stage != "active" {
        return Err(Error::invalid(format!(
            "The run {} must be in the 'active' state. Current state is {}.",
            info.run_id, info.lifecycle_stage
        )));
    }
    Ok(())
}

const RUN_COLUMNS: &str = "runs.run_id, runs.experiment_id, runs.run_name, runs.user_id, runs.status, runs.start_time, runs.end_time, runs.artifact_uri, runs.lifecycle_stage";

impl Tracking {
    pub fn new(meta: MetaStore) -> Self {
        Tracking {
            meta,
            limits: RunLimits::default(),
            outbox: qanat_events::Outbox::default(),
        }
    }

    /// The same store recording its registry events in `outbox` (the server's, whose
    /// dispatcher it wakes).
    pub fn with_outbox(mut self, outbox: qanat_events::Outbox) -> Self {
        self.outbox = outbox;
        self
    }

    /// The same store with other per-run caps.
    pub fn with_limits(mut self, limits: RunLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Refuses, inside `tx` (so nothing is written), a run that now holds more params
    /// or tags than [`RunLimits`] allow.
    async fn check_run_caps(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        run_id: &str,
        params: bool,
        tags: bool,
    ) -> Result<()> {
        let checks = [
            (params, "run_params", "params", self.limits.max_params),
            (tags, "run_tags", "tags", self.limits.max_tags),
        ];
        for (_, table, what, cap) in checks.into_iter().filter(|c| c.0) {
            let n: i64 = sqlx::query(&format!(
                "SELECT COUNT(*) AS n FROM {table} WHERE run_id = $1"
            ))
            .bind(run_id)
            .fetch_one(&mut **tx)
            .await?
            .try_get("n")?;
            if n > cap {
                return Err(Error::invalid(format!(
                    "run {run_id} would hold {n} {what}; a run holds at most {cap} (tracking.max_{what}_per_run)"
                )));
            }
        }
        Ok(())
    }

    /// One page of a search over `t`: `head` is `SELECT … FROM … WHERE <fixed
    /// conditions>` whose placeholders are `leading`; the filter and order (MLflow's
    /// syntax) are parsed, appended as bound SQL, and one page is fetched.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn search_page(
        &self,
        t: &crate::search::Target,
        head: &str,
        leading: Vec<crate::search::Bind>,
        filter: Option<&str>,
        order_by: &[String],
        max: i64,
        offset: i64,
    ) -> Result<(Vec<AnyRow>, bool)> {
        use crate::search;
        let clauses = match filter.map(str::trim).filter(|f| !f.is_empty()) {
            Some(f) => search::parse_filter(t, f)?,
            None => Vec::new(),
        };
        let order = search::parse_order(t, order_by)?;
        let mut next = 1 + leading.len();
        let filter_sql = search::where_sql(t, &clauses, self.meta.backend(), next);
        next += filter_sql.params.len();
        let order_sql = search::order_sql(t, &order, next);
        next += order_sql.params.len();
        let sql = format!(
            "{head}{} ORDER BY {} LIMIT ${next} OFFSET ${}",
            filter_sql.text,
            order_sql.text,
            next + 1
        );
        let binds: Vec<_> = leading
            .into_iter()
            .chain(filter_sql.params)
            .chain(order_sql.params)
            .collect();
        self.fetch_page(&sql, &binds, max, offset).await
    }

    /// One page of a search: `sql` ends in `LIMIT $n OFFSET $n+1` and its other
    /// placeholders are `binds`, in order. At most `max` rows, and whether more follow.
    pub(crate) async fn fetch_page(
        &self,
        sql: &str,
        binds: &[crate::search::Bind],
        max: i64,
        offset: i64,
    ) -> Result<(Vec<AnyRow>, bool)> {
        let q = bound(sql, binds);
        let mut rows = q
            .bind(max + 1)
            .bind(offset)
            .fetch_all(self.meta.reader())
            .await?;
        let more = rows.len() as i64 > max;
        rows.truncate(max as usize);
        Ok((rows, more))
    }

    /// How many runs `exps` hold (any stage), how many of them have a non-NaN latest
    /// value of `key`, and how many have one at all: three index counts, no row read.
    async fn metric_counts(
        &self,
        project: &Project,
        exps: &[i64],
        key: &str,
    ) -> Result<(i64, i64, i64)> {
        let list = placeholders(2, exps.len());
        let k = exps.len() + 2;
        let sql = format!(
            "SELECT (SELECT COUNT(*) FROM runs WHERE project_id = $1 AND experiment_id IN ({list})) AS runs, \
             (SELECT COUNT(*) FROM latest_metrics WHERE project_id = $1 AND experiment_id IN ({list}) \
             AND key = ${k} AND is_nan = 0) AS valued, \
             (SELECT COUNT(*) FROM latest_metrics WHERE project_id = $1 AND experiment_id IN ({list}) \
             AND key = ${k}) AS present"
        );
        let mut q = sqlx::query(&sql).bind(project.id.as_str());
        for e in exps {
            q = q.bind(*e);
        }
        let row = q.bind(key).fetch_one(self.meta.reader()).await?;
        Ok((
            row.try_get("runs")?,
            row.try_get("valued")?,
            row.try_get("present")?,
        ))
    }

    /// The `n` that `sql` (a `SELECT COUNT(*) AS n …`) counts.
    async fn count(&self, sql: &str, binds: &[crate::search::Bind]) -> Result<i64> {
        let q = bound(sql, binds);
        Ok(q.fetch_one(self.meta.reader()).await?.try_get("n")?)
    }

    /// Runs `sql`, whose placeholders $1.. are `ids`, on a reader.
    pub(crate) async fn rows_for(&self, sql: &str, ids: &[String]) -> Result<Vec<AnyRow>> {
        let mut q = sqlx::query(sql);
        for id in ids {
            q = q.bind(id);
        }
        Ok(q.fetch_all(self.meta.reader()).await?)
    }

    /// Makes sure the project has its "Default" experiment (id 0).
    #[qanat_macros::boxed]
    pub async fn ensure_default(&self, project: &Project) -> Result<()> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO experiments (project_id, experiment_id, name, artifact_location, lifecycle_stage, creation_time, last_update_time) \
             VALUES ($1, 0, 'Default', 'mlflow-artifacts:/0', 'active', $2, $2) ON CONFLICT DO NOTHING",
        )
        .bind(&project.id)
        .bind(now)
        .execute(self.meta.writer())
        .await?;
        Ok(())
    }

    // ---- experiments ----

    /// Creates an experiment; its artifacts live under `mlflow-artifacts:/<id>` unless
    /// another location is given.
    #[qanat_macros::boxed]
    pub async fn create_experiment(
        &self,
        project: &Project,
        name: &str,
        artifact_location: Option<&str>,
        tags: &[Tag],
    ) -> Result<String> {
        let name = name.trim();
        if name.is_empty() {
            return Err(Error::invalid("an experiment needs a non-empty name"));
        }
        if name.len() > 500 {
            return Err(Error::invalid(
                "experiment names are at most 500 characters",
            ));
        }
        check_text_name("experiment name", name)?;
        for t in tags {
            check_key("tag", &t.key)?;
        }
        self.ensure_default(project).await?;
        let now = now_ms();
        let mut tx = self.meta.writer().begin().await?;
        let taken = sqlx::query(
            "SELECT lifecycle_stage FROM experiments WHERE project_id = $1 AND name = $2",
        )
        .bind(&project.id)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = taken {
            let stage: String = row.try_get("lifecycle_stage")?;
            let kind = if stage == "deleted" {
                "deleted experiment (restore it, or choose another name)"
            } else {
                "experiment"
            };
            return Err(Error::already_exists(kind, name));
        }
        let next: i64 = sqlx::query(
            "SELECT COALESCE(MAX(experiment_id), 0) + 1 AS next FROM experiments WHERE project_id = $1",
        )
        .bind(&project.id)
        .fetch_one(&mut *tx)
        .await?
        .try_get("next")?;
        let location = match artifact_location.filter(|l| !l.is_empty()) {
            Some(l) => l.to_string(),
            None => format!("mlflow-artifacts:/{next}"),
        };
        sqlx::query(
            "INSERT INTO experiments (project_id, experiment_id, name, artifact_location, lifecycle_stage, creation_time, last_update_time) \
             VALUES ($1, $2, $3, $4, 'active', $5, $5)",
        )
        .bind(&project.id)
        .bind(next)
        .bind(name)
        .bind(&location)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        for t in tags {
            upsert_experiment_tag(&mut tx, &project.id, next, t).await?;
        }
        tx.commit().await?;
        Ok(next.to_string())
    }

    #[qanat_macros::boxed]
    pub async fn experiment(&self, project: &Project, id: &str) -> Result<Experiment> {
        let e = self.experiment_head(project, id).await?;
        self.with_tags(project, e).await
    }

    /// An experiment's row without its tags (one query): what a new run needs.
    async fn experiment_head(&self, project: &Project, id: &str) -> Result<Experiment> {
        let n = parse_experiment_id(id)?;
        if n == 0 {
            self.ensure_default(project).await?;
        }
        let row =
            sqlx::query("SELECT * FROM experiments WHERE project_id = $1 AND experiment_id = $2")
                .bind(&project.id)
                .bind(n)
                .fetch_optional(self.meta.reader())
                .await?
                .ok_or_else(|| Error::not_found("experiment", id))?;
        experiment_from(&row)
    }

    #[qanat_macros::boxed]
    pub async fn experiment_by_name(&self, project: &Project, name: &str) -> Result<Experiment> {
        if name == "Default" {
            self.ensure_default(project).await?;
        }
        let row = sqlx::query("SELECT * FROM experiments WHERE project_id = $1 AND name = $2")
            .bind(&project.id)
            .bind(name)
            .fetch_optional(self.meta.reader())
            .await?
            .ok_or_else(|| Error::not_found("experiment", name))?;
        self.with_tags(project, experiment_from(&row)?).await
    }

    async fn with_tags(&self, project: &Project, mut e: Experiment) -> Result<Experiment> {
        let rows = sqlx::query(
            "SELECT key, value FROM experiment_tags WHERE project_id = $1 AND experiment_id = $2 ORDER BY key",
        )
        .bind(&project.id)
        .bind(parse_experiment_id(&e.experiment_id)?)
        .fetch_all(self.meta.reader())
        .await?;
        e.tags = rows
            .iter()
            .map(|r| {
                Ok(Tag {
                    key: r.try_get("key")?,
                    value: r.try_get("value")?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(e)
    }

    /// Experiments of the project, newest first (or by name), a page at a time.
    /// `filter` supports what `mlflow.search_experiments` sends most: none, or
    /// `name = '…'` / `name LIKE '…'`.
    #[qanat_macros::boxed]
    pub async fn search_experiments(
        &self,
        project: &Project,
        view: ViewType,
        max_results: Option<i64>,
        page_token: Option<&str>,
        filter: Option<&str>,
        order_by: &[String],
    ) -> Result<Page<Experiment>> {
        self.ensure_default(project).await?;
        let max = check_max_results(max_results, 1000)?;
        let offset = parse_page_token(page_token)?;
        let stages = view.stages();
        let head = format!(
            "SELECT e.* FROM experiments e WHERE e.project_id = $1 AND e.lifecycle_stage IN ({})",
            placeholders(2, stages.len())
        );
        let mut leading = vec![crate::search::Bind::Text(project.id.to_string())];
        leading.extend(
            stages
                .iter()
                .map(|s| crate::search::Bind::Text(s.to_string())),
        );
        let (rows, more) = self
            .search_page(
                &crate::search::EXPERIMENTS,
                &head,
                leading,
                filter,
                order_by,
                max,
                offset,
            )
            .await?;
        let mut items = Vec::new();
        for r in &rows {
            items.push(self.with_tags(project, experiment_from(r)?).await?);
        }
        Ok(Page {
            items,
            next_page_token: more.then(|| next_page_token(offset + max)),
        })
    }

    #[qanat_macros::boxed]
    pub async fn rename_experiment(
        &self,
        project: &Project,
        id: &str,
        new_name: &str,
    ) -> Result<()> {
        let n = parse_experiment_id(id)?;
        let new_name = new_name.trim();
        check_text_name("experiment name", new_name)?;
        if new_name.is_empty() {
            return Err(Error::invalid("new_name must not be empty"));
        }
        let exp = self.experiment(project, id).await?;
        if exp.name == new_name {
            return Ok(());
        }
        if self.experiment_by_name(project, new_name).await.is_ok() {
            return Err(Error::already_exists("experiment", new_name));
        }
        sqlx::query("UPDATE experiments SET name = $1, last_update_time = $2 WHERE project_id = $3 AND experiment_id = $4")
            .bind(new_name)
            .bind(now_ms())
            .bind(&project.id)
            .bind(n)
            .execute(self.meta.writer())
            .await?;
        Ok(())
    }

    /// Marks an experiment and its runs deleted (restorable); the Default cannot be.
    #[qanat_macros::boxed]
    pub async fn set_experiment_stage(
        &self,
        project: &Project,
        id: &str,
        deleted: bool,
    ) -> Result<()> {
        let n = parse_experiment_id(id)?;
        if n == 0 && deleted {
            return Err(Error::invalid(
                "the Default experiment (id 0) cannot be deleted",
            ));
        }
        let exp = self.experiment(project, id).await?;
        let (from, to) = if deleted {
            ("active", "deleted")
        } else {
            ("deleted", "active")
        };
        if exp.lifecycle_stage != from {
            return Err(Error::invalid(format!(
                "experiment {id} is {}, not {from}",
                exp.lifecycle_stage
            )));
        }
        let now = now_ms();
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query("UPDATE experiments SET lifecycle_stage = $1, last_update_time = $2 WHERE project_id = $3 AND experiment_id = $4")
            .bind(to)
            .bind(now)
            .bind(&project.id)
            .bind(n)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE runs SET lifecycle_stage = $1, deleted_time = $2 WHERE project_id = $3 AND experiment_id = $4 AND lifecycle_stage = $5")
            .bind(to)
            .bind(deleted.then_some(now))
            .bind(&project.id)
            .bind(n)
            .bind(from)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    #[qanat_macros::boxed]
    pub async fn set_experiment_tag(&self, project: &Project, id: &str, tag: &Tag) -> Result<()> {
        check_key("tag", &tag.key)?;
        let n = parse_experiment_id(id)?;
        self.experiment(project, id).await?;
        let mut tx = self.meta.writer().begin().await?;
        upsert_experiment_tag(&mut tx, &project.id, n, tag).await?;
        tx.commit().await?;
        Ok(())
    }

    #[qanat_macros::boxed]
    pub async fn delete_experiment_tag(
        &self,
        project: &Project,
        id: &str,
        key: &str,
    ) -> Result<()> {
        let n = parse_experiment_id(id)?;
        self.experiment(project, id).await?;
        let gone = sqlx::query(
            "DELETE FROM experiment_tags WHERE project_id = $1 AND experiment_id = $2 AND key = $3",
        )
        .bind(&project.id)
        .bind(n)
        .bind(key)
        .execute(self.meta.writer())
        .await?
        .rows_affected();
        if gone == 0 {
            return Err(Error::not_found("experiment tag", key));
        }
        Ok(())
    }

    // ---- runs ----

    #[qanat_macros::boxed]
    pub async fn create_run(&self, project: &Project, new: NewRun) -> Result<Run> {
        self.create_run_audited(project, new, None).await
    }

    /// Creates a run; with `audit`, the request's success entry is appended in the
    /// run's own transaction (one commit, not two). The run is answered from what was
    /// written, not read back: a new run has only its tags.
    #[qanat_macros::boxed]
    pub async fn create_run_audited(
        &self,
        project: &Project,
        new: NewRun,
        audit: Option<&AuditRecord>,
    ) -> Result<Run> {
        let exp = self.experiment_head(project, &new.experiment_id).await?;
        if exp.lifecycle_stage != "active" {
            return Err(Error::invalid(format!(
                "experiment {} is deleted; restore it to add runs",
                exp.experiment_id
            )));
        }
        for t in &new.tags {
            check_key("tag", &t.key)?;
        }
        let run_id = uuid::Uuid::new_v4().simple().to_string();
        let tag_name = new
            .tags
            .iter()
            .find(|t| t.key == "mlflow.runName")
            .map(|t| t.value.clone());
        let run_name = new
            .run_name
            .filter(|n| !n.is_empty())
            .or(tag_name)
            .unwrap_or_else(random_run_name);
        check_text_name("run name", &run_name)?;
        let artifact_uri = format!(
            "{}/{run_id}/artifacts",
            exp.artifact_location.trim_end_matches('/')
        );
        // The user is the authenticated caller, whatever `mlflow.user` the client sent.
        let mut tags = new.tags;
        tags.retain(|t| t.key != "mlflow.runName" && t.key != USER_TAG);
        tags.push(Tag {
            key: "mlflow.runName".into(),
            value: run_name.clone(),
        });
        tags.push(Tag {
            key: USER_TAG.into(),
            value: new.user_id.clone(),
        });
        // Last value wins, as `upsert_tags` stores them; ordered by key as a read is.
        let tags: Vec<Tag> = tags
            .into_iter()
            .map(|t| (t.key, t.value))
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .map(|(key, value)| Tag { key, value })
            .collect();
        // A new run holds only these, so the cap is checked here, not counted in SQL.
        let cap = self.limits.max_tags;
        if tags.len() as i64 > cap {
            return Err(Error::invalid(format!(
                "run {run_id} would hold {} tags; a run holds at most {cap} (tracking.max_tags_per_run)",
                tags.len()
            )));
        }
        let info = RunInfo {
            run_uuid: run_id.clone(),
            run_id: run_id.clone(),
            run_name,
            experiment_id: exp.experiment_id.clone(),
            user_id: new.user_id,
            status: "RUNNING".into(),
            start_time: Some(new.start_time.unwrap_or_else(now_ms)),
            end_time: None,
            artifact_uri,
            lifecycle_stage: "active".into(),
        };
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query(
            "INSERT INTO runs (run_id, project_id, experiment_id, run_name, user_id, status, start_time, end_time, lifecycle_stage, artifact_uri, deleted_time) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8, $9, NULL)",
        )
        .bind(&info.run_id)
        .bind(&project.id)
        .bind(parse_experiment_id(&exp.experiment_id)?)
        .bind(&info.run_name)
        .bind(&info.user_id)
        .bind(&info.status)
        .bind(info.start_time)
        .bind(&info.lifecycle_stage)
        .bind(&info.artifact_uri)
        .execute(&mut *tx)
        .await?;
        upsert_tags(&mut tx, &run_id, &tags).await?;
        commit_audited(tx, audit).await?;
        Ok(Run {
            info,
            data: RunData {
                tags,
                ..RunData::default()
            },
            inputs: Default::default(),
            outputs: Default::default(),
        })
    }

    pub(crate) async fn run_row(&self, project: &Project, run_id: &str) -> Result<RunInfo> {
        check_run_id(run_id)?;
        let row = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE run_id = $1 AND project_id = $2"
        ))
        .bind(run_id)
        .bind(&project.id)
        .fetch_optional(self.meta.reader())
        .await?
        .ok_or_else(|| Error::not_found("run", run_id))?;
        run_info_from(&row)
    }

    #[qanat_macros::boxed]
    pub async fn run(&self, project: &Project, run_id: &str) -> Result<Run> {
        let info = self.run_row(project, run_id).await?;
        let ids = std::slice::from_ref(&info.run_id);
        let mut data = self.run_data(ids).await?;
        let (inputs, outputs) = self
            .run_io(ids)
            .await?
            .remove(&info.run_id)
            .unwrap_or_default();
        Ok(Run {
            data: data.remove(&info.run_id).unwrap_or_default(),
            info,
            inputs,
            outputs,
        })
    }

    /// Params, tags and latest metrics of several runs, three queries in all.
    async fn run_data(&self, ids: &[String]) -> Result<BTreeMap<String, RunData>> {
        let mut out: BTreeMap<String, RunData> = BTreeMap::new();
        if ids.is_empty() {
            return Ok(out);
        }
        for batch in ids.chunks(500) {
            let list = placeholders(1, batch.len());
            let q = format!(
                "SELECT run_id, key, value FROM run_params WHERE run_id IN ({list}) ORDER BY key"
            );
            let mut query = sqlx::query(&q);
            for id in batch {
                query = query.bind(id);
            }
            for r in query.fetch_all(self.meta.reader()).await? {
                out.entry(r.try_get("run_id")?)
                    .or_default()
                    .params
                    .push(Param {
                        key: r.try_get("key")?,
                        value: r.try_get("value")?,
                    });
            }
            let q = format!(
                "SELECT run_id, key, value FROM run_tags WHERE run_id IN ({list}) ORDER BY key"
            );
            let mut query = sqlx::query(&q);
            for id in batch {
                query = query.bind(id);
            }
            for r in query.fetch_all(self.meta.reader()).await? {
                out.entry(r.try_get("run_id")?).or_default().tags.push(Tag {
                    key: r.try_get("key")?,
                    value: r.try_get("value")?,
                });
            }
            let q = format!("SELECT run_id, key, value, is_nan, timestamp, step FROM latest_metrics WHERE run_id IN ({list}) ORDER BY key");
            let mut query = sqlx::query(&q);
            for id in batch {
                query = query.bind(id);
            }
            for r in query.fetch_all(self.meta.reader()).await? {
                out.entry(r.try_get("run_id")?)
                    .or_default()
                    .metrics
                    .push(metric_from(&r)?);
            }
        }
        Ok(out)
    }

    #[qanat_macros::boxed]
    pub async fn update_run(
        &self,
        project: &Project,
        run_id: &str,
        u: RunUpdate,
    ) -> Result<RunInfo> {
        let info = self.run_row(project, run_id).await?;
        if let Some(n) = &u.run_name {
            check_text_name("run name", n)?;
        }
        if let Some(s) = &u.status {
            if !RUN_STATUSES.contains(&s.as_str()) {
                return Err(Error::invalid(format!(
                    "run status '{s}' is not one of {}",
                    RUN_STATUSES.join(", ")
                )));
            }
        }
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query(
            "UPDATE runs SET status = COALESCE($1, status), end_time = COALESCE($2, end_time), run_name = COALESCE($3, run_name) WHERE run_id = $4",
        )
        .bind(u.status.clone())
        .bind(u.end_time)
        .bind(u.run_name.clone().filter(|n| !n.is_empty()))
        .bind(&info.run_id)
        .execute(&mut *tx)
        .await?;
        if let Some(name) = u.run_name.filter(|n| !n.is_empty()) {
            upsert_tags(
                &mut tx,
                &info.run_id,
                &[Tag {
                    key: "mlflow.runName".into(),
                    value: name,
                }],
            )
            .await?;
        }
        tx.commit().await?;
        self.run_row(project, run_id).await
    }

    #[qanat_macros::boxed]
    pub async fn set_run_stage(
        &self,
        project: &Project,
        run_id: &str,
        deleted: bool,
    ) -> Result<()> {
        let info = self.run_row(project, run_id).await?;
        let (to, time) = if deleted {
            ("deleted", Some(now_ms()))
        } else {
            ("active", None)
        };
        if !deleted {
            let exp = self.experiment(project, &info.experiment_id).await?;
            if exp.lifecycle_stage != "active" {
                return Err(Error::invalid(format!(
                    "run {run_id} belongs to deleted experiment {}; restore the experiment",
                    exp.experiment_id
                )));
            }
        }
        sqlx::query("UPDATE runs SET lifecycle_stage = $1, deleted_time = $2 WHERE run_id = $3")
            .bind(to)
            .bind(time)
            .bind(&info.run_id)
            .execute(self.meta.writer())
            .await?;
        Ok(())
    }

    /// Logs metrics, params and tags in one transaction, all or nothing. A param may be
    /// logged again only with the same value.
    /// Logs metrics, params and tags to a run in one transaction. With `audit`, the
    /// request's success entry is appended to the audit log in that same transaction.
    #[qanat_macros::boxed]
    pub async fn log_batch(
        &self,
        project: &Project,
        run_id: &str,
        batch: Batch,
        audit: Option<&AuditRecord>,
    ) -> Result<()> {
        if batch.metrics.len() > MAX_BATCH_METRICS
            || batch.params.len() > MAX_BATCH_PARAMS
            || batch.tags.len() > MAX_BATCH_TAGS
            || batch.metrics.len() + batch.params.len() + batch.tags.len() > MAX_BATCH_ITEMS
        {
            return Err(Error::invalid(format!(
                "a batch carries at most {MAX_BATCH_METRICS} metrics, {MAX_BATCH_PARAMS} params, {MAX_BATCH_TAGS} tags and {MAX_BATCH_ITEMS} items in all; got {} metrics, {} params, {} tags",
                batch.metrics.len(),
                batch.params.len(),
                batch.tags.len()
            )));
        }
        for m in &batch.metrics {
            check_key("metric", &m.key)?;
        }
        for p in &batch.params {
            check_key("param", &p.key)?;
            if p.value.len() > MAX_PARAM_VALUE {
                return Err(Error::invalid(format!(
                    "param '{}' has a value of {} characters; the limit is {MAX_PARAM_VALUE}",
                    p.key,
                    p.value.len()
                )));
            }
        }
        for t in &batch.tags {
            check_key("tag", &t.key)?;
            if t.key == USER_TAG {
                return Err(Error::invalid(format!(
                    "tag '{USER_TAG}' is set by the server from the authenticated user; leave it out"
                )));
            }
            if t.value.len() > MAX_TAG_VALUE {
                return Err(Error::invalid(format!(
                    "tag '{}' has a value of {} characters; the limit is {MAX_TAG_VALUE}",
                    t.key,
                    t.value.len()
                )));
            }
        }
        let mut seen = BTreeMap::new();
        for p in &batch.params {
            if let Some(old) = seen.insert(p.key.as_str(), p.value.as_str()) {
                if old != p.value {
                    return Err(Error::invalid(format!(
                        "param '{}' appears twice in the batch with different values",
                        p.key
                    )));
                }
            }
        }
        let info = self.run_row(project, run_id).await?;
        check_active(&info)?;
        self.check_metric_models(project, &batch.metrics).await?;
        let mut tx = self.meta.writer().begin().await?;
        // Only a batch that adds params can take a run past its cap (a repeat is not new).
        let mut params_added = false;
        if !seen.is_empty() {
            let keys: Vec<&str> = seen.keys().copied().collect();
            let q = format!(
                "SELECT key, value FROM run_params WHERE run_id = $1 AND key IN ({})",
                placeholders(2, keys.len())
            );
            let mut query = sqlx::query(&q).bind(&info.run_id);
            for k in &keys {
                query = query.bind(*k);
            }
            let mut new: Vec<(&str, &str)> = seen.iter().map(|(k, v)| (*k, *v)).collect();
            for r in query.fetch_all(&mut *tx).await? {
                let key: String = r.try_get("key")?;
                let value: String = r.try_get("value")?;
                let logged = seen.get(key.as_str()).copied().unwrap_or_default();
                if logged != value {
                    return Err(Error::invalid(format!(
                        "param '{key}' was already logged with value '{value}'; params are immutable (tried '{logged}')"
                    )));
                }
                new.retain(|(k, _)| *k != key);
            }
            params_added = !new.is_empty();
            for rows in new.chunks(ROWS_PER_INSERT) {
                let q = format!(
                    "INSERT INTO run_params (run_id, key, value) VALUES {}",
                    values_list(&tx, rows.len(), 3)
                );
                let mut query = sqlx::query(&q);
                for (k, v) in rows {
                    query = query.bind(&info.run_id).bind(*k).bind(*v);
                }
                query.execute(&mut *tx).await?;
            }
        }
        upsert_tags(&mut tx, &info.run_id, &batch.tags).await?;
        let tags = !batch.tags.is_empty();
        self.check_run_caps(&mut tx, &info.run_id, params_added, tags)
            .await?;
        insert_metrics(&mut tx, project, &info, &batch.metrics).await?;
        commit_audited(tx, audit).await?;
        Ok(())
    }

    #[qanat_macros::boxed]
    pub async fn delete_tag(&self, project: &Project, run_id: &str, key: &str) -> Result<()> {
        let info = self.run_row(project, run_id).await?;
        check_active(&info)?;
        let gone = sqlx::query("DELETE FROM run_tags WHERE run_id = $1 AND key = $2")
            .bind(&info.run_id)
            .bind(key)
            .execute(self.meta.writer())
            .await?
            .rows_affected();
        if gone == 0 {
            return Err(Error::not_found("tag", key));
        }
        Ok(())
    }

    /// Every point of one metric of a run, by step then time.
    #[qanat_macros::boxed]
    pub async fn metric_history(
        &self,
        project: &Project,
        run_id: &str,
        key: &str,
        max_results: Option<i64>,
        page_token: Option<&str>,
    ) -> Result<Page<Metric>> {
        let info = self.run_row(project, run_id).await?;
        let max = check_max_results(max_results, 25_000)?;
        let offset = parse_page_token(page_token)?;
        let rows = sqlx::query(
            "SELECT key, value, is_nan, timestamp, step FROM metrics WHERE run_id = $1 AND key = $2 ORDER BY step, timestamp LIMIT $3 OFFSET $4",
        )
        .bind(&info.run_id)
        .bind(key)
        .bind(max + 1)
        .bind(offset)
        .fetch_all(self.meta.reader())
        .await?;
        let more = rows.len() as i64 > max;
        let items = rows
            .iter()
            .take(max as usize)
            .map(metric_from)
            .collect::<Result<Vec<_>>>()?;
        Ok(Page {
            items,
            next_page_token: more.then(|| next_page_token(offset + max)),
        })
    }

    /// The points of `key` in runs `run_ids` of this project (other ids yield
    /// nothing, as on MLflow), by run, then timestamp, step and value: at most
    /// `max_results` in all. What the UI's charts ask for.
    #[qanat_macros::boxed]
    pub async fn metric_history_bulk(
        &self,
        project: &Project,
        run_ids: &[String],
        key: &str,
        max_results: i64,
    ) -> Result<Vec<(String, Metric)>> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT m.run_id, m.key, m.value, m.is_nan, m.timestamp, m.step FROM metrics m JOIN runs r ON r.run_id = m.run_id \
             WHERE r.project_id = $1 AND m.key = $2 AND m.run_id IN ({}) ORDER BY m.run_id, m.timestamp, m.step, m.value LIMIT ${}",
            placeholders(3, run_ids.len()),
            3 + run_ids.len()
        );
        let mut q = sqlx::query(&sql).bind(project.id.as_str()).bind(key);
        for r in run_ids {
            q = q.bind(r);
        }
        q.bind(max_results)
            .fetch_all(self.meta.reader())
            .await?
            .iter()
            .map(|row| Ok((row.try_get("run_id")?, metric_from(row)?)))
            .collect()
    }

    /// [`Tracking::metric_history_bulk`] thinned for a chart: the steps logged in
    /// any of the runs within `[start, end]` (default: from 0 to the last), at most
    /// `max_results` of them evenly spread plus the last, plus each run's first and
    /// last step in that range; every point at those steps, by run (in the order
    /// given), step, timestamp and value. MLflow's `get-history-bulk-interval`.
    #[qanat_macros::boxed]
    pub async fn metric_history_sampled(
        &self,
        project: &Project,
        run_ids: &[String],
        key: &str,
        max_results: usize,
        range: Option<(i64, i64)>,
    ) -> Result<Vec<(String, Metric)>> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        // The steps are chosen in SQL (distinct steps, each run's ends); only the
        // points at the chosen steps are read, never a whole history.
        let from = format!(
            "FROM metrics m JOIN runs r ON r.run_id = m.run_id WHERE r.project_id = $1 AND m.key = $2 AND m.run_id IN ({})",
            placeholders(3, run_ids.len())
        );
        macro_rules! bind_all {
            ($sql:expr) => {{
                let mut q = sqlx::query($sql).bind(project.id.as_str()).bind(key);
                for r in run_ids {
                    q = q.bind(r);
                }
                q
            }};
        }
        let steps_sql = format!("SELECT DISTINCT m.step AS step {from} ORDER BY m.step");
        let steps: Vec<i64> = bind_all!(&steps_sql)
            .fetch_all(self.meta.reader())
            .await?
            .iter()
            .map(|r| r.try_get("step"))
            .collect::<Result<_, _>>()?;
        let Some(&last) = steps.last() else {
            return Ok(Vec::new());
        };
        let (start, end) = range.unwrap_or((0, last));
        let inside: Vec<i64> = steps
            .into_iter()
            .filter(|s| (start..=end).contains(s))
            .collect();
        let mut keep: std::collections::BTreeSet<i64> = if inside.len() <= max_results {
            inside.iter().copied().collect()
        } else {
            let mut k: std::collections::BTreeSet<i64> = (0..max_results)
                .map(|i| inside[i * inside.len() / max_results])
                .collect();
            k.extend(inside.last());
            k
        };
        // Each run's own first and last step stay, so no line loses its ends.
        let ends_sql =
            format!("SELECT MIN(m.step) AS lo, MAX(m.step) AS hi {from} GROUP BY m.run_id");
        for row in bind_all!(&ends_sql).fetch_all(self.meta.reader()).await? {
            let (lo, hi): (i64, i64) = (row.try_get("lo")?, row.try_get("hi")?);
            keep.extend([lo, hi].into_iter().filter(|s| (start..=end).contains(s)));
        }
        if keep.is_empty() {
            return Ok(Vec::new());
        }
        let keep: Vec<i64> = keep.into_iter().collect();
        let mut points = Vec::new();
        // Bounded statements: at most 500 steps per query.
        for chunk in keep.chunks(500) {
            let sql = format!(
                "SELECT m.run_id, m.key, m.value, m.is_nan, m.timestamp, m.step {from} AND m.step IN ({})",
                placeholders(3 + run_ids.len(), chunk.len())
            );
            let mut q = bind_all!(&sql);
            for s in chunk {
                q = q.bind(*s);
            }
            for row in q.fetch_all(self.meta.reader()).await? {
                points.push((row.try_get::<String, _>("run_id")?, metric_from(&row)?));
            }
        }
        // Runs in the order asked for.
        let pos = |r: &str| run_ids.iter().position(|x| x == r).unwrap_or(usize::MAX);
        points.sort_by(|(ra, a), (rb, b)| {
            (pos(ra), a.step, a.timestamp)
                .cmp(&(pos(rb), b.step, b.timestamp))
                .then(a.value.0.total_cmp(&b.value.0))
        });
        Ok(points)
    }

    /// The curves of `key` in runs `run_ids` of this project, thinned for a chart
    /// (other ids yield nothing): each run's first and last step and, between them,
    /// the first step logged at or after each of `max_points` targets spread evenly
    /// over that run's steps; every point at those steps, by run (in the order given),
    /// step, timestamp and value.
    ///
    /// Unlike [`Tracking::metric_history_sampled`] (MLflow's sampling, which reads
    /// every distinct step), each chosen step is one index seek, so a curve of a
    /// million points costs what one of a thousand does: the UI's run and compare pages.
    #[qanat_macros::boxed]
    pub async fn metric_curves(
        &self,
        project: &Project,
        run_ids: &[String],
        key: &str,
        max_points: usize,
    ) -> Result<Vec<(String, Metric)>> {
        if run_ids.is_empty() || max_points == 0 {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT run_id FROM runs WHERE project_id = $1 AND run_id IN ({})",
            placeholders(2, run_ids.len())
        );
        let mut q = sqlx::query(&sql).bind(project.id.as_str());
        for r in run_ids {
            q = q.bind(r);
        }
        let mine: std::collections::HashSet<String> = q
            .fetch_all(self.meta.reader())
            .await?
            .iter()
            .map(|row| row.try_get("run_id"))
            .collect::<Result<_, _>>()?;
        let mut points = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for run in run_ids {
            if !mine.contains(run) || !seen.insert(run) {
                continue;
            }
            let ends = sqlx::query(
                "SELECT (SELECT MIN(step) FROM metrics WHERE run_id = $1 AND key = $2) AS lo, \
                 (SELECT MAX(step) FROM metrics WHERE run_id = $1 AND key = $2) AS hi",
            )
            .bind(run)
            .bind(key)
            .fetch_one(self.meta.reader())
            .await?;
            let (Some(lo), Some(hi)) = (
                ends.try_get::<Option<i64>, _>("lo")?,
                ends.try_get::<Option<i64>, _>("hi")?,
            ) else {
                continue;
            };
            let span = i128::from(hi) - i128::from(lo);
            let targets: std::collections::BTreeSet<i64> = (0..max_points)
                .map(|i| lo.saturating_add((span * i as i128 / max_points as i128) as i64))
                .chain([hi])
                .collect();
            // A target with no point at or after it within the run cannot occur (hi
            // is the last); each is found by the index's first entry at or past it.
            let sql = format!(
                "SELECT m.run_id, m.key, m.value, m.is_nan, m.timestamp, m.step FROM metrics m \
                 WHERE m.run_id = $1 AND m.key = $2 AND m.step IN (\
                 SELECT (SELECT MIN(x.step) FROM metrics x WHERE x.run_id = $1 AND x.key = $2 AND x.step >= t.column1) \
                 FROM (VALUES {}) AS t) ORDER BY m.step, m.timestamp, m.value",
                (3..3 + targets.len())
                    .map(|i| format!("(${i})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let mut q = sqlx::query(&sql).bind(run).bind(key);
            for t in &targets {
                q = q.bind(*t);
            }
            for row in q.fetch_all(self.meta.reader()).await? {
                points.push((row.try_get::<String, _>("run_id")?, metric_from(&row)?));
            }
        }
        Ok(points)
    }

    /// The distinct datasets the runs of `experiment_ids` read, with their context
    /// (the `mlflow.data.context` input tag): at most 1000.
    #[qanat_macros::boxed]
    pub async fn dataset_summaries(
        &self,
        project: &Project,
        experiment_ids: &[String],
    ) -> Result<Vec<crate::DatasetSummary>> {
        let ids = experiment_ids
            .iter()
            .map(|e| parse_experiment_id(e))
            .collect::<Result<Vec<_>>>()?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT r.experiment_id, d.name, d.digest, d.tags_json FROM run_dataset_inputs d JOIN runs r ON r.run_id = d.run_id \
             WHERE r.project_id = $1 AND r.experiment_id IN ({})",
            placeholders(2, ids.len())
        );
        let mut q = sqlx::query(&sql).bind(project.id.as_str());
        for id in &ids {
            q = q.bind(*id);
        }
        let mut out = std::collections::BTreeSet::new();
        for row in q.fetch_all(self.meta.reader()).await? {
            let tags: Vec<Tag> =
                serde_json::from_str(&row.try_get::<String, _>("tags_json")?).unwrap_or_default();
            out.insert(crate::DatasetSummary {
                experiment_id: row.try_get::<i64, _>("experiment_id")?.to_string(),
                name: row.try_get("name")?,
                digest: row.try_get("digest")?,
                context: tags
                    .into_iter()
                    .find(|t| t.key == "mlflow.data.context")
                    .map(|t| t.value),
            });
        }
        Ok(out.into_iter().take(1000).collect())
    }

    /// Runs of some experiments matching `filter` (MLflow's search syntax), sorted by
    /// `order_by` (default: newest first), a page at a time.
    #[allow(clippy::too_many_arguments)]
    #[qanat_macros::boxed]
    pub async fn search_runs(
        &self,
        project: &Project,
        experiment_ids: &[String],
        filter: Option<&str>,
        order_by: &[String],
        view: ViewType,
        max_results: Option<i64>,
        page_token: Option<&str>,
    ) -> Result<Page<Run>> {
        let max = check_max_results(max_results, 1000)?;
        let cursor = Cursor::parse(page_token)?;
        if experiment_ids.is_empty() {
            return Err(Error::invalid(
                "experiment_ids must name at least one experiment",
            ));
        }
        let exps = experiment_ids
            .iter()
            .map(|e| parse_experiment_id(e))
            .collect::<Result<Vec<_>>>()?;
        let clauses = match filter.map(str::trim).filter(|f| !f.is_empty()) {
            Some(f) => crate::search::parse_filter(&crate::search::RUNS, f)?,
            None => Vec::new(),
        };
        let order = crate::search::parse_order(&crate::search::RUNS, order_by)?;
        let stages = view.stages();
        let query = RunQuery {
            backend: self.meta.backend(),
            project: project.id.as_str(),
            exps: &exps,
            stages,
            clauses: &clauses,
            order: &order,
        };
        // Ordered by a metric first (`metrics.acc DESC`, the common search): the runs
        // that have a value are read from the (project, experiment, key, is_nan, value)
        // index of latest_metrics in order, stopping after the page; only a page past
        // them reads the runs with NaN, then those without one, as on MLflow.
        // A page starts after the sort key of the previous page's last row (its token),
        // so a deep page reads no more rows than the first; an offset token (from an
        // earlier version) is still followed, and the page after it gets a keyset one.
        let mut rows = Vec::new();
        // The part and sort key of the last row read, for the next token.
        let mut last: Option<(CursorPart, Vec<crate::search::KeyValue>)> = None;
        let more = match crate::search::driving_metric(&clauses, &order) {
            None => {
                let (after, offset) = match &cursor {
                    Cursor::Start => (None, 0),
                    Cursor::Offset(o) => (None, *o),
                    Cursor::After {
                        part: CursorPart::All,
                        key,
                    } => (Some(key.as_slice()), 0),
                    Cursor::After { .. } => return Err(crate::cursor::other_order()),
                };
                let (sql, binds, terms) = query.sql(&Part::All, after, false)?;
                let (page, more) = self.fetch_page(&sql, &binds, max, offset).await?;
                rows = page;
                if let Some(r) = rows.last() {
                    last = Some((CursorPart::All, crate::cursor::row_key(r, &terms)?));
                }
                more
            }
            Some(drive) => {
                // The runs with a value, then those whose latest value is NaN, then
                // those without one; each part read in order from where the token
                // left off, the first part from its key and the next ones from their
                // start.
                let parts = [CursorPart::Valued, CursorPart::Nan, CursorPart::Missing];
                let (first, mut after, mut offset) = match &cursor {
                    Cursor::Start => (0, None, 0),
                    Cursor::Offset(o) => (0, None, *o),
                    Cursor::After { part, key } => match parts.iter().position(|p| p == part) {
                        Some(i) => (i, Some(key.as_slice()), 0),
                        None => return Err(crate::cursor::other_order()),
                    },
                };
                let mut more = false;
                // How many runs of these experiments there are, have a value, have a
                // row at all (index counts; read once, when first needed).
                let mut counts: Option<(i64, i64, i64)> = None;
                for &part in &parts[first..] {
                    // With bounds on the metric every matching run has a value.
                    if part != CursorPart::Valued && !drive.1.is_empty() {
                        break;
                    }
                    // A part with nothing in any run of these experiments (whatever
                    // its stage or filter) is not read: when every run has a value, or
                    // a row, two index counts say so, where reading the part would
                    // look at every run for one without.
                    if part != CursorPart::Valued && after.is_none() {
                        if counts.is_none() {
                            counts = Some(self.metric_counts(project, &exps, &drive.0).await?);
                        }
                        let (runs, valued, present) = counts.unwrap_or_default();
                        let empty = match part {
                            CursorPart::Nan => present == valued,
                            _ => runs == present,
                        };
                        if empty {
                            continue;
                        }
                    }
                    let which = match part {
                        CursorPart::Valued => Part::Valued(&drive),
                        CursorPart::Nan => Part::Nan(&drive.0),
                        _ => Part::Missing(&drive.0),
                    };
                    if offset > 0 {
                        // An offset token: the parts it passes whole are skipped.
                        let (sql, binds, _) = query.sql(&which, None, true)?;
                        let n = self.count(&sql, &binds).await?;
                        if offset >= n {
                            offset -= n;
                            continue;
                        }
                    }
                    let left = max - rows.len() as i64;
                    let (sql, binds, terms) = query.sql(&which, after.take(), false)?;
                    let (page, part_more) = self.fetch_page(&sql, &binds, left, offset).await?;
                    offset = 0;
                    if let Some(r) = page.last() {
                        last = Some((part, crate::cursor::row_key(r, &terms)?));
                    }
                    rows.extend(page);
                    if part_more {
                        more = true;
                        break;
                    }
                }
                more
            }
        };
        let next_page_token = match (more, &last) {
            (true, Some((part, key))) => Some(Cursor::token(*part, key)),
            _ => None,
        };
        let infos = rows.iter().map(run_info_from).collect::<Result<Vec<_>>>()?;
        let ids: Vec<String> = infos.iter().map(|i| i.run_id.clone()).collect();
        let mut data = self.run_data(&ids).await?;
        let mut io = self.run_io(&ids).await?;
        let items = infos
            .into_iter()
            .map(|info| {
                let (inputs, outputs) = io.remove(&info.run_id).unwrap_or_default();
                Run {
                    data: data.remove(&info.run_id).unwrap_or_default(),
                    info,
                    inputs,
                    outputs,
                }
            })
            .collect();
        Ok(Page {
            items,
            next_page_token,
        })
    }
}

/// Which runs of a search one statement reads.
enum Part<'a> {
    /// Every matching run, in the search's order.
    All,
    /// The runs with a value of the driving metric (within its bounds), by that value
    /// and then the rest of the order.
    Valued(&'a crate::search::Driving),
    /// The runs whose latest value of that metric is NaN, in the rest of the order.
    Nan(&'a str),
    /// The runs without a value of that metric, in the rest of the order.
    Missing(&'a str),
}

/// A runs search, written as SQL for each [`Part`].
struct RunQuery<'a> {
    backend: qanat_store::Backend,
    project: &'a str,
    exps: &'a [i64],
    stages: &'a [&'a str],
    clauses: &'a [crate::search::Clause],
    order: &'a [crate::search::OrderKey],
}

impl RunQuery<'_> {
    /// The statement, its parameters and its sort columns; a page's LIMIT and OFFSET
    /// are the two placeholders after the parameters (but for a count). `after`, a
    /// page token's sort key: only the rows after it are read.
    fn sql(
        &self,
        part: &Part<'_>,
        after: Option<&[serde_json::Value]>,
        count: bool,
    ) -> Result<(String, Vec<crate::search::Bind>, Vec<crate::search::Term>)> {
        use crate::search::{Bind, KeyKind, Term, RUNS};
        let mut binds: Vec<Bind> = std::iter::once(Bind::Text(self.project.to_string()))
            .chain(self.exps.iter().map(|e| Bind::Int(*e)))
            .chain(self.stages.iter().map(|s| Bind::Text(s.to_string())))
            .collect();
        let exps = placeholders(2, self.exps.len());
        let mut from = "runs".to_string();
        let mut cond = format!(
            "runs.project_id = $1 AND runs.experiment_id IN ({exps}) AND runs.lifecycle_stage IN ({})",
            placeholders(2 + self.exps.len(), self.stages.len())
        );
        let mut lead = Vec::new();
        let mut order = self.order;
        match part {
            Part::All => {}
            Part::Valued((key, bounds, ascending)) => {
                from.push_str(" JOIN latest_metrics d ON d.run_id = runs.run_id");
                binds.push(Bind::Text(key.clone()));
                cond.push_str(&format!(
                    " AND d.project_id = $1 AND d.experiment_id IN ({exps}) AND d.key = ${} AND d.is_nan = 0",
                    binds.len()
                ));
                for (op, v) in bounds {
                    binds.push(Bind::Num(*v));
                    cond.push_str(&format!(" AND d.value {op} ${}", binds.len()));
                }
                lead.push(Term {
                    expr: "d.value".into(),
                    kind: KeyKind::Float,
                    ascending: *ascending,
                });
                order = &order[1..];
            }
            // The metric's place in the order is the same for every run of these two
            // parts (NaN after the values, no value last), so it is left out of it.
            Part::Nan(key) => {
                from.push_str(" JOIN latest_metrics d ON d.run_id = runs.run_id");
                binds.push(Bind::Text(key.to_string()));
                cond.push_str(&format!(
                    " AND d.project_id = $1 AND d.experiment_id IN ({exps}) AND d.key = ${} AND d.is_nan = 1",
                    binds.len()
                ));
                order = &order[1..];
            }
            Part::Missing(key) => {
                binds.push(Bind::Text(key.to_string()));
                cond.push_str(&format!(
                    " AND NOT EXISTS (SELECT 1 FROM latest_metrics d WHERE d.run_id = runs.run_id AND d.key = ${})",
                    binds.len()
                ));
                order = &order[1..];
            }
        }
        let filter = crate::search::where_sql(&RUNS, self.clauses, self.backend, binds.len() + 1);
        binds.extend(filter.params);
        if count {
            return Ok((
                format!(
                    "SELECT COUNT(*) AS n FROM {from} WHERE {cond}{}",
                    filter.text
                ),
                binds,
                Vec::new(),
            ));
        }
        let (rest, params) = crate::search::order_terms(&RUNS, order, binds.len() + 1);
        binds.extend(params);
        let terms: Vec<Term> = lead.into_iter().chain(rest).collect();
        if let Some(after) = after {
            let key = crate::cursor::key_values(after, &terms)?;
            let after = crate::search::after_sql(&terms, &key, self.backend, binds.len() + 1);
            cond.push_str(&after.text);
            binds.extend(after.params);
        }
        let sql = format!(
            "SELECT {RUN_COLUMNS}{} FROM {from} WHERE {cond}{} ORDER BY {} LIMIT ${} OFFSET ${}",
            crate::cursor::key_columns(&terms),
            filter.text,
            crate::search::order_text(&terms),
            binds.len() + 1,
            binds.len() + 2
        );
        Ok((sql, binds, terms))
    }
}

async fn upsert_experiment_tag(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    project_id: &ProjectId,
    experiment_id: i64,
    t: &Tag,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO experiment_tags (project_id, experiment_id, key, value) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (project_id, experiment_id, key) DO UPDATE SET value = excluded.value",
    )
    .bind(project_id)
    .bind(experiment_id)
    .bind(&t.key)
    .bind(&t.value)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

pub(crate) async fn upsert_tags(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    run_id: &str,
    tags: &[Tag],
) -> Result<()> {
    // Last value wins within a batch, as if logged one after another.
    let mut last: BTreeMap<&str, &str> = BTreeMap::new();
    for t in tags {
        last.insert(&t.key, &t.value);
    }
    let rows: Vec<(&str, &str)> = last.into_iter().collect();
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let q = format!(
            "INSERT INTO run_tags (run_id, key, value) VALUES {} ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value",
            values_list(tx, chunk.len(), 3)
        );
        let mut query = sqlx::query(&q);
        for (k, v) in chunk {
            query = query.bind(run_id).bind(*k).bind(*v);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

/// A metric value as stored: NaN becomes 0 with `is_nan` = 1 (SQLite has no NaN).
pub(crate) fn stored(m: &Metric) -> (f64, i64) {
    if m.value.0.is_nan() {
        (0.0, 1)
    } else {
        (m.value.0, 0)
    }
}

/// Inserts metric rows, many per statement: `head` is the `INSERT … INTO <table>` part,
/// `suffix` an ON CONFLICT clause or nothing; `owner`, the run's project and experiment
/// where the table keeps them (`latest_metrics`).
async fn insert_metric_rows(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    head: &str,
    suffix: &str,
    run_id: &str,
    owner: Option<(&str, i64)>,
    rows: &[&Metric],
) -> Result<()> {
    let (columns, n) = match owner {
        Some(_) => (", project_id, experiment_id", 8),
        None => ("", 6),
    };
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let q = format!(
            "{head} (run_id, key, value, is_nan, timestamp, step{columns}) VALUES {}{suffix}",
            values_list(tx, chunk.len(), n)
        );
        let mut query = sqlx::query(&q);
        for m in chunk {
            let (v, nan) = stored(m);
            query = query
                .bind(run_id)
                .bind(&m.key)
                .bind(v)
                .bind(nan)
                .bind(m.timestamp)
                .bind(m.step);
            if let Some((project, experiment)) = owner {
                query = query.bind(project).bind(experiment);
            }
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Appends metric points and folds each key's newest (highest step, then latest
/// timestamp, then largest value) into `latest_metrics`.
async fn insert_metrics(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    project: &Project,
    info: &RunInfo,
    metrics: &[Metric],
) -> Result<()> {
    let run_id = info.run_id.as_str();
    if metrics.is_empty() {
        return Ok(());
    }
    let all: Vec<&Metric> = metrics.iter().collect();
    // The same point again (same key, step, time and value) is kept once, as on MLflow.
    // On SQLite, OR IGNORE (every constraint, not only the unique one) also means that no
    // row can abort the statement halfway, so SQLite keeps no statement journal for it.
    // Every bound value is non-null, so only duplicates are ever skipped.
    let (head, suffix) = if is_sqlite(tx) {
        ("INSERT OR IGNORE INTO metrics", "")
    } else {
        ("INSERT INTO metrics", " ON CONFLICT DO NOTHING")
    };
    insert_metric_rows(tx, head, suffix, run_id, None, &all).await?;
    crate::models::insert_model_metrics(tx, run_id, &all).await?;
    let newer = |a: &Metric, b: &Metric| {
        (a.step, a.timestamp) > (b.step, b.timestamp)
            || ((a.step, a.timestamp) == (b.step, b.timestamp) && stored(a).0 > stored(b).0)
    };
    let mut latest: BTreeMap<&str, &Metric> = BTreeMap::new();
    for m in metrics {
        match latest.get(m.key.as_str()) {
            Some(cur) if !newer(m, cur) => {}
            _ => {
                latest.insert(&m.key, m);
            }
        }
    }
    let rows: Vec<&Metric> = latest.into_values().collect();
    insert_metric_rows(
        tx,
        "INSERT INTO latest_metrics",
        " ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, is_nan = excluded.is_nan, timestamp = excluded.timestamp, step = excluded.step \
         WHERE excluded.step > latest_metrics.step \
            OR (excluded.step = latest_metrics.step AND excluded.timestamp > latest_metrics.timestamp) \
            OR (excluded.step = latest_metrics.step AND excluded.timestamp = latest_metrics.timestamp AND excluded.value > latest_metrics.value)",
        run_id,
        Some((
            project.id.as_str(),
            parse_experiment_id(&info.experiment_id)?,
        )),
        &rows,
    )
    .await?;
    Ok(())
}
