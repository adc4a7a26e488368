//! Online features: materialization from sources into the online store, reads in
//! Feast's `/get-online-features` shape with the ttl enforced, and `/push`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use qanat_governance::{check_residency, Project};
use qanat_store::now_micros;
use serde_json::{Map, Value};
use sqlx::Row;

use crate::definitions::{
    FeatureDef, FeatureServiceDef, FeatureViewDef, ObjectKind, SourceType, ValueType,
};
use crate::error::{Error, Result};
use crate::offline::OfflineRow;
use crate::online::{OnlineRow, OnlineStore, WriteCount};
use crate::values::{check_value, entity_key, json_at, key_value, parse_time, plain_text, rfc3339};
use crate::wire::{
    Columns, FeatureColumn, Freshness, MaterializeRequest, Materialized, OnlineRequest,
    OnlineResponse, PushMode, PushRequest, PushResult, RejectedRow, ResponseMetadata,
};
use crate::{FeatureRef, Features};

/// A view as serving needs it: its newest definition and its keys with their types.
#[derive(Debug)]
pub(crate) struct LiveView {
    pub(crate) name: String,
    pub(crate) version: i64,
    pub(crate) def: FeatureViewDef,
    pub(crate) keys: Vec<(String, ValueType)>,
}

impl Features {
    fn online(&self) -> Result<&OnlineStore> {
        self.online.as_ref().ok_or_else(|| {
            Error::Unavailable("no online store is configured (features.online_store)".into())
        })
    }

    /// The online store, for writing a project's rows into it: refused when the
    /// store's region is not one the project allows (its bytes would leave them).
    fn online_for_write(&self, project: &Project) -> Result<&OnlineStore> {
        let store = self.online()?;
        let region = match &self.online_region {
            Some(r) => r.clone(),
            None => {
                self.storage
                    .location(self.storage.default_location())?
                    .region
            }
        };
        let location = qanat_store::LocationInfo {
            name: "online store (features.online_store)".into(),
            region,
            kind: "online",
        };
        check_residency(project, &location)?;
        Ok(store)
    }

    /// [`Self::live_view`], remembered for a moment (see [`crate::RegistryCache`]):
    /// what every online read looks up.
    async fn live_view_cached(&self, project: &Project, name: &str) -> Result<Arc<LiveView>> {
        let key = (project.id.clone(), name.to_string());
        if let Some(v) = self.cache.views.get(&key) {
            return Ok(v);
        }
        let generation = self.cache.views.generation();
        let v = Arc::new(self.live_view(project, name).await?);
        self.cache.views.put(key, v.clone(), generation);
        Ok(v)
    }

    /// The newest version of a live view, with its join keys.
    async fn live_view(&self, project: &Project, name: &str) -> Result<LiveView> {
        let o = self
            .object(project, ObjectKind::FeatureView, name, None)
            .await?;
        if o.deleted_at.is_some() {
            return Err(Error::not_found("feature view", name));
        }
        let mut def: FeatureViewDef = serde_json::from_value(o.definition.clone())
            .map_err(|e| Error::Corrupt(format!("feature view {name}: {e}")))?;
        self.protect_found(project, name, &mut def).await?;
        let mut keys = Vec::new();
        for e in &def.entities {
            let v = o
                .depends_on
                .iter()
                .find(|d| d.kind == ObjectKind::Entity && d.name == e.as_str())
                .map(|d| d.version);
            let eo = self
                .object(project, ObjectKind::Entity, e.as_str(), v)
                .await?;
            let ent: crate::definitions::EntityDef = serde_json::from_value(eo.definition)
                .map_err(|err| Error::Corrupt(format!("entity {e}: {err}")))?;
            keys.extend(
                ent.join_keys
                    .iter()
                    .map(|k| (k.name.to_string(), k.value_type)),
            );
        }
        Ok(LiveView {
            name: name.to_string(),
            version: o.version,
            def,
            keys,
        })
    }

    /// Writes the newest row per entity of each view's source within a window into
    /// the online store. Without `start`, each view continues from where its last
    /// materialization ended (from the beginning the first time). Idempotent: running
    /// a window again writes nothing older than what is stored.
    #[qanat_macros::boxed]
    pub async fn materialize(
        &self,
        project: &Project,
        req: &MaterializeRequest,
        by: &str,
    ) -> Result<Vec<Materialized>> {
        let store = self.online_for_write(project)?.clone();
        let end = match &req.end {
            Some(t) => parse_time(&Value::from(t.as_str()))
                .map_err(|e| Error::invalid(format!("end: {e}")))?,
            None => now_micros(),
        };
        let start = match &req.start {
            Some(t) => Some(
                parse_time(&Value::from(t.as_str()))
                    .map_err(|e| Error::invalid(format!("start: {e}")))?,
            ),
            None => None,
        };
        if start.is_some_and(|s| s > end) {
            return Err(Error::invalid("start is after end"));
        }
        let names: Vec<String> = if req.feature_views.is_empty() {
            self.registry(project)
                .await?
                .objects
                .iter()
                .filter_map(|o| o.as_view().filter(|v| v.online).map(|_| o.name.clone()))
                .collect()
        } else {
            req.feature_views.clone()
        };
        let run = self
            .runs
            .start(&project.id, req.run_id.as_deref(), by, &names)?;
        let _unfinished = crate::progress::Unfinished(run.clone());
        let all = req.feature_views.is_empty();
        let mut out = Vec::new();
        for (i, name) in names.into_iter().enumerate() {
            match self
                .materialize_view(project, &store, &run, i, &name, all, start, end, by)
                .await
            {
                Ok(Some(done)) => out.push(done),
                Ok(None) => {}
                Err(e) => {
                    run.end(Some(&e));
                    return Err(e);
                }
            }
        }
        run.end(None);
        Ok(out)
    }

