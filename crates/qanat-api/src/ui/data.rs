//! Datasets: their versions, a version's files and column profiles with histograms,
//! and the difference between two versions. Every page is a governed read, audited as
//! the API's dataset reads are.

use axum::extract::State;
use maud::{html, Markup};
use qanat_core::ObjectRef;
use qanat_types::data::tabular::ColumnProfile;
use serde::Deserialize;

use super::chart;
use super::layout::{
    self, empty, project_url, query_value, seg, table, time, Nav, Section, Session,
};
use super::{page, viewer, PageResult, UiError};
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, Scope};
use crate::route_table::Fragment;
use crate::AppState;

/// Files listed on a version's page.
const MAX_FILES: usize = 500;

pub(super) fn routes(f: Fragment) -> Fragment {
    let read = |action| viewer(action).governed_read();
    let f = page(f, "/ui/p/{project}/datasets", read("ui.datasets"), datasets);
    let f = page(
        f,
        "/ui/p/{project}/datasets/{dataset}",
        read("ui.dataset"),
        dataset,
    );
    let f = page(
        f,
        "/ui/p/{project}/datasets/{dataset}/versions/{version}",
        read("ui.dataset_version"),
        version,
    );
    page(
        f,
        "/ui/p/{project}/datasets/{dataset}/diff",
        read("ui.dataset_diff"),
        diff,
    )
}

async fn datasets(State(state): State<AppState>, s: Session, scope: Scope) -> PageResult {
    let p = &scope.project;
    let list = state.datasets.list(p).await?;
    let body = html! {
        h1 { "Datasets" }
        @if list.is_empty() { (empty("No datasets yet: qanat data push <dir> --dataset <name> makes the first version.")) } @else {
            (table("Datasets", &["Dataset", "Latest version", "Classification", "Owner", "Created"], html! {
                @for d in &list {
                    tr {
                        td { a href=(project_url(&p.name, &format!("/datasets/{}", seg(&d.name)))) { (d.name) } }
                        td.num { @if let Some(v) = d.latest_version { a href=(project_url(&p.name, &format!("/datasets/{}/versions/{v}", seg(&d.name)))) { (v) } } @else { "—" } }
                        td { (d.classification) }
                        td { (d.owner) }
                        td { (time(&d.created_at)) }
                    }
                }
            }))
        }
    };
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Datasets),
        "Datasets",
        &[],
        body,
    ))
}

async fn dataset(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiPath((_, name)): ApiPath<(String, String)>,
) -> PageResult {
    let p = &scope.project;
    let d = state.datasets.get(p, &name).await?;
    let mut versions = state.datasets.versions(&d).await?;
    versions.sort_by_key(|v| std::cmp::Reverse(v.version));
    let erasures = state.datasets.erasures(p, Some(&d.name)).await?;
    let here = project_url(&p.name, &format!("/datasets/{}", seg(&d.name)));
    let body = html! {
        h1 { "Dataset " (d.name) }
        @if !d.description.is_empty() { p { (d.description) } }
        dl.facts {
            dt { "Classification" } dd { (d.classification) }
            dt { "Owner" } dd { (d.owner) }
            dt { "Stored in" } dd { (d.location) }
            @if let Some(r) = &d.allowed_regions { dt { "Regions" } dd { (r.join(", ")) } }
            dt { "Created" } dd { (time(&d.created_at)) " by " (d.created_by) }
        }
        @if versions.len() >= 2 {
            form.filters method="get" action={(here) "/diff"} {
                label { "From" select name="from" { @for v in &versions { option value=(v.version) selected[v.version == versions[1].version] { (v.version) } } } }
                label { "To" select name="to" { @for v in &versions { option value=(v.version) { (v.version) } } } }
                button type="submit" { "Compare versions" }
            }
        }
        h2 { "Versions" }
        @if versions.is_empty() { (empty("No versions yet.")) } @else {
            (table("Versions, newest first", &["Version", "Created", "Author", "Message", "Files", "Size", "New bytes", "Tags"], html! {
                @for v in &versions {
                    tr {
                        td { a href={(here) "/versions/" (v.version)} { (v.version) } }
                        td { (time(&v.created_at)) }
                        td { (v.author) }
                        td { (v.message) }
                        td.num { (v.file_count) }
                        td.num { (layout::bytes(v.total_size.max(0) as u64)) }
                        td.num { (layout::bytes(v.new_bytes.max(0) as u64)) }
                        td { @for t in &v.tags { span.badge.plain { (t) } " " } }
                    }
                }
            }))
        }
        @if !erasures.is_empty() {
            h2 { "Erasures of data subjects" }
            (table("Erasures, newest first", &["Request", "Matched on", "Rows removed", "New version", "Versions that held them", "Chunks destroyed", "By", "Time", "Finished"], html! {
                @for e in &erasures {
                    tr {
                        td { (e.request_id) }
                        td { (e.columns.join(", ")) }
                        td.num { (e.rows_removed) }
                        td { @if let Some(v) = e.new_version { a href={(here) "/versions/" (v)} { (v) } } }
                        td { (e.files.iter().map(|f| f.version.to_string()).collect::<std::collections::BTreeSet<_>>().into_iter().collect::<Vec<_>>().join(", ")) }
                        td.num { (e.chunks_shredded) }
                        td { (e.requested_by) }
                        td { (time(&e.created_at)) }
                        td { @match &e.completed_at { Some(t) => { (time(t)) } None => { "no: send the request again" } } }
                    }
                }
            }))
        }
    };
    let crumbs = [("Datasets", project_url(&p.name, "/datasets"))];
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Datasets),
        &d.name,
        &crumbs,
        body,
    ))
}

