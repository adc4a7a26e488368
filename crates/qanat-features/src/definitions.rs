//! What a feature repo declares: entities, sources, feature views and feature
//! services, read from YAML files (one object per document, `kind:` first) and checked
//! as a whole before anything is recorded.
//!
//! Each definition has a *logic* part, which decides the values a view produces (join
//! keys, the source and its timestamps, the schema and its rules, the ttl, the SQL
//! transformation), and *metadata* (description, owner, tags, PII flags), which does
//! not. Only a change of logic makes a new version; metadata is edited in place and
//! applies to every version (a feature marked PII is protected in old versions too).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use qanat_core::Name;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use qanat_types::features::definitions::*;

use crate::error::{Error, Result};

/// One YAML document of a repo file.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Document {
    Entity(EntityDef),
    Source(SourceDef),
    FeatureView(FeatureViewDef),
    FeatureService(FeatureServiceDef),
}

/// A feature repo read from its YAML files (what `qanat features plan/apply` and the
/// quickstart read before sending it).
pub trait RepoFiles: Sized {
    /// Reads every `*.yaml` / `*.yml` file under `dir` (sorted, recursively; hidden
    /// entries skipped). Errors name the file and the document.
    fn read_dir(dir: &Path) -> Result<Self>;

    /// Adds the definitions of one YAML text (`origin` names it in errors).
    fn add_yaml(&mut self, origin: &str, text: &str) -> Result<()>;
}

impl RepoFiles for FeatureRepo {
    /// Reads every `*.yaml` / `*.yml` file under `dir` (sorted, recursively; hidden
    /// entries skipped). Errors name the file and the document.
    fn read_dir(dir: &Path) -> Result<FeatureRepo> {
        let mut files = Vec::new();
        collect_yaml(dir, &mut files)?;
        if files.is_empty() {
            return Err(Error::invalid(format!(
                "{} holds no .yaml files: a feature repo is a folder of YAML definitions (see docs/features.md)",
                dir.display()
            )));
        }
        files.sort();
        let mut repo = FeatureRepo::default();
        for f in files {
            let text = std::fs::read_to_string(&f)
                .map_err(|e| Error::invalid(format!("cannot read {}: {e}", f.display())))?;
            repo.add_yaml(&f.display().to_string(), &text)?;
        }
        Ok(repo)
    }

    /// Adds the definitions of one YAML text (`origin` names it in errors).
    fn add_yaml(&mut self, origin: &str, text: &str) -> Result<()> {
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let value = serde_yaml_ng::Value::deserialize(doc)
                .map_err(|e| Error::invalid(format!("{origin}: {e}")))?;
            if value.is_null() {
                continue; // an empty document (a trailing `---`)
            }
            let kind = value
                .get("kind")
                .and_then(|k| k.as_str())
                .map(str::to_string);
            let doc: Document = serde_yaml_ng::from_value(value).map_err(|e| {
                let what = kind.map(|k| format!(" ({k})")).unwrap_or_default();
                let hint = if e.to_string().contains("kind") {
                    ": each document starts with kind: entity | source | feature_view | feature_service"
                } else {
                    ""
                };
                Error::invalid(format!("{origin}, document {}{what}: {e}{hint}", i + 1))
            })?;
            match doc {
                Document::Entity(d) => self.entities.push(d),
                Document::Source(d) => self.sources.push(d),
                Document::FeatureView(d) => self.feature_views.push(d),
                Document::FeatureService(d) => self.feature_services.push(d),
            }
        }
        Ok(())
    }
}