    /// Materializes view `name` (the run's `i`th): scans its source for the newest row
    /// per entity in the window, then writes them oldest first, a chunk at a time,
    /// recording after each chunk how far the view is materialized — so a run cut
    /// short (a crash, a restart) resumes from there when run again without `start`.
    /// None for a view fed as rows arrive, when every view was asked for.
    #[allow(clippy::too_many_arguments)]
    async fn materialize_view(
        &self,
        project: &Project,
        store: &OnlineStore,
        run: &crate::progress::Run,
        i: usize,
        name: &str,
        all: bool,
        start: Option<i64>,
        end: i64,
        by: &str,
    ) -> Result<Option<Materialized>> {
        use crate::wire::ViewState;
        let view = self.live_view(project, name).await?;
        if !view.def.online {
            return Err(Error::invalid(format!(
                "feature view {name} is not online (online: false)"
            )));
        }
        let mut part = self.view_part(project, name, Some(view.version)).await?;
        part.features = part
            .def
            .schema
            .iter()
            .map(|f| (f.name.to_string(), f.name.to_string(), f.pii))
            .collect();
        let arriving = matches!(
            part.source.source_type,
            SourceType::Push | SourceType::Stream
        );
        if arriving && all {
            run.view(i, |v| v.state = ViewState::Skipped);
            return Ok(None); // all views: those fed as rows arrive have nothing to materialize
        }
        if arriving {
            return Err(Error::invalid(format!(
                "feature view {name} reads a {} source, whose rows reach the online store as they arrive: there is nothing to materialize",
                part.source.source_type
            )));
        }
        let from = match start {
            Some(s) => s,
            None => self.window_end(project, name).await?.unwrap_or(i64::MIN),
        };
        run.view(i, |v| v.state = ViewState::Scanning);
        let rows = self.view_rows(project, &part).await?;
        let features: Vec<String> = part.features.iter().map(|f| f.0.clone()).collect();
        let keys = part.keys.clone();
        let ts = part.source.timestamp_field.clone();
        let created = part.source.created_timestamp_field.clone();
        // A batch at a time: what is kept is the newest row per entity, so memory
        // follows the number of entities, not of rows.
        let scan = run.clone();
        let (newest, found) = tokio::task::spawn_blocking(move || -> Result<_> {
            let mut newest = Newest::new(from, end, &features);
            // What the values hold, looked at as they pass (the first values of each
            // feature).
            let mut pii = crate::pii_found::Scan::new(features.iter().map(String::as_str));
            // Decoded (and typed) on several threads, taken in here in order.
            let part = Arc::new(part);
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
            let batches =
                rows.batches_parallel(threads, move |b| crate::training_set::typed(&b, &part))?;
            for batch in batches {
                let batch = batch?;
                pii.add_batch(&batch);
                newest.add(&batch, &keys, &ts, created.as_deref())?;
                scan.view(i, |v| {
                    v.rows_scanned = newest.seen;
                    v.rows_in_window = newest.in_window;
                });
            }
            Ok((newest, pii.found()))
        })
        .await
        .map_err(|e| Error::Corrupt(format!("materialization stopped: {e}")))??;
        if let Err(e) = self
            .record_pii_found(project, name, &format!("materialization by {by}"), &found)
            .await
        {
            tracing::warn!(project = %project.name, view = name, error = %e, "recording personal data found while materializing");
        }
        let in_window = newest.in_window;
        let mut rows = newest.rows();
        // Oldest first: once a chunk is written, every entity whose newest row is
        // older than the next chunk's first row is online.
        rows.sort_unstable_by_key(|r| r.1.event_ts);
        let last_event = rows.last().map(|r| r.1.event_ts);
        run.view(i, |v| {
            v.state = ViewState::Writing;
            v.entities = rows.len() as u64;
        });
        let mut count = WriteCount::default();
        let mut size = self.materialize_chunk.0;
        while !rows.is_empty() {
            let rest = rows.split_off(rows.len().min(size));
            size = size.saturating_mul(2).min(self.materialize_chunk.1);
            let chunk = std::mem::replace(&mut rows, rest);
            let chunk_last = chunk.last().map(|r| r.1.event_ts);
            let c = store.write(project.id.as_str(), name, chunk).await?;
            count.written += c.written;
            count.stale += c.stale;
            // Done up to the next chunk's first event time (inclusive windows: a
            // resumed run reads that time again, and rewrites nothing newer).
            let until = rows.first().map_or(end, |r| r.1.event_ts);
            self.record_freshness(
                project,
                name,
                view.version,
                Some(until),
                chunk_last,
                c.written,
                by,
            )
            .await?;
            run.view(i, |v| {
                v.written = count.written;
                v.stale = count.stale;
                v.materialized_until = Some(rfc3339(until));
            });
        }
        if count.written + count.stale == 0 {
            // Nothing in the window: the window is still done.
            self.record_freshness(project, name, view.version, Some(end), None, 0, by)
                .await?;
        }
        run.view(i, |v| {
            v.state = ViewState::Done;
            v.materialized_until = Some(rfc3339(end));
        });
        Ok(Some(Materialized {
            feature_view: name.to_string(),
            version: view.version,
            start: (from != i64::MIN).then(|| rfc3339(from)),
            end: rfc3339(end),
            rows_in_window: in_window,
            written: count.written,
            stale: count.stale,
            last_event_at: last_event.map(rfc3339),
        }))
    }

