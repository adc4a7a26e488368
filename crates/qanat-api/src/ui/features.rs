//! The feature store: entities, sources, feature views and services with their
//! versions and definitions, each view's freshness, materialization runs, streams.

use axum::extract::State;
use maud::{html, Markup};
use qanat_core::ObjectRef;
use qanat_types::features::ObjectKind;

use super::layout::{self, badge, empty, project_url, table, time, Nav, Section, Session};
use super::{page, viewer, PageResult};
use crate::extract::Scope;
use crate::route_table::Fragment;
use crate::AppState;

pub(super) fn routes(f: Fragment) -> Fragment {
    page(
        f,
        "/ui/p/{project}/features",
        viewer("ui.features"),
        features,
    )
}

fn definition(v: &serde_json::Value) -> Markup {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    html! { details { summary { "Definition" } pre { (text) } } }
}

/// The features of view `o` found to hold personal data that it does not mark.
fn unmarked_found<'a>(
    o: &qanat_types::features::wire::RegisteredObject,
    found: Option<&'a qanat_features::PiiFound>,
) -> Vec<(&'a String, &'a Vec<String>)> {
    let Some(view) = o.as_view() else {
        return Vec::new();
    };
    found
        .into_iter()
        .flatten()
        .filter(|(f, _)| {
            !view
                .schema
                .iter()
                .any(|d| d.name.as_str() == f.as_str() && d.pii)
        })
        .collect()
}

async fn features(State(state): State<AppState>, s: Session, scope: Scope) -> PageResult {
    let p = &scope.project;
    let registry = state.features.registry(p).await?;
    let freshness = state.features.freshness(p).await?;
    let runs = state.features.materializations(p);
    let streams = state.features.streams(p);
    let found = state.features.pii_found(p).await?;
    let of = |k: ObjectKind| {
        registry
            .objects
            .iter()
            .filter(move |o| o.kind == k && o.deleted_at.is_none())
    };
    // Each view changed since it was first applied shows its earlier versions too.
    let mut histories = std::collections::BTreeMap::new();
    for o in of(ObjectKind::FeatureView).filter(|o| o.version > 1) {
        let h = state
            .features
            .history(p, ObjectKind::FeatureView, &o.name)
            .await?;
        histories.insert(o.name.clone(), h.versions);
    }
    let running = runs.iter().any(|r| r.ended_at.is_none());
    let body = html! {
        h1 { "Features" }
        p.hint { "Registry revision " (registry.revision) ". Definitions change with qanat features apply." }
        @if running { p.hint data-refresh="5" { "A materialization is running: this page reloads every 5 s." } }
        h2 { "Feature views" }
        @if of(ObjectKind::FeatureView).next().is_none() { (empty("No feature views.")) }
        @for o in of(ObjectKind::FeatureView) {
            @let fresh = freshness.iter().find(|f| f.feature_view == o.name);
            section #{"fv-" (o.name)} aria-label={"Feature view " (o.name)} {
                h3 { (o.name) " " span.hint { "version " (o.version) } }
                dl.facts {
                    dt { "Depends on" } dd { (o.depends_on.iter().map(|d| format!("{} {}@{}", d.kind, d.name, d.version)).collect::<Vec<_>>().join(", ")) }
                    dt { "Updated" } dd { (time(&o.updated_at)) " by " (o.created_by) }
                    @if let Some(f) = fresh {
                        dt { "Materialized until" } dd { (f.materialized_until.as_deref().map(time).unwrap_or_else(|| html! { "never" })) }
                        dt { "Lag" } dd { (f.lag_seconds.map(|l| format!("{} s", layout::num(l))).unwrap_or_else(|| "—".into())) }
                        dt { "Rows written" } dd { (f.rows_written) }
                    }
                    @let unmarked = unmarked_found(o, found.get(&o.name));
                    @if !unmarked.is_empty() {
                        dt { "Personal data found" }
                        dd.warn {
                            @for (feature, kinds) in &unmarked { code { (feature) } " (" (kinds.join(", ")) ") " }
                            span.hint { "in its values, not marked: protected as found; mark these features pii: true" }
                        }
                    }
                    dt { "Lineage" } dd { a href=(project_url(&p.name, &super::registry::lineage_path(&ObjectRef::feature_view(o.name.as_str(), o.version)))) { "lineage" } }
                }
                (definition(&o.definition))
                @if let Some(versions) = histories.get(&o.name) {
                    details {
                        summary { "All " (versions.len()) " versions" }
                        (table(&format!("Versions of {}", o.name), &["Version", "Made", "By", "Features", "Definition", "Lineage"], html! {
                            @for v in versions {
                                tr {
                                    td.num { (v.version) }
                                    td { (time(&v.created_at)) }
                                    td { (v.created_by) }
                                    td { (v.as_view().map(|d| d.schema.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ")).unwrap_or_default()) }
                                    td { (definition(&v.definition)) }
                                    td { a href=(project_url(&p.name, &super::registry::lineage_path(&ObjectRef::feature_view(v.name.as_str(), v.version)))) { "lineage of " (v.name) "@" (v.version) } }
                                }
                            }
                        }))
                    }
                }
            }
        }
        h2 { "Feature services" }
        @if of(ObjectKind::FeatureService).next().is_none() { (empty("No feature services.")) } @else {
            (table("Feature services", &["Service", "Version", "Updated", "Definition"], html! {
                @for o in of(ObjectKind::FeatureService) {
                    tr { td { (o.name) } td.num { (o.version) } td { (time(&o.updated_at)) } td { (definition(&o.definition)) } }
                }
            }))
        }
        h2 { "Entities and sources" }
        (table("Entities and sources", &["Kind", "Name", "Version", "Definition"], html! {
            @for o in of(ObjectKind::Entity).chain(of(ObjectKind::Source)) {
                tr { td { (o.kind) } td { (o.name) } td.num { (o.version) } td { (definition(&o.definition)) } }
            }
        }))
        h2 { "Materialization runs" }
        @if runs.is_empty() { (empty("No materialization since the server started.")) } @else {
            (table("Materialization runs, newest first", &["Run", "State", "Started", "Ended", "By", "Views"], html! {
                @for r in runs.iter().rev() {
                    tr {
                        td { code { (r.id) } }
                        td { (badge(&format!("{:?}", r.state).to_lowercase())) @if let Some(e) = &r.error { " " span.error { (e) } } }
                        td { (time(&r.started_at)) }
                        td { @if let Some(e) = &r.ended_at { (time(e)) } }
                        td { (r.requested_by) }
                        td { @for v in &r.views { (v.feature_view) ": " (v.written) " written (" (format!("{:?}", v.state).to_lowercase()) ") " } }
                    }
                }
            }))
        }
        @if !streams.is_empty() {
            h2 { "Streams" }
            (table("Streaming ingestion", &["Source", "Subject", "Connected", "Ingested", "Rejected", "Pending", "Last problem"], html! {
                @for st in &streams {
                    tr {
                        td { (st.source) }
                        td { code { (st.subject) } }
                        td { @if st.connected { (badge("ok")) } @else { (badge("error")) } }
                        td.num { (st.ingested) }
                        td.num { (st.rejected) }
                        td.num { (st.pending) }
                        td { (st.last_error.as_deref().or(st.last_rejection.as_deref()).unwrap_or("")) }
                    }
                }
            }))
        }
    };
    Ok(layout::page(
        &s,
        Nav::project(&p.name, Section::Features),
        "Features",
        &[],
        body,
    ))
}
