//! Run search against a reference: random runs are stored through the tracking store,
//! random filters and `order_by` lists in MLflow's search language are answered by
//! `search_runs` (a page at a time), and the answer must be the runs, in the order, that
//! MLflow's rules give when the same search is evaluated over the same runs in memory.
//!
//! The rules the reference follows (MLflow's `SearchUtils`, docs/tracking.md):
//! - comparisons are joined by AND; a run lacking the metric, param, tag or attribute a
//!   comparison names never matches it, `!=` included (`IS NULL` asks for the absence);
//! - a metric's value is its latest point (highest step); metric comparisons are IEEE
//!   comparisons, so a NaN metric matches `!=` and nothing else;
//! - `LIKE` is SQL's (`%` any run of characters, `_` one character, everything else
//!   literal, case-sensitive); `ILIKE` is the same, ignoring ASCII case;
//! - `order_by` keys sort values first, then NaN metrics, then runs without the value,
//!   in either direction; ties fall back to start time (newest first), then run id.
//!
//! SQLite always, PostgreSQL too when `QANAT_TEST_POSTGRES_URL` is set.

mod common;

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use qanat_governance::Project;
use qanat_store::testing::TestDb;
use qanat_tracking::{
    Batch, Metric, MetricValue, NewRun, Param, RunUpdate, Tag, Tracking, ViewType, RUN_STATUSES,
};

const METRIC_KEYS: [&str; 3] = ["m1", "m2", "loss rate"];
/// Filters also ask about a metric no run has.
const NO_RUNS_METRIC: &str = "never";
const PARAM_KEYS: [&str; 2] = ["p1", "p.2"];
const TAG_KEYS: [&str; 2] = ["t1", "team x"];
/// Filters also ask about the tags every run gets from its name and user.
const FILTER_TAG_KEYS: [&str; 4] = ["t1", "team x", "mlflow.runName", "mlflow.user"];
const NAMES: [&str; 4] = ["base", "Base-2", "tuned_a", "x*y"];
const USERS: [&str; 2] = ["alice", "Bob"];
const METRIC_VALUES: [f64; 10] = [
    -1.5,
    -1.0,
    0.0,
    0.5,
    1.0,
    2.0,
    3.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];
const COMPARED_NUMBERS: [f64; 7] = [-1.5, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0];
const COMPARED_TIMES: [i64; 7] = [-1, 0, 500, 1000, 2000, 3000, 4000];
/// Param and tag values: LIKE's wildcards and GLOB's specials are plain characters in a
/// value, and `é` is one character of two bytes.
const VALUES: &[&str] = &[
    "", "a", "A", "ab", "aB", "b", "a%b", "a_b", "x*y", "[z]", "é", "?",
];
/// Characters of other param and tag values.
const VALUE_CHARS: [char; 10] = ['a', 'A', 'b', '%', '_', '*', '?', '[', ']', 'é'];
/// Characters of LIKE patterns, wildcards more often.
const PATTERN_CHARS: [char; 12] = ['a', 'A', 'b', '*', '?', '[', 'é', '%', '%', '%', '_', '_'];

/// One run as the test stores it.
#[derive(Debug, Clone)]
struct RunSpec {
    name: usize,
    user: usize,
    start_time: i64,
    status: usize,
    end_time: Option<i64>,
    deleted: bool,
    params: BTreeMap<usize, String>,
    tags: BTreeMap<usize, String>,
    /// Per metric key: its points at steps 0, 1, …, and whether they are logged from
    /// the highest step down (the latest point is always the last value).
    metrics: BTreeMap<usize, (Vec<f64>, bool)>,
}

/// What a run looks like to the reference, once stored.
#[derive(Debug)]
struct RefRun {
    id: String,
    name: String,
    user: String,
    status: String,
    start_time: i64,
    end_time: Option<i64>,
    lifecycle_stage: &'static str,
    params: BTreeMap<String, String>,
    tags: BTreeMap<String, String>,
    metrics: BTreeMap<String, f64>,
}

/// A value a comparison is made against, or a run's value of something.
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Num(f64),
    Int(i64),
    Text(String),
}

