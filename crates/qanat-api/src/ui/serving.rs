//! Deployments: the traffic split and how each target answers (health, canary and
//! shadow state and their judgment), latency and throughput over time from the
//! inference log, a sample of that log, and the revisions.

use std::collections::BTreeMap;

use axum::extract::State;
use maud::html;
use qanat_core::{Kind, ObjectRef};
use qanat_types::serving::{LogRecord, Target};

use super::chart::{self, Series};
use super::layout::{
    self, badge, empty, project_url, query_value, seg, table, time_ms, Nav, Section, Session,
};
use super::{page, viewer, PageResult};
use crate::extract::{ApiPath, Scope};
use crate::route_table::Fragment;
use crate::AppState;

/// Log records read for the charts (the newest).
const LOG_RECORDS: usize = 5_000;
/// Log records shown as a sample.
const LOG_SAMPLE: usize = 20;

pub(super) fn routes(f: Fragment) -> Fragment {
    let f = page(
        f,
        "/ui/p/{project}/deployments",
        viewer("ui.deployments"),
        deployments,
    );
    // The page shows a sample of the inference log: a governed read, as the API's.
    page(
        f,
        "/ui/p/{project}/deployments/{name}",
        viewer("ui.deployment").governed_read(),
        deployment,
    )
}

fn target(t: &Target) -> String {
    let what = match (&t.version, &t.alias) {
        (Some(v), _) => format!("version {v}"),
        (None, Some(a)) => format!("@{a}"),
        (None, None) => "latest".into(),
    };
    if t.shadow {
        format!("{what} (shadow)")
    } else {
        format!("{what}: {}%", t.weight)
    }
}

async fn deployments(State(state): State<AppState>, s: Session, scope: Scope) -> PageResult {
    let p = &scope.project;
    let list = state.serving.deployments().list(p).await?;
    let body = html! {
        h1 { "Deployments" }
        @if list.is_empty() { (empty("No deployments: qanat deploy create <name> --model <model> serves one.")) } @else {
            (table("Deployments", &["Deployment", "Model", "Traffic", "Routing", "Revision", "Updated"], html! {
                @for d in &list {
                    tr {
                        td { a href=(project_url(&p.name, &format!("/deployments/{}", seg(&d.name)))) { (d.name) } }
                        td { a href=(project_url(&p.name, &format!("/models/{}", seg(&d.spec.model)))) { (d.spec.model) } }
                        td { (d.spec.targets.iter().map(target).collect::<Vec<_>>().join(", ")) }
                        td { (d.spec.routing) }
                        td.num { (d.revision) }
                        td { (time_ms(d.updated_at / 1000)) " by " (d.updated_by) }
                    }
                }
            }))
        }
    };
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Deployments),
        "Deployments",
        &[],
        body,
    ))
}

/// Requests a second and latency percentiles per minute, from the log's records.
fn over_time(records: &[LogRecord]) -> (Vec<Series>, Vec<Series>) {
    let mut minutes: BTreeMap<i64, Vec<u64>> = BTreeMap::new();
    for r in records {
        minutes
            .entry(r.time.div_euclid(60_000_000))
            .or_default()
            .push(r.latency_us);
    }
    let Some(first) = minutes.keys().next().copied() else {
        return (Vec::new(), Vec::new());
    };
    let mut rate = Series {
        name: "requests/s (logged)".into(),
        points: Vec::new(),
    };
    let mut p50 = Series {
        name: "p50".into(),
        points: Vec::new(),
    };
    let mut p99 = Series {
        name: "p99".into(),
        points: Vec::new(),
    };
    for (m, mut lat) in minutes {
        let x = (m - first) as f64;
        lat.sort_unstable();
        let q = |f: f64| lat[((lat.len() - 1) as f64 * f).round() as usize] as f64 / 1000.0;
        rate.points.push((x, lat.len() as f64 / 60.0));
        p50.points.push((x, q(0.5)));
        p99.points.push((x, q(0.99)));
    }
    (vec![rate], vec![p50, p99])
}