fn version_ref(v: &str) -> Result<qanat_data::VersionRef, UiError> {
    v.parse().map_err(|e: qanat_core::RefError| {
        UiError(ApiError::bad_request(format!(
            "'{v}' is not a version: {e}"
        )))
    })
}

/// One column's profile: its numbers and its distribution.
fn column(c: &ColumnProfile, rows: u64) -> Markup {
    let q = c.quantiles.as_ref();
    let hist = q.and_then(|q| {
        let min: f64 = c.min.as_deref()?.parse().ok()?;
        let max: f64 = c.max.as_deref()?.parse().ok()?;
        let mut edges = vec![min];
        for k in ["p01", "p05", "p25", "p50", "p75", "p95", "p99"] {
            edges.push(*q.get(k)?);
        }
        edges.push(max);
        chart::density(
            &format!("Distribution of {}", c.name),
            &edges,
            &[0.01, 0.04, 0.2, 0.25, 0.25, 0.2, 0.04, 0.01],
        )
    });
    let cats = if hist.is_none() && !c.top.is_empty() {
        let labels: Vec<String> = c.top.iter().map(|t| t.value.clone()).collect();
        let counts: Vec<f64> = c.top.iter().map(|t| t.count as f64).collect();
        chart::bars(
            &format!("Most frequent values of {}", c.name),
            &labels,
            &[("count", &counts)],
        )
    } else {
        None
    };
    html! {
        section.column aria-label={"Column " (c.name)} {
            h3 { (c.name) " " span.hint { (c.data_type) } }
            dl.facts {
                dt { "Missing" } dd { (c.nulls) " of " (rows) " (" (layout::num(c.null_fraction * 100.0)) "%)" }
                dt { "Distinct (about)" } dd { (c.distinct_estimate) }
                @if !c.pii.is_empty() {
                    dt { "Personal data" }
                    dd.pii {
                        @for (i, f) in c.pii.iter().enumerate() {
                            @if i > 0 { ", " }
                            span.badge title=(format!("{} of {} values matched; confidence {}{}", f.matched, f.checked, format!("{:?}", f.confidence).to_lowercase(), if f.by_name { "; the column's name suggests it" } else { "" })) { (f.kind) }
                            @if f.matched > 0 { " " (layout::num(f.share * 100.0)) "%" } @else { " (by name)" }
                        }
                    }
                }
                @if let (Some(lo), Some(hi)) = (&c.min, &c.max) { dt { "Range" } dd { (lo) " to " (hi) } }
                @if let Some(m) = c.mean { dt { "Mean" } dd { (layout::num(m)) @if let Some(sd) = c.std { " ± " (layout::num(sd)) } } }
                @if let Some(q) = q { dt { "Median" } dd { (q.get("p50").map(|v| layout::num(*v)).unwrap_or_default()) } }
            }
            @if let Some(h) = hist { figure { (h) figcaption { "Between the profile's quantiles; each bar's area is its share of the values." } } }
            @if let Some(b) = cats { figure { (b) figcaption { "The most frequent values." } } }
        }
    }
}

