//! The feature registry: what `plan` compares a repo against and `apply` records, in
//! one transaction.
//!
//! Invariants: a version row is written once and never changed; an object's head
//! points at its newest version and carries its current metadata; the project's
//! registry revision moves on by exactly one per apply that changes anything, and the
//! conditional update that moves it is the first write of the transaction, so of two
//! applies planned against the same revision one is refused rather than both mixed.

use std::collections::BTreeMap;

use qanat_governance::{append_audit_in, AuditRecord, Project};
use qanat_store::{format_micros, now_micros};
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::definitions::{check, metadata_of, Checked, FeatureRepo, ObjectKind};
use crate::error::{Error, Result};
use crate::wire::{Action, Change, Dependency, ObjectHistory, Plan, RegisteredObject, Registry};
use crate::Features;

/// Who applies a feature repo: the name recorded as its author, the request's audit
/// entry (appended in the apply's transaction), and whether they may turn a feature's
/// PII protection off (a maintainer's decision).
#[derive(Debug, Clone, Copy)]
pub struct Applier<'a> {
    pub by: &'a str,
    pub audit: Option<&'a AuditRecord>,
    pub may_unmark_pii: bool,
}

impl<'a> Applier<'a> {
    /// A maintainer applying outside a request (no audit entry of its own).
    pub fn maintainer(by: &'a str) -> Self {
        Applier {
            by,
            audit: None,
            may_unmark_pii: true,
        }
    }
}

/// An object's head row with its newest version's fingerprint and logic.
struct Head {
    latest_version: i64,
    definition: Value,
    logic: Value,
    fingerprint: String,
    depends_on: Vec<Dependency>,
    deleted: bool,
}

/// A change with what must be written for it.
struct Planned {
    change: Change,
    checked: Option<Checked>,
    depends_on: Vec<Dependency>,
    head_exists: bool,
    /// Whether a version row is written (a new object, or new logic).
    writes_version: bool,
}

impl Features {
    /// What applying `repo` to `project` would do, object by object. Checks the whole
    /// repo first: a repo with problems is refused with all of them.
    #[qanat_macros::boxed]
    pub async fn plan(&self, project: &Project, repo: &FeatureRepo) -> Result<Plan> {
        let checked = check(repo)?;
        let mut conn = self.meta.reader().acquire().await?;
        let revision = revision(&mut conn, project).await?;
        let heads = heads(&mut conn, project).await?;
        let planned = plan_changes(checked, &heads);
        Ok(Plan {
            revision,
            applied: false,
            changes: planned.into_iter().map(|p| p.change).collect(),
            warnings: Vec::new(),
        })
    }

    /// Applies `repo`: the registry of `project` then holds exactly its objects. All
    /// or nothing, audited with the applier's entry in the same transaction. With
    /// `expected_revision`, refused unless nothing was applied since that plan.
    /// Removing a feature's `pii` flag is refused, naming each feature it would
    /// expose, unless the applier may (a maintainer).
    #[qanat_macros::boxed]
    pub async fn apply(
        &self,
        project: &Project,
        repo: &FeatureRepo,
        expected_revision: Option<i64>,
        applier: &Applier<'_>,
    ) -> Result<Plan> {
        let Applier {
            by,
            audit,
            may_unmark_pii,
        } = *applier;
        let checked = check(repo)?;
        let now = now_micros();
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query(
            "INSERT INTO feature_registry (project_id, revision, applied_at, applied_by) VALUES ($1, 0, $2, $3) \
             ON CONFLICT (project_id) DO NOTHING",
        )
        .bind(project.id.as_str())
        .bind(now)
        .bind(by)
        .execute(&mut *tx)
        .await?;
        let current = revision(&mut tx, project).await?;
        if let Some(want) = expected_revision {
            if want != current {
                return Err(Error::Conflict(format!(
                    "the feature registry of {} is at revision {current}, not {want}: it changed since the plan; plan again",
                    project.name
                )));
            }
        }
        let heads = heads(&mut tx, project).await?;
        let unmarked = unmarked_pii(&checked, &heads);
        if !unmarked.is_empty() && !may_unmark_pii {
            return Err(Error::Forbidden(format!(
                "removing the pii flag of {} needs a maintainer of project '{}': its values would then be served and pulled in clear",
                unmarked.join(", "),
                project.name
            )));
        }
        let planned = plan_changes(checked, &heads);
        let changes = planned.iter().any(|p| p.change.action != Action::Unchanged);
        if !changes {
            return Ok(Plan {
                revision: current,
                applied: false,
                changes: planned.into_iter().map(|p| p.change).collect(),
                warnings: Vec::new(),
            });
        }
        let moved = sqlx::query(
            "UPDATE feature_registry SET revision = revision + 1, applied_at = $1, applied_by = $2 \
             WHERE project_id = $3 AND revision = $4",
        )
        .bind(now)
        .bind(by)
        .bind(project.id.as_str())
        .bind(current)
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() != 1 {
            return Err(Error::Conflict(format!(
                "another apply to the feature registry of {} ran at the same time: plan again",
                project.name
            )));
        }
        for p in &planned {
            write(&mut tx, project, p, by, now).await?;
        }
        if let Some(rec) = audit {
            let mut rec = rec.clone();
            rec.resource = format!("project:{}/feature_registry@{}", project.name, current + 1);
            append_audit_in(&mut tx, &rec).await?;
        }
        tx.commit().await?;
        crate::registry_changed();
        Ok(Plan {
            revision: current + 1,
            applied: true,
            changes: planned.into_iter().map(|p| p.change).collect(),
            warnings: Vec::new(),
        })
    }

