//! The compliance report: for one project or the whole installation and a period,
//! where data lives (each storage location, its region, each project's bytes in it),
//! the residency and personal-data policy of each project, which datasets, feature
//! views and inference logs hold personal data and how it is protected, residency
//! refusals and reads of personal data in clear (from the audit log), retention and
//! what gc removed, the master keys and their rotations, and whether the audit chain
//! is whole. JSON, or HTML to hand over (`format=html`); the UI shows the same page.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use maud::{html, Markup, DOCTYPE};
use qanat_data::tabular::{confirmed_kinds, declared_pii, protected_columns};
use qanat_data::VersionRef;
use qanat_governance::compliance::{
    AuditExcerpt, AuditIntegrity, ComplianceReport, KeysReport, LocationReport, PiiColumn,
    PiiHolding, ProjectErasure, ProjectPolicy, ReportParams, RetentionReport, StoredBytes,
};
use qanat_governance::Role::Admin;
use qanat_governance::{AuditEntry, Principal, Project};
use utoipa_axum::routes;

use crate::authz::Policy;
use crate::error::ApiError;
use crate::extract::{ApiQuery, Caller, Scope};
use crate::route_table::Fragment;
use crate::AppState;

/// Audit entries listed per section (the count covers them all).
const EXCERPT: i64 = 500;
/// The default period: the last 30 days.
const DEFAULT_DAYS: i64 = 30;

/// The installation's compliance report (global admins; audited): every project, or
/// `project`, over `since`–`until` (default: the last 30 days). `format=html` gives
/// a page to hand over.
#[utoipa::path(get, path = "/api/v1/compliance/report", tag = "compliance", security(("bearer" = [])),
    params(ReportParams),
    responses((status = 200, body = ComplianceReport), (status = 400, body = crate::ErrorBody)))]
pub(crate) async fn installation(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(q): ApiQuery<ReportParams>,
) -> Result<Response, ApiError> {
    let projects = match &q.project {
        Some(name) => vec![state.gov.project(name).await?],
        None => state.gov.projects_for(&caller).await?,
    };
    let report = build(&state, &caller, q.project.clone(), &projects, &q).await?;
    respond(report, &q)
}

/// One project's compliance report (its admins; audited).
#[utoipa::path(get, path = "/api/v1/projects/{project}/compliance/report", tag = "compliance", security(("bearer" = [])),
    params(("project" = String, Path), ReportParams),
    responses((status = 200, body = ComplianceReport), (status = 400, body = crate::ErrorBody)))]
pub(crate) async fn project(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ApiQuery(q): ApiQuery<ReportParams>,
) -> Result<Response, ApiError> {
    if q.project.as_ref().is_some_and(|p| *p != scope.project.name) {
        return Err(ApiError::bad_request(
            "the project is the one in the path; leave out ?project=",
        ));
    }
    let name = scope.project.name.clone();
    let report = build(&state, &caller, Some(name), &[scope.project], &q).await?;
    respond(report, &q)
}

fn respond(report: ComplianceReport, q: &ReportParams) -> Result<Response, ApiError> {
    match q.format.as_deref() {
        None | Some("json") => Ok(Json(report).into_response()),
        Some("html") => Ok((
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (
                    header::CONTENT_SECURITY_POLICY,
                    "default-src 'none'; style-src 'unsafe-inline'",
                ),
            ],
            document(&report).into_string(),
        )
            .into_response()),
        Some(other) => Err(ApiError::bad_request(format!(
            "format '{other}' is not one of json, html"
        ))),
    }
}

/// The period `[since, until)` in microseconds, and as RFC 3339.
fn period(q: &ReportParams) -> Result<(i64, i64), ApiError> {
    let now = qanat_store::now_micros();
    let parse = |field: &str, v: &Option<String>| -> Result<Option<i64>, ApiError> {
        v.as_deref()
            .map(|s| {
                qanat_store::parse_micros(s).map_err(|e| {
                    ApiError::bad_request(format!(
                        "{field} '{s}' is not an RFC 3339 time (e.g. 2026-11-01T00:00:00Z): {e}"
                    ))
                })
            })
            .transpose()
    };
    let until = parse("until", &q.until)?.unwrap_or(now);
    let since = parse("since", &q.since)?.unwrap_or(until - DEFAULT_DAYS * 86_400_000_000);
    if since >= until {
        return Err(ApiError::bad_request(
            "since must be before until".to_string(),
        ));
    }
    Ok((since, until))
}