async fn version(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiPath((_, name, version)): ApiPath<(String, String, String)>,
) -> PageResult {
    let p = &scope.project;
    let d = state.datasets.get(p, &name).await?;
    let v = state.datasets.resolve(&d, &version_ref(&version)?).await?;
    let clear = state.gov.reads_pii(p, &s.user).await?;
    let shown = crate::datasets::shown_version(&state, &d, v, clear).await?;
    let note = crate::datasets::pii_note(&shown.protected, clear);
    let (v, manifest, profiles) = (shown.body.version, shown.body.manifest, shown.body.profiles);
    let protected = shown.protected;
    let graph = super::registry::lineage_graph(
        &state,
        p,
        &ObjectRef::dataset(d.name.as_str(), v.version).to_string(),
    )
    .await?;
    let title = format!("{} version {}", d.name, v.version);
    let body = html! {
        h1 { (title) }
        dl.facts {
            dt { "Created" } dd { (time(&v.created_at)) " by " (v.author) }
            dt { "Message" } dd { (v.message) }
            dt { "Files" } dd { (v.file_count) " · " (layout::bytes(v.total_size.max(0) as u64)) }
            @if let Some(parent) = v.parent { dt { "Parent" } dd { a href=(project_url(&p.name, &format!("/datasets/{}/versions/{parent}", seg(&d.name)))) { (parent) } } }
            dt { "Manifest" } dd { code { (v.manifest_id) } }
        }
        @if !v.undeclared_pii.is_empty() {
            section.warn aria-label="Undeclared personal data" {
                h2 { "Undeclared personal data" }
                p { "These columns look like personal data that the dataset does not declare. Declare them (" code { "qanat data declare-pii " (d.name) " …" } ") so that every reader without the PII permission gets them pseudonymized, or remove them." }
                ul { @for u in &v.undeclared_pii { li { (u.describe()) } } }
            }
        }
        @if !protected.is_empty() {
            p.hint id="pii-protection" {
                @if clear { "You hold this project's PII permission: personal data is shown in clear, and this read is audited. " }
                @else { "Personal data is pseudonymized for you (no PII permission): its values are left out of the profiles, and pulls get keyed pseudonyms. " }
                "Columns: "
                @for (i, f) in protected.iter().enumerate() { @if i > 0 { "; " } (f.path) " [" (f.columns.join(", ")) "]" }
            }
        }
        h2 { "Lineage" }
        (graph)
        h2 { "Column profiles" }
        @if profiles.is_empty() { (empty("No table files (CSV or Parquet) to profile.")) }
        @for f in &profiles {
            h3 { (f.path) }
            @if let Some(e) = &f.error { p.error { (e) } }
            @if let Some(t) = &f.profile {
                p.hint { (t.rows) " rows, " (t.columns.len()) " columns, " (format!("{:?}", t.format)) }
                @for c in &t.columns { (column(c, t.rows)) }
            }
        }
        h2 { "Files" }
        (table("Files", &["Path", "Size", "BLAKE3"], html! {
            @for f in manifest.files.iter().take(MAX_FILES) {
                tr { td { (f.path) } td.num { (layout::bytes(f.size)) } td { code { (f.blake3.get(..16).unwrap_or(&f.blake3)) } } }
            }
        }))
        @if manifest.files.len() > MAX_FILES { p.hint { "The first " (MAX_FILES) " of " (manifest.files.len()) " files: qanat data show lists them all." } }
    };
    let crumbs = [
        ("Datasets", project_url(&p.name, "/datasets")),
        (
            d.name.as_str(),
            project_url(&p.name, &format!("/datasets/{}", seg(&d.name))),
        ),
    ];
    let mut resp = layout::page(
        &s,
        Nav::project(&p.name, Section::Datasets),
        &title,
        &crumbs,
        body,
    );
    if let Some(n) = note {
        resp.extensions_mut().insert(crate::error::ReadNote(n));
    }
    Ok(resp)
}

