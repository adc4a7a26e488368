//! Experiments, the runs table (MLflow's filter syntax, sort, pages), a run (params,
//! metric charts, tags, inputs, artifacts with previews), and runs compared.

use std::collections::BTreeSet;

use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::response::Response;
use futures::StreamExt;
use maud::{html, Markup};
use qanat_core::ObjectRef;
use qanat_governance::Project;
use qanat_tracking::ViewType;
use qanat_types::tracking::Run;
use serde::Deserialize;

use super::chart::{self, Series};
use super::layout::{
    self, badge, empty, project_url, query_value, seg, table, time_ms, Nav, Section, Session,
};
use super::{page, viewer, PageResult, UiError};
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, Scope};
use crate::mlflow::Ml;
use crate::route_table::Fragment;
use crate::AppState;

/// Runs shown per page of the runs table.
const RUNS_PER_PAGE: i64 = 50;
/// Steps drawn per metric chart: a longer history is thinned (evenly, ends kept).
const CHART_POINTS: usize = 500;
/// Metric charts drawn on a run's page.
const MAX_CHARTS: usize = 24;
/// Bytes of an artifact read for its preview.
const PREVIEW_BYTES: usize = 64 * 1024;

pub(super) fn routes(f: Fragment) -> Fragment {
    let f = page(
        f,
        "/ui/p/{project}/experiments",
        viewer("ui.experiments"),
        experiments,
    );
    let f = page(
        f,
        "/ui/p/{project}/experiments/{experiment}",
        viewer("ui.runs"),
        runs,
    );
    let f = page(f, "/ui/p/{project}/runs/{run}", viewer("ui.run"), run);
    let f = page(f, "/ui/p/{project}/compare", viewer("ui.compare"), compare);
    page(
        f,
        "/ui/p/{project}/runs/{run}/artifact",
        viewer("ui.artifact").governed_read(),
        artifact,
    )
}

#[derive(Deserialize)]
struct PageQuery {
    page: Option<String>,
}

async fn experiments(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> PageResult {
    let p = &scope.project;
    let found = state
        .tracking
        .search_experiments(
            p,
            ViewType::ActiveOnly,
            Some(100),
            q.page.as_deref(),
            None,
            &[],
        )
        .await?;
    let body = html! {
        h1 { "Experiments" }
        @if found.items.is_empty() { (empty("No experiments yet: log a run with mlflow, or train with qanat jobs submit.")) } @else {
            (table("Experiments", &["Name", "ID", "Created", "Last update"], html! {
                @for e in &found.items {
                    tr {
                        td { a href=(project_url(&p.name, &format!("/experiments/{}", seg(&e.experiment_id)))) { (e.name) } }
                        td { (e.experiment_id) }
                        td { (time_ms(e.creation_time)) }
                        td { (time_ms(e.last_update_time)) }
                    }
                }
            }))
            (pager(&project_url(&p.name, "/experiments?"), q.page.is_some(), found.next_page_token.as_deref()))
        }
    };
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Experiments),
        "Experiments",
        &[],
        body,
    ))
}

/// "First page" and "Next page" links; `base` ends with `?` or `&`.
pub(super) fn pager(base: &str, not_first: bool, next: Option<&str>) -> Markup {
    html! {
        nav.pager aria-label="Pages" {
            @if not_first { a href=(base.trim_end_matches(['?', '&'])) { "First page" } }
            @if let Some(t) = next { a href={(base) "page=" (query_value(t))} rel="next" { "Next page" } }
        }
    }
}

#[derive(Deserialize, Default)]
struct RunsQuery {
    filter: Option<String>,
    order: Option<String>,
    page: Option<String>,
}

/// A metric or param key as MLflow's search syntax writes it (backquoted unless plain).
fn quoted(key: &str) -> String {
    if key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        key.to_string()
    } else {
        format!("`{}`", key.replace('`', ""))
    }
}

