//! The audit log: an append-only hash chain.
//!
//! Entry `n` stores `hash_n = SHA-256(canonical(n, fields…, hash_{n-1}))`, with
//! `hash_0` = 64 zeros. The single `audit_head` row holds the newest entry's number and
//! hash, and the database accepts an entry only if it follows the head, advancing the
//! head in the same statement (a trigger; a row lock on PostgreSQL, the single writer
//! on SQLite), so sequence numbers are dense and every entry links to the one before
//! it. The server's own appends are group-committed, a batch one INSERT; a domain's
//! append (with [`append_audit_in`]) goes in the transaction that makes the change the
//! entry records.
//!
//! [`Governance::verify_audit`] recomputes the chain: an edited entry no longer matches
//! its hash, a deleted one leaves a gap in the sequence (or, at the end, falls short of
//! the head), and a moved one no longer links to its predecessor.

use qanat_store::{now_micros, Micros};
use sha2::{Digest, Sha256};
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::identity::rfc3339;
use crate::wire::AuditFilter;
use crate::{AuditEntry, AuditVerification, ChainProblem};
use crate::{Error, Governance, Result};

const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const VERIFY_PAGE: i64 = 1000;
const MAX_PROBLEMS: usize = 100;

qanat_core::word_enum! {
    /// How an audited request ended.
    #[derive(utoipa::ToSchema)]
    pub enum AuditOutcome as "outcome" {
        Success,
        /// Refused for lack of identity or permission (401/403), residency included.
        Denied,
        /// Failed for another reason (bad input, missing object, server error).
        Failure,
    }
}

/// What to record.
#[derive(Debug, Clone)]
pub struct AuditRecord {
    pub request_id: String,
    /// User name, or `anonymous`.
    pub actor: String,
    /// Dotted action name, e.g. `project.create`, `object.write`.
    pub action: String,
    /// What was acted on, e.g. `project:fraud/object:data/x.csv`.
    pub resource: String,
    pub project: Option<String>,
    pub outcome: AuditOutcome,
    /// Free text: the HTTP status and, for refusals, the reason.
    pub detail: String,
}

impl AuditRecord {
    /// The record of an operation the server performs by itself — the scheduler acting
    /// on a job, the monitor rolling back an alias — with no request behind it. The
    /// actor is `service:<service>` (no user may take that name: user names cannot
    /// contain ':'), and the request id is a fresh `svc-<uuid>` that ties together
    /// whatever the operation records.
    ///
    /// Append it with [`append_audit_in`] inside the operation's own transaction, so
    /// the change and its record commit together, as a request's do.
    pub fn by_service(
        service: &str,
        action: impl Into<String>,
        resource: impl Into<String>,
        project: Option<&str>,
    ) -> Self {
        AuditRecord {
            request_id: format!("svc-{}", uuid::Uuid::new_v4()),
            actor: format!("{SERVICE_ACTOR_PREFIX}{service}"),
            action: action.into(),
            resource: resource.into(),
            project: project.map(str::to_string),
            outcome: AuditOutcome::Success,
            detail: String::new(),
        }
    }

    /// The same record with `detail` (what was done, in words).
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    /// Whether the actor is one of the server's own services.
    pub fn is_service(&self) -> bool {
        self.actor.starts_with(SERVICE_ACTOR_PREFIX)
    }
}

/// How a service actor's name starts in the audit log.
pub const SERVICE_ACTOR_PREFIX: &str = "service:";

#[allow(clippy::too_many_arguments)]
fn entry_hash(
    seq: i64,
    ts: Micros,
    request_id: &str,
    actor: &str,
    action: &str,
    resource: &str,
    project: Option<&str>,
    outcome: &str,
    detail: &str,
    prev_hash: &str,
) -> String {
    // A JSON array of scalars serialises one way only, so it is a canonical encoding
    // that needs no escaping rules of our own (a tuple is written as that array).
    let canonical = serde_json::to_vec(&(
        seq, ts, request_id, actor, action, resource, project, outcome, detail, prev_hash,
    ))
    .expect("scalars always serialise");
    hex::encode(Sha256::digest(&canonical))
}

struct RawEntry {
    seq: i64,
    ts: Micros,
    request_id: String,
    actor: String,
    action: String,
    resource: String,
    project: Option<String>,
    outcome: String,
    detail: String,
    prev_hash: String,
    hash: String,
}

