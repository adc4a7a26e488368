//! Monitors: drift share over time, each check's per-column drift, alerts and the
//! actions they took (linked through lineage to what they made), and the HTML drift
//! reports.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::html;
use qanat_core::{Kind, ObjectRef};
use serde::Deserialize;

use super::chart::{self, Series};
use super::layout::{self, badge, empty, project_url, seg, table, time, Nav, Section, Session};
use super::{page, viewer, PageResult, UiError};
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, Scope};
use crate::route_table::Fragment;
use crate::AppState;

/// Checks drawn over time.
const CHECKS: i64 = 200;

pub(super) fn routes(f: Fragment) -> Fragment {
    let f = page(
        f,
        "/ui/p/{project}/monitors",
        viewer("ui.monitors"),
        monitors,
    );
    let f = page(
        f,
        "/ui/p/{project}/monitors/{deployment}",
        viewer("ui.monitor"),
        monitor,
    );
    page(
        f,
        "/ui/p/{project}/monitors/{deployment}/checks/{check}/report",
        viewer("ui.drift_report"),
        report,
    )
}

async fn monitors(State(state): State<AppState>, s: Session, scope: Scope) -> PageResult {
    let p = &scope.project;
    let list = state.monitor.list(p).await?;
    let body = html! {
        h1 { "Monitors" }
        @if list.is_empty() { (empty("No monitors: qanat monitor create <deployment> watches one for drift.")) } @else {
            (table("Monitors", &["Deployment", "Checks", "Window", "Alert rules", "Next window", "Updated"], html! {
                @for m in &list {
                    tr {
                        td { a href=(project_url(&p.name, &format!("/monitors/{}", seg(&m.deployment)))) { (m.deployment) } }
                        td.num { (m.checks) }
                        td { @if let Some(sec) = m.spec.window.seconds { (sec) " s" } @if let Some(r) = m.spec.window.rows { (r) " rows" } }
                        td { (m.spec.alerts.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")) }
                        td { (time(&m.next_window)) }
                        td { (time(&m.updated_at)) " by " (m.updated_by) }
                    }
                }
            }))
        }
    };
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Monitors),
        "Monitors",
        &[],
        body,
    ))
}

#[derive(Deserialize)]
struct MonitorQuery {
    check: Option<i64>,
}

