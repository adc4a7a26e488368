//! Projects (members, residency, quota, what each holds) and the audit log.

use axum::extract::State;
use maud::html;
use qanat_governance::wire::AuditFilter;
use serde::Deserialize;

use super::layout::{self, badge, empty, project_url, table, time, Nav, Section, Session};
use super::{page, viewer, PageResult};
use crate::authz::Policy;
use crate::extract::{ApiQuery, Scope};
use crate::route_table::Fragment;
use crate::AppState;

pub(super) fn routes(f: Fragment) -> Fragment {
    let f = page(f, "/ui/", Policy::authenticated("ui.projects"), home);
    let f = page(f, "/ui/p/{project}", viewer("ui.project"), project);
    let f = page(f, "/ui/audit", Policy::global_admin("ui.audit"), audit);
    page(
        f,
        "/ui/compliance",
        Policy::global_admin("ui.compliance").governed_read(),
        compliance,
    )
}

/// The compliance report (global admins; audited): the whole installation or one
/// project, over a period (the API's `/api/v1/compliance/report` as a page).
async fn compliance(
    State(state): State<AppState>,
    s: Session,
    ApiQuery(q): ApiQuery<qanat_governance::compliance::ReportParams>,
) -> PageResult {
    let q = qanat_governance::compliance::ReportParams {
        project: q.project.filter(|p| !p.is_empty()),
        since: q.since.filter(|p| !p.is_empty()),
        until: q.until.filter(|p| !p.is_empty()),
        format: None,
    };
    let projects = match &q.project {
        Some(name) => vec![state.gov.project(name).await?],
        None => state.gov.projects_for(&s.user).await?,
    };
    let report =
        crate::compliance::build(&state, &s.user, q.project.clone(), &projects, &q).await?;
    let body = html! {
        form.filters method="get" action="/ui/compliance" {
            label { "Project" input type="text" name="project" value=[q.project.as_deref()]; }
            label { "Since" input type="text" name="since" placeholder="2026-11-01T00:00:00Z" value=[q.since.as_deref()]; }
            label { "Until" input type="text" name="until" value=[q.until.as_deref()]; }
            button type="submit" { "Report" }
        }
        (crate::compliance::body(&report))
    };
    Ok(layout::page(
        &s,
        Nav::global(Section::Compliance),
        "Compliance report",
        &[],
        body,
    ))
}

/// The projects the caller may see.
async fn home(State(state): State<AppState>, s: Session) -> PageResult {
    let projects = state.gov.projects_for(&s.user).await?;
    let body = html! {
        h1 { "Projects" }
        @if projects.is_empty() {
            (empty("You are not a member of any project yet: ask a project's maintainer to add you (qanat projects members set)."))
        } @else {
            ul.cards {
                @for p in &projects {
                    li {
                        h2 { a href=(project_url(&p.name, "")) { (p.name) } }
                        @if !p.description.is_empty() { p { (p.description) } }
                        p.hint { "Regions: " (p.allowed_regions.join(", ")) }
                    }
                }
            }
        }
    };
    Ok(layout::page(
        &s,
        Nav::global(Section::Projects),
        "Projects",
        &[],
        body,
    ))
}