/// A run's experiment's runs, MLflow's way: a filter, an order, pages.
async fn runs(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiPath((_, experiment)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<RunsQuery>,
) -> PageResult {
    let p = &scope.project;
    let exp = state.tracking.experiment(p, &experiment).await?;
    let filter = q.filter.as_deref().map(str::trim).filter(|f| !f.is_empty());
    let order = q.order.as_deref().map(str::trim).filter(|f| !f.is_empty());
    let order_by: Vec<String> = order.into_iter().map(String::from).collect();
    let (found, problem) = match state
        .tracking
        .search_runs(
            p,
            std::slice::from_ref(&exp.experiment_id),
            filter,
            &order_by,
            ViewType::ActiveOnly,
            Some(RUNS_PER_PAGE),
            q.page.as_deref(),
        )
        .await
    {
        Ok(page) => (page, None),
        Err(e) => {
            let e = ApiError::from(e);
            if e.status.is_server_error() {
                return Err(UiError(e));
            }
            (
                qanat_tracking::Page {
                    items: Vec::new(),
                    next_page_token: None,
                },
                Some(e.message),
            )
        }
    };
    // The columns: the params and metrics the shown runs have (at most 12 of each).
    let params: BTreeSet<&str> = found
        .items
        .iter()
        .flat_map(|r| r.data.params.iter().map(|x| x.key.as_str()))
        .collect();
    let metrics: BTreeSet<&str> = found
        .items
        .iter()
        .flat_map(|r| r.data.metrics.iter().map(|x| x.key.as_str()))
        .collect();
    let params: Vec<&str> = params.into_iter().take(12).collect();
    let metrics: Vec<&str> = metrics.into_iter().take(12).collect();
    let here = project_url(
        &p.name,
        &format!("/experiments/{}", seg(&exp.experiment_id)),
    );
    let with = |order: &str| {
        let mut u = format!("{here}?order={}", query_value(order));
        if let Some(f) = filter {
            u.push_str(&format!("&filter={}", query_value(f)));
        }
        u
    };
    // A header sorts by its column: descending first, then the other way.
    let sort_link = |label: &str, column: String| {
        let desc = format!("{column} DESC");
        let asc = format!("{column} ASC");
        let (next, state) = match order {
            Some(o) if o == desc => (asc, Some("descending")),
            Some(o) if o == asc => (desc, Some("ascending")),
            _ => (desc, None),
        };
        html! {
            th scope="col" aria-sort=[state] { a href=(with(&next)) { (label) @if let Some(s) = state { @if s == "descending" { " ↓" } @else { " ↑" } } } }
        }
    };
    let mut base = format!("{here}?");
    if let Some(f) = filter {
        base.push_str(&format!("filter={}&", query_value(f)));
    }
    if let Some(o) = order {
        base.push_str(&format!("order={}&", query_value(o)));
    }
    let body = html! {
        h1 { "Runs of " (exp.name) }
        form.filters method="get" action=(here) role="search" {
            label { "Filter (MLflow's search syntax)"
                input type="search" name="filter" value=[filter] size="48" placeholder="metrics.accuracy > 0.9 and params.lr = '0.01'";
            }
            label { "Order by"
                input type="text" name="order" value=[order] placeholder="metrics.accuracy DESC";
            }
            button type="submit" { "Search" }
        }
        @if let Some(problem) = &problem { p.error role="alert" { (problem) } }
        form method="get" action=(project_url(&p.name, "/compare")) {
            div.scroll role="region" aria-label="Runs" tabindex="0" {
                table #runs {
                    caption.sr { "Runs of " (exp.name) }
                    thead {
                        tr {
                            th scope="col" { span.sr { "Compare" } }
                            (sort_link("Run", "attributes.run_name".into()))
                            (sort_link("Status", "attributes.status".into()))
                            (sort_link("Started", "attributes.start_time".into()))
                            th scope="col" { "Duration" }
                            (sort_link("User", "attributes.user_id".into()))
                            @for k in &params { (sort_link(k, format!("params.{}", quoted(k)))) }
                            @for k in &metrics { (sort_link(k, format!("metrics.{}", quoted(k)))) }
                        }
                    }
                    tbody {
                        @for r in &found.items {
                            @let i = &r.info;
                            tr {
                                td { input type="checkbox" name="run" value=(i.run_id) aria-label={"Compare " (i.run_name)}; }
                                td { a href=(project_url(&p.name, &format!("/runs/{}", seg(&i.run_id)))) { (if i.run_name.is_empty() { &i.run_id } else { &i.run_name }) } }
                                td { (badge(&i.status)) }
                                td { @if let Some(t) = i.start_time { (time_ms(t)) } }
                                td.num { (duration(i.start_time, i.end_time)) }
                                td { (i.user_id) }
                                @for k in &params {
                                    td { (r.data.params.iter().find(|x| x.key == *k).map(|x| x.value.as_str()).unwrap_or("")) }
                                }
                                @for k in &metrics {
                                    td.num { (r.data.metrics.iter().find(|x| x.key == *k).map(|x| layout::num(x.value.0)).unwrap_or_default()) }
                                }
                            }
                        }
                    }
                }
            }
            @if found.items.is_empty() && problem.is_none() { (empty("No runs match.")) }
            p { button #compare-link type="submit" { "Compare the ticked runs" } }
        }
        (pager(&base, q.page.is_some(), found.next_page_token.as_deref()))
    };
    let crumbs = [("Experiments", project_url(&p.name, "/experiments"))];
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Experiments),
        &exp.name,
        &crumbs,
        body,
    ))
}

