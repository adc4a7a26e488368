//! MLflow's search language: `filter` (comparisons joined by AND) and `order_by`,
//! parsed here and turned into SQL with bound parameters only. One parser serves runs,
//! logged models, registered models and model versions; a [`Target`] says which table
//! is searched and where its attributes, params, tags and metrics live.
//!
//! ```text
//! metrics.rmse < 0.5 and params.model = 'tree' and tags."team" != 'x'
//! attributes.status = 'FINISHED' and run_name LIKE 'base%' and attributes.run_id IN ('a', 'b')
//! order_by: ["metrics.rmse ASC", "attributes.start_time DESC"]
//! ```

use qanat_store::Backend;

use crate::{Error, Result};

/// What a comparison looks at.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entity {
    Metric(String),
    Param(String),
    Tag(String),
    /// An attribute: a SQL expression over the searched table.
    Attribute(&'static str),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Num(f64),
    Str(String),
    List(Vec<String>),
    Null,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Clause {
    pub entity: Entity,
    pub op: String,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OrderKey {
    pub entity: Entity,
    pub ascending: bool,
}

/// What a search runs over. `link` is the condition tying a side table row (alias
/// `{a}`) to the searched row.
pub(crate) struct Target {
    pub what: &'static str,
    pub link: &'static str,
    pub params: Option<&'static str>,
    pub tags: Option<&'static str>,
    /// A table of (key, value, is_nan) rows; a comparison holds if any row matches.
    pub metrics: Option<&'static str>,
    /// Attribute names (as users write them) and their SQL expressions.
    pub string_attrs: &'static [(&'static str, &'static str)],
    pub numeric_attrs: &'static [(&'static str, &'static str)],
    /// The final ORDER BY terms that make the order total.
    pub tie_break: &'static str,
    /// Whether `tags.k != 'v'` also matches rows without the tag (the registry's rule:
    /// the client always adds `tags.mlflow.prompt.is_prompt != 'true'`, which untagged
    /// models must pass); for runs and logged models the tag must exist.
    pub untagged_differs: bool,
}

pub(crate) const RUNS: Target = Target {
    what: "run",
    link: "{a}.run_id = runs.run_id",
    params: Some("run_params"),
    tags: Some("run_tags"),
    metrics: Some("latest_metrics"),
    string_attrs: &[
        ("run_id", "runs.run_id"),
        ("run_uuid", "runs.run_id"),
        ("run_name", "runs.run_name"),
        ("status", "runs.status"),
        ("user_id", "runs.user_id"),
        ("artifact_uri", "runs.artifact_uri"),
        ("lifecycle_stage", "runs.lifecycle_stage"),
    ],
    numeric_attrs: &[
        ("start_time", "runs.start_time"),
        ("end_time", "runs.end_time"),
    ],
    tie_break: "runs.start_time DESC, runs.run_id",
    untagged_differs: false,
};

pub(crate) const EXPERIMENTS: Target = Target {
    what: "experiment",
    link: "{a}.project_id = e.project_id AND {a}.experiment_id = e.experiment_id",
    params: None,
    tags: Some("experiment_tags"),
    metrics: None,
    string_attrs: &[("name", "e.name")],
    numeric_attrs: &[
        ("creation_time", "e.creation_time"),
        ("last_update_time", "e.last_update_time"),
        ("experiment_id", "e.experiment_id"),
    ],
    tie_break: "e.experiment_id DESC",
    untagged_differs: false,
};

pub(crate) const LOGGED_MODELS: Target = Target {
    what: "logged model",
    link: "{a}.model_id = lm.model_id",
    params: Some("logged_model_params"),
    tags: Some("logged_model_tags"),
    metrics: Some("logged_model_metrics"),
    string_attrs: &[
        ("model_id", "lm.model_id"),
        ("name", "lm.name"),
        ("model_type", "lm.model_type"),
        ("status", "lm.status"),
        ("source_run_id", "lm.source_run_id"),
    ],
    numeric_attrs: &[
        ("creation_timestamp", "lm.creation_time"),
        ("creation_time", "lm.creation_time"),
        ("last_updated_timestamp", "lm.last_update_time"),
    ],
    tie_break: "lm.creation_time DESC, lm.model_id",
    untagged_differs: false,
};

pub(crate) const REGISTERED_MODELS: Target = Target {
    what: "registered model",
    link: "{a}.registered_model_id = rm.id",
    params: None,
    tags: Some("registered_model_tags"),
    metrics: None,
    string_attrs: &[("name", "rm.name")],
    numeric_attrs: &[
        ("creation_timestamp", "rm.creation_time"),
        ("last_updated_timestamp", "rm.last_update_time"),
        ("timestamp", "rm.last_update_time"),
    ],
    tie_break: "rm.name",
    untagged_differs: true,
};

pub(crate) const MODEL_VERSIONS: Target = Target {
    what: "model version",
    link: "{a}.registered_model_id = mv.registered_model_id AND {a}.version = mv.version",
    params: None,
    tags: Some("model_version_tags"),
    metrics: None,
    string_attrs: &[
        ("name", "rm.name"),
        ("run_id", "mv.run_id"),
        ("source_path", "mv.source"),
        ("source", "mv.source"),
        ("current_stage", "mv.current_stage"),
        ("user_id", "mv.user_id"),
        ("model_id", "mv.model_id"),
    ],
    numeric_attrs: &[
        ("version_number", "mv.version"),
        ("version", "mv.version"),
        ("creation_timestamp", "mv.creation_time"),
        ("last_updated_timestamp", "mv.last_update_time"),
    ],
    tie_break: "rm.name, mv.version DESC",
    untagged_differs: true,
};

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid(msg)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Num(f64),
    Op(String),
    LParen,
    RParen,
    Comma,
}

fn tokenize(s: &str) -> Result<Vec<Tok>> {
    let c: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '(' {
            out.push(Tok::LParen);
            i += 1;
        } else if ch == ')' {
            out.push(Tok::RParen);
            i += 1;
        } else if ch == ',' {
            out.push(Tok::Comma);
            i += 1;
        } else if ch == '\'' || ch == '"' || ch == '`' {
            let end = c[i + 1..]
                .iter()
                .position(|x| *x == ch)
                .ok_or_else(|| bad(format!("unterminated quote in '{s}'")))?;
            let text: String = c[i + 1..i + 1 + end].iter().collect();
            // A quoted name right after `entity.` is part of an identifier.
            if let Some(Tok::Ident(prev)) = out.last_mut() {
                if prev.ends_with('.') {
                    prev.push_str(&text);
                    i += end + 2;
                    continue;
                }
            }
            out.push(if ch == '`' {
                Tok::Ident(text)
            } else {
                Tok::Str(text)
            });
            i += end + 2;
        } else if "=!<>".contains(ch) {
            let two: String = c[i..(i + 2).min(c.len())].iter().collect();
            if ["!=", "<=", ">=", "<>"].contains(&two.as_str()) {
                out.push(Tok::Op(if two == "<>" { "!=".into() } else { two }));
                i += 2;
            } else if ch == '!' {
                return Err(bad(format!("unexpected '!' in '{s}'")));
            } else {
                out.push(Tok::Op(ch.to_string()));
                i += 1;
            }
        } else if ch.is_ascii_digit()
            || ((ch == '-' || ch == '.') && c.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let start = i;
            i += 1;
            while i < c.len()
                && (c[i].is_ascii_alphanumeric()
                    || c[i] == '.'
                    || ((c[i] == '-' || c[i] == '+') && matches!(c[i - 1], 'e' | 'E')))
            {
                i += 1;
            }
            let text: String = c[start..i].iter().collect();
            out.push(Tok::Num(
                text.parse()
                    .map_err(|_| bad(format!("'{text}' is not a number")))?,
            ));
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || "_.-:/".contains(c[i])) {
                i += 1;
            }
            out.push(Tok::Ident(c[start..i].iter().collect()));
        } else {
            return Err(bad(format!("unexpected '{ch}' in '{s}'")));
        }
    }
    Ok(out)
}