    /// This server's recent materialization runs in `project`, newest first.
    pub fn materializations(&self, project: &Project) -> Vec<crate::wire::MaterializationRun> {
        self.runs.list(&project.id)
    }

    /// One of this server's recent materialization runs in `project`.
    pub fn materialization(
        &self,
        project: &Project,
        id: &str,
    ) -> Result<crate::wire::MaterializationRun> {
        self.runs.get(&project.id, id)
    }

    async fn window_end(&self, project: &Project, view: &str) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "SELECT window_end FROM feature_materializations WHERE project_id = $1 AND view = $2 AND window_end > 0",
        )
        .bind(project.id.as_str())
        .bind(view)
        .fetch_optional(self.meta.reader())
        .await?)
    }

    #[allow(clippy::too_many_arguments)]
    async fn record_freshness(
        &self,
        project: &Project,
        view: &str,
        version: i64,
        window_end: Option<i64>,
        last_event: Option<i64>,
        written: u64,
        by: &str,
    ) -> Result<()> {
        let mut tx = self.meta.writer().begin().await?;
        let old = sqlx::query("SELECT window_end, last_event_at, rows_written FROM feature_materializations WHERE project_id = $1 AND view = $2")
            .bind(project.id.as_str())
            .bind(view)
            .fetch_optional(&mut *tx)
            .await?;
        let (old_end, old_last, old_rows) = match &old {
            Some(r) => (
                r.try_get::<i64, _>("window_end")?,
                r.try_get::<Option<i64>, _>("last_event_at")?,
                r.try_get::<i64, _>("rows_written")?,
            ),
            None => (0, None, 0),
        };
        let end = window_end.map_or(old_end, |e| e.max(old_end));
        let last = match (old_last, last_event) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let rows = old_rows + written as i64;
        sqlx::query(
            "INSERT INTO feature_materializations (project_id, view, view_version, window_end, last_event_at, rows_written, updated_at, updated_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (project_id, view) DO UPDATE SET view_version = $3, window_end = $4, \
             last_event_at = $5, rows_written = $6, updated_at = $7, updated_by = $8",
        )
        .bind(project.id.as_str())
        .bind(view)
        .bind(version)
        .bind(end)
        .bind(last)
        .bind(rows)
        .bind(now_micros())
        .bind(by)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Per view: what reached the online store, and how far behind now it is.
    #[qanat_macros::boxed]
    pub async fn freshness(&self, project: &Project) -> Result<Vec<Freshness>> {
        Ok(self
            .freshness_where(Some(project))
            .await?
            .into_iter()
            .map(|(_, f)| f)
            .collect())
    }

    /// [`Features::freshness`] of every project, with the project's name (metrics).
    #[qanat_macros::boxed]
    pub async fn freshness_all(&self) -> Result<Vec<(String, Freshness)>> {
        self.freshness_where(None).await
    }

    async fn freshness_where(&self, project: Option<&Project>) -> Result<Vec<(String, Freshness)>> {
        let rows = sqlx::query(
            "SELECT p.name AS project, m.view, m.view_version, m.window_end, m.last_event_at, m.rows_written, m.updated_at \
             FROM feature_materializations m JOIN projects p ON p.id = m.project_id \
             WHERE $1 = '' OR m.project_id = $1 ORDER BY p.name, m.view",
        )
        .bind(project.map_or("", |p| p.id.as_str()))
        .fetch_all(self.meta.reader())
        .await?;
        let now = now_micros();
        rows.iter()
            .map(|r| {
                let last: Option<i64> = r.try_get("last_event_at")?;
                let end: i64 = r.try_get("window_end")?;
                Ok((
                    r.try_get("project")?,
                    Freshness {
                        feature_view: r.try_get("view")?,
                        version: r.try_get("view_version")?,
                        materialized_until: (end > 0).then(|| rfc3339(end)),
                        last_event_at: last.map(rfc3339),
                        lag_seconds: last.map(|l| ((now - l).max(0) as f64) / 1e6),
                        rows_written: r.try_get("rows_written")?,
                        updated_at: rfc3339(r.try_get("updated_at")?),
                    },
                ))
            })
            .collect()
    }

    /// Feast's `/get-online-features`: for each entity, each feature's newest value,
    /// its status and its event time. Values older than the view's ttl are not served
    /// (OUTSIDE_MAX_AGE). PII features are pseudonymized unless `pii_allowed`.
    #[qanat_macros::boxed]
    pub async fn online_features(
        &self,
        project: &Project,
        req: &OnlineRequest,
        pii_allowed: bool,
    ) -> Result<OnlineResponse> {
        Ok(self.online_read(project, req, pii_allowed).await?.0)
    }

    /// Online features for a model inside this process (serving's enrichment): the
    /// stored values, PII included, and per result column whether it is PII (so the
    /// caller can keep it out of its logs).
    #[qanat_macros::boxed]
    pub async fn online_for_model(
        &self,
        project: &Project,
        req: &OnlineRequest,
    ) -> Result<(OnlineResponse, Vec<bool>)> {
        self.online_read(project, req, true).await
    }

    /// The join keys of a feature service's views, each once, in the order its
    /// features name them, with their types: what a caller sends to read the service.
    #[qanat_macros::boxed]
    pub async fn service_keys(
        &self,
        project: &Project,
        service: &str,
    ) -> Result<Vec<(String, ValueType)>> {
        let req = OnlineRequest {
            entities: Columns::default(),
            features: None,
            feature_service: Some(service.to_string()),
            full_feature_names: false,
        };
        let mut keys: Vec<(String, ValueType)> = Vec::new();
        let mut views: Vec<qanat_core::Name> = Vec::new();
        for r in self.online_refs(project, &req).await? {
            if views.contains(&r.view) {
                continue;
            }
            let view = self.live_view_cached(project, r.view.as_str()).await?;
            for k in &view.keys {
                if !keys.iter().any(|(name, _)| name == &k.0) {
                    keys.push(k.clone());
                }
            }
            views.push(r.view);
        }
        Ok(keys)
    }

    async fn online_read(
        &self,
        project: &Project,
        req: &OnlineRequest,
        pii_allowed: bool,
    ) -> Result<(OnlineResponse, Vec<bool>)> {
        let store = self.online()?;
        let refs = self.online_refs(project, req).await?;
        let rows = req.entities.0.first().map_or(0, |c| c.1.len());
        if rows == 0 {
            return Err(Error::invalid(
                "entities is empty: give each join key a list of values",
            ));
        }
        for (name, values) in &req.entities.0 {
            if values.len() != rows {
                return Err(Error::invalid(format!(
                    "entity column {name} has {} values, the first has {rows}: every column has one value per entity",
                    values.len()
                )));
            }
        }
        // The views asked for, in order of first mention, with their features.
        let mut chosen: Vec<(Arc<LiveView>, Vec<usize>)> = Vec::new();
        let mut live: HashMap<String, usize> = HashMap::new();
        for r in &refs {
            let i = match live.get(r.view.as_str()) {
                Some(&i) => i,
                None => {
                    let v = self.live_view_cached(project, r.view.as_str()).await?;
                    if let Some(pinned) = r.version {
                        if pinned != v.version {
                            return Err(Error::invalid(format!(
                                "{r}: the online store serves feature view {} at its newest version, {}",
                                r.view, v.version
                            )));
                        }
                    }
                    if !v.def.online {
                        return Err(Error::invalid(format!(
                            "feature view {} is not online (online: false)",
                            r.view
                        )));
                    }
                    chosen.push((v, Vec::new()));
                    live.insert(r.view.to_string(), chosen.len() - 1);
                    chosen.len() - 1
                }
            };
            let (v, feats) = &mut chosen[i];
            let wanted: Vec<usize> = match &r.feature {
                None => (0..v.def.schema.len()).collect(),
                Some(f) => {
                    vec![v
                        .def
                        .schema
                        .iter()
                        .position(|d| &d.name == f)
                        .ok_or_else(|| {
                            Error::invalid(format!("feature view {} has no feature '{f}'", r.view))
                        })?]
                }
            };
            for f in wanted {
                if !feats.contains(&f) {
                    feats.push(f);
                }
            }
        }
        let views: Vec<(Arc<LiveView>, Vec<FeatureDef>)> = chosen
            .into_iter()
            .map(|(v, f)| {
                let owned = f.into_iter().map(|i| v.def.schema[i].clone()).collect();
                (v, owned)
            })
            .collect();

        let mut names = Vec::new();
        let mut results = Vec::new();
        let mut pii = Vec::new();
        for (name, values) in &req.entities.0 {
            names.push(name.clone());
            pii.push(false);
            results.push(FeatureColumn {
                values: values.clone(),
                statuses: vec!["PRESENT".into(); rows],
                event_timestamps: vec!["1970-01-01T00:00:00Z".into(); rows],
            });
        }
        let now = now_micros();
        let purpose = format!("features.pii.{}", project.id);
        for (view, feats) in &views {
            let mut keys = Vec::with_capacity(rows);
            for i in 0..rows {
                let mut kv = Vec::with_capacity(view.keys.len());
                for (k, t) in &view.keys {
                    let col = req.entities.0.iter().find(|c| &c.0 == k).ok_or_else(|| {
                        Error::invalid(format!(
                            "feature view {} needs the join key '{k}' in entities",
                            view.name
                        ))
                    })?;
                    kv.push(key_value(&col.1[i], *t).map_err(|e| {
                        Error::invalid(format!(
                            "entities.{k}[{i}]: {e} (the join key's declared type)"
                        ))
                    })?);
                }
                keys.push(entity_key(&kv));
            }
            let stored = store.read(project.id.as_str(), &view.name, &keys).await?;
            let ttl = i64::try_from(view.def.ttl.0.as_micros()).unwrap_or(i64::MAX);
            // Every feature of a row shares the row's event time: formatted once.
            let stamps: Vec<String> = stored
                .iter()
                .map(|s| rfc3339(s.as_ref().map_or(0, |r| r.event_ts)))
                .collect();
            for f in feats {
                let mut col = FeatureColumn {
                    values: Vec::with_capacity(rows),
                    statuses: Vec::with_capacity(rows),
                    event_timestamps: Vec::with_capacity(rows),
                };
                for (s, stamp) in stored.iter().zip(&stamps) {
                    let (value, status) = match s {
                        None => (Value::Null, "NOT_FOUND"),
                        Some(row) => {
                            let v = row.values.get(f.name.as_str());
                            if ttl > 0 && now - row.event_ts > ttl {
                                (Value::Null, "OUTSIDE_MAX_AGE")
                            } else {
                                match v {
                                    None => (Value::Null, "NOT_FOUND"),
                                    Some(Value::Null) => (Value::Null, "NULL_VALUE"),
                                    Some(v) if f.pii && !pii_allowed => (
                                        Value::String(format!(
                                            "pii:{}",
                                            &self
                                                .storage
                                                .keyring()
                                                .mac(&purpose, plain_text(v).as_bytes())
                                                .1[..32]
                                        )),
                                        "PRESENT",
                                    ),
                                    Some(v) => (v.clone(), "PRESENT"),
                                }
                            }
                        }
                    };
                    col.values.push(value);
                    col.statuses.push(status.into());
                    col.event_timestamps.push(stamp.clone());
                }
                names.push(if req.full_feature_names {
                    format!("{}__{}", view.name, f.name)
                } else {
                    f.name.to_string()
                });
                pii.push(f.pii);
                results.push(col);
            }
        }
        Ok((
            OnlineResponse {
                metadata: ResponseMetadata {
                    feature_names: names,
                },
                results,
            },
            pii,
        ))
    }

    async fn online_refs(&self, project: &Project, req: &OnlineRequest) -> Result<Vec<FeatureRef>> {
        match (&req.features, &req.feature_service) {
            (Some(f), None) if !f.is_empty() => f
                .iter()
                .map(|s| {
                    let r: FeatureRef = s.parse().map_err(Error::Invalid)?;
                    if r.feature.is_none() {
                        return Err(Error::invalid(format!(
                            "'{s}' names no feature: write view:feature"
                        )));
                    }
                    Ok(r)
                })
                .collect(),
            (None, Some(s)) => {
                let key = (project.id.clone(), s.to_string());
                if let Some(refs) = self.cache.services.get(&key) {
                    return Ok(refs.to_vec());
                }
                let generation = self.cache.services.generation();
                let o = self
                    .object(project, ObjectKind::FeatureService, s, None)
                    .await?;
                if o.deleted_at.is_some() {
                    return Err(Error::not_found("feature service", s.as_str()));
                }
                let def: FeatureServiceDef = serde_json::from_value(o.definition)
                    .map_err(|e| Error::Corrupt(format!("feature service {s}: {e}")))?;
                self.cache
                    .services
                    .put(key, Arc::from(def.features.clone()), generation);
                Ok(def.features)
            }
            (Some(_), Some(_)) => Err(Error::invalid("give features or feature_service, not both")),
            _ => Err(Error::invalid(
                "name the features (view:feature, ...) or a feature_service",
            )),
        }
    }

    /// Feast's `/push`: rows for every view that reads the push source. Each row is
    /// checked against each view's schema; bad rows are rejected with their reasons and
    /// good ones written online, offline or both (`to`).
    #[qanat_macros::boxed]
    pub async fn push(&self, project: &Project, req: &PushRequest, by: &str) -> Result<PushResult> {
        let registry = self.registry(project).await?;
        let source = registry
            .objects
            .iter()
            .find(|o| o.kind == ObjectKind::Source && o.name == req.push_source_name)
            .ok_or_else(|| Error::not_found("push source", req.push_source_name.as_str()))?;
        let sdef: crate::definitions::SourceDef = serde_json::from_value(source.definition.clone())
            .map_err(|e| Error::Corrupt(format!("source {}: {e}", source.name)))?;
        if sdef.source_type != SourceType::Push {
            return Err(Error::invalid(format!(
                "source {} is a {} source, not a push source",
                sdef.name, sdef.source_type
            )));
        }
        self.ingest(project, &registry, &sdef, &req.df, req.to, by)
            .await
    }

    /// Checks rows of a source (pushed or streamed) against every view that reads it
    /// and writes the good ones: online to the online views, offline to the source's
    /// offline store, as `to` says.
    pub(crate) async fn ingest(
        &self,
        project: &Project,
        registry: &crate::wire::Registry,
        sdef: &crate::definitions::SourceDef,
        df: &crate::wire::Columns,
        to: PushMode,
        by: &str,
    ) -> Result<PushResult> {
        let online = matches!(to, PushMode::Online | PushMode::OnlineAndOffline);
        let offline = matches!(to, PushMode::Offline | PushMode::OnlineAndOffline);
        let store = if online {
            Some(self.online_for_write(project)?)
        } else {
            None
        };
        let mut views = Vec::new();
        for o in &registry.objects {
            if let Some(v) = o.as_view() {
                if v.source == sdef.name {
                    views.push(self.live_view(project, &o.name).await?);
                }
            }
        }
        if views.is_empty() {
            return Err(Error::invalid(format!(
                "no feature view reads source {}: there is no schema to check the rows against",
                sdef.name
            )));
        }
        let columns = &df.0;
        let rows = columns.first().map_or(0, |c| c.1.len());
        if rows == 0 {
            return Err(Error::invalid(
                "df is empty: send each column as a list of values",
            ));
        }
        for (name, values) in columns {
            if values.len() != rows {
                return Err(Error::invalid(format!(
                    "df column {name} has {} values, the first has {rows}",
                    values.len()
                )));
            }
        }
        // The offline store's columns: every view's keys and features, first
        // declaration first.
        let mut offline_columns: Vec<(String, ValueType)> = Vec::new();
        for v in &views {
            let declared = v.keys.iter().cloned().chain(
                v.def
                    .schema
                    .iter()
                    .map(|f| (f.name.to_string(), f.value_type)),
            );
            for (name, t) in declared {
                if !offline_columns.iter().any(|c| c.0 == name) {
                    offline_columns.push((name, t));
                }
            }
        }
        let cell = |name: &str, i: usize| columns.iter().find(|c| c.0 == name).map(|c| &c.1[i]);
        let mut result = PushResult::default();
        let mut per_view: Vec<Vec<(String, OnlineRow)>> = vec![Vec::new(); views.len()];
        let mut offline_rows = Vec::new();
        let mut newest: BTreeMap<usize, i64> = BTreeMap::new();
        for i in 0..rows {
            let mut reasons = Vec::new();
            let event = match cell(&sdef.timestamp_field, i) {
                None => Err(format!(
                    "no {} column (the source's timestamp_field)",
                    sdef.timestamp_field
                )),
                Some(v) => parse_time(v).map_err(|e| format!("{}: {e}", sdef.timestamp_field)),
            };
            let created = match &sdef.created_timestamp_field {
                None => Ok(None),
                Some(c) => match cell(c, i) {
                    None | Some(Value::Null) => Ok(None),
                    Some(v) => parse_time(v).map(Some).map_err(|e| format!("{c}: {e}")),
                },
            };
            let mut staged = Vec::new();
            let mut checked: BTreeMap<String, Value> = BTreeMap::new();
            for (vi, v) in views.iter().enumerate() {
                let mut kv = Vec::new();
                for (k, t) in &v.keys {
                    match cell(k, i) {
                        None | Some(Value::Null) => {
                            reasons.push(format!("join key {k} is missing"))
                        }
                        Some(val) => match key_value(val, *t) {
                            Ok(x) => {
                                checked.insert(k.clone(), x.clone());
                                kv.push(x)
                            }
                            Err(e) => reasons.push(format!("join key {k}: {e}")),
                        },
                    }
                }
                let mut values = Map::new();
                for f in &v.def.schema {
                    match check_value(f, cell(f.name.as_str(), i)) {
                        Ok(x) => {
                            checked.insert(f.name.to_string(), x.clone());
                            values.insert(f.name.to_string(), x);
                        }
                        Err(e) => reasons.push(e),
                    }
                }
                staged.push((vi, entity_key(&kv), values));
            }
            match (&event, &created) {
                (Err(e), _) | (_, Err(e)) => reasons.push(e.clone()),
                _ => {}
            }
            reasons.sort();
            reasons.dedup();
            if !reasons.is_empty() {
                result.rejected.push(RejectedRow { row: i, reasons });
                continue;
            }
            let (Ok(e), Ok(c)) = (event, created) else {
                continue;
            };
            if online {
                for (vi, key, values) in staged {
                    if !views[vi].def.online {
                        continue;
                    }
                    per_view[vi].push((
                        key,
                        OnlineRow {
                            event_ts: e,
                            created_ts: c.unwrap_or(0),
                            values,
                        },
                    ));
                    let n = newest.entry(vi).or_insert(e);
                    *n = (*n).max(e);
                }
            }
            if offline {
                offline_rows.push(OfflineRow {
                    event_ts: e,
                    created_ts: c,
                    values: checked,
                });
            }
            result.accepted += 1;
        }
        if result.accepted == 0 {
            let first: Vec<String> = result
                .rejected
                .iter()
                .take(3)
                .map(|r| format!("row {}: {}", r.row, r.reasons.join("; ")))
                .collect();
            return Err(Error::invalid(format!(
                "every row was rejected ({} rows): {}",
                rows,
                first.join(" | ")
            )));
        }
        // Offline first: a failure there leaves the online store untouched, so a retry
        // (a stream's redelivery) repeats the whole batch.
        if offline {
            result.offline_files = self
                .append_offline(project, sdef, &offline_columns, offline_rows)
                .await?;
        }
        if let Some(store) = store {
            for (vi, batch) in per_view.into_iter().enumerate() {
                let v = &views[vi];
                if !v.def.online {
                    continue;
                }
                let c = store.write(project.id.as_str(), &v.name, batch).await?;
                result.written += c.written;
                result.stale += c.stale;
                self.record_freshness(
                    project,
                    &v.name,
                    v.version,
                    None,
                    newest.get(&vi).copied(),
                    c.written,
                    by,
                )
                .await?;
                result.feature_views.push(v.name.clone());
            }
        }
        if !online {
            result.feature_views = views.iter().map(|v| v.name.clone()).collect();
        }
        // The rows are written: what they hold is looked at (a failure to record it
        // does not undo the push).
        let found_by = format!("{} by {by}", sdef.source_type);
        if let Err(e) = self.scan_pushed(project, &views, df, &found_by).await {
            tracing::warn!(project = %project.name, source = %sdef.name, error = %e, "recording personal data found in pushed rows");
        }
        Ok(result)
    }
}

