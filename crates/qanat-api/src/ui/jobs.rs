//! Jobs: the queue with the reason each one waits, a job's history, its logs per rank
//! (the page follows a running job), its resource and GPU use over time, schedules.

use axum::extract::State;
use maud::html;
use serde::Deserialize;

use super::chart;
use super::layout::{self, badge, empty, project_url, seg, table, time, Nav, Section, Session};
use super::{page, viewer, PageResult};
use crate::extract::{ApiPath, ApiQuery, Scope};
use crate::route_table::Fragment;
use crate::AppState;

/// Bytes of a log shown: its end.
const LOG_TAIL: usize = 64 * 1024;
/// Chunks of a log read to find its end (1 MiB each).
const LOG_CHUNKS: usize = 8;

pub(super) fn routes(f: Fragment) -> Fragment {
    let f = page(f, "/ui/p/{project}/jobs", viewer("ui.jobs"), jobs);
    // A job's page shows its log and the script follows it: reads of a log are
    // governed (audited), as on the API.
    let f = page(
        f,
        "/ui/p/{project}/jobs/{job}",
        viewer("ui.job").governed_read(),
        job,
    );
    page(
        f,
        "/ui/p/{project}/jobs/{job}/log",
        viewer("ui.job.log").governed_read(),
        log,
    )
}

#[derive(Deserialize)]
struct LogQuery {
    rank: Option<u32>,
    attempt: Option<u32>,
    offset: Option<u64>,
    wait: Option<u64>,
}

/// Seconds the page's script waits on the server for more of a log.
const LOG_WAIT_SECS: u64 = 20;

/// What a rank's log holds after `offset` (JSON, the API's log chunk), waiting up to
/// 20 s for more while the attempt runs: the job page's script follows a running
/// job's log with it.
async fn log(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath((_, job_id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<LogQuery>,
) -> Result<axum::response::Response, super::UiError> {
    let chunk = state
        .jobs
        .logs(
            &scope.project,
            &job_id,
            &qanat_jobs::wire::LogParams {
                rank: q.rank,
                attempt: q.attempt,
                offset: q.offset,
                wait_secs: Some(q.wait.unwrap_or(0).min(LOG_WAIT_SECS)),
            },
        )
        .await?;
    let mut resp = axum::response::IntoResponse::into_response(axum::Json(chunk));
    super::secure_headers(&mut resp);
    Ok(resp)
}

#[derive(Deserialize)]
struct JobsQuery {
    state: Option<String>,
}

async fn jobs(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiQuery(q): ApiQuery<JobsQuery>,
) -> PageResult {
    let p = &scope.project;
    let wanted = q
        .state
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(String::from);
    let list = state
        .jobs
        .list(
            p,
            &qanat_jobs::wire::JobListParams {
                state: wanted.clone(),
                limit: Some(200),
            },
        )
        .await?;
    let schedules = state.jobs.schedules(p).await?;
    let quota = state.jobs.quota(p).await?;
    let busy = list
        .iter()
        .any(|j| j.state == "queued" || j.state == "running");
    let body = html! {
        h1 { "Jobs" }
        p { (quota.running_jobs) " running, " (quota.queued_jobs) " queued; using "
            (layout::num(quota.used.cpu_millis as f64 / 1000.0)) " CPUs, " (quota.used.memory_mb) " MiB, " (quota.used.gpus) " GPUs." }
        form.filters method="get" action=(project_url(&p.name, "/jobs")) {
            label { "State"
                select name="state" {
                    @for st in ["", "queued", "running", "succeeded", "failed", "cancelled"] {
                        option value=(st) selected[wanted.as_deref() == Some(st)] { @if st.is_empty() { "any" } @else { (st) } }
                    }
                }
            }
            button type="submit" { "Show" }
        }
        @if busy { p.hint data-refresh="10" { "This page reloads every 10 s while jobs are queued or running." } }
        @if list.is_empty() { (empty("No jobs: qanat jobs submit -f job.yaml starts one.")) } @else {
            (table("Jobs, newest first", &["Job", "Name", "Kind", "State", "Why it waits or ended", "Resources", "Executor", "Submitted", "Run"], html! {
                @for j in &list {
                    tr {
                        td { a href=(project_url(&p.name, &format!("/jobs/{}", seg(&j.job_id)))) { (j.job_id) } }
                        td { (j.name) }
                        td { (j.kind) }
                        td { (badge(&j.state)) }
                        td { (j.reason.as_deref().unwrap_or("")) }
                        td { (resources(&j.resources)) @if j.ranks > 1 { " × " (j.ranks) " ranks" } }
                        td { (j.executor) }
                        td { (time(&j.submitted_at)) " by " (j.submitted_by) }
                        td { @if let Some(r) = &j.run_id { a href=(project_url(&p.name, &format!("/runs/{}", seg(r)))) { "run" } } }
                    }
                }
            }))
        }
        h2 { "Schedules" }
        @if schedules.is_empty() { (empty("No schedules: qanat jobs schedule create adds one.")) } @else {
            (table("Schedules", &["Name", "Cron", "Job", "Next", "Created by"], html! {
                @for sc in &schedules {
                    tr { td { (sc.name) } td { code { (sc.cron) } } td { (sc.job.name) " (" (sc.job.kind) ")" } td { (time(&sc.next_at)) } td { (sc.created_by) } }
                }
            }))
        }
    };
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Jobs),
        "Jobs",
        &[],
        body,
    ))
}