/// Builds the report over `projects`.
pub(crate) async fn build(
    state: &AppState,
    caller: &Principal,
    project: Option<String>,
    projects: &[Project],
    q: &ReportParams,
) -> Result<ComplianceReport, ApiError> {
    let (since, until) = period(q)?;
    let locations = locations(state, projects).await?;
    let mut policies = Vec::with_capacity(projects.len());
    let mut personal_data = Vec::new();
    for p in projects {
        policies.push(ProjectPolicy {
            name: p.name.clone(),
            allowed_regions: p.allowed_regions.clone(),
            require_pii_declared: p.require_pii_declared,
            inference_log_days: p.inference_log_days,
            dataset_version_days: p.dataset_version_days,
            pii_readers: state.gov.pii_readers(p).await?,
        });
        personal_data.extend(holdings(state, p).await?);
    }
    let scope = project.as_deref();
    // `whole`: of the installation whatever the report's scope; `success`: only what
    // was done, not what was refused.
    let excerpt_of = |whole: bool,
                      success: bool,
                      actions: &'static [&'static str],
                      details: &'static [&'static str]| async move {
        let scope = if whole { None } else { scope };
        let outcome = success.then_some(qanat_governance::AuditOutcome::Success);
        let (count, entries) = state
            .gov
            .audit_excerpt(scope, outcome, since, until, actions, details, EXCERPT)
            .await?;
        Ok::<AuditExcerpt, ApiError>(AuditExcerpt { count, entries })
    };
    let excerpt = |actions, details| excerpt_of(false, false, actions, details);
    let residency_refusals = excerpt(&[], &["data residency:"]).await?;
    let pii_access = excerpt(
        &["pii.grant", "pii.revoke", "job.input.pii_clear"],
        &["PII read in clear"],
    )
    .await?;
    let gc_runs = excerpt(&["project.gc", "gc.all"], &[]).await?;
    // The erasures made in the period, from their records (the refused attempts are
    // in the audit log).
    let mut erasures = Vec::new();
    for p in projects {
        for e in state.datasets.erasures(p, None).await? {
            let at = qanat_store::parse_micros(&e.created_at).unwrap_or(0);
            if at >= since && at < until {
                erasures.push(ProjectErasure {
                    project: p.name.clone(),
                    erasure: e,
                });
            }
        }
    }
    // The master keys wrap every project's data keys: their rotations belong in a
    // project's report too, though their entries name no project.
    let rotations = excerpt_of(true, true, &["keys.rotate"], &[]).await?;
    let keyring = state.storage.keyring();
    let verification = state.gov.verify_audit().await?;
    let checkpoint = state.gov.audit_checkpoint(keyring).await?;
    let last_shipped_checkpoint = state
        .http
        .last_checkpoint
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    Ok(ComplianceReport {
        generated_at: qanat_store::format_micros(qanat_store::now_micros()),
        generated_by: caller.name.clone(),
        project,
        since: qanat_store::format_micros(since),
        until: qanat_store::format_micros(until),
        locations,
        projects: policies,
        personal_data,
        residency_refusals,
        pii_access,
        retention: RetentionReport {
            deleted_days: state.http.retention.as_secs() / 86_400,
            gc_runs,
            erasures,
        },
        keys: KeysReport {
            active_key_id: keyring.active_key_id(),
            key_ids: keyring.key_ids(),
            source: match keyring.source() {
                qanat_store::KeyringSource::File(_) => "file".into(),
                qanat_store::KeyringSource::Env => "environment".into(),
            },
            rotations,
        },
        audit: AuditIntegrity {
            verification,
            checkpoint,
            last_shipped_checkpoint,
        },
    })
}