fn entity(t: &Target, ident: &str) -> Result<Entity> {
    let (kind, key) = match ident.split_once('.') {
        Some((k, rest)) => (k.to_ascii_lowercase(), rest.to_string()),
        None => ("attributes".to_string(), ident.to_string()),
    };
    if key.is_empty() {
        return Err(bad(format!("'{ident}' names no key")));
    }
    match kind.as_str() {
        "metric" | "metrics" if t.metrics.is_some() => Ok(Entity::Metric(key)),
        "param" | "params" | "parameter" | "parameters" if t.params.is_some() => {
            Ok(Entity::Param(key))
        }
        "tag" | "tags" if t.tags.is_some() => Ok(Entity::Tag(key)),
        "attribute" | "attributes" | "attr" | "run" => {
            let k = key.to_ascii_lowercase();
            if let Some((_, col)) = t
                .string_attrs
                .iter()
                .chain(t.numeric_attrs)
                .find(|(n, _)| *n == k)
            {
                return Ok(Entity::Attribute(col));
            }
            let names: Vec<&str> = t
                .string_attrs
                .iter()
                .chain(t.numeric_attrs)
                .map(|(n, _)| *n)
                .collect();
            Err(bad(format!(
                "unknown {} attribute '{key}': use {}",
                t.what,
                names.join(", ")
            )))
        }
        "dataset" | "datasets" => Err(bad("filtering on datasets is not supported yet")),
        other => Err(bad(format!(
            "'{other}' in '{ident}' cannot be searched on a {}: use {}attributes.",
            t.what,
            [
                t.metrics.map(|_| "metrics., "),
                t.params.map(|_| "params., "),
                t.tags.map(|_| "tags., "),
            ]
            .into_iter()
            .flatten()
            .collect::<String>()
        ))),
    }
}