/// A string operand; run ids exist only once the runs are stored, so they are named
/// by position (past the last run: an id no run has).
#[derive(Debug, Clone)]
enum Lit {
    Text(String),
    RunId(usize),
    /// The first `n` characters of a run's id, then `%`.
    RunIdPrefix(usize, usize),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Subject {
    Metric(&'static str),
    Param(&'static str),
    Tag(&'static str),
    Attr(&'static str),
}

#[derive(Debug, Clone)]
enum Op {
    /// `=`, `!=`, `<`, `<=`, `>`, `>=`
    Cmp(&'static str),
    Like,
    ILike,
    In,
    NotIn,
    IsNull,
    IsNotNull,
}

#[derive(Debug, Clone)]
enum Operand {
    Num(f64),
    Int(i64),
    Text(Lit),
    List(Vec<Lit>),
    None,
}

#[derive(Debug, Clone)]
struct Clause {
    subject: Subject,
    op: Op,
    operand: Operand,
    /// Picks among equivalent spellings (prefix, quoting, keyword case).
    style: u8,
}

#[derive(Debug, Clone)]
struct Query {
    clauses: Vec<Clause>,
    /// The order keys as written, with their subject and direction.
    order: Vec<(&'static str, Subject, Option<bool>)>,
    view: ViewType,
    page_size: i64,
    and_style: bool,
}

fn text(chars: &'static [char], max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(select(chars), 0..=max).prop_map(String::from_iter)
}

/// A param or tag value: mostly from a small pool (so that comparisons often hold),
/// sometimes anything.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(VALUES).prop_map(str::to_string),
        1 => text(&VALUE_CHARS, 3),
    ]
}

fn run_spec() -> impl Strategy<Value = RunSpec> {
    (
        0..NAMES.len(),
        0..USERS.len(),
        0i64..4,
        0..RUN_STATUSES.len(),
        proptest::option::of(0i64..5),
        proptest::bool::weighted(0.2),
        proptest::collection::btree_map(0..PARAM_KEYS.len(), value(), 0..=2),
        proptest::collection::btree_map(0..TAG_KEYS.len(), value(), 0..=2),
        proptest::collection::btree_map(
            0..METRIC_KEYS.len(),
            (
                proptest::collection::vec(select(METRIC_VALUES.to_vec()), 1..=3),
                any::<bool>(),
            ),
            1..=3,
        ),
    )
        .prop_map(
            |(name, user, start, status, end, deleted, params, tags, metrics)| RunSpec {
                name,
                user,
                start_time: start * 1000,
                status,
                end_time: end.map(|e| e * 1000),
                deleted,
                params,
                tags,
                metrics,
            },
        )
}

/// A string to compare with: one of `pool` (sometimes lower-cased, which exact and
/// LIKE comparisons must tell apart), or anything.
fn operand(pool: &'static [&'static str]) -> BoxedStrategy<Lit> {
    prop_oneof![
        6 => select(pool).prop_map(|s| Lit::Text(s.to_string())),
        1 => select(pool).prop_map(|s| Lit::Text(s.to_lowercase())),
        1 => text(&VALUE_CHARS, 3).prop_map(Lit::Text),
    ]
    .boxed()
}

/// A LIKE pattern: one of `pool` with some characters turned into wildcards or their
/// case flipped, and `%` around it or not; or any string of pattern characters.
fn pattern(pool: &'static [&'static str]) -> BoxedStrategy<Lit> {
    let edited = (
        select(pool),
        proptest::collection::vec(0u8..8, 8),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(base, edits, before, after)| {
            let mut out = String::new();
            if before {
                out.push('%');
            }
            for (c, edit) in base
                .chars()
                .zip(edits.into_iter().chain(std::iter::repeat(0)))
            {
                match edit {
                    5 => out.push('_'),
                    6 => out.push('%'),
                    7 if c.is_ascii_uppercase() => out.push(c.to_ascii_lowercase()),
                    7 if c.is_ascii_lowercase() => out.push(c.to_ascii_uppercase()),
                    _ => out.push(c),
                }
            }
            if after {
                out.push('%');
            }
            Lit::Text(out)
        });
    prop_oneof![
        3 => edited,
        1 => text(&PATTERN_CHARS, 4).prop_map(Lit::Text),
    ]
    .boxed()
}

/// A comparison of a string: `=`, `!=`, `LIKE`, `ILIKE`, and either `IN`/`NOT IN`
/// (attributes) or `IS NULL`/`IS NOT NULL` (params and tags).
fn string_clause(
    subject: Subject,
    value: BoxedStrategy<Lit>,
    pattern: BoxedStrategy<Lit>,
    lists: bool,
) -> BoxedStrategy<Clause> {
    let text = |op: Op, s: &BoxedStrategy<Lit>| {
        s.clone()
            .prop_map(move |v| (op.clone(), Operand::Text(v)))
            .boxed()
    };
    let mut ops: Vec<(u32, BoxedStrategy<(Op, Operand)>)> = vec![
        (2, text(Op::Cmp("="), &value)),
        (2, text(Op::Cmp("!="), &value)),
        (2, text(Op::Like, &pattern)),
        (2, text(Op::ILike, &pattern)),
    ];
    if lists {
        let list = proptest::collection::vec(value, 1..=3);
        ops.push((
            1,
            list.clone()
                .prop_map(|l| (Op::In, Operand::List(l)))
                .boxed(),
        ));
        ops.push((1, list.prop_map(|l| (Op::NotIn, Operand::List(l))).boxed()));
    } else {
        ops.push((1, Just((Op::IsNull, Operand::None)).boxed()));
        ops.push((1, Just((Op::IsNotNull, Operand::None)).boxed()));
    }
    (proptest::strategy::Union::new_weighted(ops), any::<u8>())
        .prop_map(move |((op, operand), style)| Clause {
            subject,
            op,
            operand,
            style,
        })
        .boxed()
}

fn pooled_clause(
    subject: Subject,
    pool: &'static [&'static str],
    lists: bool,
) -> BoxedStrategy<Clause> {
    string_clause(subject, operand(pool), pattern(pool), lists)
}

fn numeric_clause(subject: Subject, value: BoxedStrategy<Operand>) -> BoxedStrategy<Clause> {
    (
        select(vec!["=", "!=", "<", "<=", ">", ">="]),
        value,
        any::<u8>(),
    )
        .prop_map(move |(op, operand, style)| Clause {
            subject,
            op: Op::Cmp(op),
            operand,
            style,
        })
        .boxed()
}

fn clause() -> BoxedStrategy<Clause> {
    let metric = prop_oneof![
        6 => select(METRIC_KEYS.to_vec()),
        1 => Just(NO_RUNS_METRIC),
    ]
    .prop_flat_map(|k| {
        numeric_clause(
            Subject::Metric(k),
            select(COMPARED_NUMBERS.to_vec())
                .prop_map(Operand::Num)
                .boxed(),
        )
    });
    let param = select(PARAM_KEYS.to_vec())
        .prop_flat_map(|k| pooled_clause(Subject::Param(k), VALUES, false));
    let tag = select(FILTER_TAG_KEYS.to_vec()).prop_flat_map(|k| {
        let pool = match k {
            "mlflow.runName" => &NAMES[..],
            "mlflow.user" => &USERS[..],
            _ => VALUES,
        };
        pooled_clause(Subject::Tag(k), pool, false)
    });
    let time = select(vec!["start_time", "end_time"]).prop_flat_map(|a| {
        numeric_clause(
            Subject::Attr(a),
            select(COMPARED_TIMES.to_vec())
                .prop_map(Operand::Int)
                .boxed(),
        )
    });
    // Run ids exist only once the runs are stored: they are named by position, and
    // LIKE gets a prefix of one.
    let run_id = (0usize..6, 1usize..6)
        .prop_flat_map(|(i, n)| {
            string_clause(
                Subject::Attr("run_id"),
                Just(Lit::RunId(i)).boxed(),
                Just(Lit::RunIdPrefix(i, n)).boxed(),
                true,
            )
        })
        .boxed();
    let strings = prop_oneof![
        pooled_clause(Subject::Attr("run_name"), &NAMES, true),
        pooled_clause(Subject::Attr("status"), &RUN_STATUSES, true),
        pooled_clause(Subject::Attr("user_id"), &USERS, true),
        pooled_clause(
            Subject::Attr("lifecycle_stage"),
            &["active", "deleted"],
            true
        ),
    ];
    prop_oneof![
        3 => metric,
        2 => param,
        2 => tag,
        1 => time,
        1 => run_id,
        2 => strings,
    ]
    .boxed()
}

const ORDER_KEYS: [(&str, Subject); 12] = [
    ("metrics.m1", Subject::Metric("m1")),
    ("metric.m2", Subject::Metric("m2")),
    ("metrics.`loss rate`", Subject::Metric("loss rate")),
    ("params.p1", Subject::Param("p1")),
    ("params.\"p.2\"", Subject::Param("p.2")),
    ("tags.t1", Subject::Tag("t1")),
    ("tag.`team x`", Subject::Tag("team x")),
    ("attributes.start_time", Subject::Attr("start_time")),
    ("end_time", Subject::Attr("end_time")),
    ("run_name", Subject::Attr("run_name")),
    ("attributes.status", Subject::Attr("status")),
    ("attr.user_id", Subject::Attr("user_id")),
];

fn query() -> impl Strategy<Value = Query> {
    (
        proptest::collection::vec(clause(), 0..=3),
        proptest::sample::subsequence(ORDER_KEYS.to_vec(), 0..=3).prop_shuffle(),
        proptest::collection::vec(proptest::option::of(any::<bool>()), 3),
        prop_oneof![
            2 => Just(ViewType::ActiveOnly),
            1 => Just(ViewType::DeletedOnly),
            2 => Just(ViewType::All),
        ],
        1i64..10,
        any::<bool>(),
    )
        .prop_map(|(clauses, keys, dirs, view, page_size, and_style)| Query {
            clauses,
            order: keys
                .into_iter()
                .zip(dirs)
                .map(|((name, subject), dir)| (name, subject, dir))
                .collect(),
            view,
            page_size,
            and_style,
        })
}

// ---- rendering a query as a user would write it ----

fn resolve(lit: &Lit, ids: &[String]) -> String {
    let id = |i: usize| ids.get(i).cloned().unwrap_or_else(|| "0".repeat(32));
    match lit {
        Lit::Text(s) => s.clone(),
        Lit::RunId(i) => id(*i),
        Lit::RunIdPrefix(i, n) => format!("{}%", &id(*i)[..*n]),
    }
}

fn quote_value(s: &str, style: u8) -> String {
    if style & 1 == 0 {
        format!("'{s}'")
    } else {
        format!("\"{s}\"")
    }
}

fn number(v: f64, style: u8) -> String {
    if style & 2 == 0 {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

fn name(subject: Subject, style: u8) -> String {
    let pick = |options: &[&str]| options[usize::from(style >> 2) % options.len()].to_string();
    let (prefix, key) = match subject {
        Subject::Metric(k) => (pick(&["metrics.", "metric.", "METRICS."]), k),
        Subject::Param(k) => (pick(&["params.", "param.", "parameter.", "parameters."]), k),
        Subject::Tag(k) => (pick(&["tags.", "tag."]), k),
        Subject::Attr(k) => (pick(&["attributes.", "attribute.", "attr.", "run.", ""]), k),
    };
    let key = if key.contains(' ') || style & 0x40 != 0 {
        if style & 0x80 == 0 {
            format!("`{key}`")
        } else {
            format!("\"{key}\"")
        }
    } else {
        key.to_string()
    };
    // An unprefixed name cannot be quoted (it would read as a string).
    if prefix.is_empty() {
        key.trim_matches(|c| c == '`' || c == '"').to_string()
    } else {
        format!("{prefix}{key}")
    }
}

fn keyword(word: &str, style: u8) -> String {
    if style & 0x20 == 0 {
        word.to_string()
    } else {
        word.to_lowercase()
    }
}

fn render_clause(c: &Clause, ids: &[String]) -> String {
    let s = c.style;
    let op = match &c.op {
        Op::Cmp(o) => o.to_string(),
        Op::Like => keyword("LIKE", s),
        Op::ILike => keyword("ILIKE", s),
        Op::In => keyword("IN", s),
        Op::NotIn => keyword("NOT IN", s),
        Op::IsNull => keyword("IS NULL", s),
        Op::IsNotNull => keyword("IS NOT NULL", s),
    };
    let operand = match &c.operand {
        Operand::Num(v) => number(*v, s),
        Operand::Int(v) => v.to_string(),
        Operand::Text(l) => quote_value(&resolve(l, ids), s),
        Operand::List(items) => format!(
            "({})",
            items
                .iter()
                .map(|l| quote_value(&resolve(l, ids), s))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Operand::None => String::new(),
    };
    format!("{} {op} {operand}", name(c.subject, s))
        .trim_end()
        .to_string()
}

fn render_filter(q: &Query, ids: &[String]) -> String {
    let and = if q.and_style { " AND " } else { " and " };
    q.clauses
        .iter()
        .map(|c| render_clause(c, ids))
        .collect::<Vec<_>>()
        .join(and)
}

fn render_order(q: &Query) -> Vec<String> {
    q.order
        .iter()
        .map(|(name, _, dir)| match dir {
            None => name.to_string(),
            Some(true) => format!("{name} ASC"),
            Some(false) => format!("{name} desc"),
        })
        .collect()
}

// ---- the reference ----

impl RefRun {
    fn value(&self, s: Subject) -> Option<Val> {
        match s {
            Subject::Metric(k) => self.metrics.get(k).map(|v| Val::Num(*v)),
            Subject::Param(k) => self.params.get(k).map(|v| Val::Text(v.clone())),
            Subject::Tag(k) => self.tags.get(k).map(|v| Val::Text(v.clone())),
            Subject::Attr(a) => match a {
                "run_id" => Some(Val::Text(self.id.clone())),
                "run_name" => Some(Val::Text(self.name.clone())),
                "status" => Some(Val::Text(self.status.clone())),
                "user_id" => Some(Val::Text(self.user.clone())),
                "lifecycle_stage" => Some(Val::Text(self.lifecycle_stage.to_string())),
                "start_time" => Some(Val::Int(self.start_time)),
                "end_time" => self.end_time.map(Val::Int),
                other => unreachable!("no attribute {other} in the test"),
            },
        }
    }
}

/// SQL's LIKE: `%` any run of characters, `_` exactly one, the rest literal.
fn like(value: &str, pattern: &str, fold_case: bool) -> bool {
    let fold = |c: char| {
        if fold_case {
            c.to_ascii_lowercase()
        } else {
            c
        }
    };
    let v: Vec<char> = value.chars().map(fold).collect();
    let p: Vec<char> = pattern.chars().map(fold).collect();
    // matches[j]: whether the pattern so far matches v[..j].
    let mut matches = vec![false; v.len() + 1];
    matches[0] = true;
    for pc in p {
        let mut next = vec![false; v.len() + 1];
        match pc {
            '%' => {
                let mut any = false;
                for j in 0..=v.len() {
                    any |= matches[j];
                    next[j] = any;
                }
            }
            _ => {
                for j in 1..=v.len() {
                    next[j] = matches[j - 1] && (pc == '_' || pc == v[j - 1]);
                }
            }
        }
        matches = next;
    }
    matches[v.len()]
}

fn compare_number(op: &str, a: f64, b: f64) -> bool {
    // Rust's f64 comparisons are IEEE's: NaN is unequal to everything, below nothing.
    match op {
        "=" => a == b,
        "!=" => a != b,
        "<" => a < b,
        "<=" => a <= b,
        ">" => a > b,
        ">=" => a >= b,
        other => unreachable!("no operator {other}"),
    }
}

fn matches(run: &RefRun, c: &Clause, ids: &[String]) -> bool {
    let lhs = run.value(c.subject);
    match (&c.op, &c.operand, lhs) {
        (Op::IsNull, _, lhs) => lhs.is_none(),
        (Op::IsNotNull, _, lhs) => lhs.is_some(),
        (_, _, None) => false,
        (Op::Cmp(op), Operand::Num(v), Some(Val::Num(a))) => compare_number(op, a, *v),
        (Op::Cmp(op), Operand::Int(v), Some(Val::Int(a))) => {
            compare_number(op, a as f64, *v as f64)
        }
        (Op::Cmp("="), Operand::Text(l), Some(Val::Text(a))) => a == resolve(l, ids),
        (Op::Cmp("!="), Operand::Text(l), Some(Val::Text(a))) => a != resolve(l, ids),
        (Op::Like, Operand::Text(l), Some(Val::Text(a))) => like(&a, &resolve(l, ids), false),
        (Op::ILike, Operand::Text(l), Some(Val::Text(a))) => like(&a, &resolve(l, ids), true),
        (Op::In, Operand::List(l), Some(Val::Text(a))) => l.iter().any(|x| resolve(x, ids) == a),
        (Op::NotIn, Operand::List(l), Some(Val::Text(a))) => l.iter().all(|x| resolve(x, ids) != a),
        (op, operand, lhs) => unreachable!("the test made {op:?} {operand:?} on {lhs:?}"),
    }
}

/// Values first, then NaN, then missing, in either direction; values in `ascending`
/// order; ties to newest start time, then run id.
fn reference_order(a: &RefRun, b: &RefRun, order: &[(&str, Subject, Option<bool>)]) -> Ordering {
    let rank = |v: &Option<Val>| match v {
        None => 2,
        Some(Val::Num(n)) if n.is_nan() => 1,
        Some(_) => 0,
    };
    for (_, subject, dir) in order {
        let ascending = dir.unwrap_or(true);
        let (va, vb) = (a.value(*subject), b.value(*subject));
        let by_rank = rank(&va).cmp(&rank(&vb));
        if by_rank != Ordering::Equal {
            return by_rank;
        }
        let by_value = match (va, vb) {
            (Some(Val::Num(x)), Some(Val::Num(y))) if !x.is_nan() => {
                x.partial_cmp(&y).unwrap_or(Ordering::Equal)
            }
            (Some(Val::Int(x)), Some(Val::Int(y))) => x.cmp(&y),
            (Some(Val::Text(x)), Some(Val::Text(y))) => x.cmp(&y),
            _ => Ordering::Equal,
        };
        let by_value = if ascending {
            by_value
        } else {
            by_value.reverse()
        };
        if by_value != Ordering::Equal {
            return by_value;
        }
    }
    b.start_time
        .cmp(&a.start_time)
        .then_with(|| a.id.cmp(&b.id))
}

// ---- the property ----

fn fail(what: &str) -> impl Fn(qanat_tracking::Error) -> TestCaseError + '_ {
    move |e| TestCaseError::fail(format!("{what}: {e}"))
}

async fn store_runs(
    t: &Tracking,
    p: &Project,
    exp: &str,
    specs: &[RunSpec],
) -> Result<Vec<RefRun>, TestCaseError> {
    let mut out = Vec::new();
    for spec in specs {
        let run = t
            .create_run(
                p,
                NewRun {
                    experiment_id: exp.into(),
                    user_id: USERS[spec.user].into(),
                    run_name: Some(NAMES[spec.name].into()),
                    start_time: Some(spec.start_time),
                    tags: Vec::new(),
                },
            )
            .await
            .map_err(fail("create run"))?;
        let id = run.info.run_id;
        let mut batch = Batch::default();
        let mut r = RefRun {
            id: id.clone(),
            name: NAMES[spec.name].into(),
            user: USERS[spec.user].into(),
            status: RUN_STATUSES[spec.status].into(),
            start_time: spec.start_time,
            end_time: spec.end_time,
            lifecycle_stage: if spec.deleted { "deleted" } else { "active" },
            params: BTreeMap::new(),
            tags: BTreeMap::from([
                ("mlflow.runName".into(), NAMES[spec.name].into()),
                ("mlflow.user".into(), USERS[spec.user].into()),
            ]),
            metrics: BTreeMap::new(),
        };
        for (k, v) in &spec.params {
            batch.params.push(Param {
                key: PARAM_KEYS[*k].into(),
                value: v.clone(),
            });
            r.params.insert(PARAM_KEYS[*k].into(), v.clone());
        }
        for (k, v) in &spec.tags {
            batch.tags.push(Tag {
                key: TAG_KEYS[*k].into(),
                value: v.clone(),
            });
            r.tags.insert(TAG_KEYS[*k].into(), v.clone());
        }
        for (k, (points, downwards)) in &spec.metrics {
            let mut logged: Vec<Metric> = points
                .iter()
                .enumerate()
                .map(|(step, v)| Metric {
                    key: METRIC_KEYS[*k].into(),
                    value: MetricValue(*v),
                    timestamp: 1,
                    step: step as i64,
                    ..Metric::default()
                })
                .collect();
            if *downwards {
                logged.reverse();
            }
            batch.metrics.extend(logged);
            if let Some(last) = points.last() {
                r.metrics.insert(METRIC_KEYS[*k].into(), *last);
            }
        }
        t.log_batch(p, &id, batch, None)
            .await
            .map_err(fail("log batch"))?;
        if spec.status != 0 || spec.end_time.is_some() {
            t.update_run(
                p,
                &id,
                RunUpdate {
                    status: Some(r.status.clone()),
                    end_time: spec.end_time,
                    run_name: None,
                },
            )
            .await
            .map_err(fail("update run"))?;
        }
        if spec.deleted {
            t.set_run_stage(p, &id, true)
                .await
                .map_err(fail("delete run"))?;
        }
        out.push(r);
    }
    Ok(out)
}

/// Every page of a search, concatenated.
async fn search_all(
    t: &Tracking,
    p: &Project,
    exp: &str,
    filter: &str,
    order_by: &[String],
    q: &Query,
) -> Result<Vec<String>, TestCaseError> {
    let mut got = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..=20 {
        let page = t
            .search_runs(
                p,
                &[exp.to_string()],
                Some(filter),
                order_by,
                q.view,
                Some(q.page_size),
                token.as_deref(),
            )
            .await
            .map_err(|e| TestCaseError::fail(format!("search {filter:?} {order_by:?}: {e}")))?;
        prop_assert!(page.items.len() as i64 <= q.page_size);
        got.extend(page.items.into_iter().map(|r| r.info.run_id));
        match page.next_page_token {
            Some(next) => token = Some(next),
            None => return Ok(got),
        }
    }
    Err(TestCaseError::fail("paging did not end"))
}

static EXPERIMENTS: AtomicU64 = AtomicU64::new(0);

async fn check(
    t: &Tracking,
    p: &Project,
    specs: &[RunSpec],
    queries: &[Query],
) -> Result<(), TestCaseError> {
    // Each case gets its own experiment; the other cases' runs must never show.
    let n = EXPERIMENTS.fetch_add(1, AtomicOrdering::Relaxed);
    let exp = t
        .create_experiment(p, &format!("case-{n}"), None, &[])
        .await
        .map_err(fail("create experiment"))?;
    let runs = store_runs(t, p, &exp, specs).await?;
    let ids: Vec<String> = runs.iter().map(|r| r.id.clone()).collect();
    for q in queries {
        let filter = render_filter(q, &ids);
        let order_by = render_order(q);
        let mut want: Vec<&RefRun> = runs
            .iter()
            .filter(|r| match q.view {
                ViewType::ActiveOnly => r.lifecycle_stage == "active",
                ViewType::DeletedOnly => r.lifecycle_stage == "deleted",
                ViewType::All => true,
            })
            .filter(|r| q.clauses.iter().all(|c| matches(r, c, &ids)))
            .collect();
        want.sort_by(|a, b| reference_order(a, b, &q.order));
        let want: Vec<String> = want.iter().map(|r| r.id.clone()).collect();
        let got = search_all(t, p, &exp, &filter, &order_by, q).await?;
        prop_assert_eq!(
            got,
            want,
            "filter {:?}, order_by {:?}, view {:?}, runs {:#?}",
            filter,
            order_by,
            q.view,
            runs
        );
    }
    Ok(())
}

#[test]
fn run_search_answers_as_mlflow_does() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    for db in rt.block_on(TestDb::all(common::SCHEMA)) {
        let (t, _, p, _) = rt.block_on(common::setup(&db));
        let mut runner = TestRunner::new(Config {
            failure_persistence: None,
            ..Config::with_cases(64)
        });
        let strategy = (
            proptest::collection::vec(run_spec(), 1..=8),
            proptest::collection::vec(query(), 1..=4),
        );
        let result = runner.run(&strategy, |(specs, queries)| {
            rt.block_on(check(&t, &p, &specs, &queries))
        });
        if let Err(e) = result {
            panic!("on {}: {e}", db.url);
        }
    }
}

#[test]
fn the_reference_like_is_sql_like() {
    assert!(like("abc", "a%", false));
    assert!(like("abc", "%c", false));
    assert!(like("abc", "_b_", false));
    assert!(!like("abc", "_b", false));
    assert!(!like("abc", "A%", false));
    assert!(like("abc", "A%", true));
    assert!(like("", "%", false));
    assert!(!like("", "_", false));
    assert!(like("é", "_", false));
    assert!(like("a*b", "a*b", false));
    assert!(!like("axb", "a*b", false));
    assert!(like("%", "%", false));
}