#[derive(Deserialize)]
struct DiffQuery {
    from: Option<String>,
    to: Option<String>,
}

async fn diff(
    State(state): State<AppState>,
    s: Session,
    scope: Scope,
    ApiPath((_, name)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<DiffQuery>,
) -> PageResult {
    let p = &scope.project;
    let d = state.datasets.get(p, &name).await?;
    let a = state
        .datasets
        .resolve(&d, &version_ref(q.from.as_deref().unwrap_or("latest"))?)
        .await?;
    let b = state
        .datasets
        .resolve(&d, &version_ref(q.to.as_deref().unwrap_or("latest"))?)
        .await?;
    let ma = state.datasets.manifest(&d, &a).await?;
    let mb = state.datasets.manifest(&d, &b).await?;
    let mut pa = state.datasets.profiles(&d, &a).await?;
    let mut pb = state.datasets.profiles(&d, &b).await?;
    if !state.gov.reads_pii(p, &s.user).await? {
        crate::datasets::redact_profiles(&d, &mut pa);
        crate::datasets::redact_profiles(&d, &mut pb);
    }
    let files = qanat_data::diff(&ma, &mb)?;
    let tables = qanat_data::table_deltas(&pa, &pb);
    let title = format!("{}: version {} → {}", d.name, a.version, b.version);
    let body = html! {
        h1 { (title) }
        p { (files.added.len()) " added, " (files.removed.len()) " removed, " (files.changed.len()) " changed, " (files.unchanged) " unchanged." }
        @if !(files.added.is_empty() && files.removed.is_empty() && files.changed.is_empty()) {
            (table("Files that differ", &["", "Path", "Size", "New bytes"], html! {
                @for f in &files.added { tr { td { span.badge.ok { "added" } } td { (f.path) } td.num { (layout::bytes(f.size)) } td {} } }
                @for f in &files.removed { tr { td { span.badge.bad { "removed" } } td { (f.path) } td.num { (layout::bytes(f.size)) } td {} } }
                @for f in &files.changed {
                    tr { td { span.badge.busy { "changed" } } td { (f.path) } td.num { (layout::bytes(f.old_size)) " → " (layout::bytes(f.new_size)) } td.num { (layout::bytes(f.new_chunk_bytes)) } }
                }
            }))
        }
        @for t in &tables {
            h2 { "Table " (t.path) }
            p { "Rows: " (t.rows_before) " → " (t.rows_after)
                @if !t.columns_added.is_empty() { "; columns added: " (t.columns_added.join(", ")) }
                @if !t.columns_removed.is_empty() { "; columns removed: " (t.columns_removed.join(", ")) }
                @if !t.type_changes.is_empty() { "; types: " (t.type_changes.join(", ")) }
            }
            (table("Columns before and after", &["Column", "Missing before", "after", "Mean before", "after", "Distinct before", "after"], html! {
                @for c in &t.columns {
                    tr {
                        td { (c.name) }
                        td.num { (layout::num(c.null_fraction_before * 100.0)) "%" }
                        td.num { (layout::num(c.null_fraction_after * 100.0)) "%" }
                        td.num { (c.mean_before.map(layout::num).unwrap_or_default()) }
                        td.num { (c.mean_after.map(layout::num).unwrap_or_default()) }
                        td.num { (c.distinct_before) }
                        td.num { (c.distinct_after) }
                    }
                }
            }))
        }
        p { a href=(project_url(&p.name, &format!("/datasets/{}/versions/{}", seg(&d.name), a.version))) { "Version " (a.version) } " · "
            a href=(project_url(&p.name, &format!("/datasets/{}/versions/{}", seg(&d.name), b.version))) { "Version " (b.version) }
            " · " a href=(project_url(&p.name, &format!("/datasets/{}/diff?from={}&to={}", seg(&d.name), query_value(&b.version.to_string()), query_value(&a.version.to_string())))) { "the other way" } }
    };
    let crumbs = [
        ("Datasets", project_url(&p.name, "/datasets")),
        (
            d.name.as_str(),
            project_url(&p.name, &format!("/datasets/{}", seg(&d.name))),
        ),
    ];
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Datasets),
        &title,
        &crumbs,
        body,
    ))
}