fn is_numeric(t: &Target, e: &Entity) -> bool {
    matches!(e, Entity::Metric(_))
        || matches!(e, Entity::Attribute(c) if t.numeric_attrs.iter().any(|(_, col)| col == c))
}

/// The most comparisons one filter may join with AND: each becomes a subquery, and
/// the SQL engines bound expression depth (SQLite at 1,000).
pub(crate) const MAX_FILTER_CLAUSES: usize = 100;
/// The longest filter accepted, in bytes.
pub(crate) const MAX_FILTER_BYTES: usize = 16 * 1024;

/// Parses a filter into AND-ed clauses.
pub(crate) fn parse_filter(t: &Target, filter: &str) -> Result<Vec<Clause>> {
    if filter.len() > MAX_FILTER_BYTES {
        return Err(bad(format!(
            "a filter is at most {MAX_FILTER_BYTES} bytes; this one is {}",
            filter.len()
        )));
    }
    let toks = tokenize(filter)?;
    let mut i = 0;
    let mut out = Vec::new();
    while i < toks.len() {
        let Tok::Ident(name) = &toks[i] else {
            return Err(bad(format!(
                "expected a name like metrics.rmse in '{filter}'"
            )));
        };
        let ent = entity(t, name)?;
        i += 1;
        let word = |t: Option<&Tok>| match t {
            Some(Tok::Ident(w)) => Some(w.to_ascii_uppercase()),
            _ => None,
        };
        let op = match (toks.get(i), word(toks.get(i)).as_deref()) {
            (Some(Tok::Op(o)), _) => {
                i += 1;
                o.clone()
            }
            (_, Some("LIKE")) | (_, Some("ILIKE")) | (_, Some("IN")) => {
                i += 1;
                word(toks.get(i - 1)).unwrap_or_default()
            }
            (_, Some("NOT")) if word(toks.get(i + 1)).as_deref() == Some("IN") => {
                i += 2;
                "NOT IN".into()
            }
            (_, Some("IS")) => {
                let not = word(toks.get(i + 1)).as_deref() == Some("NOT");
                let null_at = if not { i + 2 } else { i + 1 };
                if word(toks.get(null_at)).as_deref() != Some("NULL") {
                    return Err(bad(format!(
                        "expected IS NULL or IS NOT NULL in '{filter}'"
                    )));
                }
                i = null_at + 1;
                if not {
                    "IS NOT NULL".into()
                } else {
                    "IS NULL".into()
                }
            }
            _ => {
                return Err(bad(format!(
                    "expected a comparison after '{name}' in '{filter}'"
                )))
            }
        };
        let value = match op.as_str() {
            "IS NULL" | "IS NOT NULL" => Value::Null,
            "IN" | "NOT IN" => {
                if toks.get(i) != Some(&Tok::LParen) {
                    return Err(bad(format!(
                        "{op} needs a list like ('a', 'b') in '{filter}'"
                    )));
                }
                i += 1;
                let mut items = Vec::new();
                loop {
                    match toks.get(i) {
                        Some(Tok::Str(s)) => items.push(s.clone()),
                        _ => return Err(bad(format!("{op} lists quoted strings in '{filter}'"))),
                    }
                    i += 1;
                    match toks.get(i) {
                        Some(Tok::Comma) => i += 1,
                        Some(Tok::RParen) => {
                            i += 1;
                            break;
                        }
                        _ => return Err(bad(format!("unclosed list in '{filter}'"))),
                    }
                }
                Value::List(items)
            }
            _ => {
                let v = match toks.get(i) {
                    Some(Tok::Str(s)) => Value::Str(s.clone()),
                    Some(Tok::Num(n)) => Value::Num(*n),
                    _ => {
                        return Err(bad(format!(
                            "expected a value after '{name} {op}' in '{filter}'"
                        )))
                    }
                };
                i += 1;
                v
            }
        };
        check_clause(t, &ent, &op, &value, name)?;
        if out.len() == MAX_FILTER_CLAUSES {
            return Err(bad(format!(
                "a filter joins at most {MAX_FILTER_CLAUSES} comparisons with AND; split the search"
            )));
        }
        out.push(Clause {
            entity: ent,
            op,
            value,
        });
        match word(toks.get(i)).as_deref() {
            None if i >= toks.len() => {}
            Some("AND") => {
                i += 1;
                if i >= toks.len() {
                    return Err(bad(format!("'{filter}' ends with AND")));
                }
            }
            Some("OR") => {
                return Err(bad(
                    "OR is not supported in search filters (MLflow neither); run two searches",
                ))
            }
            _ => {
                return Err(bad(format!(
                    "expected AND between comparisons in '{filter}'"
                )))
            }
        }
    }
    Ok(out)
}