    /// Every live object of `project`'s registry at its newest version.
    #[qanat_macros::boxed]
    pub async fn registry(&self, project: &Project) -> Result<Registry> {
        let mut conn = self.meta.reader().acquire().await?;
        let revision = revision(&mut conn, project).await?;
        let rows = sqlx::query(&format!(
            "{SELECT_OBJECT} WHERE o.project_id = $1 AND o.deleted_at IS NULL AND v.version = o.latest_version \
             ORDER BY o.kind, o.name"
        ))
        .bind(project.id.as_str())
        .fetch_all(&mut *conn)
        .await?;
        let mut objects = rows.iter().map(object_of).collect::<Result<Vec<_>>>()?;
        objects.sort_by_key(|o| (o.kind, o.name.clone()));
        Ok(Registry { revision, objects })
    }

    /// One object at `version` (the newest when None), removed ones included.
    #[qanat_macros::boxed]
    pub async fn object(
        &self,
        project: &Project,
        kind: ObjectKind,
        name: &str,
        version: Option<i64>,
    ) -> Result<RegisteredObject> {
        let row = sqlx::query(&format!(
            "{SELECT_OBJECT} WHERE o.project_id = $1 AND o.kind = $2 AND o.name = $3 \
             AND v.version = COALESCE($4, o.latest_version)"
        ))
        .bind(project.id.as_str())
        .bind(kind.as_str())
        .bind(name)
        .bind(version)
        .fetch_optional(self.meta.reader())
        .await?;
        match row {
            Some(r) => object_of(&r),
            None => Err(Error::not_found(
                kind_noun(kind),
                match version {
                    Some(v) => format!("{name}@{v}"),
                    None => name.to_string(),
                },
            )),
        }
    }

    /// Every version of one object, newest first.
    #[qanat_macros::boxed]
    pub async fn history(
        &self,
        project: &Project,
        kind: ObjectKind,
        name: &str,
    ) -> Result<ObjectHistory> {
        let rows = sqlx::query(&format!(
            "{SELECT_OBJECT} WHERE o.project_id = $1 AND o.kind = $2 AND o.name = $3 ORDER BY v.version DESC"
        ))
        .bind(project.id.as_str())
        .bind(kind.as_str())
        .bind(name)
        .fetch_all(self.meta.reader())
        .await?;
        if rows.is_empty() {
            return Err(Error::not_found(kind_noun(kind), name));
        }
        Ok(ObjectHistory {
            kind,
            name: name.to_string(),
            versions: rows.iter().map(object_of).collect::<Result<_>>()?,
        })
    }
}

pub(crate) fn kind_noun(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::Entity => "entity",
        ObjectKind::Source => "source",
        ObjectKind::FeatureView => "feature view",
        ObjectKind::FeatureService => "feature service",
    }
}