fn duration(start: Option<i64>, end: Option<i64>) -> String {
    match (start, end) {
        (Some(s), Some(e)) if e >= s => {
            let secs = (e - s) as f64 / 1000.0;
            if secs < 120.0 {
                format!("{secs:.1} s")
            } else if secs < 7200.0 {
                format!("{:.1} min", secs / 60.0)
            } else {
                format!("{:.1} h", secs / 3600.0)
            }
        }
        _ => String::new(),
    }
}

/// The curves of `key` in `runs`, thinned for a chart.
pub(super) async fn curves(
    state: &AppState,
    p: &Project,
    runs: &[String],
    key: &str,
    names: &[String],
) -> Result<Vec<Series>, UiError> {
    let points = state
        .tracking
        .metric_curves(p, runs, key, CHART_POINTS)
        .await?;
    let mut series: Vec<Series> = runs
        .iter()
        .zip(names)
        .map(|(_, n)| Series {
            name: n.clone(),
            points: Vec::new(),
        })
        .collect();
    for (run, m) in points {
        if let Some(i) = runs.iter().position(|r| *r == run) {
            series[i].points.push((m.step as f64, m.value.0));
        }
    }
    Ok(series)
}

/// One run: what it was given, what it measured, what it left.
async fn run(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiPath((_, run_id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<ArtifactQuery>,
) -> PageResult {
    let p = &scope.project;
    let r = state.tracking.run(p, &run_id).await?;
    let exp = state.tracking.experiment(p, &r.info.experiment_id).await?;
    let i = &r.info;
    let name = if i.run_name.is_empty() {
        i.run_id.clone()
    } else {
        i.run_name.clone()
    };
    let mut keys: Vec<&str> = r.data.metrics.iter().map(|m| m.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut charts = Vec::new();
    for key in keys.iter().take(MAX_CHARTS) {
        let series = curves(
            &state,
            p,
            std::slice::from_ref(&i.run_id),
            key,
            std::slice::from_ref(&name),
        )
        .await?;
        charts.push((key.to_string(), chart::lines(key, "step", &series)));
    }
    let versions = state
        .tracking
        .search_model_versions(
            p,
            Some(&format!("run_id = '{}'", i.run_id.replace('\'', ""))),
            &[],
            Some(100),
            None,
        )
        .await
        .map(|pg| pg.items)
        .unwrap_or_default();
    let job = r
        .data
        .tags
        .iter()
        .find(|t| t.key == "qanat.job_id")
        .map(|t| t.value.clone());
    let ml = Ml {
        state: state.clone(),
        p: p.clone(),
    };
    let dir = q.path.clone().unwrap_or_default();
    let listing = artifacts(&ml, &r, &dir).await;
    let preview = match q.path.as_deref().filter(|_| q.file.is_some()) {
        Some(path) => Some(preview(&ml, &r, path).await),
        None => None,
    };
    let tags: Vec<_> = r
        .data
        .tags
        .iter()
        .filter(|t| !t.key.starts_with("mlflow.log-model.history"))
        .collect();
    let body = html! {
        h1 { "Run " (name) }
        dl.facts {
            dt { "Status" } dd { (badge(&i.status)) }
            dt { "Experiment" } dd { a href=(project_url(&p.name, &format!("/experiments/{}", seg(&exp.experiment_id)))) { (exp.name) } }
            dt { "Run ID" } dd { code { (i.run_id) } }
            dt { "User" } dd { (i.user_id) }
            dt { "Started" } dd { @if let Some(t) = i.start_time { (time_ms(t)) } }
            dt { "Duration" } dd { (duration(i.start_time, i.end_time)) }
            @if let Some(j) = &job {
                dt { "Job" } dd { a href=(project_url(&p.name, &format!("/jobs/{}", seg(j)))) { (j) } }
            }
            dt { "Lineage" } dd { a href=(project_url(&p.name, &super::registry::lineage_path(&ObjectRef::run(i.run_id.as_str())))) { "where it came from and what came of it" } }
        }
        h2 { "Metrics" }
        @if charts.is_empty() { (empty("No metrics logged.")) } @else {
            div.charts {
                @for (key, svg) in &charts {
                    figure {
                        @if let Some(svg) = svg { (svg) } @else { p.empty { "No finite values." } }
                        figcaption { (key) }
                    }
                }
            }
            @if keys.len() > MAX_CHARTS { p.hint { "The first " (MAX_CHARTS) " of " (keys.len()) " metrics are drawn; all are in the table." } }
            (table("Latest metric values", &["Metric", "Value", "Step"], html! {
                @for m in &r.data.metrics { tr { td { (m.key) } td.num { (layout::num(m.value.0)) } td.num { (m.step) } } }
            }))
        }
        h2 { "Parameters" }
        @if r.data.params.is_empty() { (empty("No parameters logged.")) } @else {
            (table("Parameters", &["Parameter", "Value"], html! {
                @for x in &r.data.params { tr { td { (x.key) } td { (x.value) } } }
            }))
        }
        h2 { "Inputs" }
        @if r.inputs.dataset_inputs.is_empty() { (empty("No dataset inputs logged.")) } @else {
            (table("Dataset inputs", &["Dataset", "Digest", "Source", "Context"], html! {
                @for d in &r.inputs.dataset_inputs {
                    tr {
                        td { (d.dataset.name) }
                        td { code { (d.dataset.digest) } }
                        td { (dataset_source(&p.name, &d.dataset.source)) }
                        td { (d.tags.iter().find(|t| t.key == "mlflow.data.context").map(|t| t.value.as_str()).unwrap_or("")) }
                    }
                }
            }))
        }
        @if !versions.is_empty() {
            h2 { "Registered as" }
            ul { @for v in &versions { li { a href=(project_url(&p.name, &format!("/models/{}?version={}", seg(&v.name), query_value(&v.version)))) { (v.name) " version " (v.version) } } } }
        }
        h2 #artifacts { "Artifacts" }
        (listing)
        @if let Some(pv) = preview { (pv) }
        h2 { "Tags" }
        @if tags.is_empty() { (empty("No tags.")) } @else {
            (table("Tags", &["Tag", "Value"], html! {
                @for t in &tags { tr { td { (t.key) } td { (t.value) } } }
            }))
        }
    };
    let crumbs = [
        ("Experiments", project_url(&p.name, "/experiments")),
        (
            exp.name.as_str(),
            project_url(
                &p.name,
                &format!("/experiments/{}", seg(&exp.experiment_id)),
            ),
        ),
    ];
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Experiments),
        &name,
        &crumbs,
        body,
    ))
}