fn resources(r: &qanat_types::jobs::Resources) -> String {
    let mut s = format!(
        "{} CPU, {} MiB",
        layout::num(r.cpu_millis as f64 / 1000.0),
        r.memory_mb
    );
    if r.gpus > 0 {
        s.push_str(&format!(", {} GPU", r.gpus));
    }
    s
}

#[derive(Deserialize)]
struct JobQuery {
    rank: Option<u32>,
}

async fn job(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiPath((_, job_id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<JobQuery>,
) -> PageResult {
    let p = &scope.project;
    let d = state.jobs.get(p, &job_id).await?;
    let j = &d.job;
    let rank = q.rank.unwrap_or(0).min(j.ranks.saturating_sub(1));
    // The log's end: read on from the start, keep the last LOG_TAIL bytes.
    let mut log = String::new();
    let mut offset = 0;
    let mut cut = false;
    for _ in 0..LOG_CHUNKS {
        let chunk = state
            .jobs
            .logs(
                p,
                &job_id,
                &qanat_jobs::wire::LogParams {
                    rank: Some(rank),
                    attempt: None,
                    offset: Some(offset),
                    wait_secs: None,
                },
            )
            .await?;
        log.push_str(&chunk.data);
        if log.len() > LOG_TAIL {
            let mut from = log.len() - LOG_TAIL;
            while !log.is_char_boundary(from) {
                from += 1;
            }
            log.drain(..from);
            cut = true;
        }
        let done = chunk.next_offset == offset || chunk.complete;
        offset = chunk.next_offset;
        if done {
            break;
        }
    }
    // A running job's log is followed by the page's script from where it ends; a
    // queued one's page reloads until it starts.
    let following = j.state == "running";
    let queued = j.state == "queued";
    let telemetry = match &j.run_id {
        Some(run_id) => {
            let run = state.tracking.run(p, run_id).await.ok();
            let mut keys: Vec<String> = run
                .map(|r| {
                    r.data
                        .metrics
                        .into_iter()
                        .map(|m| m.key)
                        .filter(|k| k.starts_with("system/"))
                        .collect()
                })
                .unwrap_or_default();
            keys.sort();
            keys.dedup();
            let mut charts = Vec::new();
            for k in keys.iter().take(12) {
                let series = super::tracking::curves(
                    &state,
                    p,
                    std::slice::from_ref(run_id),
                    k,
                    std::slice::from_ref(k),
                )
                .await?;
                charts.push((k.clone(), chart::lines(k, "sample", &series)));
            }
            charts
        }
        None => Vec::new(),
    };
    let here = project_url(&p.name, &format!("/jobs/{}", seg(&j.job_id)));
    let body = html! {
        h1 { "Job " (j.name) " " (badge(&j.state)) }
        @if queued { p.hint data-refresh="5" { "This page reloads every 5 s while the job is queued." } }
        @if following { p.hint { "The log follows the job while it runs; the page reloads when the attempt ends." } }
        dl.facts {
            dt { "Job ID" } dd { code { (j.job_id) } }
            dt { "Kind" } dd { (j.kind) }
            @if let Some(r) = &j.reason { dt { "Why" } dd { (r) } }
            dt { "Resources" } dd { (resources(&j.resources)) " × " (j.ranks) " rank(s)" }
            dt { "Executor" } dd { (j.executor) @if let Some(pl) = &j.placement { " on " (pl) } }
            @if let Some(e) = &j.enforcement { dt { "Limits enforced by" } dd { (e) } }
            dt { "Attempt" } dd { (j.attempt) " of at most " (j.max_retries + 1) " (" (j.failures) " failed, " (j.preemptions) " preempted)" }
            dt { "Submitted" } dd { (time(&j.submitted_at)) " by " (j.submitted_by) }
            @if let Some(t) = &j.started_at { dt { "Started" } dd { (time(t)) } }
            @if let Some(t) = &j.finished_at { dt { "Finished" } dd { (time(t)) @if let Some(c) = j.exit_code { " (exit code " (c) ")" } } }
            @if let Some(r) = &j.run_id { dt { "Run" } dd { a href=(project_url(&p.name, &format!("/runs/{}", seg(r)))) { (r) } } }
            @if let Some(g) = &j.idle_gpus { dt { "Idle GPUs" } dd.error { (g) } }
            @if !d.spec.inputs.is_empty() {
                dt { "Inputs" } dd { @for i in &d.spec.inputs { @let n = i.to_string(); (super::registry::node_link(&p.name, &n)) " " } }
            }
        }
        h2 { "Logs" }
        @if j.ranks > 1 {
            nav.pager aria-label="Ranks" {
                @for r in 0..j.ranks {
                    a href={(here) "?rank=" (r)} aria-current=[(r == rank).then_some("page")] { "rank " (r) }
                }
            }
        }
        @if following {
            @if cut { p.hint { "The last " (layout::bytes(LOG_TAIL as u64)) " so far; qanat jobs logs " (j.job_id) " prints it all." } }
            pre data-follow data-log={(here) "/log?rank=" (rank) "&attempt=" (j.attempt)} data-offset=(offset) aria-label={"Log of rank " (rank)} aria-live="polite" tabindex="0" { (log) }
        } @else if log.is_empty() { (empty("No output yet.")) } @else {
            @if cut { p.hint { "The last " (layout::bytes(LOG_TAIL as u64)) "; qanat jobs logs " (j.job_id) " prints it all." } }
            pre data-follow aria-label={"Log of rank " (rank)} tabindex="0" { (log) }
        }
        @if !telemetry.is_empty() {
            h2 { "Resources over time" }
            div.charts {
                @for (k, svg) in &telemetry { figure { @if let Some(svg) = svg { (svg) } figcaption { (k) } } }
            }
        }
        h2 { "History" }
        (table("Events", &["When", "Attempt", "Event", "Message"], html! {
            @for e in &d.events { tr { td { (time(&e.at)) } td.num { (e.attempt) } td { (e.event) } td { (e.message) } } }
        }))
    };
    let crumbs = [("Jobs", project_url(&p.name, "/jobs"))];
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Jobs),
        &j.name,
        &crumbs,
        body,
    ))
}