async fn deployment(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiPath((_, name)): ApiPath<(String, String)>,
) -> PageResult {
    let p = &scope.project;
    let status = state.serving.status(p, &name).await?;
    let d = &status.deployment;
    let revisions = state.serving.deployments().revisions(p, &name).await?;
    let mut records = state
        .serving
        .log_records(p, &name, LOG_RECORDS)
        .await
        .unwrap_or_default();
    records.sort_by_key(|r| r.time);
    let (rate, latency) = over_time(&records);
    let monitor = state.monitor.status(p, &name).await.ok();
    let canary: Vec<_> = monitor
        .as_ref()
        .map(|m| m.alerts.iter().filter(|a| a.candidate.is_some()).collect())
        .unwrap_or_default();
    let split: Vec<String> = status
        .targets
        .iter()
        .map(|t| format!("{} {}", t.role, t.version.as_deref().unwrap_or("?")))
        .collect();
    let weights: Vec<f64> = status.targets.iter().map(|t| f64::from(t.weight)).collect();
    let body = html! {
        h1 { "Deployment " (d.name) }
        dl.facts {
            dt { "Model" } dd { a href=(project_url(&p.name, &format!("/models/{}", seg(&d.spec.model)))) { (d.spec.model) } }
            dt { "Routing" } dd { (d.spec.routing) }
            dt { "Revision" } dd { (d.revision) ", " (time_ms(d.updated_at / 1000)) " by " (d.updated_by) }
            dt { "Answers at" } dd { code { "/oip/" (p.name) "/v2/models/" (d.name) "/infer" } }
            dt { "Monitor" } dd { @if monitor.is_some() { a href=(project_url(&p.name, &format!("/monitors/{}", seg(&d.name)))) { "drift checks and alerts" } } @else { "none" } }
            dt { "Lineage" } dd { a href=(project_url(&p.name, &super::registry::lineage_path(&ObjectRef::unversioned(Kind::InferenceLog, d.name.as_str())))) { "what its log fed" } }
        }
        h2 { "Traffic" }
        @if let Some(svg) = chart::bars("Traffic split by target (percent)", &split, &[("weight", &weights)]) { figure { (svg) figcaption { "Each target's share of requests; shadows get a copy of each request." } } }
        (table("Targets", &["Role", "Version", "Weight", "Health", "Runtime", "Requests", "Failures", "Shadow agreement"], html! {
            @for t in &status.targets {
                tr {
                    td { (badge(&t.role)) }
                    td { @if let Some(v) = &t.version { a href=(project_url(&p.name, &format!("/models/{}?version={}", seg(&d.spec.model), query_value(v)))) { (v) } } }
                    td.num { (t.weight) "%" }
                    td { @if t.healthy { (badge("healthy")) } @else { (badge("unservable")) " " (t.reason.as_deref().unwrap_or("")) } }
                    td { (t.runtime.as_deref().unwrap_or("")) }
                    td.num { (t.requests) }
                    td.num { (t.failures) }
                    td { @if let Some(sh) = &t.shadow {
                        @if sh.rows > 0 { (layout::num(sh.agreed as f64 / sh.rows as f64 * 100.0)) "% of " (sh.rows) " rows agree (mean |diff| " (layout::num(sh.mean_abs_diff)) ")" } @else { "no comparisons yet" }
                    } }
                }
            }
        }))
        @if !canary.is_empty() {
            h2 { "Canary" }
            (table("Canary judgments", &["Alert", "Candidate", "State", "Checks passed", "Started at"], html! {
                @for a in &canary {
                    tr {
                        td { a href=(project_url(&p.name, &format!("/monitors/{}#alert-{}", seg(&d.name), a.alert))) { (a.alert) } }
                        td { (a.candidate.as_deref().unwrap_or("")) }
                        td { (badge(&a.state)) }
                        td.num { (a.canary_passed) }
                        td { @if let Some(n) = a.canary_since { "check " (n) } }
                    }
                }
            }))
        }
        h2 { "Over time" }
        @if records.is_empty() { (empty("No inference log yet (or logging is off for this deployment).")) } @else {
            div.charts {
                @if let Some(svg) = chart::lines("Logged requests a second", "minute", &rate) { figure { (svg) figcaption { "Requests a second, per minute, of the logged sample (log.sample " (layout::num(d.spec.log.sample)) ")." } } }
                @if let Some(svg) = chart::lines("Latency (ms)", "minute", &latency) { figure { (svg) (chart::legend(&["p50", "p99"])) figcaption { "Latency in milliseconds, per minute." } } }
            }
            h2 { "Inference log sample" }
            p.hint { "The newest " (LOG_SAMPLE.min(records.len())) " records; personal data is pseudonymized as in the log." }
            (table("Inference log, newest first", &["Time", "Version", "Role", "Rows", "Latency", "Caller", "Inputs", "Outputs"], html! {
                @for r in records.iter().rev().take(LOG_SAMPLE) {
                    tr {
                        td { (time_ms(r.time / 1000)) }
                        td { (r.version) }
                        td { (r.role) }
                        td.num { (r.rows) }
                        td.num { (layout::num(r.latency_us as f64 / 1000.0)) " ms" }
                        td { (r.actor) }
                        td { code { (r.inputs.chars().take(160).collect::<String>()) } }
                        td { code { (r.outputs.chars().take(160).collect::<String>()) } }
                    }
                }
            }))
        }
        h2 { "Revisions" }
        (table("Revisions, newest first", &["Revision", "Action", "Traffic", "When", "By", "Note"], html! {
            @for r in &revisions {
                tr {
                    td.num { (r.revision) }
                    td { (r.action) }
                    td { (r.spec.targets.iter().map(target).collect::<Vec<_>>().join(", ")) }
                    td { (time_ms(r.created_at / 1000)) }
                    td { (r.created_by) }
                    td { (r.note) }
                }
            }
        }))
    };
    let crumbs = [("Deployments", project_url(&p.name, "/deployments"))];
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Deployments),
        &d.name,
        &crumbs,
        body,
    ))
}