fn check_clause(t: &Target, e: &Entity, op: &str, v: &Value, name: &str) -> Result<()> {
    let numeric = is_numeric(t, e);
    let ok = match (numeric, op, v) {
        (true, "=" | "!=" | "<" | "<=" | ">" | ">=", Value::Num(_)) => true,
        (false, "=" | "!=" | "LIKE" | "ILIKE", Value::Str(_)) => true,
        (false, "IN" | "NOT IN", Value::List(_)) => matches!(e, Entity::Attribute(_)),
        (false, "IS NULL" | "IS NOT NULL", Value::Null) => {
            matches!(e, Entity::Tag(_) | Entity::Param(_))
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else if numeric {
        Err(bad(format!(
            "'{name}' compares with =, !=, <, <=, >, >= and a number"
        )))
    } else {
        Err(bad(format!("'{name}' compares with =, !=, LIKE, ILIKE (IN for attributes, IS NULL for tags and params) and a quoted string")))
    }
}

/// The most keys one `order_by` may name: each is a sort column (and a subquery per
/// row for metrics, params and tags).
pub(crate) const MAX_ORDER_KEYS: usize = 20;

/// Parses `order_by` entries such as `metrics.rmse DESC`.
pub(crate) fn parse_order(t: &Target, order_by: &[String]) -> Result<Vec<OrderKey>> {
    if order_by.len() > MAX_ORDER_KEYS {
        return Err(bad(format!(
            "order_by names at most {MAX_ORDER_KEYS} keys; this one names {}",
            order_by.len()
        )));
    }
    order_by
        .iter()
        .map(|o| {
            let toks = tokenize(o)?;
            let (name, dir) = match toks.as_slice() {
                [Tok::Ident(n)] => (n.clone(), true),
                [Tok::Ident(n), Tok::Ident(d)] if d.eq_ignore_ascii_case("asc") => {
                    (n.clone(), true)
                }
                [Tok::Ident(n), Tok::Ident(d)] if d.eq_ignore_ascii_case("desc") => {
                    (n.clone(), false)
                }
                _ => {
                    return Err(bad(format!(
                        "invalid order_by '{o}': use e.g. 'metrics.rmse DESC'"
                    )))
                }
            };
            Ok(OrderKey {
                entity: entity(t, &name)?,
                ascending: dir,
            })
        })
        .collect()
}

/// A metric key, its numeric bounds (`op`, value) and the order direction.
pub(crate) type Driving = (String, Vec<(String, f64)>, bool);

/// When the first order key is a metric, that metric's key, the filter's numeric
/// bounds on it (`op`, value; maybe none) and the direction: such a search can be
/// driven from the metric's values in order (an index of each experiment's values).
/// With bounds every matching run has a value; without, the runs with none (or NaN)
/// come after those that have one.
pub(crate) fn driving_metric(clauses: &[Clause], order: &[OrderKey]) -> Option<Driving> {
    let first = order.first()?;
    let Entity::Metric(key) = &first.entity else {
        return None;
    };
    let bounds: Vec<(String, f64)> = clauses
        .iter()
        .filter_map(|c| match (&c.entity, &c.value) {
            (Entity::Metric(k), Value::Num(v)) if k == key && c.op != "!=" => {
                Some((c.op.clone(), *v))
            }
            _ => None,
        })
        .collect();
    Some((key.clone(), bounds, first.ascending))
}

/// SQL pieces with their parameters, numbered from `first`.
pub(crate) struct Sql {
    pub text: String,
    pub params: Vec<Bind>,
}

#[derive(Debug, Clone)]
pub(crate) enum Bind {
    Text(String),
    Num(f64),
    Int(i64),
}

/// `LIKE` is case-sensitive in MLflow; SQLite's is not, so there it becomes GLOB.
pub(crate) fn like_to_glob(pattern: &str) -> String {
    let mut out = String::new();
    for ch in pattern.chars() {
        match ch {
            '%' => out.push('*'),
            '_' => out.push('?'),
            '*' | '?' | '[' => {
                out.push('[');
                out.push(ch);
                out.push(']');
            }
            c => out.push(c),
        }
    }
    out
}

/// The WHERE conditions (each starting with " AND ") for `clauses`.
pub(crate) fn where_sql(t: &Target, clauses: &[Clause], backend: Backend, first: usize) -> Sql {
    let link = t.link.replace("{a}", "f");
    let mut text = String::new();
    let mut params = Vec::new();
    let mut n = first;
    let mut next = |b: Bind, params: &mut Vec<Bind>| {
        params.push(b);
        n += 1;
        format!("${}", n - 1)
    };
    for c in clauses {
        let string_cmp = |col: &str,
                          op: &str,
                          v: &str,
                          params: &mut Vec<Bind>,
                          next: &mut dyn FnMut(Bind, &mut Vec<Bind>) -> String|
         -> String {
            match op {
                "LIKE" if backend == Backend::Sqlite => {
                    format!("{col} GLOB {}", next(Bind::Text(like_to_glob(v)), params))
                }
                "LIKE" => format!("{col} LIKE {}", next(Bind::Text(v.to_string()), params)),
                "ILIKE" => format!(
                    "LOWER({col}) LIKE LOWER({})",
                    next(Bind::Text(v.to_string()), params)
                ),
                "!=" => format!("{col} <> {}", next(Bind::Text(v.to_string()), params)),
                _ => format!("{col} = {}", next(Bind::Text(v.to_string()), params)),
            }
        };
        let cond = match (&c.entity, &c.value) {
            (Entity::Metric(k), Value::Num(v)) => {
                let key = next(Bind::Text(k.clone()), &mut params);
                let val = next(Bind::Num(*v), &mut params);
                let table = t.metrics.unwrap_or("latest_metrics");
                // NaN compares as IEEE (and MLflow) say: unequal to every number, and
                // neither below nor above any.
                let cmp = if c.op == "!=" {
                    format!("(f.is_nan = 1 OR f.value <> {val})")
                } else {
                    format!("f.is_nan = 0 AND f.value {} {val}", c.op)
                };
                format!("EXISTS (SELECT 1 FROM {table} f WHERE {link} AND f.key = {key} AND {cmp})")
            }
            (Entity::Param(k) | Entity::Tag(k), v) => {
                let table = if matches!(c.entity, Entity::Param(_)) {
                    t.params.unwrap_or("run_params")
                } else {
                    t.tags.unwrap_or("run_tags")
                };
                let key = next(Bind::Text(k.clone()), &mut params);
                match v {
                    Value::Null if c.op == "IS NULL" => format!(
                        "NOT EXISTS (SELECT 1 FROM {table} f WHERE {link} AND f.key = {key})"
                    ),
                    Value::Null => {
                        format!("EXISTS (SELECT 1 FROM {table} f WHERE {link} AND f.key = {key})")
                    }
                    Value::Str(s)
                        if c.op == "!="
                            && t.untagged_differs
                            && matches!(c.entity, Entity::Tag(_)) =>
                    {
                        let val = next(Bind::Text(s.clone()), &mut params);
                        format!("NOT EXISTS (SELECT 1 FROM {table} f WHERE {link} AND f.key = {key} AND f.value = {val})")
                    }
                    Value::Str(s) => {
                        let cmp = string_cmp("f.value", &c.op, s, &mut params, &mut next);
                        format!("EXISTS (SELECT 1 FROM {table} f WHERE {link} AND f.key = {key} AND {cmp})")
                    }
                    _ => "1 = 0".into(),
                }
            }
            (Entity::Attribute(col), Value::Num(v)) => {
                let val = next(Bind::Num(*v), &mut params);
                let op = if c.op == "!=" { "<>" } else { c.op.as_str() };
                format!("{col} {op} {val}")
            }
            (Entity::Attribute(col), Value::Str(s)) => {
                string_cmp(col, &c.op, s, &mut params, &mut next)
            }
            (Entity::Attribute(col), Value::List(items)) => {
                let list: Vec<String> = items
                    .iter()
                    .map(|s| next(Bind::Text(s.clone()), &mut params))
                    .collect();
                let not = if c.op == "NOT IN" { "NOT " } else { "" };
                format!("{col} {not}IN ({})", list.join(", "))
            }
            _ => "1 = 0".into(),
        };
        text.push_str(" AND ");
        text.push_str(&cond);
    }
    Sql { text, params }
}

/// How the values of one ORDER BY column are read from a row and bound again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum KeyKind {
    Int,
    Float,
    Text,
}

/// One column of an ORDER BY: an SQL expression, the kind of its values and its
/// direction. A column is NULL only where the rank column before it (the `CASE` that
/// puts rows without the value last) already says so, so rows equal on every earlier
/// column are all NULL or all not NULL here; the tie break (for runs, the start time
/// that every run is created with, then the id) is never NULL.
#[derive(Debug, Clone)]
pub(crate) struct Term {
    pub expr: String,
    pub kind: KeyKind,
    pub ascending: bool,
}

/// One value of a row's sort key, as a page token carries it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KeyValue {
    Int(i64),
    Float(f64),
    Text(String),
    Null,
}

