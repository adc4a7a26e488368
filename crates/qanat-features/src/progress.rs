//! Materialization runs as they go: per view, rows scanned, rows in the window,
//! entities found, written and already as new. Held in memory for the most recent
//! runs of each server (what a run leaves for good — each view's materialized window
//! and the values — is in the metadata and online stores; a run cut short by a
//! restart is resumed by running it again, see `Features::materialize`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use qanat_core::ProjectId;
use qanat_store::now_micros;

use crate::error::{Error, Result};
use crate::values::rfc3339;
use crate::wire::{MaterializationRun, RunState, ViewProgress, ViewState};

/// Runs kept per server (the oldest ended ones go first).
const KEPT: usize = 200;

/// Every run this server knows of, newest last.
#[derive(Clone, Default)]
pub(crate) struct Runs(Arc<Mutex<VecDeque<(ProjectId, Run)>>>);

impl std::fmt::Debug for Runs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runs").finish_non_exhaustive()
    }
}

/// One run, shared by the task doing it and the readers of its progress.
#[derive(Clone)]
pub(crate) struct Run(Arc<Mutex<MaterializationRun>>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Checks a run id chosen by the caller: 1 to 64 of `A-Z a-z 0-9 - _`.
fn check_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "run_id '{id}': use 1 to 64 letters, digits, '-' or '_'"
        )))
    }
}

impl Runs {
    /// Starts the record of a run over `views`; `id` is the caller's or a new one.
    /// Refused if a run of the project already has that id.
    pub(crate) fn start(
        &self,
        project: &ProjectId,
        id: Option<&str>,
        by: &str,
        views: &[String],
    ) -> Result<Run> {
        let id = match id {
            Some(id) => {
                check_id(id)?;
                id.to_string()
            }
            None => {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                format!("mat-{:x}-{n}", now_micros())
            }
        };
        let mut runs = lock(&self.0);
        if runs
            .iter()
            .any(|(p, r)| p == project && lock(&r.0).id == id)
        {
            return Err(Error::Conflict(format!(
                "a materialization run '{id}' already exists in this project; choose another run_id"
            )));
        }
        let run = Run(Arc::new(Mutex::new(MaterializationRun {
            id,
            state: RunState::Running,
            requested_by: by.to_string(),
            started_at: rfc3339(now_micros()),
            ended_at: None,
            error: None,
            views: views
                .iter()
                .map(|v| ViewProgress {
                    feature_view: v.clone(),
                    state: ViewState::Pending,
                    rows_scanned: 0,
                    rows_in_window: 0,
                    entities: 0,
                    written: 0,
                    stale: 0,
                    materialized_until: None,
                })
                .collect(),
        })));
        if runs.len() >= KEPT {
            // The oldest run that has ended makes room; running ones stay.
            if let Some(i) = runs
                .iter()
                .position(|(_, r)| lock(&r.0).state != RunState::Running)
            {
                runs.remove(i);
            }
        }
        runs.push_back((project.clone(), run.clone()));
        Ok(run)
    }

    /// The project's runs, newest first.
    pub(crate) fn list(&self, project: &ProjectId) -> Vec<MaterializationRun> {
        lock(&self.0)
            .iter()
            .rev()
            .filter(|(p, _)| p == project)
            .map(|(_, r)| lock(&r.0).clone())
            .collect()
    }

    /// One run of the project.
    pub(crate) fn get(&self, project: &ProjectId, id: &str) -> Result<MaterializationRun> {
        lock(&self.0)
            .iter()
            .filter(|(p, _)| p == project)
            .map(|(_, r)| lock(&r.0).clone())
            .find(|r| r.id == id)
            .ok_or_else(|| Error::not_found("materialization run", id))
    }
}

impl Run {
    /// Changes view `i`'s progress.
    pub(crate) fn view(&self, i: usize, f: impl FnOnce(&mut ViewProgress)) {
        if let Some(v) = lock(&self.0).views.get_mut(i) {
            f(v);
        }
    }

    /// Ends the run: succeeded, or failed with `error` (the view being worked on is
    /// marked too).
    pub(crate) fn end(&self, error: Option<&Error>) {
        let mut run = lock(&self.0);
        if run.state != RunState::Running {
            return;
        }
        run.ended_at = Some(rfc3339(now_micros()));
        match error {
            None => run.state = RunState::Succeeded,
            Some(e) => {
                run.state = RunState::Failed;
                run.error = Some(e.to_string());
                for v in &mut run.views {
                    if matches!(v.state, ViewState::Scanning | ViewState::Writing) {
                        v.state = ViewState::Failed;
                    }
                }
            }
        }
    }
}

/// Marks its run failed if it is dropped while the run is still going: the request
/// doing it was cancelled (its client went away) or the server is stopping.
pub(crate) struct Unfinished(pub(crate) Run);

impl Drop for Unfinished {
    fn drop(&mut self) {
        self.0.end(Some(&Error::Unavailable(
            "stopped before it finished (the request was cancelled or the server stopped); run it again without start to resume".into(),
        )));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_listed_newest_first_per_project_and_ids_are_unique() {
        let runs = Runs::default();
        let (p, q) = (ProjectId::new("p"), ProjectId::new("q"));
        let a = runs
            .start(&p, Some("a"), "ann", &["v".into()])
            .expect("start");
        runs.start(&q, Some("a"), "ann", &[])
            .expect("same id, another project");
        runs.start(&p, None, "ann", &[]).expect("a new id");
        assert!(matches!(
            runs.start(&p, Some("a"), "ann", &[]),
            Err(Error::Conflict(_))
        ));
        assert!(matches!(
            runs.start(&p, Some("no spaces"), "ann", &[]),
            Err(Error::Invalid(_))
        ));
        let listed = runs.list(&p);
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[1].id, "a");
        a.view(0, |v| {
            v.state = ViewState::Scanning;
            v.rows_scanned = 10;
        });
        a.end(Some(&Error::invalid("boom")));
        // Ended once: a later end (the drop guard's) changes nothing.
        drop(Unfinished(a.clone()));
        let got = runs.get(&p, "a").expect("run a");
        assert_eq!(got.state, RunState::Failed);
        assert_eq!(got.views[0].state, ViewState::Failed);
        assert_eq!(got.views[0].rows_scanned, 10);
        assert_eq!(got.error.as_deref(), Some("boom"));
        assert!(runs.get(&q, "zzz").is_err());
    }
}