/// A dataset input's source, linked to its dataset when it is one of this project's.
fn dataset_source(project: &str, source: &str) -> Markup {
    // Qanat's own datasets are referenced as `dataset:name@version`.
    if let Some(rest) = source.strip_prefix("dataset:") {
        if let Some((name, version)) = rest.split_once('@') {
            return html! { a href=(project_url(project, &format!("/datasets/{}/versions/{}", seg(name), seg(version)))) { (source) } };
        }
    }
    html! { (source.chars().take(200).collect::<String>()) }
}

#[derive(Deserialize, Default)]
struct ArtifactQuery {
    /// A directory to list, or with `file` a file to preview, relative to the run's
    /// artifact root.
    path: Option<String>,
    file: Option<String>,
}

/// The entries of one directory of a run's artifacts, linked for browsing.
async fn artifacts(ml: &Ml, r: &Run, dir: &str) -> Markup {
    let sub = match crate::mlflow::tracking::relative_path(dir) {
        Ok(s) => s,
        Err(e) => return html! { p.error { (e.message) } },
    };
    let root = r.info.artifact_root().to_string();
    let full = if sub.is_empty() {
        root
    } else {
        format!("{root}/{sub}")
    };
    let entries = match crate::mlflow::tracking::list_dir(ml, &full).await {
        Ok(e) => e,
        Err(e) if e.status.is_server_error() => {
            tracing::error!(message = %e.message, "listing a run's artifacts failed");
            return html! { p.error { "The artifacts could not be listed." } };
        }
        Err(e) => return html! { p.error { (e.message) } },
    };
    let here = project_url(&ml.p.name, &format!("/runs/{}", seg(&r.info.run_id)));
    let join = |name: &str| {
        if sub.is_empty() {
            name.to_string()
        } else {
            format!("{sub}/{name}")
        }
    };
    html! {
        @if !sub.is_empty() {
            p { "In " code { (sub) } " · " a href={(here) "#artifacts"} { "back to the top" } }
        }
        @if entries.is_empty() { (empty("No artifacts here.")) } @else {
            (table("Artifacts", &["Name", "Size", ""], html! {
                @for (name, is_dir, size) in &entries {
                    @let path = join(name);
                    tr {
                        @if *is_dir {
                            td { a href={(here) "?path=" (query_value(&path)) "#artifacts"} { (name) "/" } }
                            td {} td {}
                        } @else {
                            td { a href={(here) "?path=" (query_value(&path)) "&file=1#preview"} { (name) } }
                            td.num { (layout::bytes(*size)) }
                            td { a href={(here) "/artifact?path=" (query_value(&path))} download { "download" } }
                        }
                    }
                }
            }))
        }
    }
}