/// Every storage location with each reported project's objects in it.
async fn locations(
    state: &AppState,
    projects: &[Project],
) -> Result<Vec<LocationReport>, ApiError> {
    let mut out = Vec::new();
    for loc in state.storage.locations() {
        let (_, total, _) = state.storage.usage(&loc.name, None).await?;
        let mut stored = Vec::new();
        let mut counted = 0u64;
        for p in projects {
            let prefix = format!("projects/{}", p.id);
            let (objects, bytes, stored_bytes) =
                state.storage.usage(&loc.name, Some(&prefix)).await?;
            if objects == 0 {
                continue;
            }
            counted += bytes;
            stored.push(StoredBytes {
                project: p.name.clone(),
                objects,
                bytes,
                stored_bytes,
                region_allowed: p.allowed_regions.iter().any(|r| r == loc.region.as_str()),
            });
        }
        out.push(LocationReport {
            name: loc.name.clone(),
            region: loc.region.to_string(),
            kind: loc.kind.to_string(),
            projects: stored,
            other_bytes: total.saturating_sub(counted),
        });
    }
    Ok(out)
}

/// What holds personal data in project `p`: each dataset's latest version, each
/// feature view with PII features, each deployment that logs PII inputs.
async fn holdings(state: &AppState, p: &Project) -> Result<Vec<PiiHolding>, ApiError> {
    let mut out = Vec::new();
    for d in state.datasets.list(p).await? {
        let Some(latest) = d.latest_version else {
            continue;
        };
        let v = state
            .datasets
            .resolve(&d, &VersionRef::Version(latest))
            .await?;
        let declared = declared_pii(d.schema.as_ref(), &d.pii_columns);
        let mut columns = Vec::new();
        for fp in state.datasets.profiles(&d, &v).await? {
            match &fp.profile {
                Some(profile) => {
                    for name in protected_columns(profile, &declared) {
                        let kinds = profile
                            .columns
                            .iter()
                            .find(|c| c.name == name)
                            .map(|c| confirmed_kinds(&c.pii))
                            .unwrap_or_default();
                        columns.push(PiiColumn {
                            file: Some(fp.path.clone()),
                            declared: declared.contains(&name),
                            column: name,
                            kinds,
                            protection: "pseudonymized for readers without the PII permission (pulls, job inputs, profiles)".into(),
                        });
                    }
                }
                None => {
                    for name in &declared {
                        columns.push(PiiColumn {
                            file: Some(fp.path.clone()),
                            column: name.clone(),
                            kinds: Vec::new(),
                            declared: true,
                            protection: "pseudonymized by name for readers without the PII permission (the table has no profile)".into(),
                        });
                    }
                }
            }
        }
        if !columns.is_empty() {
            out.push(PiiHolding {
                project: p.name.clone(),
                kind: "dataset".into(),
                name: d.name.clone(),
                version: Some(v.version),
                columns,
            });
        }
    }
    let registry = state.features.registry(p).await?;
    let recorded = state.features.pii_found(p).await?;
    for o in &registry.objects {
        let Some(view) = o.as_view() else { continue };
        let def = registry
            .objects
            .iter()
            .filter(|o| {
                o.kind == qanat_features::ObjectKind::Source && o.name == view.source.as_str()
            })
            .find_map(|o| {
                serde_json::from_value::<qanat_features::definitions::SourceDef>(
                    o.definition.clone(),
                )
                .ok()
            });
        let mut found = match &def {
            Some(def) => source_findings(state, p, def).await,
            None => BTreeMap::new(),
        };
        let seen = recorded.get(&o.name);
        merge_found(&mut found, seen);
        let columns: Vec<PiiColumn> = view_findings(&view, &found)
            .into_iter()
            .map(|(column, kinds, declared)| {
                let protection = if declared {
                    "pseudonymized in training sets and online reads without the PII permission".into()
                } else if seen.is_some_and(|s| s.contains_key(&column)) {
                    "pseudonymized in training sets and online reads without the PII permission, as found in its values (not marked: mark the feature pii: true)".into()
                } else {
                    "NONE until its values are read (materialized, pushed or joined into a training set, then protected as found): mark the feature pii: true".into()
                };
                PiiColumn {
                    file: None,
                    column,
                    kinds,
                    declared,
                    protection,
                }
            })
            .collect();
        if !columns.is_empty() {
            out.push(PiiHolding {
                project: p.name.clone(),
                kind: "feature_view".into(),
                name: o.name.clone(),
                version: Some(o.version),
                columns,
            });
        }
    }
    for dep in state.serving.deployments().list(p).await? {
        // What its log says it found, in its newest records, besides what it declares.
        let mut found: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
        // A log that cannot be read is said to be so, not taken for one without
        // findings.
        let unreadable = match qanat_serving::log::read(
            &state.storage,
            p.id.as_str(),
            &dep.name,
            1000,
        )
        .await
        {
            Ok(recent) => {
                for r in &recent {
                    for (input, kinds) in &r.pii_found {
                        // An input declared since is listed once, as declared.
                        if dep.spec.log.pii.contains(input) {
                            continue;
                        }
                        found
                            .entry(input.clone())
                            .or_default()
                            .extend(kinds.iter().cloned());
                    }
                }
                None
            }
            Err(e) => {
                tracing::warn!(deployment = %dep.name, error = %e, "the compliance report could not read an inference log");
                Some(PiiColumn {
                        file: None,
                        column: "*".into(),
                        kinds: Vec::new(),
                        declared: false,
                        protection: format!(
                            "UNKNOWN: its newest records could not be read to look for personal data ({e})"
                        ),
                    })
            }
        };
        let mut columns: Vec<PiiColumn> = dep
            .spec
            .log
            .pii
            .iter()
            .map(|c| PiiColumn {
                file: None,
                column: c.clone(),
                kinds: Vec::new(),
                declared: true,
                protection: "written to the inference log as keyed pseudonyms".into(),
            })
            .collect();
        columns.extend(found.into_iter().map(|(column, kinds)| PiiColumn {
            file: None,
            column,
            kinds: kinds.into_iter().collect(),
            declared: false,
            protection: "its identifiers written to the inference log as keyed pseudonyms (found in requests, not declared: declare it with qanat deploy … --pii)".into(),
        }));
        columns.extend(unreadable);
        if columns.is_empty() {
            continue;
        }
        out.push(PiiHolding {
            project: p.name.clone(),
            kind: "inference_log".into(),
            name: dep.name.clone(),
            version: Some(dep.revision),
            columns,
        });
    }
    Ok(out)
}

