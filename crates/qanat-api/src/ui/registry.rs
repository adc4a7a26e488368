//! Registered models (versions, aliases and their history, promote and rollback for
//! maintainers, where each version is deployed) and the lineage of any object, drawn.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Form;
use maud::{html, Markup};
use qanat_core::{Kind, ObjectRef};
use qanat_governance::{LineageEdge, Role};
use serde::Deserialize;

use super::layout::{
    self, badge, empty, project_url, query_value, seg, table, time_ms, Nav, Section, Session,
};
use super::{form, page, viewer, PageResult, UiError};
use crate::authz::{AuditTicket, Policy};
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, Scope};
use crate::route_table::Fragment;
use crate::AppState;

pub(super) fn routes(f: Fragment) -> Fragment {
    let release = |action| Policy::in_project(action, Role::Maintainer);
    let f = page(f, "/ui/p/{project}/models", viewer("ui.models"), models);
    let f = page(
        f,
        "/ui/p/{project}/models/{name}",
        viewer("ui.model"),
        model,
    );
    let f = form(
        f,
        "/ui/p/{project}/models/{name}/promote",
        release("model.promote"),
        promote,
    );
    let f = form(
        f,
        "/ui/p/{project}/models/{name}/rollback",
        release("model.rollback"),
        rollback,
    );
    page(f, "/ui/p/{project}/lineage", viewer("ui.lineage"), lineage)
}

#[derive(Deserialize)]
struct ModelsQuery {
    page: Option<String>,
}

async fn models(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiQuery(q): ApiQuery<ModelsQuery>,
) -> PageResult {
    let p = &scope.project;
    let found = state
        .tracking
        .search_registered_models(p, None, &[], Some(100), q.page.as_deref())
        .await?;
    let body = html! {
        h1 { "Registered models" }
        @if found.items.is_empty() { (empty("No registered models yet: register one with mlflow.register_model, or with `register:` in a training job.")) } @else {
            (table("Registered models", &["Model", "Latest version", "Aliases", "Updated"], html! {
                @for m in &found.items {
                    tr {
                        td { a href=(project_url(&p.name, &format!("/models/{}", seg(&m.name)))) { (m.name) } }
                        td.num { (m.latest_versions.iter().map(|v| v.version.as_str()).max_by_key(|v| v.parse::<i64>().unwrap_or(0)).unwrap_or("—")) }
                        td { @for a in &m.aliases { span.badge.plain { (a.alias) " → " (a.version) } " " } }
                        td { (time_ms(m.last_updated_timestamp)) }
                    }
                }
            }))
            (super::tracking::pager(&project_url(&p.name, "/models?"), q.page.is_some(), found.next_page_token.as_deref()))
        }
    };
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Models),
        "Models",
        &[],
        body,
    ))
}

#[derive(Deserialize)]
struct ModelQuery {
    version: Option<String>,
}

/// Whether the caller may move aliases in this project.
fn maintains(s: &Session, scope: &Scope) -> bool {
    s.user.is_admin || scope.role.is_some_and(|r| r >= Role::Maintainer)
}