/// How a row ranks against another of the same entity: (event time, created time,
/// position); the greatest is the newest.
type Rank = (i64, Option<i64>, u64);

/// The newest row per entity within a window, gathered a batch at a time.
struct Newest {
    from: i64,
    end: i64,
    /// The features kept, in the order of each row's values.
    features: Vec<String>,
    /// Rows seen with an event time in the window.
    in_window: u64,
    /// Rows seen so far (positions break the last ties: the later row wins).
    seen: u64,
    /// Per entity key (its text, as [`entity_key`] writes it): the (event time,
    /// created time, position) of its newest row, and that row's values in
    /// `features`' order. A row's values are made only when it is the newest so far.
    best: HashMap<Vec<u8>, (Rank, Vec<Value>)>,
    /// The same for entities of one int64 key, by its value (no text per row).
    ints: HashMap<i64, (Rank, Vec<Value>)>,
    /// The key of the row at hand (reused: most rows are not the newest of their
    /// entity and need no key of their own).
    key: Vec<u8>,
}

impl Newest {
    fn new(from: i64, end: i64, features: &[String]) -> Newest {
        Newest {
            from,
            end,
            features: features.to_vec(),
            in_window: 0,
            seen: 0,
            best: HashMap::new(),
            ints: HashMap::new(),
            key: Vec::new(),
        }
    }