/// Adds what scans of a view's values found (materialization, pushes, streams,
/// training sets) to what its source's profiles show.
fn merge_found(
    found: &mut BTreeMap<String, Vec<String>>,
    recorded: Option<&qanat_features::PiiFound>,
) {
    for (feature, kinds) in recorded.into_iter().flatten() {
        let known = found.entry(feature.clone()).or_default();
        for k in kinds {
            if !known.contains(k) {
                known.push(k.clone());
            }
        }
    }
}

/// The personal data found in a dataset source's columns (its pinned or latest
/// version's profiles, medium or high confidence), by column. Sources read from files,
/// SQL, pushes or streams have no profiles: their values are scanned as they pass
/// (see `qanat_features::Features::pii_found`).
pub(crate) async fn source_findings(
    state: &AppState,
    p: &Project,
    def: &qanat_features::definitions::SourceDef,
) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    if def.source_type != qanat_features::definitions::SourceType::Dataset {
        return out;
    }
    let Some(r) = def
        .dataset
        .as_deref()
        .and_then(|d| qanat_core::ObjectRef::parse_of(qanat_core::Kind::Dataset, d).ok())
    else {
        return out;
    };
    let Ok(d) = state.datasets.get(p, &r.name).await else {
        return out;
    };
    let Ok(v) = state.datasets.resolve(&d, &r.selector_or_latest()).await else {
        return out;
    };
    for fp in state.datasets.profiles(&d, &v).await.unwrap_or_default() {
        for c in fp.profile.iter().flat_map(|t| &t.columns) {
            let kinds = confirmed_kinds(&c.pii);
            if !kinds.is_empty() {
                out.insert(c.name.clone(), kinds);
            }
        }
    }
    out
}

/// The kinds of personal data a feature's name alone says it holds (people's names,
/// passport numbers, birth dates: the kinds values cannot show).
fn kinds_by_name(name: &str) -> Vec<String> {
    qanat_core::pii::kinds_by_name(name)
        .into_iter()
        .filter(|k| !k.by_content())
        .map(|k| k.as_str().to_string())
        .collect()
}

/// The features of `view` that hold personal data, found in `sources` (by column) or
/// by name: (feature, kinds, marked `pii`).
pub(crate) fn view_findings(
    view: &qanat_features::definitions::FeatureViewDef,
    found: &BTreeMap<String, Vec<String>>,
) -> Vec<(String, Vec<String>, bool)> {
    view.schema
        .iter()
        .filter_map(|f| {
            let name = f.name.to_string();
            let kinds = found
                .get(&name)
                .cloned()
                .unwrap_or_else(|| kinds_by_name(&name));
            (f.pii || !kinds.is_empty()).then_some((name, kinds, f.pii))
        })
        .collect()
}