/// A project: its residency policy, members, quota, and what it holds.
async fn project(State(state): State<AppState>, s: Session, scope: Scope) -> PageResult {
    let p = &scope.project;
    let members = state.gov.members(p).await?;
    let quota = state.jobs.quota(p).await?;
    let experiments = state
        .tracking
        .search_experiments(
            p,
            qanat_tracking::ViewType::ActiveOnly,
            Some(1000),
            None,
            None,
            &[],
        )
        .await?
        .items
        .len();
    let models = state
        .tracking
        .search_registered_models(p, None, &[], Some(1000), None)
        .await?
        .items
        .len();
    let datasets = state.datasets.list(p).await?.len();
    let deployments = state.serving.deployments().list(p).await?.len();
    let monitors = state.monitor.list(p).await?.len();
    let jobs = state
        .jobs
        .list(
            p,
            &qanat_jobs::wire::JobListParams {
                state: None,
                limit: Some(1000),
            },
        )
        .await?
        .len();
    let role = scope
        .role
        .map(|r| r.to_string())
        .unwrap_or_else(|| "global admin".into());
    let count = |n: usize| {
        if n >= 1000 {
            "1000+".to_string()
        } else {
            n.to_string()
        }
    };
    let q = &quota.quota;
    let limit = |v: Option<String>| v.unwrap_or_else(|| "unlimited".into());
    let body = html! {
        h1 { "Project " (p.name) }
        @if !p.description.is_empty() { p { (p.description) } }
        dl.facts {
            dt { "Your role" } dd { (role) }
            dt { "Data may live in" } dd { (p.allowed_regions.join(", ")) }
            dt { "Created" } dd { (time(&p.created_at)) " by " (p.created_by) }
        }
        h2 { "What it holds" }
        ul.cards {
            li { a href=(project_url(&p.name, "/experiments")) { "Experiments" } div.count { (count(experiments)) } }
            li { a href=(project_url(&p.name, "/models")) { "Registered models" } div.count { (count(models)) } }
            li { a href=(project_url(&p.name, "/datasets")) { "Datasets" } div.count { (count(datasets)) } }
            li { a href=(project_url(&p.name, "/features")) { "Features" } div.count { "→" } }
            li { a href=(project_url(&p.name, "/jobs")) { "Jobs" } div.count { (count(jobs)) } }
            li { a href=(project_url(&p.name, "/deployments")) { "Deployments" } div.count { (count(deployments)) } }
            li { a href=(project_url(&p.name, "/monitors")) { "Monitors" } div.count { (count(monitors)) } }
        }
        h2 { "Members" }
        @if members.is_empty() { (empty("No members.")) } @else {
            (table("Members", &["User", "Role", "Since"], html! {
                @for m in &members {
                    tr { td { (m.user) } td { (m.role) } td { (time(&m.created_at)) } }
                }
            }))
        }
        h2 { "Job quota" }
        (table("Job quota", &["", "Limit", "In use"], html! {
            tr { th scope="row" { "CPUs" } td.num { (limit(q.cpus.map(layout::num))) } td.num { (layout::num(quota.used.cpu_millis as f64 / 1000.0)) } }
            tr { th scope="row" { "Memory (MiB)" } td.num { (limit(q.memory_mb.map(|m| m.to_string()))) } td.num { (quota.used.memory_mb) } }
            tr { th scope="row" { "GPUs" } td.num { (limit(q.gpus.map(|g| g.to_string()))) } td.num { (quota.used.gpus) } }
            tr { th scope="row" { "Running jobs" } td.num { (limit(q.running_jobs.map(|g| g.to_string()))) } td.num { (quota.running_jobs) } }
            tr { th scope="row" { "Queued jobs" } td.num { "—" } td.num { (quota.queued_jobs) } }
        }))
    };
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Overview),
        &p.name,
        &[],
        body,
    ))
}

#[derive(Deserialize, Default)]
struct AuditQuery {
    actor: Option<String>,
    action: Option<String>,
    project: Option<String>,
    outcome: Option<String>,
    since: Option<String>,
    until: Option<String>,
    verify: Option<String>,
}

fn nonempty(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
}

/// The audit log (global admins): filters, the latest entries, the chain's state.
async fn audit(
    State(state): State<AppState>,
    s: Session,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> PageResult {
    let filter = AuditFilter {
        actor: nonempty(&q.actor),
        action: nonempty(&q.action),
        project: nonempty(&q.project),
        outcome: nonempty(&q.outcome),
        since: nonempty(&q.since),
        until: nonempty(&q.until),
        after_seq: None,
        limit: Some(200),
    };
    let entries = state.gov.query_audit(&filter).await?;
    let verification = if q.verify.is_some() {
        Some(state.gov.verify_audit().await?)
    } else {
        None
    };
    let field = |name: &str, label: &str, value: &Option<String>| {
        html! { label { (label) input type="text" name=(name) value=[value.as_deref()]; } }
    };
    let body = html! {
        h1 { "Audit log" }
        form.filters method="get" action="/ui/audit" {
            (field("actor", "Actor", &q.actor))
            (field("action", "Action", &q.action))
            (field("project", "Project", &q.project))
            label { "Outcome"
                select name="outcome" {
                    @for o in ["", "success", "denied", "failure"] {
                        option value=(o) selected[q.outcome.as_deref() == Some(o)] { @if o.is_empty() { "any" } @else { (o) } }
                    }
                }
            }
            (field("since", "Since (RFC 3339)", &q.since))
            (field("until", "Until (RFC 3339)", &q.until))
            button type="submit" { "Filter" }
            button.secondary type="submit" name="verify" value="1" { "Filter and verify the chain" }
        }
        @if let Some(v) = &verification {
            section aria-label="Chain verification" {
                @if v.ok {
                    p { (badge("ok")) " The chain of " (v.entries_checked) " entries verifies, up to entry " (v.head_seq) "." }
                } @else {
                    p.error role="alert" { "The chain does not verify: " (v.problems.len()) " problem(s)." }
                    ul { @for pr in &v.problems { li { (format!("{pr:?}")) } } }
                }
            }
        }
        @if entries.is_empty() { (empty("No entries match.")) } @else {
            (table("Audit entries, newest first", &["#", "Time", "Actor", "Action", "Project", "Resource", "Outcome", "Detail"], html! {
                @for e in &entries {
                    tr {
                        td.num { (e.seq) }
                        td { (time(&e.time)) }
                        td { (e.actor) }
                        td { (e.action) }
                        td { @if let Some(p) = &e.project { a href=(project_url(p, "")) { (p) } } }
                        td { (e.resource) }
                        td { (badge(&e.outcome)) }
                        td { (e.detail) }
                    }
                }
            }))
        }
    };
    Ok(layout::page(
        &s,
        Nav::global(Section::Audit),
        "Audit log",
        &[],
        body,
    ))
}
