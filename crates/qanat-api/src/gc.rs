//! Garbage collection: what was deleted and has outlived the retention period
//! (`retention.deleted_days`) is purged with its bytes. Per project (maintainers):
//! deleted datasets, experiments and runs, then dataset chunks nothing references,
//! then the event delivery history older than the retention period.
//! Installation-wide (global admins): deleted projects as a whole, then every project.
//! Until its purge, anything deleted can be restored. The audit log keeps every entry.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use qanat_data::wire::GcBody;
use qanat_data::{GcReport, InstallationGc};
use qanat_governance::Project;
use qanat_governance::Role::Maintainer;
use qanat_store::{now_micros, ObjectKey};
use utoipa_axum::routes;

use crate::authz::Policy;
use crate::error::ApiError;
use crate::error::ReadNote;
use crate::extract::{ApiJson, Caller, Scope};
use crate::route_table::Fragment;
use crate::AppState;

fn cutoff_micros(retention: Duration) -> i64 {
    now_micros() - i64::try_from(retention.as_micros()).unwrap_or(i64::MAX)
}

fn grace(body: &GcBody) -> Duration {
    Duration::from_secs(body.grace_seconds.unwrap_or(3600))
}

/// Deletes every object under `prefix` in every location; returns how many.
async fn delete_under(state: &AppState, prefix: &str) -> Result<u64, ApiError> {
    let prefix: ObjectKey = prefix.parse()?;
    let mut n = 0;
    for loc in state.storage.locations() {
        for o in state.storage.list(&loc.name, Some(&prefix)).await? {
            let key: ObjectKey = o.key.parse()?;
            match state.storage.delete(&loc.name, &key).await {
                Ok(()) | Err(qanat_store::Error::NotFound { .. }) => n += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(n)
}

async fn project_gc(state: &AppState, p: &Project, grace: Duration) -> Result<GcReport, ApiError> {
    let mut report = state.datasets.gc(p, grace, state.http.retention).await?;
    let purged = state
        .tracking
        .purge_deleted(p, cutoff_micros(state.http.retention) / 1000)
        .await?;
    let mut artifacts_deleted = 0;
    let root = format!("projects/{}/mlflow-artifacts", p.id);
    for e in &purged.experiments {
        artifacts_deleted += delete_under(state, &format!("{root}/{e}")).await?;
    }
    for (e, r) in &purged.runs {
        if !purged.experiments.contains(e) {
            artifacts_deleted += delete_under(state, &format!("{root}/{e}/{r}")).await?;
        }
    }
    report.experiments_purged = purged.experiments.len() as u64;
    report.runs_purged = purged.runs.len() as u64;
    report.kept_for_registry = purged.kept_for_registry;
    report.artifacts_deleted = artifacts_deleted;
    report.deliveries_purged = state
        .events
        .purge_history(&p.id, cutoff_micros(state.http.retention) / 1000)
        .await?;
    if let Some(days) = p.inference_log_days {
        let (files, bytes) = expire_inference_logs(state, p, days).await?;
        report.inference_log_files_deleted = files;
        report.inference_log_bytes_deleted = bytes;
    }
    Ok(report)
}

/// Deletes the project's inference log files of days older than `days` before today
/// (UTC), in every location; (files, bytes) deleted. A log file lives under
/// `projects/<id>/inference-log/<deployment>/<yyyy-mm-dd>/`.
async fn expire_inference_logs(
    state: &AppState,
    p: &Project,
    days: u32,
) -> Result<(u64, u64), ApiError> {
    let prefix: ObjectKey = format!("projects/{}/inference-log", p.id).parse()?;
    let oldest_kept = oldest_day_kept(now_micros(), days);
    let (mut files, mut bytes) = (0, 0);
    for loc in state.storage.locations() {
        for o in state.storage.list(&loc.name, Some(&prefix)).await? {
            if !log_day_expired(&o.key, &oldest_kept) {
                continue;
            }
            let key: ObjectKey = o.key.parse()?;
            match state.storage.delete(&loc.name, &key).await {
                Ok(()) => {
                    files += 1;
                    bytes += o.size;
                }
                Err(qanat_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok((files, bytes))
}

/// The first day (`yyyy-mm-dd`, UTC) a retention of `days` keeps at `now` (µs): today
/// and the `days - 1` days before it.
fn oldest_day_kept(now: i64, days: u32) -> String {
    let day = 86_400_000_000i64;
    let start = now.div_euclid(day) * day - i64::from(days.saturating_sub(1)) * day;
    qanat_store::format_micros(start)[..10].to_string()
}

/// Whether the log file `key` holds a day before `oldest_kept`; a key without a day
/// segment is never expired.
fn log_day_expired(key: &str, oldest_kept: &str) -> bool {
    key.split('/')
        .nth(4)
        .filter(|d| {
            d.len() == 10
                && d.bytes().enumerate().all(|(i, b)| {
                    if i == 4 || i == 7 {
                        b == b'-'
                    } else {
                        b.is_ascii_digit()
                    }
                })
        })
        .is_some_and(|d| d < oldest_kept)
}

/// Removes a deleted project and everything it held: its objects first, then each
/// domain's rows, the project itself last (an interrupted purge is finished by the
/// next gc).
async fn purge_project(state: &AppState, p: &Project) -> Result<(), ApiError> {
    delete_under(state, &format!("projects/{}", p.id)).await?;
    state.datasets.purge_project(p.id.as_str()).await?;
    state.tracking.purge_project(p.id.as_str()).await?;
    state.events.purge_project(p.id.as_str()).await?;
    state.gov.purge_project(p).await?;
    Ok(())
}

/// Purge a project's datasets, experiments and runs deleted longer ago than the
/// retention period, then delete dataset chunks no version references (maintainers).
/// Safe to run while pushes are in progress.
#[utoipa::path(post, path = "/api/v1/projects/{project}/gc", tag = "gc", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = GcBody,
    responses((status = 200, body = GcReport)))]
pub(crate) async fn gc(
    State(state): State<AppState>,
    scope: Scope,
    ApiJson(body): ApiJson<GcBody>,
) -> Result<Response, ApiError> {
    let report = project_gc(&state, &scope.project, grace(&body)).await?;
    let note = removed(&report);
    let mut resp = Json(report).into_response();
    resp.extensions_mut().insert(ReadNote(note));
    Ok(resp)
}

/// What a gc removed, for its audit entry (and the compliance report).
fn removed(r: &GcReport) -> String {
    format!(
        "removed: {} dataset(s) purged, {} dataset version(s) past retention, {} chunk(s) deleted ({} bytes), {} experiment(s) and {} run(s) purged, {} artifact(s) deleted, {} delivery record(s) purged, {} inference log file(s) past retention deleted ({} bytes)",
        r.datasets_purged,
        r.dataset_versions_expired,
        r.chunks_deleted,
        r.bytes_freed,
        r.experiments_purged,
        r.runs_purged,
        r.artifacts_deleted,
        r.deliveries_purged,
        r.inference_log_files_deleted,
        r.inference_log_bytes_deleted
    )
}

/// Purge projects deleted longer ago than the retention period with everything they
/// held, then run every project's gc (global admins).
#[utoipa::path(post, path = "/api/v1/gc", tag = "gc", security(("bearer" = [])),
    request_body = GcBody, responses((status = 200, body = InstallationGc)))]
pub(crate) async fn gc_all(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiJson(body): ApiJson<GcBody>,
) -> Result<Response, ApiError> {
    let cutoff = cutoff_micros(state.http.retention);
    let mut projects_purged = Vec::new();
    for p in state.gov.deleted_projects().await? {
        let deleted = p
            .deleted_at
            .as_deref()
            .and_then(|t| qanat_store::parse_micros(t).ok())
            .unwrap_or(i64::MAX);
        if deleted <= cutoff {
            purge_project(&state, &p).await?;
            projects_purged.push(p.name.clone());
        }
    }
    let mut projects = BTreeMap::new();
    for p in state.gov.projects_for(&caller).await? {
        let report = project_gc(&state, &p, grace(&body)).await?;
        projects.insert(p.name.clone(), report);
    }
    let mut note = format!("projects purged: {}", projects_purged.len());
    for (name, r) in &projects {
        note.push_str(&format!("; {name}: {}", removed(r)));
    }
    let mut resp = Json(InstallationGc {
        projects_purged,
        projects,
    })
    .into_response();
    resp.extensions_mut().insert(ReadNote(note));
    Ok(resp)
}

/// Garbage collection. Each run streams (it may take a while on a large project).
pub(crate) fn routes() -> Fragment {
    Fragment::default()
        .streaming(routes!(gc), Policy::in_project("project.gc", Maintainer))
        .streaming(routes!(gc_all), Policy::global_admin("gc.all"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_keeps_today_and_the_days_before_it_and_nothing_older() {
        let now = qanat_store::parse_micros("2026-11-29T10:00:00Z").expect("time");
        assert_eq!(oldest_day_kept(now, 1), "2026-11-29");
        assert_eq!(oldest_day_kept(now, 30), "2026-10-31");
        let key = |day: &str| format!("projects/p1/inference-log/web/{day}/10-abc.parquet");
        assert!(log_day_expired(&key("2026-10-30"), "2026-10-31"));
        assert!(!log_day_expired(&key("2026-10-31"), "2026-10-31"));
        assert!(!log_day_expired(&key("2026-11-29"), "2026-10-31"));
        // Anything that is not a day segment is left alone.
        assert!(!log_day_expired(
            "projects/p1/inference-log/web/x.parquet",
            "2026-10-31"
        ));
        assert!(!log_day_expired(
            "projects/p1/inference-log/web/2026-1-1/x",
            "2026-10-31"
        ));
    }
}