fn collect_yaml(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::invalid(format!("cannot read {}: {e}", dir.display())))?;
    for entry in entries {
        let entry =
            entry.map_err(|e| Error::invalid(format!("cannot read {}: {e}", dir.display())))?;
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if hidden {
            continue;
        }
        if path.is_dir() {
            collect_yaml(&path, out)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
    Ok(())
}

/// A definition checked against the rest of its repo, split into the part that is
/// versioned and the part that is edited in place, with the fingerprint of its logic
/// (which covers the logic of what it depends on: a view changes when its source does).
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    pub kind: ObjectKind,
    pub name: String,
    /// The whole definition, as recorded.
    pub definition: Value,
    /// The versioned part, canonical.
    pub logic: Value,
    pub fingerprint: String,
    /// (kind, name) of what this object's logic depends on.
    pub depends_on: Vec<(ObjectKind, String)>,
}

/// Checks a whole repo: names unique per kind, every reference resolves, schemas are
/// consistent, constraints fit their types. Returns the objects in dependency order
/// (entities, sources, views, services), with fingerprints.
pub(crate) fn check(repo: &FeatureRepo) -> Result<Vec<Checked>> {
    let mut problems = Vec::new();
    let mut out = Vec::new();
    let mut fingerprints: BTreeMap<(ObjectKind, String), String> = BTreeMap::new();

    unique(
        "entity",
        repo.entities.iter().map(|e| &e.name),
        &mut problems,
    );
    unique(
        "source",
        repo.sources.iter().map(|e| &e.name),
        &mut problems,
    );
    unique(
        "feature view",
        repo.feature_views.iter().map(|e| &e.name),
        &mut problems,
    );
    unique(
        "feature service",
        repo.feature_services.iter().map(|e| &e.name),
        &mut problems,
    );

    // Entities.
    let mut entities = BTreeMap::new();
    for e in &repo.entities {
        let at = format!("entity {}", e.name);
        if e.join_keys.is_empty() {
            problems.push(format!(
                "{at}: join_keys is empty: name at least one key column and its type"
            ));
        }
        unique(
            &format!("{at}: join key"),
            e.join_keys.iter().map(|k| &k.name),
            &mut problems,
        );
        for k in &e.join_keys {
            if matches!(
                k.value_type,
                ValueType::Float32 | ValueType::Float64 | ValueType::Bytes
            ) {
                problems.push(format!(
                    "{at}: join key {} has type {}: keys are bool, int32, int64, string or timestamp (floats do not compare exactly)",
                    k.name, k.value_type
                ));
            }
        }
        entities.insert(e.name.as_str(), e);
        let logic = serde_json::json!({ "join_keys": e.join_keys });
        push_checked(
            &mut out,
            &mut fingerprints,
            ObjectKind::Entity,
            e.name.as_str(),
            e,
            logic,
            vec![],
        );
    }

    // Sources.
    let source_names: BTreeSet<&str> = repo.sources.iter().map(|s| s.name.as_str()).collect();
    for s in &repo.sources {
        let at = format!("source {}", s.name);
        let want = |field: &str, present: bool, problems: &mut Vec<String>| {
            if !present {
                problems.push(format!("{at}: a {} source needs '{field}'", s.source_type));
            }
        };
        let forbid = |field: &str, present: bool, problems: &mut Vec<String>| {
            if present {
                problems.push(format!(
                    "{at}: '{field}' does not apply to a {} source",
                    s.source_type
                ));
            }
        };
        match s.source_type {
            SourceType::Dataset => {
                want("dataset", s.dataset.is_some(), &mut problems);
                if let Some(d) = &s.dataset {
                    if let Err(e) = qanat_core::ObjectRef::parse_of(qanat_core::Kind::Dataset, d) {
                        problems.push(format!("{at}: dataset: {e}"));
                    }
                }
            }
            SourceType::File => {
                want(
                    "path",
                    s.path.as_ref().is_some_and(|p| !p.trim().is_empty()),
                    &mut problems,
                );
                if let Some(p) = &s.path {
                    if p.split('/').any(|seg| seg == "..") {
                        problems.push(format!("{at}: path '{p}' may not contain '..'"));
                    }
                }
            }
            SourceType::Sql => {
                want(
                    "sql",
                    s.sql.as_ref().is_some_and(|q| !q.trim().is_empty()),
                    &mut problems,
                );
            }
            SourceType::Push => {}
            SourceType::Stream => {
                want(
                    "subject",
                    s.subject.as_ref().is_some_and(|q| !q.trim().is_empty()),
                    &mut problems,
                );
                if let Some(subj) = &s.subject {
                    if subj.chars().any(|c| c.is_whitespace()) {
                        problems.push(format!("{at}: subject '{subj}' may not contain spaces"));
                    }
                }
            }
        }
        if s.source_type != SourceType::Dataset {
            forbid("dataset", s.dataset.is_some(), &mut problems);
        }
        if s.source_type != SourceType::File {
            forbid("path", s.path.is_some(), &mut problems);
            forbid("format", s.format.is_some(), &mut problems);
        }
        if s.source_type != SourceType::Sql {
            forbid("sql", s.sql.is_some(), &mut problems);
        }
        if s.source_type != SourceType::Stream {
            forbid("subject", s.subject.is_some(), &mut problems);
        }
        if s.timestamp_field.trim().is_empty() {
            problems.push(format!(
                "{at}: timestamp_field is empty: name the column with each row's event time"
            ));
        }
        if s.created_timestamp_field.as_deref() == Some(s.timestamp_field.as_str()) {
            problems.push(format!(
                "{at}: created_timestamp_field must differ from timestamp_field"
            ));
        }
        let mut depends = Vec::new();
        if let Some(q) = &s.sql {
            if let Err(e) = crate::sql::check_query_only(q) {
                problems.push(format!("{at}: sql: {e}"));
            }
            // The sources a query reads, named as tables: each must be another source.
            for t in sql_tables(q) {
                if t == s.name.as_str() {
                    problems.push(format!("{at}: its sql reads itself"));
                } else if source_names.contains(t.as_str()) {
                    depends.push((ObjectKind::Source, t));
                }
            }
            if depends.is_empty() {
                problems.push(format!(
                    "{at}: its sql reads no source of the repo: name sources as tables (FROM other_source)"
                ));
            }
        }
        let logic = serde_json::json!({
            "type": s.source_type,
            "dataset": s.dataset,
            "path": s.path,
            "format": s.format,
            "sql": s.sql,
            "subject": s.subject,
            "timestamp_field": s.timestamp_field,
            "created_timestamp_field": s.created_timestamp_field,
        });
        push_checked(
            &mut out,
            &mut fingerprints,
            ObjectKind::Source,
            s.name.as_str(),
            s,
            logic,
            depends,
        );
    }
    // A sql source may read another sql source: fingerprint in dependency order, and
    // refuse cycles.
    refingerprint_sources(&mut out, &mut fingerprints, &mut problems);

    // Feature views.
    let mut views = BTreeMap::new();
    for v in &repo.feature_views {
        let at = format!("feature view {}", v.name);
        let mut depends = Vec::new();
        if v.entities.is_empty() {
            problems.push(format!(
                "{at}: entities is empty: name the entities its rows are about"
            ));
        }
        unique(&format!("{at}: entity"), v.entities.iter(), &mut problems);
        let mut keys = BTreeSet::new();
        for e in &v.entities {
            match entities.get(e.as_str()) {
                Some(ent) => {
                    depends.push((ObjectKind::Entity, e.to_string()));
                    for k in &ent.join_keys {
                        keys.insert(k.name.as_str());
                    }
                }
                None => problems.push(format!("{at}: entity '{e}' is not declared in the repo")),
            }
        }
        if source_names.contains(v.source.as_str()) {
            depends.push((ObjectKind::Source, v.source.to_string()));
        } else {
            problems.push(format!(
                "{at}: source '{}' is not declared in the repo",
                v.source
            ));
        }
        if v.schema.is_empty() {
            problems.push(format!(
                "{at}: schema is empty: declare its features with their types"
            ));
        }
        unique(
            &format!("{at}: feature"),
            v.schema.iter().map(|f| &f.name),
            &mut problems,
        );
        for f in &v.schema {
            let fat = format!("{at}: feature {}", f.name);
            if keys.contains(f.name.as_str()) {
                problems.push(format!("{fat} has the name of a join key"));
            }
            check_rules(&fat, f, &mut problems);
        }
        if let Some(t) = &v.transformation {
            if t.trim().is_empty() {
                problems.push(format!(
                    "{at}: transformation is empty: leave it out, or write SQL over 'source'"
                ));
            } else if let Err(e) = crate::sql::check_query_only(t) {
                problems.push(format!("{at}: transformation: {e}"));
            }
            let arriving = repo.sources.iter().any(|s| {
                s.name == v.source && matches!(s.source_type, SourceType::Push | SourceType::Stream)
            });
            if arriving {
                problems.push(format!(
                    "{at}: a transformation needs a batch source; pushed and streamed rows go online as they arrive, untransformed (transform in a sql source over this one, or before pushing)"
                ));
            }
        }
        let schema: Vec<Value> = v
            .schema
            .iter()
            .map(|f| {
                serde_json::json!({
                    "name": f.name,
                    "type": f.value_type,
                    "nullable": f.nullable,
                    "range": f.range,
                    "allowed": f.allowed,
                })
            })
            .collect();
        let logic = serde_json::json!({
            "entities": v.entities,
            "source": v.source,
            "ttl": v.ttl,
            "schema": schema,
            "transformation": v.transformation,
            "online": v.online,
        });
        views.insert(v.name.as_str(), v);
        push_checked(
            &mut out,
            &mut fingerprints,
            ObjectKind::FeatureView,
            v.name.as_str(),
            v,
            logic,
            depends,
        );
    }

    // Feature services.
    for s in &repo.feature_services {
        let at = format!("feature service {}", s.name);
        if s.features.is_empty() {
            problems.push(format!("{at}: features is empty"));
        }
        let mut depends = BTreeSet::new();
        for r in &s.features {
            match views.get(r.view.as_str()) {
                None => problems.push(format!(
                    "{at}: feature view '{}' is not declared in the repo",
                    r.view
                )),
                Some(v) => {
                    if let Some(f) = &r.feature {
                        if !v.schema.iter().any(|d| &d.name == f) {
                            problems.push(format!(
                                "{at}: feature view '{}' has no feature '{f}'",
                                r.view
                            ));
                        }
                    }
                    depends.insert((ObjectKind::FeatureView, r.view.to_string()));
                }
            }
        }
        let refs: Vec<String> = s.features.iter().map(|r| r.to_string()).collect();
        let logic = serde_json::json!({ "features": refs });
        // A service follows its unpinned views' newest versions: its own version
        // changes only when its list does.
        let mut c = checked(
            ObjectKind::FeatureService,
            s.name.as_str(),
            s,
            logic,
            &fingerprints,
            &[],
        );
        c.depends_on = depends.into_iter().collect();
        fingerprints.insert((c.kind, c.name.clone()), c.fingerprint.clone());
        out.push(c);
    }

    if problems.is_empty() {
        Ok(out)
    } else {
        Err(Error::Definitions(problems))
    }
}