/// What kind of preview a file gets, by its name.
#[derive(Debug, PartialEq, Eq)]
enum PreviewKind {
    Image(&'static str),
    Table(u8),
    Text,
    None,
}

fn preview_kind(path: &str) -> PreviewKind {
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    match ext {
        "png" => PreviewKind::Image("image/png"),
        "jpg" | "jpeg" => PreviewKind::Image("image/jpeg"),
        "gif" => PreviewKind::Image("image/gif"),
        "webp" => PreviewKind::Image("image/webp"),
        "csv" => PreviewKind::Table(b','),
        "tsv" => PreviewKind::Table(b'\t'),
        "txt" | "log" | "json" | "yaml" | "yml" | "md" | "py" | "toml" | "cfg" | "ini" | "html"
        | "xml" | "sh" | "r" | "sql" => PreviewKind::Text,
        _ if [
            "mlmodel",
            "conda.yaml",
            "requirements.txt",
            "python_env.yaml",
            "license",
            "readme",
        ]
        .contains(&name.as_str()) =>
        {
            PreviewKind::Text
        }
        _ => PreviewKind::None,
    }
}

/// The first bytes of one artifact file, at most `limit`.
async fn head_bytes(
    ml: &Ml,
    r: &Run,
    path: &str,
    limit: usize,
) -> Result<(Vec<u8>, u64), ApiError> {
    let sub = crate::mlflow::tracking::relative_path(path)?;
    if sub.is_empty() {
        return Err(ApiError::bad_request("name a file"));
    }
    let location = crate::mlflow::tracking::artifacts_location(ml)?;
    let key =
        crate::mlflow::tracking::artifact_key(ml, &format!("{}/{sub}", r.info.artifact_root()))
            .await?;
    let (size, mut stream) = ml.state.storage.get_sized(&location, &key).await?;
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        out.extend_from_slice(&chunk);
        if out.len() >= limit {
            out.truncate(limit);
            break;
        }
    }
    Ok((out, size))
}