/// The ORDER BY columns for `keys` and then the target's tie break, with the
/// parameters their expressions use, numbered from `first`: rows without the value
/// sort last either way (after NaN metrics); ties fall back to the target's order (for
/// runs: newest start time, then run id).
pub(crate) fn order_terms(t: &Target, keys: &[OrderKey], first: usize) -> (Vec<Term>, Vec<Bind>) {
    let link = t.link.replace("{a}", "o");
    let mut terms = Vec::new();
    let mut params = Vec::new();
    let rank = |expr: String| Term {
        expr,
        kind: KeyKind::Int,
        ascending: true,
    };
    for k in keys {
        let (rank_expr, value, kind) = match &k.entity {
            Entity::Attribute(col) => (
                format!("CASE WHEN {col} IS NULL THEN 1 ELSE 0 END"),
                col.to_string(),
                attribute_kind(t, col),
            ),
            Entity::Metric(key) => {
                let table = t.metrics.unwrap_or("latest_metrics");
                // A logged model may have several points per key: order by the best.
                let agg = if k.ascending { "MIN" } else { "MAX" };
                params.push(Bind::Text(key.clone()));
                // The same key, bound once, is used by the rank and the value.
                let key = format!("${}", first + params.len() - 1);
                // As on MLflow, NaN sorts after every number and before no value at
                // all, whichever the direction.
                let value = format!(
                    "(SELECT {agg}(o.value) FROM {table} o WHERE {link} AND o.key = {key} AND o.is_nan = 0)"
                );
                (
                    format!(
                        "CASE WHEN {value} IS NOT NULL THEN 0 \
                         WHEN EXISTS (SELECT 1 FROM {table} o WHERE {link} AND o.key = {key}) THEN 1 \
                         ELSE 2 END"
                    ),
                    value,
                    KeyKind::Float,
                )
            }
            Entity::Param(key) | Entity::Tag(key) => {
                let table = if matches!(k.entity, Entity::Param(_)) {
                    t.params.unwrap_or("run_params")
                } else {
                    t.tags.unwrap_or("run_tags")
                };
                params.push(Bind::Text(key.clone()));
                let value = format!(
                    "(SELECT MAX(o.value) FROM {table} o WHERE {link} AND o.key = ${})",
                    first + params.len() - 1
                );
                (
                    format!("CASE WHEN {value} IS NULL THEN 1 ELSE 0 END"),
                    value,
                    KeyKind::Text,
                )
            }
        };
        terms.push(rank(rank_expr));
        terms.push(Term {
            expr: value,
            kind,
            ascending: k.ascending,
        });
    }
    terms.extend(tie_break(t));
    (terms, params)
}