/// The features of a repo's views that hold personal data without `pii: true`, as
/// `view.feature (kinds)`.
pub(crate) async fn unmarked_pii(
    state: &AppState,
    p: &Project,
    repo: &qanat_features::FeatureRepo,
) -> Vec<String> {
    let mut out = Vec::new();
    // What was found in the values of the views already applied (by name).
    let recorded = match state.features.pii_found(p).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(project = %p.name, error = %e, "reading the personal data found in feature views");
            BTreeMap::new()
        }
    };
    for view in &repo.feature_views {
        let mut found = match repo.sources.iter().find(|s| s.name == view.source) {
            Some(def) => source_findings(state, p, def).await,
            None => BTreeMap::new(),
        };
        merge_found(&mut found, recorded.get(view.name.as_str()));
        for (feature, kinds, marked) in view_findings(view, &found) {
            if !marked {
                out.push(format!("{}.{feature} ({})", view.name, kinds.join(", ")));
            }
        }
    }
    out
}

/// The report as a page of its own (no script, inline style).
pub(crate) fn document(r: &ComplianceReport) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Compliance report" }
                style { (STYLE) }
            }
            body { (body(r)) }
        }
    }
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2rem;color:#222}\
table{border-collapse:collapse;margin:.5rem 0 1.5rem}th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}\
th{background:#f3f3f3}.bad{color:#a00;font-weight:600}.ok{color:#060;font-weight:600}code{font-size:12px}";

fn entries(e: &AuditExcerpt) -> Markup {
    html! {
        p { (e.count) " in the period" @if (e.count as usize) > e.entries.len() { " (the newest " (e.entries.len()) " listed)" } "." }
        @if !e.entries.is_empty() {
            table {
                tr { th { "Seq" } th { "Time" } th { "Actor" } th { "Action" } th { "Resource" } th { "Outcome" } th { "Detail" } }
                @for a in &e.entries { (entry(a)) }
            }
        }
    }
}

fn entry(a: &AuditEntry) -> Markup {
    html! {
        tr { td { (a.seq) } td { (a.time) } td { (a.actor) } td { (a.action) } td { (a.resource) } td { (a.outcome) } td { (a.detail) } }
    }
}

/// The report's sections (the UI wraps them in its layout).
pub(crate) fn body(r: &ComplianceReport) -> Markup {
    html! {
        h1 { "Compliance report" }
        p {
            "Generated " (r.generated_at) " by " (r.generated_by) " for "
            @match &r.project { Some(p) => { "project " strong { (p) } } None => { "the whole installation" } }
            ", audit period " (r.since) " to " (r.until) "."
        }
        h2 { "Where data lives" }
        table {
            tr { th { "Location" } th { "Region" } th { "Kind" } th { "Project" } th { "Objects" } th { "Bytes" } th { "Stored bytes" } th { "Region allowed" } }
            @for l in &r.locations {
                @if l.projects.is_empty() {
                    tr { td { (l.name) } td { (l.region) } td { (l.kind) } td { "—" } td {} td {} td {} td {} }
                }
                @for p in &l.projects {
                    tr {
                        td { (l.name) } td { (l.region) } td { (l.kind) } td { (p.project) }
                        td { (p.objects) } td { (p.bytes) } td { (p.stored_bytes) }
                        td { @if p.region_allowed { span.ok { "yes" } } @else { span.bad { "NO" } } }
                    }
                }
            }
        }
        h2 { "Projects" }
        table {
            tr { th { "Project" } th { "Allowed regions" } th { "Personal data" } th { "Inference logs kept" } th { "Old dataset versions kept" } th { "PII permission held by" } }
            @for p in &r.projects {
                tr {
                    td { (p.name) } td { (p.allowed_regions.join(", ")) }
                    td { @if p.require_pii_declared { "must be declared" } @else { "flagged when undeclared" } }
                    td { @match p.inference_log_days { Some(d) => { (d) " days" } None => { "until deleted" } } }
                    td { @match p.dataset_version_days { Some(d) => { (d) " days (latest and tagged: always)" } None => { "until deleted" } } }
                    td { @if p.pii_readers.is_empty() { "nobody (global admins only)" } @else { @for (i, x) in p.pii_readers.iter().enumerate() { @if i > 0 { ", " } (x.user) " (by " (x.granted_by) ", " (x.granted_at) ")" } } }
                }
            }
        }
        h2 { "Personal data held" }
        @if r.personal_data.is_empty() { p { "None found or declared." } } @else {
            table {
                tr { th { "Project" } th { "Kind" } th { "Name" } th { "Version" } th { "File" } th { "Column" } th { "Found" } th { "Declared" } th { "Protection" } }
                @for h in &r.personal_data {
                    @for c in &h.columns {
                        tr {
                            td { (h.project) } td { (h.kind) } td { (h.name) } td { @if let Some(v) = h.version { (v) } }
                            td { @if let Some(f) = &c.file { (f) } } td { (c.column) } td { (c.kinds.join(", ")) }
                            td { @if c.declared { "yes" } @else { span.bad { "no" } } } td { (c.protection) }
                        }
                    }
                }
            }
        }
        h2 { "Residency refusals" }
        (entries(&r.residency_refusals))
        h2 { "Personal data read in clear, and PII permission changes" }
        (entries(&r.pii_access))
        h2 { "Retention and garbage collection" }
        p { "Deleted datasets, experiments and projects are purged after " (r.retention.deleted_days) " days." }
        (entries(&r.retention.gc_runs))
        h2 { "Erasures of data subjects" }
        p { (r.retention.erasures.len()) " in the period." }
        @if !r.retention.erasures.is_empty() {
            table {
                tr { th { "Request" } th { "Project" } th { "Dataset" } th { "Matched on" } th { "Rows removed" } th { "New version" } th { "Versions that held them" } th { "Chunks destroyed" } th { "By" } th { "Time" } th { "Finished" } }
                @for x in &r.retention.erasures {
                    @let e = &x.erasure;
                    tr {
                        td { (e.request_id) } td { (x.project) } td { (e.dataset) } td { (e.columns.join(", ")) }
                        td { (e.rows_removed) } td { @if let Some(v) = e.new_version { (v) } }
                        td { (e.files.iter().map(|f| f.version.to_string()).collect::<std::collections::BTreeSet<_>>().into_iter().collect::<Vec<_>>().join(", ")) }
                        td { (e.chunks_shredded) } td { (e.requested_by) } td { (e.created_at) }
                        td { @match &e.completed_at { Some(t) => { (t) } None => { span.bad { "NO: send the request again" } } } }
                    }
                }
            }
        }
        h2 { "Encryption keys" }
        p { "Active master key " code { (r.keys.active_key_id) } " (from " (r.keys.source) "); keys held: " (r.keys.key_ids.join(", ")) "." }
        (entries(&r.keys.rotations))
        h2 { "Audit trail" }
        p {
            @if r.audit.verification.ok { span.ok { "The chain verifies" } } @else { span.bad { "The chain does NOT verify" } }
            ": " (r.audit.verification.entries_checked) " entries checked, head " (r.audit.verification.head_seq) "."
        }
        @if !r.audit.verification.problems.is_empty() {
            ul { @for p in &r.audit.verification.problems { li { (p.seq) " " (p.kind) ": " (p.message) } } }
        }
        p { "Checkpoint of the head now: seq " (r.audit.checkpoint.seq) ", hash " code { (r.audit.checkpoint.hash) } ", signed with key " code { (r.audit.checkpoint.key_id) } "." }
        p {
            @match &r.audit.last_shipped_checkpoint {
                Some(c) => { "Last checkpoint shipped by the audit sinks: seq " (c.seq) " at " (c.time) "." }
                None => { "No checkpoint shipped by an audit sink since this server started (none configured, or none due yet)." }
            }
        }
    }
}

/// The report (compliance): the installation's (global admins) and a project's (its
/// admins); both audited.
pub(crate) fn routes() -> Fragment {
    Fragment::default()
        .route(
            routes!(installation),
            Policy::global_admin("compliance.report").governed_read(),
        )
        .route(
            routes!(project),
            Policy::in_project("compliance.report", Admin).governed_read(),
        )
}