impl RawEntry {
    fn from_row(row: &AnyRow) -> Result<Self> {
        Ok(RawEntry {
            seq: row.try_get("seq")?,
            ts: row.try_get("ts")?,
            request_id: row.try_get("request_id")?,
            actor: row.try_get("actor")?,
            action: row.try_get("action")?,
            resource: row.try_get("resource")?,
            project: row.try_get("project")?,
            outcome: row.try_get("outcome")?,
            detail: row.try_get("detail")?,
            prev_hash: row.try_get("prev_hash")?,
            hash: row.try_get("hash")?,
        })
    }

    fn recompute(&self) -> String {
        entry_hash(
            self.seq,
            self.ts,
            &self.request_id,
            &self.actor,
            &self.action,
            &self.resource,
            self.project.as_deref(),
            &self.outcome,
            &self.detail,
            &self.prev_hash,
        )
    }

    fn into_entry(self) -> AuditEntry {
        AuditEntry {
            seq: self.seq,
            time: rfc3339(self.ts),
            request_id: self.request_id,
            actor: self.actor,
            action: self.action,
            resource: self.resource,
            project: self.project,
            outcome: self.outcome,
            detail: self.detail,
            prev_hash: self.prev_hash,
            hash: self.hash,
        }
    }
}

enum Bind {
    Text(String),
    Int(i64),
}

/// Appends `rec` inside the caller's transaction on the metadata store, so the entry
/// commits, or rolls back, together with the change it records (one commit instead of
/// two). The head row is locked here, so call it last, just before the commit: on
/// PostgreSQL the row stays locked until then.
#[qanat_macros::boxed]
pub async fn append_audit_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    rec: &AuditRecord,
) -> Result<AuditEntry> {
    let head = lock_head(tx).await?;
    let ts = now_micros();
    let mut entries = chain(std::slice::from_ref(rec), &head, ts);
    insert_entries(&mut **tx, &entries, ts).await?;
    Ok(entries.pop().expect("one entry per record"))
}

/// Appends `audit` to the chain inside `tx`, when there is one (a request's entry or
/// a service's), and commits `tx`: the change and its audit entry land together.
#[qanat_macros::boxed]
pub async fn commit_audited(
    mut tx: sqlx::Transaction<'_, sqlx::Any>,
    audit: Option<&AuditRecord>,
) -> Result<()> {
    if let Some(rec) = audit {
        append_audit_in(&mut tx, rec).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Reads the head inside `tx` and keeps it from moving until `tx` ends: a no-op update
/// takes the head's row lock (PostgreSQL) or the write lock (SQLite).
async fn lock_head(tx: &mut sqlx::Transaction<'_, sqlx::Any>) -> Result<Head> {
    let row = sqlx::query("UPDATE audit_head SET seq = seq WHERE id = 1 RETURNING seq, hash")
        .fetch_one(&mut **tx)
        .await?;
    Ok(Head {
        seq: row.try_get("seq")?,
        hash: row.try_get("hash")?,
    })
}

/// The newest entry of the chain: its sequence number and hash.
#[derive(Debug, Clone)]
struct Head {
    seq: i64,
    hash: String,
}

/// `recs` as the entries that follow `head`, in order, sharing one timestamp.
fn chain(recs: &[AuditRecord], head: &Head, ts: Micros) -> Vec<AuditEntry> {
    let time = rfc3339(ts);
    let mut prev_hash = head.hash.clone();
    let mut entries = Vec::with_capacity(recs.len());
    for (i, rec) in recs.iter().enumerate() {
        let seq = head.seq + 1 + i as i64;
        let outcome = rec.outcome.as_str();
        let hash = entry_hash(
            seq,
            ts,
            &rec.request_id,
            &rec.actor,
            &rec.action,
            &rec.resource,
            rec.project.as_deref(),
            outcome,
            &rec.detail,
            &prev_hash,
        );
        entries.push(AuditEntry {
            seq,
            time: time.clone(),
            request_id: rec.request_id.clone(),
            actor: rec.actor.clone(),
            action: rec.action.clone(),
            resource: rec.resource.clone(),
            project: rec.project.clone(),
            outcome: outcome.to_string(),
            detail: rec.detail.clone(),
            prev_hash: std::mem::replace(&mut prev_hash, hash.clone()),
            hash,
        });
    }
    entries
}

/// Writes `entries` with one multi-row INSERT. The database accepts them only if the
/// first follows the head it holds, and advances the head with them (the trigger of
/// migration 0011), all in the one statement.
async fn insert_entries<'e, E>(exec: E, entries: &[AuditEntry], ts: Micros) -> sqlx::Result<()>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let mut sql = String::from(
        "INSERT INTO audit_log (seq, ts, request_id, actor, action, resource, project, outcome, detail, prev_hash, hash) VALUES ",
    );
    for i in 0..entries.len() {
        let b = i * 11;
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for c in 1..=11 {
            if c > 1 {
                sql.push_str(", ");
            }
            sql.push('$');
            sql.push_str(&(b + c).to_string());
        }
        sql.push(')');
    }
    let mut insert = sqlx::query(&sql);
    for e in entries {
        insert = insert
            .bind(e.seq)
            .bind(ts)
            .bind(&e.request_id)
            .bind(&e.actor)
            .bind(&e.action)
            .bind(&e.resource)
            .bind(e.project.as_deref())
            .bind(&e.outcome)
            .bind(&e.detail)
            .bind(&e.prev_hash)
            .bind(&e.hash);
    }
    insert.execute(exec).await?;
    Ok(())
}