/// Whether an attribute column holds numbers (times, ids, versions) or text.
fn attribute_kind(t: &Target, col: &str) -> KeyKind {
    if t.numeric_attrs.iter().any(|(_, c)| *c == col) {
        KeyKind::Int
    } else {
        KeyKind::Text
    }
}

/// The target's tie break as columns.
fn tie_break(t: &Target) -> Vec<Term> {
    t.tie_break
        .split(", ")
        .map(|term| {
            let (col, ascending) = match term.strip_suffix(" DESC") {
                Some(c) => (c, false),
                None => (term.strip_suffix(" ASC").unwrap_or(term), true),
            };
            Term {
                expr: col.to_string(),
                kind: attribute_kind(t, col),
                ascending,
            }
        })
        .collect()
}

/// ORDER BY text for `terms`.
pub(crate) fn order_text(terms: &[Term]) -> String {
    terms
        .iter()
        .map(|t| format!("{} {}", t.expr, if t.ascending { "ASC" } else { "DESC" }))
        .collect::<Vec<_>>()
        .join(", ")
}

/// ORDER BY terms for `keys` (see [`order_terms`]).
pub(crate) fn order_sql(t: &Target, keys: &[OrderKey], first: usize) -> Sql {
    let (terms, params) = order_terms(t, keys, first);
    Sql {
        text: order_text(&terms),
        params,
    }
}