/// A file's preview: text, a table, an image — or a download link.
async fn preview(ml: &Ml, r: &Run, path: &str) -> Markup {
    let kind = preview_kind(path);
    let link = format!(
        "{}/artifact?path={}",
        project_url(&ml.p.name, &format!("/runs/{}", seg(&r.info.run_id))),
        query_value(path)
    );
    let body = match kind {
        PreviewKind::Image(_) => html! { img.preview src=(link) alt={"Artifact " (path)}; },
        PreviewKind::None => {
            html! { p { "No preview for this kind of file: " a href=(link) download { "download it" } "." } }
        }
        PreviewKind::Text | PreviewKind::Table(_) => {
            match head_bytes(ml, r, path, PREVIEW_BYTES).await {
                Err(e) if e.status.is_server_error() => {
                    tracing::error!(message = %e.message, "reading an artifact failed");
                    html! { p.error { "The file could not be read." } }
                }
                Err(e) => html! { p.error { (e.message) } },
                Ok((bytes, size)) => {
                    let cut = size as usize > bytes.len();
                    let text = String::from_utf8_lossy(&bytes);
                    html! {
                        @if let PreviewKind::Table(sep) = kind { (csv_table(&text, sep)) } @else { pre { (text) } }
                        @if cut { p.hint { "The first " (layout::bytes(bytes.len() as u64)) " of " (layout::bytes(size)) ": " a href=(link) download { "download the whole file" } "." } }
                    }
                }
            }
        }
    };
    html! {
        section #preview aria-label="Preview" {
            h3 { (path) }
            (body)
        }
    }
}

/// The first rows of a delimited text file as a table.
fn csv_table(text: &str, sep: u8) -> Markup {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(sep)
        .has_headers(true)
        .flexible(true)
        .from_reader(text.as_bytes());
    let head: Vec<String> = reader
        .headers()
        .map(|h| h.iter().map(String::from).collect())
        .unwrap_or_default();
    let rows: Vec<Vec<String>> = reader
        .records()
        .take(50)
        .filter_map(Result::ok)
        .map(|r| r.iter().map(String::from).collect())
        .collect();
    let cols: Vec<&str> = head.iter().map(String::as_str).collect();
    html! {
        (table("The file's first rows", &cols, html! {
            @for r in &rows { tr { @for c in r { td { (c) } } } }
        }))
        p.hint { "The first " (rows.len()) " rows." }
    }
}

/// One artifact's bytes: raster images inline (for previews), everything else as a
/// download that the browser never runs (an HTML or SVG artifact is someone's upload).
async fn artifact(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath((_, run_id)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<ArtifactQuery>,
) -> Result<Response, UiError> {
    let p = &scope.project;
    let r = state.tracking.run(p, &run_id).await?;
    let path = q.path.unwrap_or_default();
    let ml = Ml {
        state: state.clone(),
        p: p.clone(),
    };
    let sub = crate::mlflow::tracking::relative_path(&path)?;
    if sub.is_empty() {
        return Err(UiError(ApiError::bad_request("name a file with ?path=")));
    }
    let location = crate::mlflow::tracking::artifacts_location(&ml)?;
    let key =
        crate::mlflow::tracking::artifact_key(&ml, &format!("{}/{sub}", r.info.artifact_root()))
            .await?;
    let mut resp = crate::objects::verified_download(&state, &location, &key).await?;
    let h = resp.headers_mut();
    let name: String = sub
        .rsplit('/')
        .next()
        .unwrap_or("artifact")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
        .collect();
    match preview_kind(&sub) {
        PreviewKind::Image(kind) => {
            h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
        }
        _ => {
            h.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/octet-stream"),
            );
            if let Ok(v) =
                header::HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
            {
                h.insert(header::CONTENT_DISPOSITION, v);
            }
        }
    }
    super::secure_headers(&mut resp);
    resp.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    Ok(resp)
}