/// Whether `e` is the database refusing entries that do not follow its head.
fn head_moved(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.message().contains("audit chain head moved"))
}

/// The most entries one group commit writes (11 bound values each, well under
/// SQLite's and PostgreSQL's limits on parameters per statement).
const BATCH_MAX: usize = 256;

type Waiter = tokio::sync::oneshot::Sender<Result<AuditEntry>>;

/// Group commit for [`Governance::append_audit`]: records that arrive while a batch is
/// being written wait and go together in the next one, so a busy server pays one
/// statement and one commit for many entries instead of a transaction each. Every
/// caller still gets its answer only after its entry is committed.
#[derive(Default)]
pub(crate) struct AuditBatcher {
    queue: std::sync::Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    pending: Vec<(AuditRecord, Waiter)>,
    /// Whether a writer task is draining `pending`.
    writing: bool,
    /// The head as the last batch left it, taken by the next: a batch that follows it
    /// is one INSERT. Stale when another appender (a domain's own transaction, another
    /// server) moved the head since; the database then refuses the batch and the head
    /// is read again.
    head: Option<Head>,
}

impl std::fmt::Debug for AuditBatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditBatcher").finish_non_exhaustive()
    }
}

impl AuditBatcher {
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Writes `recs` after the head. With the head the last batch left, that is one
/// statement (autocommit); without it, or if the database says another appender moved
/// it since, one transaction that locks the head, reads it and appends (which cannot
/// lose to another appender).
async fn write_batch(gov: &Governance, recs: &[AuditRecord]) -> Result<Vec<AuditEntry>> {
    let ts = now_micros();
    let known = gov.audit.queue().head.take();
    let remember = |entries: &[AuditEntry]| {
        let last = entries.last().expect("a batch is never empty");
        gov.audit.queue().head = Some(Head {
            seq: last.seq,
            hash: last.hash.clone(),
        });
    };
    if let Some(head) = known {
        let entries = chain(recs, &head, ts);
        match insert_entries(gov.meta.writer(), &entries, ts).await {
            Ok(()) => {
                remember(&entries);
                return Ok(entries);
            }
            Err(e) if head_moved(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut tx = gov.meta.writer().begin().await?;
    let head = lock_head(&mut tx).await?;
    let entries = chain(recs, &head, ts);
    insert_entries(&mut *tx, &entries, ts).await?;
    tx.commit().await?;
    remember(&entries);
    Ok(entries)
}

/// Drains the queue batch by batch until it is empty. Runs as its own task, so a
/// caller that goes away (a closed connection) cannot strand the others.
async fn write_batches(gov: Governance) {
    /// If the task ends early (a panic, or its runtime shutting down), clears
    /// `writing` so the next append starts a writer; the waiters queued then hear that
    /// their entry was not written.
    struct Early<'a>(&'a AuditBatcher, bool);
    impl Drop for Early<'_> {
        fn drop(&mut self) {
            if !self.1 {
                let mut q = self.0.queue();
                q.writing = false;
                q.pending.clear();
            }
        }
    }
    let mut guard = Early(&gov.audit, false);
    loop {
        let batch: Vec<(AuditRecord, Waiter)> = {
            let mut q = gov.audit.queue();
            if q.pending.is_empty() {
                q.writing = false;
                guard.1 = true;
                return;
            }
            let take = q.pending.len().min(BATCH_MAX);
            q.pending.drain(..take).collect()
        };
        let (recs, waiters): (Vec<AuditRecord>, Vec<Waiter>) = batch.into_iter().unzip();
        match write_batch(&gov, &recs).await {
            Ok(entries) => {
                for (w, e) in waiters.into_iter().zip(entries) {
                    let _ = w.send(Ok(e));
                }
            }
            Err(e) => {
                let why = e.to_string();
                for w in waiters {
                    let _ = w.send(Err(Error::AuditWrite(why.clone())));
                }
            }
        }
    }
}

/// `q` with `binds` bound in order.
fn bound<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    binds: &'q [Bind],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for b in binds {
        q = match b {
            Bind::Text(s) => q.bind(s.as_str()),
            Bind::Int(i) => q.bind(*i),
        };
    }
    q
}