    /// Takes in a batch of typed source rows.
    fn add(
        &mut self,
        rows: &arrow_array::RecordBatch,
        keys: &[String],
        ts: &str,
        created: Option<&str>,
    ) -> Result<()> {
        use arrow_array::cast::AsArray;
        use arrow_array::types::TimestampMicrosecondType;
        use arrow_array::Array;
        let micros = |name: &str| -> Result<arrow_array::ArrayRef> {
            let col = rows
                .column_by_name(name)
                .ok_or_else(|| Error::invalid(format!("the source has no column '{name}'")))?;
            arrow_cast::cast(
                col.as_ref(),
                &arrow_schema::DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None),
            )
            .map_err(|e| Error::invalid(format!("column '{name}' is not a time: {e}")))
        };
        let event = micros(ts)?;
        let event = event.as_primitive::<TimestampMicrosecondType>();
        let created = created.map(micros).transpose()?;
        let created = created
            .as_ref()
            .map(|c| c.as_primitive::<TimestampMicrosecondType>());
        let key_cols: Vec<&arrow_array::ArrayRef> = keys
            .iter()
            .map(|k| {
                rows.column_by_name(k).ok_or_else(|| {
                    Error::invalid(format!("the source has no join key column '{k}'"))
                })
            })
            .collect::<Result<_>>()?;
        let cols: Vec<&arrow_array::ArrayRef> = self
            .features
            .iter()
            .map(|f| {
                rows.column_by_name(f)
                    .ok_or_else(|| Error::invalid(format!("the source has no column '{f}'")))
            })
            .collect::<Result<_>>()?;
        // One int64 key (the common case): entities held by their number, the key's
        // text written only for the newest rows at the end.
        let int_key = match key_cols.as_slice() {
            [c] if c.data_type() == &arrow_schema::DataType::Int64 && self.best.is_empty() => {
                Some(c.as_primitive::<arrow_array::types::Int64Type>())
            }
            _ => None,
        };
        if int_key.is_none() {
            for (id, held) in std::mem::take(&mut self.ints) {
                self.best.insert(format!("[{id}]").into_bytes(), held);
            }
        }
        for i in 0..rows.num_rows() {
            let position = self.seen;
            self.seen += 1;
            if event.is_null(i) {
                continue;
            }
            let e = event.value(i);
            if e < self.from || e > self.end {
                continue;
            }
            self.in_window += 1;
            let c = created.and_then(|c| c.is_valid(i).then(|| c.value(i)));
            let rank = (e, c, position);
            let values_at = |i: usize| {
                cols.iter()
                    .map(|col| json_at(col, i))
                    .collect::<std::result::Result<Vec<Value>, String>>()
                    .map_err(Error::Invalid)
            };
            if let Some(ids) = int_key {
                if ids.is_null(i) {
                    continue;
                }
                let id = ids.value(i);
                match self.ints.get_mut(&id) {
                    Some(held) if held.0 >= rank => {}
                    Some(held) => *held = (rank, values_at(i)?),
                    None => {
                        self.ints.insert(id, (rank, values_at(i)?));
                    }
                }
                continue;
            }
            if !crate::values::write_entity_key_at(&key_cols, i, &mut self.key)
                .map_err(Error::Invalid)?
            {
                continue;
            }
            match self.best.get_mut(self.key.as_slice()) {
                Some(held) if held.0 >= rank => {}
                Some(held) => *held = (rank, values_at(i)?),
                None => {
                    self.best.insert(self.key.clone(), (rank, values_at(i)?));
                }
            }
        }
        Ok(())
    }

    /// The newest rows, by entity key.
    fn rows(self) -> Vec<(String, OnlineRow)> {
        let features = self.features;
        let ints = self
            .ints
            .into_iter()
            .map(|(id, held)| (format!("[{id}]").into_bytes(), held));
        self.best
            .into_iter()
            .chain(ints)
            .map(|(k, ((event_ts, created, _), values))| {
                let row = OnlineRow {
                    event_ts,
                    created_ts: created.unwrap_or(0),
                    values: features.iter().cloned().zip(values).collect(),
                };
                // The key was written from JSON text of valid UTF-8 values.
                (String::from_utf8_lossy(&k).into_owned(), row)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::TimestampMicrosecondArray;
    use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};

    fn batch(
        ids: Vec<Option<i64>>,
        cities: Vec<&str>,
        events: Vec<i64>,
        created: Vec<Option<i64>>,
    ) -> RecordBatch {
        let n = ids.len();
        RecordBatch::try_from_iter([
            ("driver_id", Arc::new(Int64Array::from(ids)) as ArrayRef),
            ("city", Arc::new(StringArray::from(cities)) as ArrayRef),
            (
                "ts",
                Arc::new(TimestampMicrosecondArray::from(events)) as ArrayRef,
            ),
            (
                "created",
                Arc::new(TimestampMicrosecondArray::from(created)) as ArrayRef,
            ),
            (
                "speed",
                Arc::new(Float64Array::from(
                    (0..n).map(|i| i as f64).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
        ])
        .expect("batch")
    }

    fn newest(keys: &[&str], batches: &[RecordBatch]) -> Vec<(String, i64, i64, Value)> {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let mut n = Newest::new(0, 100, &["speed".to_string()]);
        for b in batches {
            n.add(b, &keys, "ts", Some("created")).expect("add");
        }
        let mut rows: Vec<_> = n
            .rows()
            .into_iter()
            .map(|(k, r)| (k, r.event_ts, r.created_ts, r.values["speed"].clone()))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }

    #[test]
    fn the_newest_row_of_each_entity_wins_by_event_then_created_then_position() {
        let rows = [
            batch(
                vec![Some(1), Some(1), Some(2), Some(2), None, Some(3)],
                vec!["a", "a", "b", "b", "c", "d"],
                vec![10, 20, 5, 5, 50, 200],
                vec![None, None, Some(7), Some(3), None, None],
            ),
            batch(
                vec![Some(1), Some(2), Some(-4)],
                vec!["a", "b", "e"],
                vec![20, 5, 1],
                vec![None, Some(7), None],
            ),
        ];
        // One int64 key: by number. Driver 1: the later of two rows at 20 (position);
        // 2: created 7 beats 3, and the later of two at (5, 7); 3 is outside the
        // window; the null key has no entity.
        assert_eq!(
            newest(&["driver_id"], &rows),
            vec![
                ("[-4]".to_string(), 1, 0, Value::from(2.0)),
                ("[1]".to_string(), 20, 0, Value::from(0.0)),
                ("[2]".to_string(), 5, 7, Value::from(1.0)),
            ]
        );
        // Two keys: by their text, the same winners.
        assert_eq!(
            newest(&["driver_id", "city"], &rows),
            vec![
                ("[-4,\"e\"]".to_string(), 1, 0, Value::from(2.0)),
                ("[1,\"a\"]".to_string(), 20, 0, Value::from(0.0)),
                ("[2,\"b\"]".to_string(), 5, 7, Value::from(1.0)),
            ]
        );
    }
}