fn push_checked<T: Serialize>(
    out: &mut Vec<Checked>,
    fingerprints: &mut BTreeMap<(ObjectKind, String), String>,
    kind: ObjectKind,
    name: &str,
    def: &T,
    logic: Value,
    depends_on: Vec<(ObjectKind, String)>,
) {
    let c = checked(kind, name, def, logic, fingerprints, &depends_on);
    fingerprints.insert((kind, name.to_string()), c.fingerprint.clone());
    out.push(Checked { depends_on, ..c });
}

fn checked<T: Serialize>(
    kind: ObjectKind,
    name: &str,
    def: &T,
    logic: Value,
    fingerprints: &BTreeMap<(ObjectKind, String), String>,
    depends_on: &[(ObjectKind, String)],
) -> Checked {
    let logic = strip_nulls(logic);
    let mut h = blake3::Hasher::new();
    h.update(kind.as_str().as_bytes());
    h.update(b"\0");
    // serde_json's Value keeps object keys sorted (no preserve_order feature), so the
    // text is canonical.
    h.update(logic.to_string().as_bytes());
    for d in depends_on {
        h.update(b"\0");
        h.update(d.0.as_str().as_bytes());
        h.update(b":");
        h.update(d.1.as_bytes());
        h.update(b"=");
        h.update(
            fingerprints
                .get(d)
                .map(String::as_str)
                .unwrap_or("?")
                .as_bytes(),
        );
    }
    Checked {
        kind,
        name: name.to_string(),
        definition: serde_json::to_value(def).unwrap_or(Value::Null),
        logic,
        fingerprint: h.finalize().to_hex()[..32].to_string(),
        depends_on: depends_on.to_vec(),
    }
}