/// Runs side by side: metric curves overlaid, params and latest metrics in columns.
async fn compare(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    RawQuery(raw): RawQuery,
) -> PageResult {
    let p = &scope.project;
    let mut ids: Vec<String> = form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == "run")
        .map(|(_, v)| v.into_owned())
        .collect();
    ids.dedup();
    if ids.is_empty() {
        return Err(UiError(ApiError::bad_request(
            "tick at least one run in a runs table to compare",
        )));
    }
    if ids.len() > 8 {
        return Err(UiError(ApiError::bad_request(
            "compare at most 8 runs at a time",
        )));
    }
    let mut runs = Vec::new();
    for id in &ids {
        runs.push(state.tracking.run(p, id).await?);
    }
    let names: Vec<String> = runs
        .iter()
        .map(|r| {
            if r.info.run_name.is_empty() {
                r.info.run_id.clone()
            } else {
                r.info.run_name.clone()
            }
        })
        .collect();
    let keys: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.data.metrics.iter().map(|m| m.key.as_str()))
        .collect();
    let params: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.data.params.iter().map(|m| m.key.as_str()))
        .collect();
    let mut charts = Vec::new();
    for key in keys.iter().take(MAX_CHARTS) {
        let series = curves(&state, p, &ids, key, &names).await?;
        charts.push((key.to_string(), chart::lines(key, "step", &series)));
    }
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut head = vec![""];
    head.extend(name_refs.iter().copied());
    let body = html! {
        h1 { "Compare " (runs.len()) " runs" }
        (chart::legend(&name_refs))
        div.charts {
            @for (key, svg) in &charts {
                figure { @if let Some(svg) = svg { (svg) } figcaption { (key) } }
            }
        }
        h2 { "Parameters" }
        (table("Parameters side by side", &head, html! {
            @for k in &params {
                @let values: Vec<Option<&str>> = runs.iter().map(|r| r.data.params.iter().find(|x| x.key == *k).map(|x| x.value.as_str())).collect();
                @let differs = values.windows(2).any(|w| w[0] != w[1]);
                tr {
                    th scope="row" { (k) @if differs { " " span.badge.busy { "differs" } } }
                    @for v in &values { td { (v.unwrap_or("—")) } }
                }
            }
        }))
        h2 { "Latest metrics" }
        (table("Latest metrics side by side", &head, html! {
            @for k in &keys {
                tr {
                    th scope="row" { (k) }
                    @for r in &runs { td.num { (r.data.metrics.iter().find(|x| x.key == *k).map(|x| layout::num(x.value.0)).unwrap_or_else(|| "—".into())) } }
                }
            }
        }))
        h2 { "Runs" }
        ul { @for (r, n) in runs.iter().zip(&names) { li { a href=(project_url(&p.name, &format!("/runs/{}", seg(&r.info.run_id)))) { (n) } } } }
    };
    let crumbs = [("Experiments", project_url(&p.name, "/experiments"))];
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Experiments),
        "Compare runs",
        &crumbs,
        body,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_quoted_as_mlflow_search_needs() {
        assert_eq!(quoted("acc"), "acc");
        assert_eq!(quoted("val loss"), "`val loss`");
        assert_eq!(quoted("a`b"), "`ab`");
    }

    #[test]
    fn only_raster_images_are_shown_inline() {
        assert_eq!(
            preview_kind("plots/roc.PNG"),
            PreviewKind::Image("image/png")
        );
        assert_eq!(preview_kind("x.svg"), PreviewKind::None);
        assert_eq!(preview_kind("page.html"), PreviewKind::Text);
        assert_eq!(preview_kind("model/MLmodel"), PreviewKind::Text);
        assert_eq!(preview_kind("data/part.csv"), PreviewKind::Table(b','));
    }
}