async fn monitor(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiPath((_, deployment)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<MonitorQuery>,
) -> PageResult {
    let p = &scope.project;
    let status = state.monitor.status(p, &deployment).await?;
    let mut checks = state.monitor.checks(p, &deployment, CHECKS).await?;
    checks.sort_by_key(|c| c.check);
    let alerts = state.monitor.alerts(p, &deployment, 100).await?;
    // Drift share of each version over the checks.
    let mut by_version: std::collections::BTreeMap<String, Series> = Default::default();
    for c in &checks {
        for v in &c.versions {
            if let Some(d) = &v.drift {
                by_version
                    .entry(v.version.clone())
                    .or_insert_with(|| Series {
                        name: format!("version {}", v.version),
                        points: Vec::new(),
                    })
                    .points
                    .push((c.check as f64, d.share));
            }
        }
    }
    let series: Vec<Series> = by_version.into_values().collect();
    let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
    let shown = match q.check {
        Some(n) => Some(state.monitor.check(p, &deployment, Some(n)).await?),
        None => checks.last().cloned(),
    };
    let here = project_url(&p.name, &format!("/monitors/{}", seg(&deployment)));
    let m = &status.monitor;
    let body = html! {
        h1 { "Monitor of " (deployment) }
        dl.facts {
            dt { "Deployment" } dd { a href=(project_url(&p.name, &format!("/deployments/{}", seg(&deployment)))) { (deployment) } }
            dt { "Checks" } dd { (m.checks) ", next window " (time(&m.next_window)) }
            dt { "Labels" } dd { (status.labels.posted) " posted, " (status.labels.matched) " matched to logged requests, " (status.labels.unmatched) " unmatched, " (status.labels.pending) " waiting" }
        }
        h2 { "Drift share over time" }
        @match chart::lines("Share of drifted input columns per check", "check", &series) {
            Some(svg) => figure { (svg) (chart::legend(&names)) figcaption { "The share of the model's input columns that drifted, per check and version." } },
            None => (empty("No check has tested drift yet.")),
        }
        @if let Some(c) = &shown {
            h2 #check { "Check " (c.check) " " (badge(&c.status.to_string())) }
            p { "Window " (time(&c.window_start)) " to " (time(&c.window_end)) ", " (c.rows) " rows. "
                @if c.report { a href={(here) "/checks/" (c.check) "/report"} { "The drift report, with both distributions of each column" } } " · "
                a href=(project_url(&p.name, &super::registry::lineage_path(&ObjectRef::version(Kind::DriftReport, deployment.as_str(), c.check)))) { "its lineage" } }
            @for v in &c.versions {
                h3 { "Version " (v.version) ": " (v.rows) " rows " (badge(&v.status.to_string())) }
                @if let Some(n) = &v.note { p.hint { (n) } }
                @if let Some(d) = &v.drift {
                    p { (d.drifted_columns) " of " (d.columns) " columns drifted (share " (layout::num(d.share)) ", threshold " (layout::num(d.threshold)) ")." }
                    (table("Per-column drift", &["Column", "Kind", "Method", "Statistic", "Threshold", "Drifted", "Reference rows", "Current rows"], html! {
                        @for col in &d.by_column {
                            tr {
                                td { (col.column) }
                                td { (col.kind) }
                                td { (col.method) }
                                td.num { (col.statistic.map(layout::num).unwrap_or_default()) }
                                td.num { (layout::num(col.threshold)) }
                                td { @if col.drifted { (badge("drift")) } @else { (badge("ok")) } }
                                td.num { (col.reference_rows) }
                                td.num { (col.current_rows) }
                            }
                        }
                    }))
                }
                @if v.quality.labelled > 0 {
                    p { "Live quality on " (v.quality.labelled) " labelled rows:"
                        @if let Some(a) = v.quality.accuracy { " accuracy " (layout::num(a)) }
                        @if let Some(a) = v.quality.auc { " AUC " (layout::num(a)) }
                        @if let Some(a) = v.quality.rmse { " RMSE " (layout::num(a)) } }
                }
            }
        }
        @if let Some(c) = shown.as_ref().filter(|c| c.report) {
            details.report open {
                summary { "Both distributions of each column: the drift report of check " (c.check) }
                // Sandboxed: the report's own styles apply, nothing in it runs.
                iframe.report src={(here) "/checks/" (c.check) "/report"} title={"Drift report of check " (c.check)} sandbox="" {}
            }
        }
        h2 { "Checks" }
        @if checks.is_empty() { (empty("No checks yet.")) } @else {
            (table("Checks, newest first", &["Check", "Window end", "Rows", "Status", "Report"], html! {
                @for c in checks.iter().rev().take(50) {
                    tr {
                        td { a href={(here) "?check=" (c.check) "#check"} { (c.check) } }
                        td { (time(&c.window_end)) }
                        td.num { (c.rows) }
                        td { (badge(&c.status.to_string())) }
                        td { @if c.report { a href={(here) "/checks/" (c.check) "/report"} { "report" } } }
                    }
                }
            }))
        }
        h2 { "Alerts and what they did" }
        @if alerts.is_empty() { (empty("No alerts.")) } @else {
            @for a in &alerts {
                section #{"alert-" (a.alert)} aria-label={"Alert " (a.alert)} {
                    h3 { "Alert " (a.alert) ": " (a.rule) " " (badge(&a.state)) }
                    p { (a.condition) " (" (a.metric) " = " (layout::num(a.value)) ") on version " (a.version) " at "
                        a href={(here) "?check=" (a.check) "#check"} { "check " (a.check) } ", " (time(&a.created_at)) }
                    @if !a.actions.is_empty() {
                        (table("Actions", &["Action", "When", "Outcome", "Message", "Made"], html! {
                            @for x in &a.actions {
                                tr {
                                    td { (x.action) }
                                    td { (time(&x.at)) }
                                    td { (badge(&x.outcome)) }
                                    td { (x.message) }
                                    td { @if let Some(o) = &x.object { (super::registry::node_link(&p.name, o)) } }
                                }
                            }
                        }))
                    }
                    @if let Some(j) = &a.job { p { "Retraining job: " a href=(project_url(&p.name, &format!("/jobs/{}", seg(j)))) { (j) } } }
                }
            }
        }
    };
    let crumbs = [("Monitors", project_url(&p.name, "/monitors"))];
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Monitors),
        &deployment,
        &crumbs,
        body,
    ))
}

/// A check's HTML drift report, as the monitor wrote it. It is sent with a policy of
/// its own: its inline styles may apply, nothing may run, and only this server's pages
/// may frame it (the monitor's page, sandboxed).
async fn report(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath((_, deployment, check)): ApiPath<(String, String, String)>,
) -> Result<Response, UiError> {
    let n: i64 = check.parse().map_err(|_| {
        UiError(ApiError::bad_request(format!(
            "'{check}' is not a check number"
        )))
    })?;
    let (_, html) = state
        .monitor
        .report(&scope.project, &deployment, Some(n))
        .await?;
    let mut resp = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html,
    )
        .into_response();
    super::secure_headers(&mut resp);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'; base-uri 'none'; form-action 'none'"),
    );
    // The monitor's page shows it in a frame; no other site may.
    h.insert(
        header::X_FRAME_OPTIONS,
        header::HeaderValue::from_static("SAMEORIGIN"),
    );
    Ok(resp)
}