impl Governance {
    /// Appends one entry to the chain. Returns it with its sequence number and hash,
    /// once it is committed. Concurrent appends are committed together (group commit).
    #[qanat_macros::boxed]
    pub async fn append_audit(&self, rec: &AuditRecord) -> Result<AuditEntry> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let start = {
            let mut q = self.audit.queue();
            q.pending.push((rec.clone(), tx));
            !std::mem::replace(&mut q.writing, true)
        };
        if start {
            tokio::spawn(write_batches(self.clone()));
        }
        rx.await.map_err(|_| {
            Error::AuditWrite("the audit writer stopped before writing the entry".into())
        })?
    }

    /// Reads entries matching `q`. Without `after_seq`, the newest `limit` matching
    /// entries; with it, the oldest `limit` entries after that sequence number. Either
    /// way the result is in ascending order.
    #[qanat_macros::boxed]
    pub async fn query_audit(&self, q: &AuditFilter) -> Result<Vec<AuditEntry>> {
        if let Some(o) = &q.outcome {
            o.parse::<AuditOutcome>()?;
        }
        let limit = match q.limit {
            None => 100,
            Some(l) if (1..=1000).contains(&l) => l,
            Some(_) => return Err(Error::invalid("limit", "use 1 to 1000")),
        };
        let time = |field: &'static str, v: &Option<String>| {
            v.as_deref()
                .map(|s| qanat_store::parse_micros(s).map_err(|e| Error::invalid(field, e)))
                .transpose()
        };
        let (since, until) = (time("since", &q.since)?, time("until", &q.until)?);
        let mut clauses: Vec<String> = Vec::new();
        let mut binds: Vec<Bind> = Vec::new();
        let mut add = |clause: &str, bind: Bind| {
            binds.push(bind);
            clauses.push(clause.replace('?', &format!("${}", binds.len())));
        };
        if let Some(v) = &q.actor {
            add("actor = ?", Bind::Text(v.clone()));
        }
        if let Some(v) = &q.action {
            add("action = ?", Bind::Text(v.clone()));
        }
        if let Some(v) = &q.project {
            add("project = ?", Bind::Text(v.clone()));
        }
        if let Some(v) = &q.outcome {
            add("outcome = ?", Bind::Text(v.clone()));
        }
        if let Some(v) = since {
            add("ts >= ?", Bind::Int(v));
        }
        if let Some(v) = until {
            add("ts < ?", Bind::Int(v));
        }
        if let Some(v) = q.after_seq {
            add("seq > ?", Bind::Int(v));
        }
        let filter = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        let order = if q.after_seq.is_some() { "ASC" } else { "DESC" };
        let sql = format!(
            "SELECT * FROM audit_log {filter} ORDER BY seq {order} LIMIT ${}",
            binds.len() + 1
        );
        let rows = bound(sqlx::query(&sql), &binds)
            .bind(limit)
            .fetch_all(self.meta.reader())
            .await?;
        let mut out = rows
            .iter()
            .map(|r| RawEntry::from_row(r).map(RawEntry::into_entry))
            .collect::<Result<Vec<_>>>()?;
        if order == "DESC" {
            out.reverse();
        }
        Ok(out)
    }

    /// Entries of the period `[since, until)` (microseconds), of `project` (by name) or
    /// of any, with `outcome` if given, whose action is one of `actions` or whose
    /// detail contains one of `details`: how many, and the newest `limit` of them
    /// (oldest first). What a compliance report lists.
    #[allow(clippy::too_many_arguments)]
    #[qanat_macros::boxed]
    pub async fn audit_excerpt(
        &self,
        project: Option<&str>,
        outcome: Option<AuditOutcome>,
        since: i64,
        until: i64,
        actions: &[&str],
        details: &[&str],
        limit: i64,
    ) -> Result<(u64, Vec<AuditEntry>)> {
        let mut binds: Vec<Bind> = vec![Bind::Int(since), Bind::Int(until)];
        let mut clauses = vec!["ts >= $1".to_string(), "ts < $2".to_string()];
        if let Some(p) = project {
            binds.push(Bind::Text(p.to_string()));
            clauses.push(format!("project = ${}", binds.len()));
        }
        if let Some(o) = outcome {
            binds.push(Bind::Text(o.to_string()));
            clauses.push(format!("outcome = ${}", binds.len()));
        }
        let mut any: Vec<String> = Vec::new();
        for a in actions {
            binds.push(Bind::Text((*a).to_string()));
            any.push(format!("action = ${}", binds.len()));
        }
        for d in details {
            // LIKE's wildcards in the text are matched literally.
            let escaped = d
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            binds.push(Bind::Text(format!("%{escaped}%")));
            any.push(format!("detail LIKE ${} ESCAPE '\\'", binds.len()));
        }
        if any.is_empty() {
            return Ok((0, Vec::new()));
        }
        clauses.push(format!("({})", any.join(" OR ")));
        let filter = clauses.join(" AND ");
        let count_sql = format!("SELECT COUNT(*) AS n FROM audit_log WHERE {filter}");
        let rows_sql = format!(
            "SELECT * FROM audit_log WHERE {filter} ORDER BY seq DESC LIMIT {}",
            limit.clamp(1, 10_000)
        );
        let count: i64 = bound(sqlx::query(&count_sql), &binds)
            .fetch_one(self.meta.reader())
            .await?
            .try_get("n")?;
        let rows = bound(sqlx::query(&rows_sql), &binds)
            .fetch_all(self.meta.reader())
            .await?;
        let mut out = rows
            .iter()
            .map(|r| RawEntry::from_row(r).map(RawEntry::into_entry))
            .collect::<Result<Vec<_>>>()?;
        out.reverse();
        Ok((u64::try_from(count).unwrap_or(0), out))
    }

    /// Walks the whole chain and reports every entry that was changed, deleted or moved.
    #[qanat_macros::boxed]
    pub async fn verify_audit(&self) -> Result<AuditVerification> {
        let mut problems = Vec::new();
        let mut push = |p: ChainProblem| {
            if problems.len() < MAX_PROBLEMS {
                problems.push(p);
            }
        };
        let mut expected_seq = 1i64;
        let mut prev_hash = GENESIS.to_string();
        let mut checked = 0u64;
        let mut cursor = 0i64;
        loop {
            let rows =
                sqlx::query("SELECT * FROM audit_log WHERE seq > $1 ORDER BY seq ASC LIMIT $2")
                    .bind(cursor)
                    .bind(VERIFY_PAGE)
                    .fetch_all(self.meta.reader())
                    .await?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                let e = RawEntry::from_row(row)?;
                checked += 1;
                if e.seq != expected_seq {
                    push(ChainProblem {
                        seq: expected_seq,
                        kind: "missing".into(),
                        message: if e.seq - 1 == expected_seq {
                            format!("entry {expected_seq} is missing (deleted)")
                        } else {
                            format!(
                                "entries {expected_seq}..={} are missing (deleted)",
                                e.seq - 1
                            )
                        },
                    });
                } else if e.prev_hash != prev_hash {
                    push(ChainProblem {
                        seq: e.seq,
                        kind: "broken_link".into(),
                        message: format!(
                            "entry {} does not follow entry {} (moved, replaced or reordered)",
                            e.seq,
                            e.seq - 1
                        ),
                    });
                }
                if e.recompute() != e.hash {
                    push(ChainProblem {
                        seq: e.seq,
                        kind: "changed".into(),
                        message: format!("entry {} was altered after it was written", e.seq),
                    });
                }
                prev_hash = e.hash.clone();
                expected_seq = e.seq + 1;
                cursor = e.seq;
            }
        }
        let head = sqlx::query("SELECT seq, hash FROM audit_head WHERE id = 1")
            .fetch_one(self.meta.reader())
            .await?;
        let head_seq: i64 = head.try_get("seq")?;
        let head_hash: String = head.try_get("hash")?;
        let last = expected_seq - 1;
        if head_seq > last {
            push(ChainProblem {
                seq: last + 1,
                kind: "truncated".into(),
                message: format!(
                    "entries {}..={head_seq} are missing from the end of the log (deleted)",
                    last + 1
                ),
            });
        } else if head_seq < last || head_hash != prev_hash {
            push(ChainProblem {
                seq: last,
                kind: "broken_link".into(),
                message: format!(
                    "the chain head (entry {head_seq}) does not match the last entry ({last})"
                ),
            });
        }
        Ok(AuditVerification {
            ok: problems.is_empty(),
            entries_checked: checked,
            head_seq,
            problems,
        })
    }
}