const SELECT_OBJECT: &str = "SELECT o.kind, o.name, o.latest_version, o.definition AS head_definition, \
     o.updated_at, o.deleted_at, v.version, v.definition, v.depends_on, v.fingerprint, v.created_at, v.created_by \
     FROM feature_objects o JOIN feature_object_versions v \
     ON v.project_id = o.project_id AND v.kind = o.kind AND v.name = o.name";

fn object_of(row: &AnyRow) -> Result<RegisteredObject> {
    let kind: ObjectKind = row.try_get::<String, _>("kind")?.parse()?;
    let name: String = row.try_get("name")?;
    let version: i64 = row.try_get("version")?;
    let latest: i64 = row.try_get("latest_version")?;
    let head = json(&row.try_get::<String, _>("head_definition")?, &name)?;
    // An older version's definition, with the object's current metadata over it.
    let definition = if version == latest {
        head
    } else {
        let mut old = json(&row.try_get::<String, _>("definition")?, &name)?;
        overlay_metadata(&mut old, &metadata_of(&head));
        old
    };
    Ok(RegisteredObject {
        kind,
        name: name.clone(),
        version,
        latest_version: latest,
        definition,
        depends_on: serde_json::from_str(&row.try_get::<String, _>("depends_on")?)
            .map_err(|e| Error::Corrupt(format!("feature object {name}: depends_on: {e}")))?,
        fingerprint: row.try_get("fingerprint")?,
        created_at: format_micros(row.try_get("created_at")?),
        created_by: row.try_get("created_by")?,
        updated_at: format_micros(row.try_get("updated_at")?),
        deleted_at: row
            .try_get::<Option<i64>, _>("deleted_at")?
            .map(format_micros),
    })
}

fn json(text: &str, name: &str) -> Result<Value> {
    serde_json::from_str(text)
        .map_err(|e| Error::Corrupt(format!("feature object {name}: stored definition: {e}")))
}

/// The features (`view.feature`) whose head has `pii: true` and which `checked`
/// keeps without it.
fn unmarked_pii(checked: &[Checked], heads: &BTreeMap<(ObjectKind, String), Head>) -> Vec<String> {
    let pii = |def: &Value| -> Vec<(String, bool)> {
        def.get("schema")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| {
                let name = f.get("name")?.as_str()?.to_string();
                Some((name, f.get("pii").and_then(Value::as_bool) == Some(true)))
            })
            .collect()
    };
    let mut out = Vec::new();
    for c in checked.iter().filter(|c| c.kind == ObjectKind::FeatureView) {
        let Some(head) = heads.get(&(c.kind, c.name.clone())).filter(|h| !h.deleted) else {
            continue;
        };
        let now: BTreeMap<String, bool> = pii(&c.definition).into_iter().collect();
        for (feature, was) in pii(&head.definition) {
            if was && now.get(&feature) == Some(&false) {
                out.push(format!("{}.{feature}", c.name));
            }
        }
    }
    out
}

/// Puts `meta` (as [`metadata_of`] gives it) over a definition.
fn overlay_metadata(def: &mut Value, meta: &Value) {
    let (Value::Object(d), Value::Object(m)) = (def, meta) else {
        return;
    };
    for key in ["description", "owner", "tags"] {
        match m.get(key) {
            Some(v) => d.insert(key.into(), v.clone()),
            None => d.remove(key),
        };
    }
    let per = m.get("features").and_then(Value::as_object);
    if let Some(Value::Array(schema)) = d.get_mut("schema") {
        for f in schema.iter_mut() {
            let Some(fo) = f.as_object_mut() else {
                continue;
            };
            let name = fo
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let fm = per.and_then(|p| p.get(&name)).and_then(Value::as_object);
            for key in ["pii", "description"] {
                match fm.and_then(|m| m.get(key)) {
                    Some(v) => fo.insert(key.into(), v.clone()),
                    None => fo.remove(key),
                };
            }
        }
    }
}

async fn revision(conn: &mut sqlx::AnyConnection, project: &Project) -> Result<i64> {
    let r: Option<i64> =
        sqlx::query_scalar("SELECT revision FROM feature_registry WHERE project_id = $1")
            .bind(project.id.as_str())
            .fetch_optional(&mut *conn)
            .await?;
    Ok(r.unwrap_or(0))
}