async fn model(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiPath((_, name)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<ModelQuery>,
) -> PageResult {
    let p = &scope.project;
    let m = state.tracking.registered_model(p, &name).await?;
    let mut versions = state.tracking.versions(p, &name).await?;
    versions.sort_by_key(|v| std::cmp::Reverse(v.version.parse::<i64>().unwrap_or(0)));
    let history = state.tracking.alias_history(p, &name).await?;
    let deployments = state.serving.deployments().list(p).await?;
    let deployed: Vec<_> = deployments
        .iter()
        .filter(|d| d.spec.model == m.name)
        .collect();
    let selected = q
        .version
        .clone()
        .or_else(|| versions.first().map(|v| v.version.clone()));
    let graph = match &selected {
        Some(v) => Some(
            lineage_graph(
                &state,
                p,
                &ObjectRef::at(Kind::Model, m.name.as_str(), v).to_string(),
            )
            .await?,
        ),
        None => None,
    };
    let can_release = maintains(&s, &scope);
    let here = project_url(&p.name, &format!("/models/{}", seg(&m.name)));
    let body = html! {
        h1 { "Model " (m.name) }
        @if !m.description.is_empty() { p { (m.description) } }
        dl.facts {
            dt { "Aliases" } dd { @if m.aliases.is_empty() { "none" } @for a in &m.aliases { span.badge.plain { (a.alias) " → " (a.version) } " " } }
            dt { "Deployed by" } dd {
                @if deployed.is_empty() { "no deployment" }
                @for d in &deployed { a href=(project_url(&p.name, &format!("/deployments/{}", seg(&d.name)))) { (d.name) } " " }
            }
        }
        h2 { "Versions" }
        @if versions.is_empty() { (empty("No versions.")) } @else {
            (table("Versions, newest first", &["Version", "Created", "Aliases", "Stage", "Status", "Run", "Lineage"], html! {
                @for v in &versions {
                    tr #{"v" (v.version)} aria-current=[(selected.as_deref() == Some(v.version.as_str())).then_some("true")] {
                        td { a href={(here) "?version=" (query_value(&v.version))} { (v.version) } }
                        td { (time_ms(v.creation_timestamp)) }
                        td { @for a in &v.aliases { span.badge.ok { (a) } " " } }
                        td { (v.current_stage) }
                        td { (badge(&v.status)) }
                        td { @if let Some(r) = &v.run_id { a href=(project_url(&p.name, &format!("/runs/{}", seg(r)))) { (r.chars().take(12).collect::<String>()) } } }
                        td { a href=(project_url(&p.name, &lineage_path(&ObjectRef::at(Kind::Model, m.name.as_str(), &v.version)))) { "lineage" } }
                    }
                }
            }))
        }
        @if can_release && !versions.is_empty() {
            h2 { "Promote or roll back" }
            form.inline method="post" action={(here) "/promote"} data-confirm="Move the alias to this version? Deployments that follow it switch at once." {
                (s.csrf_field())
                label { "Alias" input type="text" name="alias" value="production" required pattern="[A-Za-z0-9_\\-]+"; }
                label { "Version"
                    select name="version" { @for v in &versions { option value=(v.version) selected[selected.as_deref() == Some(v.version.as_str())] { (v.version) } } }
                }
                button type="submit" { "Promote" }
            }
            form.inline method="post" action={(here) "/rollback"} data-confirm="Move the alias back to the version it pointed at before?" {
                (s.csrf_field())
                label { "Alias" input type="text" name="alias" value="production" required pattern="[A-Za-z0-9_\\-]+"; }
                button.secondary type="submit" { "Roll back" }
            }
        }
        h2 { "Alias history" }
        @if history.is_empty() { (empty("No alias has moved yet.")) } @else {
            (table("Alias history, newest first", &["When", "Alias", "From", "To", "By", "Why"], html! {
                @for h in history.iter().rev() {
                    tr {
                        td { (time_ms(h.changed_time)) }
                        td { (h.alias) }
                        td { (h.previous_version.as_deref().unwrap_or("—")) }
                        td { (h.version.as_deref().unwrap_or("removed")) }
                        td { (h.changed_by) }
                        td { (h.reason) }
                    }
                }
            }))
        }
        @if let (Some(v), Some(g)) = (&selected, graph) {
            h2 { "Lineage of version " (v) }
            (g)
        }
    };
    let crumbs = [("Models", project_url(&p.name, "/models"))];
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Models),
        &m.name,
        &crumbs,
        body,
    ))
}

#[derive(Deserialize)]
struct AliasForm {
    alias: String,
    #[serde(default)]
    version: String,
}

fn back_to(url: String) -> Response {
    let mut resp = (StatusCode::SEE_OTHER, [(header::LOCATION, url)]).into_response();
    super::secure_headers(&mut resp);
    resp
}

async fn promote(
    State(state): State<AppState>,
    scope: Scope,
    ticket: AuditTicket,
    ApiPath((_, name)): ApiPath<(String, String)>,
    Form(f): Form<AliasForm>,
) -> PageResult {
    let p = &scope.project;
    let alias = f.alias.trim();
    if f.version.trim().is_empty() {
        return Err(UiError(ApiError::bad_request(
            "choose a version to promote",
        )));
    }
    state
        .tracking
        .set_alias(
            p,
            &name,
            alias,
            f.version.trim(),
            "promote",
            ticket.record(),
        )
        .await?;
    ticket.committed();
    Ok(back_to(project_url(
        &p.name,
        &format!(
            "/models/{}?version={}",
            seg(&name),
            query_value(f.version.trim())
        ),
    )))
}