/// The conditions (each starting with " AND ") that keep the rows strictly after a
/// row whose sort key was `after` in the order of `terms`, with their parameters
/// numbered from `first`: a page read from there needs no OFFSET, so a deep page
/// costs what the first one does. The first column's bound is also written alone, so
/// that an index on it is read from that point on rather than from the start.
///
/// Where NULL sorts is the backend's: first in ascending order on SQLite, last on
/// PostgreSQL.
pub(crate) fn after_sql(terms: &[Term], after: &[KeyValue], backend: Backend, first: usize) -> Sql {
    let nulls_high = backend == Backend::Postgres;
    let mut params = Vec::new();
    let slots: Vec<Option<String>> = after
        .iter()
        .map(|v| {
            let b = match v {
                KeyValue::Int(i) => Bind::Int(*i),
                KeyValue::Float(f) => Bind::Num(*f),
                KeyValue::Text(s) => Bind::Text(s.clone()),
                KeyValue::Null => return None,
            };
            params.push(b);
            Some(format!("${}", first + params.len() - 1))
        })
        .collect();
    let mut text = String::new();
    if let (Some(t), Some(Some(p))) = (terms.first(), slots.first()) {
        let op = if t.ascending { ">=" } else { "<=" };
        text.push_str(&format!(" AND {} {op} {p}", t.expr));
    }
    let mut equal: Vec<String> = Vec::new();
    let mut beyond: Vec<String> = Vec::new();
    for (t, slot) in terms.iter().zip(&slots) {
        let nulls_last = t.ascending == nulls_high;
        let past = match slot {
            Some(p) => Some(format!(
                "{} {} {p}",
                t.expr,
                if t.ascending { ">" } else { "<" }
            )),
            // Nothing sorts after NULL where NULL comes last; every value does where
            // it comes first.
            None if nulls_last => None,
            None => Some(format!("{} IS NOT NULL", t.expr)),
        };
        if let Some(past) = past {
            let mut all = equal.clone();
            all.push(past);
            beyond.push(format!("({})", all.join(" AND ")));
        }
        equal.push(match slot {
            Some(p) => format!("{} = {p}", t.expr),
            None => format!("{} IS NULL", t.expr),
        });
    }
    if beyond.is_empty() {
        text.push_str(" AND 1 = 0");
    } else {
        text.push_str(&format!(" AND ({})", beyond.join(" OR ")));
    }
    Sql { text, params }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_client_sends() {
        let c = parse_filter(
            &RUNS,
            "metrics.rmse < 0.5 and params.model = 'tree' AND tags.\"mlflow.user\" != 'x'",
        )
        .expect("parse");
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].entity, Entity::Metric("rmse".into()));
        assert_eq!(c[0].value, Value::Num(0.5));
        assert_eq!(c[2].entity, Entity::Tag("mlflow.user".into()));
        let c = parse_filter(&RUNS, "attributes.status IN ('FINISHED', 'FAILED') and run_name LIKE 'base%' and metrics.`my metric` >= -1e3").expect("parse");
        assert_eq!(
            c[0].value,
            Value::List(vec!["FINISHED".into(), "FAILED".into()])
        );
        assert_eq!(c[1].entity, Entity::Attribute("runs.run_name"));
        assert_eq!(c[2].value, Value::Num(-1000.0));
        assert!(parse_filter(&RUNS, "tags.team IS NULL").is_ok());
    }

    #[test]
    fn refuses_what_it_cannot_answer_exactly() {
        for bad in [
            "metrics.rmse < 'x'",
            "params.a > 1",
            "metrics.rmse < 1 or metrics.rmse > 2",
            "nonsense.a = 'b'",
            "metrics.a <",
            "metrics.a < 1 and",
            "params.a = 'unterminated",
            "attributes.colour = 'red'",
        ] {
            assert!(parse_filter(&RUNS, bad).is_err(), "{bad}");
        }
        assert!(parse_order(&RUNS, &["metrics.rmse sideways".into()]).is_err());
        let keys = |n: usize| (0..n).map(|i| format!("metrics.m{i}")).collect::<Vec<_>>();
        assert_eq!(
            parse_order(&RUNS, &keys(MAX_ORDER_KEYS))
                .expect("at the limit")
                .len(),
            MAX_ORDER_KEYS
        );
        let e = parse_order(&RUNS, &keys(MAX_ORDER_KEYS + 1)).expect_err("over the limit");
        assert!(e.to_string().contains("at most 20 keys"), "{e}");
        assert_eq!(
            parse_order(&RUNS, &["metrics.rmse DESC".into()]).expect("order")[0],
            OrderKey {
                entity: Entity::Metric("rmse".into()),
                ascending: false
            }
        );
    }

    #[test]
    fn like_becomes_an_exact_glob() {
        assert_eq!(like_to_glob("a%b_c*"), "a*b?c[*]");
    }

    #[test]
    fn filters_are_bounded() {
        let terms = |n: usize| {
            (0..n)
                .map(|i| format!("metrics.m{i} > 0"))
                .collect::<Vec<_>>()
                .join(" AND ")
        };
        assert_eq!(
            parse_filter(&RUNS, &terms(MAX_FILTER_CLAUSES))
                .expect("at the limit")
                .len(),
            MAX_FILTER_CLAUSES
        );
        let e = parse_filter(&RUNS, &terms(150)).expect_err("150 terms");
        assert!(e.to_string().contains("at most 100 comparisons"), "{e}");
        let long = format!("params.p = '{}'", "x".repeat(MAX_FILTER_BYTES));
        let e = parse_filter(&RUNS, &long).expect_err("too long");
        assert!(e.to_string().contains("at most 16384 bytes"), "{e}");
    }
}