async fn heads(
    conn: &mut sqlx::AnyConnection,
    project: &Project,
) -> Result<BTreeMap<(ObjectKind, String), Head>> {
    let rows = sqlx::query(
        "SELECT o.kind, o.name, o.latest_version, o.definition, o.deleted_at, v.logic, v.fingerprint, v.depends_on \
         FROM feature_objects o JOIN feature_object_versions v \
         ON v.project_id = o.project_id AND v.kind = o.kind AND v.name = o.name AND v.version = o.latest_version \
         WHERE o.project_id = $1",
    )
    .bind(project.id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    let mut out = BTreeMap::new();
    for row in rows {
        let kind: ObjectKind = row.try_get::<String, _>("kind")?.parse()?;
        let name: String = row.try_get("name")?;
        let head = Head {
            latest_version: row.try_get("latest_version")?,
            definition: json(&row.try_get::<String, _>("definition")?, &name)?,
            logic: json(&row.try_get::<String, _>("logic")?, &name)?,
            fingerprint: row.try_get("fingerprint")?,
            depends_on: serde_json::from_str(&row.try_get::<String, _>("depends_on")?)
                .map_err(|e| Error::Corrupt(format!("feature object {name}: depends_on: {e}")))?,
            deleted: row.try_get::<Option<i64>, _>("deleted_at")?.is_some(),
        };
        out.insert((kind, name), head);
    }
    Ok(out)
}

/// Compares checked definitions (in dependency order) with the registry's heads.
fn plan_changes(
    checked: Vec<Checked>,
    heads: &BTreeMap<(ObjectKind, String), Head>,
) -> Vec<Planned> {
    let mut out = Vec::new();
    // The version each object of the repo will be at, for its dependants' records.
    let mut versions: BTreeMap<(ObjectKind, String), i64> = BTreeMap::new();
    let mut in_repo = std::collections::BTreeSet::new();
    for c in checked {
        let key = (c.kind, c.name.clone());
        in_repo.insert(key.clone());
        let depends_on: Vec<Dependency> = c
            .depends_on
            .iter()
            .map(|d| Dependency {
                kind: d.0,
                name: d.1.clone(),
                version: versions.get(d).copied().unwrap_or(1),
            })
            .collect();
        let (action, from, to, details) = match heads.get(&key) {
            None => (Action::Create, None, 1, vec![]),
            Some(h) if h.deleted => {
                if h.fingerprint == c.fingerprint {
                    (
                        Action::Create,
                        None,
                        h.latest_version,
                        vec![format!("restored at version {}", h.latest_version)],
                    )
                } else {
                    let v = h.latest_version + 1;
                    (
                        Action::Create,
                        None,
                        v,
                        vec![format!(
                            "back, as version {v} (it was removed at version {})",
                            h.latest_version
                        )],
                    )
                }
            }
            Some(h) => {
                let meta = diff(&metadata_of(&h.definition), &metadata_of(&c.definition));
                if h.fingerprint != c.fingerprint {
                    let mut details = diff(&h.logic, &c.logic);
                    for d in &depends_on {
                        let before = h
                            .depends_on
                            .iter()
                            .find(|o| o.kind == d.kind && o.name == d.name);
                        match before {
                            Some(b) if b.version != d.version => details.push(format!(
                                "{} {}: version {} → {}",
                                kind_noun(d.kind),
                                d.name,
                                b.version,
                                d.version
                            )),
                            None => {
                                details.push(format!("{} {}: now used", kind_noun(d.kind), d.name))
                            }
                            _ => {}
                        }
                    }
                    details.extend(meta);
                    (
                        Action::NewVersion,
                        Some(h.latest_version),
                        h.latest_version + 1,
                        details,
                    )
                } else if !meta.is_empty() {
                    (
                        Action::Metadata,
                        Some(h.latest_version),
                        h.latest_version,
                        meta,
                    )
                } else {
                    (
                        Action::Unchanged,
                        Some(h.latest_version),
                        h.latest_version,
                        vec![],
                    )
                }
            }
        };
        versions.insert(key.clone(), to);
        let writes_version = match heads.get(&key) {
            None => true,
            Some(h) => h.fingerprint != c.fingerprint,
        };
        out.push(Planned {
            writes_version,
            change: Change {
                kind: c.kind,
                name: c.name.clone(),
                action,
                from_version: from,
                to_version: Some(to),
                details,
            },
            head_exists: heads.contains_key(&key),
            checked: Some(c),
            depends_on,
        });
    }
    for ((kind, name), h) in heads {
        if h.deleted || in_repo.contains(&(*kind, name.clone())) {
            continue;
        }
        out.push(Planned {
            change: Change {
                kind: *kind,
                name: name.clone(),
                action: Action::Remove,
                from_version: Some(h.latest_version),
                to_version: None,
                details: vec![],
            },
            checked: None,
            depends_on: vec![],
            head_exists: true,
            writes_version: false,
        });
    }
    out
}

/// `sql` with its first three parameters bound to the object's key (project, kind, name).
fn keyed<'q>(
    sql: &'q str,
    pid: &'q str,
    c: &'q Change,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    sqlx::query(sql)
        .bind(pid)
        .bind(c.kind.as_str())
        .bind(&c.name)
}