async fn rollback(
    State(state): State<AppState>,
    scope: Scope,
    ticket: AuditTicket,
    ApiPath((_, name)): ApiPath<(String, String)>,
    Form(f): Form<AliasForm>,
) -> PageResult {
    let p = &scope.project;
    let (_, now) = state
        .tracking
        .rollback_alias(p, &name, f.alias.trim(), ticket.record())
        .await?;
    ticket.committed();
    Ok(back_to(project_url(
        &p.name,
        &format!("/models/{}?version={}", seg(&name), query_value(&now)),
    )))
}

#[derive(Deserialize)]
struct LineageQuery {
    #[serde(rename = "ref")]
    reference: Option<String>,
}

/// Where any object came from and what came of it.
async fn lineage(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiQuery(q): ApiQuery<LineageQuery>,
) -> PageResult {
    let p = &scope.project;
    let Some(root) = q
        .reference
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
    else {
        return Err(UiError(ApiError::bad_request(
            "name an object with ?ref=, e.g. model:fraud@2 or run:<id>",
        )));
    };
    let root: qanat_core::ObjectRef = root.parse().map_err(|e: qanat_core::RefError| {
        UiError(ApiError::bad_request(format!(
            "'{root}' is not an object reference: {e}"
        )))
    })?;
    let root = root.to_string();
    let graph = lineage_graph(&state, p, &root).await?;
    let up = state.gov.lineage_upstream(&p.id, &root, 8).await?;
    let down = state.gov.lineage_downstream(&p.id, &root, 8).await?;
    let edge_rows = |edges: &[LineageEdge]| {
        html! {
            @for e in edges {
                tr { td { (node_link(&p.name, &e.child)) } td { (e.relation) } td { (node_link(&p.name, &e.parent)) } }
            }
        }
    };
    let body = html! {
        h1 { "Lineage of " (root) }
        p { (node_link(&p.name, &root)) }
        (graph)
        h2 { "Where it came from" }
        @if up.edges.is_empty() { (empty("Nothing recorded upstream.")) } @else {
            (table("Upstream edges", &["Object", "Relation", "Parent"], edge_rows(&up.edges)))
            @if up.truncated { p.hint { "Cut at 8 levels." } }
        }
        h2 { "What came of it" }
        @if down.edges.is_empty() { (empty("Nothing recorded downstream.")) } @else {
            (table("Downstream edges", &["Object", "Relation", "Parent"], edge_rows(&down.edges)))
            @if down.truncated { p.hint { "Cut at 8 levels or 200 children." } }
        }
    };
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Overview),
        &format!("Lineage of {root}"),
        &[],
        body,
    ))
}

/// The lineage page of `node` (a path under the project).
pub(super) fn lineage_path(node: &ObjectRef) -> String {
    format!("/lineage?ref={}", query_value(&node.to_string()))
}

/// The page of a lineage node (`kind:name@version`), if it has one.
pub(super) fn node_url(project: &str, node: &str) -> Option<String> {
    let (kind, rest) = node.split_once(':')?;
    let (name, version) = match rest.split_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (rest, None),
    };
    let url = match (kind, version) {
        ("dataset", Some(v)) => format!("/datasets/{}/versions/{}", seg(name), seg(v)),
        ("dataset", None) => format!("/datasets/{}", seg(name)),
        ("model", Some(v)) => format!("/models/{}?version={}", seg(name), query_value(v)),
        ("model", None) => format!("/models/{}", seg(name)),
        ("run", _) => format!("/runs/{}", seg(name)),
        ("feature_view", _) => format!("/features#fv-{}", seg(name)),
        ("drift_report", Some(v)) => format!("/monitors/{}?check={}", seg(name), query_value(v)),
        ("drift_report", None) | ("inference_log", _) => format!("/deployments/{}", seg(name)),
        _ => return None,
    };
    Some(project_url(project, &url))
}

pub(super) fn node_link(project: &str, node: &str) -> Markup {
    match node_url(project, node) {
        Some(u) => {
            html! { a href=(u) { (node) } " " a.hint href=(project_url(project, &format!("/lineage?ref={}", query_value(node)))) aria-label={"Lineage of " (node)} { "⇄" } }
        }
        None => html! { (node) },
    }
}

/// Columns of the drawing, upstream to downstream.
const ORDER: [&str; 8] = [
    "user",
    "dataset",
    "feature_view",
    "run",
    "logged_model",
    "model",
    "inference_log",
    "drift_report",
];