/// Sql sources depend on other sources: recompute their fingerprints in dependency
/// order (so a change to an input source changes the query source too), refusing
/// cycles.
fn refingerprint_sources(
    out: &mut [Checked],
    fingerprints: &mut BTreeMap<(ObjectKind, String), String>,
    problems: &mut Vec<String>,
) {
    let sql: Vec<usize> = (0..out.len())
        .filter(|&i| out[i].kind == ObjectKind::Source && !out[i].depends_on.is_empty())
        .collect();
    let mut done: BTreeSet<String> = out
        .iter()
        .filter(|c| c.kind == ObjectKind::Source && c.depends_on.is_empty())
        .map(|c| c.name.clone())
        .collect();
    let mut pending = sql;
    while !pending.is_empty() {
        let before = pending.len();
        pending.retain(|&i| {
            let ready = out[i].depends_on.iter().all(|d| done.contains(&d.1));
            if ready {
                let c = &out[i];
                let again = checked(
                    c.kind,
                    &c.name,
                    &c.definition,
                    c.logic.clone(),
                    fingerprints,
                    &c.depends_on,
                );
                fingerprints.insert((c.kind, c.name.clone()), again.fingerprint.clone());
                done.insert(c.name.clone());
                out[i].fingerprint = again.fingerprint;
            }
            !ready
        });
        if pending.len() == before {
            let names: Vec<&str> = pending.iter().map(|&i| out[i].name.as_str()).collect();
            problems.push(format!(
                "sources {} read each other in a cycle",
                names.join(", ")
            ));
            return;
        }
    }
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

fn unique<'a, I: IntoIterator<Item = &'a Name>>(what: &str, names: I, problems: &mut Vec<String>) {
    let mut seen = BTreeSet::new();
    for n in names {
        if !seen.insert(n.as_str()) {
            problems.push(format!("{what} '{n}' is declared twice"));
        }
    }
}

/// Checks a feature's declared range and allowed values against its type.
fn check_rules(at: &str, f: &FeatureDef, problems: &mut Vec<String>) {
    if let Some(r) = &f.range {
        if !f.value_type.is_numeric() {
            problems.push(format!(
                "{at}: range applies to numeric features, not {}",
                f.value_type
            ));
        }
        if r.min.is_none() && r.max.is_none() {
            problems.push(format!("{at}: range names neither min nor max"));
        }
        if let (Some(lo), Some(hi)) = (r.min, r.max) {
            if lo > hi {
                problems.push(format!("{at}: range min {lo} is above max {hi}"));
            }
        }
    }
    if let Some(allowed) = &f.allowed {
        if allowed.is_empty() {
            problems.push(format!("{at}: allowed is empty: no value could pass"));
        }
        for a in allowed {
            let fits = match f.value_type {
                ValueType::String => a.is_string(),
                ValueType::Int32 | ValueType::Int64 => a.is_i64(),
                ValueType::Bool => a.is_boolean(),
                _ => false,
            };
            if !fits {
                problems.push(format!(
                    "{at}: allowed value {a} does not fit type {} (allowed lists are for string, integer and bool features)",
                    f.value_type
                ));
            }
        }
    }
}

/// The table names a query reads (after FROM and JOIN): enough to find the sources
/// it depends on; DataFusion parses the query itself when it runs.
fn sql_tables(sql: &str) -> Vec<String> {
    let words: Vec<&str> = sql
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')' || c == ';')
        .filter(|w| !w.is_empty())
        .collect();
    let mut out = Vec::new();
    for pair in words.windows(2) {
        if pair[0].eq_ignore_ascii_case("from") || pair[0].eq_ignore_ascii_case("join") {
            let t = pair[1].trim_matches('"').to_string();
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    out
}

/// The metadata of a definition (what is edited in place): everything but its logic.
pub(crate) fn metadata_of(definition: &Value) -> Value {
    let mut meta = serde_json::Map::new();
    if let Value::Object(m) = definition {
        for key in ["description", "owner", "tags"] {
            if let Some(v) = m.get(key) {
                meta.insert(key.into(), v.clone());
            }
        }
        if let Some(Value::Array(schema)) = m.get("schema") {
            let per: serde_json::Map<String, Value> = schema
                .iter()
                .filter_map(|f| {
                    let name = f.get("name")?.as_str()?.to_string();
                    let mut fm = serde_json::Map::new();
                    for key in ["pii", "description"] {
                        if let Some(v) = f.get(key) {
                            fm.insert(key.into(), v.clone());
                        }
                    }
                    (!fm.is_empty()).then_some((name, Value::Object(fm)))
                })
                .collect();
            if !per.is_empty() {
                meta.insert("features".into(), Value::Object(per));
            }
        }
    }
    Value::Object(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const REPO: &str = include_str!("../tests/fixtures/definitions_repo.yaml");

    fn repo() -> FeatureRepo {
        let mut r = FeatureRepo::default();
        r.add_yaml("repo.yaml", REPO)
            .expect("the example repo parses");
        r
    }

    fn fingerprint(r: &FeatureRepo, kind: ObjectKind, name: &str) -> String {
        check(r)
            .expect("valid")
            .into_iter()
            .find(|c| c.kind == kind && c.name == name)
            .expect("present")
            .fingerprint
    }

    #[test]
    fn a_repo_of_yaml_documents_parses_and_checks() {
        let r = repo();
        assert_eq!(r.feature_views[0].ttl, Ttl(Duration::from_secs(86_400)));
        assert!(r.feature_views[0].schema[2].pii);
        let checked = check(&r).expect("valid");
        assert_eq!(checked.len(), 4);
    }

    #[test]
    fn metadata_changes_leave_the_fingerprint_alone() {
        let a = repo();
        let mut b = repo();
        b.feature_views[0].owner = "someone-else".into();
        b.feature_views[0].schema[0].pii = true;
        b.feature_views[0].tags.insert("team".into(), "x".into());
        assert_eq!(
            fingerprint(&a, ObjectKind::FeatureView, "driver_stats"),
            fingerprint(&b, ObjectKind::FeatureView, "driver_stats")
        );
    }

    #[test]
    fn logic_changes_and_source_changes_change_the_view_fingerprint() {
        let a = repo();
        let mut b = repo();
        b.feature_views[0].ttl = Ttl(Duration::from_secs(7200));
        assert_ne!(
            fingerprint(&a, ObjectKind::FeatureView, "driver_stats"),
            fingerprint(&b, ObjectKind::FeatureView, "driver_stats")
        );
        let mut c = repo();
        c.sources[0].created_timestamp_field = None;
        assert_ne!(
            fingerprint(&a, ObjectKind::FeatureView, "driver_stats"),
            fingerprint(&c, ObjectKind::FeatureView, "driver_stats")
        );
        // The service follows the newest view: its own fingerprint stays.
        assert_eq!(
            fingerprint(&a, ObjectKind::FeatureService, "driver_activity"),
            fingerprint(&c, ObjectKind::FeatureService, "driver_activity")
        );
    }

    #[test]
    fn every_problem_of_a_repo_is_reported_at_once() {
        let mut r = repo();
        r.feature_views[0]
            .entities
            .push("rider".parse().expect("name"));
        r.feature_views[0].schema[1].range = Some(ValueRange {
            min: Some(5.0),
            max: Some(1.0),
        });
        r.feature_views[0].schema[2].allowed = Some(vec![serde_json::json!(3)]);
        r.feature_services[0]
            .features
            .push("driver_stats:nope".parse().expect("ref"));
        let Err(Error::Definitions(p)) = check(&r) else {
            panic!("expected problems");
        };
        let text = p.join("\n");
        for want in [
            "entity 'rider' is not declared",
            "range min 5 is above max 1",
            "allowed value 3 does not fit type string",
            "has no feature 'nope'",
        ] {
            assert!(text.contains(want), "{want} missing from:\n{text}");
        }
    }

    #[test]
    fn unknown_fields_and_kinds_are_refused_with_the_document() {
        let mut r = FeatureRepo::default();
        let e = r
            .add_yaml(
                "a.yaml",
                "kind: entity\nname: d\njoin_keys: []\nowner: x\nttll: 3\n",
            )
            .expect_err("unknown field");
        assert!(e.to_string().contains("a.yaml, document 1 (entity)"), "{e}");
        assert!(e.to_string().contains("ttll"), "{e}");
        let e = r
            .add_yaml("b.yaml", "kind: table\nname: d\n")
            .expect_err("unknown kind");
        assert!(e.to_string().contains("b.yaml"), "{e}");
    }

    #[test]
    fn ttls_read_as_durations_or_seconds() {
        assert_eq!("0".parse::<Ttl>().expect("ttl"), Ttl(Duration::ZERO));
        assert_eq!(
            "3600".parse::<Ttl>().expect("ttl"),
            Ttl(Duration::from_secs(3600))
        );
        assert_eq!("2h".parse::<Ttl>().expect("ttl").to_string(), "2h");
        assert!("soon".parse::<Ttl>().is_err());
    }

    #[test]
    fn sql_sources_depend_on_the_sources_they_read_and_cycles_are_refused() {
        let mut r = repo();
        r.sources.push(SourceDef {
            name: "derived".parse().expect("name"),
            source_type: SourceType::Sql,
            dataset: None,
            path: None,
            format: None,
            sql: Some("SELECT * FROM driver_stats_src WHERE trips > 0".into()),
            subject: None,
            timestamp_field: "event_timestamp".into(),
            created_timestamp_field: None,
            description: String::new(),
            owner: String::new(),
            tags: BTreeMap::new(),
        });
        let before = fingerprint(&r, ObjectKind::Source, "derived");
        r.sources[0].path = Some("features/other.parquet".into());
        assert_ne!(before, fingerprint(&r, ObjectKind::Source, "derived"));
        r.sources[0].source_type = SourceType::Sql;
        r.sources[0].path = None;
        r.sources[0].sql = Some("SELECT * FROM derived".into());
        let Err(Error::Definitions(p)) = check(&r) else {
            panic!("a cycle");
        };
        assert!(p.join("\n").contains("cycle"), "{p:?}");
    }

    #[test]
    fn a_transformation_over_pushed_rows_is_refused() {
        let mut r = repo();
        r.sources[0].source_type = SourceType::Push;
        r.sources[0].path = None;
        r.sources[0].format = None;
        r.feature_views[0].transformation = Some("SELECT * FROM source".into());
        let Err(Error::Definitions(p)) = check(&r) else {
            panic!("refused");
        };
        assert!(
            p.join("\n")
                .contains("a transformation needs a batch source"),
            "{p:?}"
        );
    }
}