async fn write(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    project: &Project,
    p: &Planned,
    by: &str,
    now: i64,
) -> Result<()> {
    let pid = project.id.as_str();
    let c = &p.change;
    if c.action == Action::Remove {
        keyed(
            "UPDATE feature_objects SET deleted_at = $4, updated_at = $4, updated_by = $5 \
             WHERE project_id = $1 AND kind = $2 AND name = $3",
            pid,
            c,
        )
        .bind(now)
        .bind(by)
        .execute(&mut **tx)
        .await?;
        return Ok(());
    }
    let (Some(checked), Some(to)) = (&p.checked, c.to_version) else {
        return Ok(());
    };
    if c.action == Action::Unchanged {
        return Ok(());
    }
    let definition = checked.definition.to_string();
    // The head row: moved to the new version, or the object's first.
    let head = if p.head_exists {
        "UPDATE feature_objects SET latest_version = $4, definition = $5, updated_at = $6, updated_by = $7, \
         deleted_at = NULL WHERE project_id = $1 AND kind = $2 AND name = $3"
    } else {
        "INSERT INTO feature_objects (project_id, kind, name, latest_version, definition, created_at, created_by, \
         updated_at, updated_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $6, $7)"
    };
    keyed(head, pid, c)
        .bind(to)
        .bind(&definition)
        .bind(now)
        .bind(by)
        .execute(&mut **tx)
        .await?;
    if p.writes_version {
        let depends = serde_json::to_string(&p.depends_on)
            .map_err(|e| Error::Corrupt(format!("depends_on: {e}")))?;
        keyed(
            "INSERT INTO feature_object_versions (project_id, kind, name, version, definition, logic, fingerprint, \
             depends_on, created_at, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            pid,
            c,
        )
        .bind(to)
        .bind(&definition)
        .bind(checked.logic.to_string())
        .bind(&checked.fingerprint)
        .bind(depends)
        .bind(now)
        .bind(by)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Field by field differences between two JSON documents, as `path: old → new`
/// lines. Arrays of objects with a `name` (a schema) are compared by name.
fn diff(old: &Value, new: &Value) -> Vec<String> {
    let mut a = BTreeMap::new();
    let mut b = BTreeMap::new();
    flatten("", old, &mut a);
    flatten("", new, &mut b);
    let mut out = Vec::new();
    for (k, v) in &a {
        match b.get(k) {
            None => out.push(format!("{k}: {v} → (none)")),
            Some(w) if w != v => out.push(format!("{k}: {v} → {w}")),
            _ => {}
        }
    }
    for (k, w) in &b {
        if !a.contains_key(k) {
            out.push(format!("{k}: (none) → {w}"));
        }
    }
    out
}

fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                flatten(&join(k), v, out);
            }
        }
        Value::Array(items)
            if !items.is_empty()
                && items
                    .iter()
                    .all(|i| i.get("name").and_then(Value::as_str).is_some()) =>
        {
            for i in items {
                let name = i.get("name").and_then(Value::as_str).unwrap_or_default();
                if let Value::Object(m) = i {
                    for (k, v) in m.iter().filter(|(k, _)| *k != "name") {
                        flatten(&join(&format!("{name}.{k}")), v, out);
                    }
                    if m.len() == 1 {
                        out.insert(join(name), "declared".into());
                    }
                }
            }
        }
        other => {
            let text = match other {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            out.insert(prefix.to_string(), text);
        }
    }
}