/// The lineage around `root` (up to 4 levels each way) drawn as columns by kind,
/// upstream on the left, each node a link to its page.
pub(super) async fn lineage_graph(
    state: &AppState,
    p: &qanat_governance::Project,
    root: &str,
) -> Result<Markup, UiError> {
    let up = state.gov.lineage_upstream(&p.id, root, 4).await?;
    let down = state.gov.lineage_downstream(&p.id, root, 4).await?;
    let edges: BTreeSet<LineageEdge> = up.edges.into_iter().chain(down.edges).collect();
    if edges.is_empty() {
        return Ok(html! { p.empty { "No lineage recorded for " (root) "." } });
    }
    let mut columns: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut nodes: BTreeSet<String> = BTreeSet::new();
    for e in &edges {
        nodes.insert(e.child.clone());
        nodes.insert(e.parent.clone());
    }
    nodes.insert(root.to_string());
    for n in &nodes {
        let kind = n.split(':').next().unwrap_or("");
        let col = ORDER.iter().position(|k| *k == kind).unwrap_or(ORDER.len());
        columns.entry(col).or_default().push(n.clone());
    }
    let (w, h, gap_x, gap_y) = (170.0, 30.0, 60.0, 14.0);
    let mut at: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for (i, (_, list)) in columns.iter().enumerate() {
        for (j, n) in list.iter().enumerate() {
            at.insert(
                n.as_str(),
                (10.0 + i as f64 * (w + gap_x), 10.0 + j as f64 * (h + gap_y)),
            );
        }
    }
    let width = 20.0 + columns.len() as f64 * (w + gap_x) - gap_x;
    let tallest = columns.values().map(Vec::len).max().unwrap_or(1) as f64;
    let height = 20.0 + tallest * (h + gap_y) - gap_y;
    // A group, not an image: an image's content is hidden from screen readers, and
    // each box is a link they must reach.
    let svg = html! {
        svg.lineage viewBox={"0 0 " (width) " " (height)} width=(width) height=(height) role="group" aria-label={"Lineage around " (root)} xmlns="http://www.w3.org/2000/svg" {
            title { "Lineage around " (root) }
            @for e in &edges {
                @if let (Some((px, py)), Some((cx, cy))) = (at.get(e.parent.as_str()), at.get(e.child.as_str())) {
                    @let (x1, y1, x2, y2) = (px + w, py + h / 2.0, *cx, cy + h / 2.0);
                    @let mid = (x1 + x2) / 2.0;
                    path d=(format!("M{x1:.0},{y1:.0} C{mid:.0},{y1:.0} {mid:.0},{y2:.0} {x2:.0},{y2:.0}")) fill="none" stroke="#8a939d" stroke-width="1.2" {
                        title { (e.parent) " —" (e.relation) "→ " (e.child) }
                    }
                }
            }
            @for (n, (x, y)) in &at {
                @let label: String = if n.chars().count() > 24 { format!("{}…", n.chars().take(23).collect::<String>()) } else { n.to_string() };
                @let is_root = *n == root;
                @let shape = html! {
                    rect x=(x) y=(y) width=(w) height=(h) rx="4" fill=(if is_root { "#e6f0fa" } else { "#f5f7f9" }) stroke=(if is_root { "#0b5cad" } else { "#8a939d" }) stroke-width=(if is_root { "2" } else { "1" }) {}
                    text x=(x + 6.0) y=(y + 19.0) font-size="11" fill="#1b1f24" { (label) }
                    title { (n) }
                };
                @match node_url(&p.name, n) {
                    Some(u) => a href=(u) { (shape) },
                    None => g { (shape) },
                }
            }
        }
    };
    Ok(
        html! { figure.scroll { (svg) figcaption { "Upstream on the left; each box opens its page." } } },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lineage_nodes_open_their_pages() {
        assert_eq!(
            node_url("demo", "dataset:tx@3").as_deref(),
            Some("/ui/p/demo/datasets/tx/versions/3")
        );
        assert_eq!(
            node_url("demo", "model:fraud@2").as_deref(),
            Some("/ui/p/demo/models/fraud?version=2")
        );
        assert_eq!(
            node_url("demo", "drift_report:web@12").as_deref(),
            Some("/ui/p/demo/monitors/web?check=12")
        );
        assert_eq!(
            node_url("demo", "run:abc").as_deref(),
            Some("/ui/p/demo/runs/abc")
        );
        assert_eq!(node_url("demo", "user:alice"), None);
        assert_eq!(node_url("demo", "nonsense"), None);
    }
}
