//! The scheduling policy: which queued jobs start now, which wait (and why), and which
//! running jobs are preempted for them. A pure function of the queue, the running jobs,
//! the executors' free resources and the projects' quotas, so the order it produces is
//! tested on its own.
//!
//! The order, as documented in docs/jobs.md:
//! 1. Higher priority first.
//! 2. Among jobs of one priority, fair share: the next job comes from the project with
//!    the lowest *dominant share* (its largest fraction of any resource — cores,
//!    memory, GPUs — in use, counting what this pass starts), then the earliest
//!    submitted.
//! 3. A job over its project's quota waits and does not hold anyone up.
//! 4. A job that does not fit reserves its executor: nothing of its priority or lower
//!    starts there before it (no starvation of large or multi-rank jobs). If running
//!    jobs of *lower* priority that are preemptible would free enough, the fewest of
//!    them are preempted — lowest priority first, and among those the most recently
//!    started (the least work lost). Jobs of equal or higher priority are never
//!    preempted, and nothing is preempted when preempting everything allowed would
//!    still not make room.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::spec::Resources;

/// A queued job, as the policy sees it.
#[derive(Debug, Clone)]
pub struct Queued {
    pub job_id: String,
    pub project: String,
    pub priority: i64,
    pub submitted_at: i64,
    /// All ranks together.
    pub total: Resources,
    pub executor: String,
}

/// A running job.
#[derive(Debug, Clone)]
pub struct Running {
    pub job_id: String,
    pub project: String,
    pub priority: i64,
    pub started_at: i64,
    pub total: Resources,
    pub executor: String,
    pub preemptible: bool,
    /// Already being stopped (cancelled, preempted, timed out): it frees its resources
    /// soon and is not chosen again.
    pub stopping: bool,
}

/// An executor's resources.
#[derive(Debug, Clone)]
pub struct Pool {
    pub executor: String,
    pub capacity: Resources,
    pub free: Resources,
}

/// A project's limits on running jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub cpu_millis: Option<u64>,
    pub memory_mb: Option<u64>,
    pub gpus: Option<u32>,
    pub running_jobs: Option<u32>,
}

impl Limits {
    /// Why `total` more (as one more job) would break these limits given `used`, if it
    /// would.
    pub fn exceeded_by(&self, used: Resources, jobs: u32, total: Resources) -> Option<String> {
        let after = used.plus(total);
        if let Some(max) = self.running_jobs {
            if jobs + 1 > max {
                return Some(format!(
                    "project quota: {jobs} of {max} running jobs in use"
                ));
            }
        }
        if let Some(max) = self.cpu_millis {
            if after.cpu_millis > max {
                return Some(format!(
                    "project quota: {} of {} cpus in use, this job needs {}",
                    used.cpu_millis as f64 / 1000.0,
                    max as f64 / 1000.0,
                    total.cpu_millis as f64 / 1000.0
                ));
            }
        }
        if let Some(max) = self.memory_mb {
            if after.memory_mb > max {
                return Some(format!(
                    "project quota: {} of {max} MiB in use, this job needs {} MiB",
                    used.memory_mb, total.memory_mb
                ));
            }
        }
        if let Some(max) = self.gpus {
            if after.gpus > max {
                return Some(format!(
                    "project quota: {} of {max} gpus in use, this job needs {}",
                    used.gpus, total.gpus
                ));
            }
        }
        None
    }

    /// Whether a job of `total` could ever run under these limits.
    pub fn admits(&self, total: Resources) -> Option<String> {
        self.exceeded_by(Resources::default(), 0, total)
    }
}

/// What the policy decided for one queued job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Start {
        job_id: String,
    },
    /// Stop these running jobs (requeued, to resume later) so this one fits.
    Preempt {
        job_id: String,
        victims: Vec<String>,
    },
    Wait {
        job_id: String,
        reason: String,
    },
}

fn dominant_share(used: Resources, capacity: Resources) -> f64 {
    let frac = |u: u64, c: u64| if c == 0 { 0.0 } else { u as f64 / c as f64 };
    frac(used.cpu_millis, capacity.cpu_millis)
        .max(frac(used.memory_mb, capacity.memory_mb))
        .max(frac(u64::from(used.gpus), u64::from(capacity.gpus)))
}

/// Decides what happens to each queued job (see the module's documentation).
pub fn decide(
    queued: &[Queued],
    running: &[Running],
    pools: &[Pool],
    quotas: &HashMap<String, Limits>,
) -> Vec<Decision> {
    let mut free: HashMap<&str, Resources> = pools
        .iter()
        .map(|p| (p.executor.as_str(), p.free))
        .collect();
    // Shares are of what is known: an executor that cannot say what it has (a
    // Kubernetes cluster whose nodes Qanat may not list) does not count.
    let capacity = pools
        .iter()
        .filter(|p| p.capacity.cpu_millis < u64::MAX / 8)
        .fold(Resources::default(), |a, p| a.plus(p.capacity));
    let mut used: HashMap<&str, Resources> = HashMap::new();
    let mut jobs: HashMap<&str, u32> = HashMap::new();
    for r in running {
        let u = used.entry(r.project.as_str()).or_default();
        *u = u.plus(r.total);
        *jobs.entry(r.project.as_str()).or_default() += 1;
    }
    // executor -> the job that reserved it.
    let mut reserved: HashMap<&str, &str> = HashMap::new();
    let mut victims_taken: HashSet<&str> = HashSet::new();
    let mut out = Vec::with_capacity(queued.len());

    let mut by_priority: BTreeMap<std::cmp::Reverse<i64>, Vec<&Queued>> = BTreeMap::new();
    for q in queued {
        by_priority
            .entry(std::cmp::Reverse(q.priority))
            .or_default()
            .push(q);
    }
    for (_, group) in by_priority {
        // Per project, oldest first.
        let mut fifo: BTreeMap<&str, std::collections::VecDeque<&Queued>> = BTreeMap::new();
        let mut group = group;
        group.sort_by(|a, b| (a.submitted_at, &a.job_id).cmp(&(b.submitted_at, &b.job_id)));
        for q in group {
            fifo.entry(q.project.as_str()).or_default().push_back(q);
        }
        loop {
            let next = fifo
                .iter()
                .filter_map(|(p, q)| q.front().map(|j| (*p, *j)))
                .min_by(|(pa, a), (pb, b)| {
                    let sa = dominant_share(used.get(pa).copied().unwrap_or_default(), capacity);
                    let sb = dominant_share(used.get(pb).copied().unwrap_or_default(), capacity);
                    sa.total_cmp(&sb)
                        .then((a.submitted_at, &a.job_id).cmp(&(b.submitted_at, &b.job_id)))
                });
            let Some((project, job)) = next else { break };
            if let Some(q) = fifo.get_mut(project) {
                q.pop_front();
            }
            let wait = |reason: String| Decision::Wait {
                job_id: job.job_id.clone(),
                reason,
            };
            let Some(room) = free.get(job.executor.as_str()).copied() else {
                out.push(wait(format!(
                    "executor '{}' is not available on this server",
                    job.executor
                )));
                continue;
            };
            let u = used.get(project).copied().unwrap_or_default();
            let n = jobs.get(project).copied().unwrap_or(0);
            if let Some(reason) = quotas
                .get(project)
                .and_then(|l| l.exceeded_by(u, n, job.total))
            {
                out.push(wait(reason));
                continue;
            }
            if let Some(first) = reserved.get(job.executor.as_str()) {
                out.push(wait(format!(
                    "waiting for resources: {first} is ahead of it on {}",
                    job.executor
                )));
                continue;
            }
            if job.total.fits(room) {
                free.insert(job.executor.as_str(), room.minus(job.total));
                used.insert(project, u.plus(job.total));
                *jobs.entry(project).or_default() += 1;
                out.push(Decision::Start {
                    job_id: job.job_id.clone(),
                });
                continue;
            }
            reserved.insert(job.executor.as_str(), job.job_id.as_str());
            match victims(job, room, running, &victims_taken) {
                Victims::Chosen(v) => {
                    for id in &v {
                        if let Some(r) = running.iter().find(|r| &r.job_id == id) {
                            victims_taken.insert(r.job_id.as_str());
                        }
                    }
                    out.push(Decision::Preempt {
                        job_id: job.job_id.clone(),
                        victims: v,
                    });
                }
                Victims::AlreadyStopping => out.push(wait(format!(
                    "waiting for stopping jobs on {} to free {}",
                    job.executor,
                    job.total.describe()
                ))),
                Victims::None => out.push(wait(format!(
                    "waiting for resources on {}: needs {}, {} free",
                    job.executor,
                    job.total.describe(),
                    room.describe()
                ))),
            }
        }
    }
    out
}

enum Victims {
    Chosen(Vec<String>),
    /// Jobs already being stopped will free enough.
    AlreadyStopping,
    None,
}

fn victims(job: &Queued, room: Resources, running: &[Running], taken: &HashSet<&str>) -> Victims {
    let on_pool = running.iter().filter(|r| r.executor == job.executor);
    let freeing = on_pool
        .clone()
        .filter(|r| r.stopping || taken.contains(r.job_id.as_str()))
        .fold(room, |a, r| a.plus(r.total));
    if job.total.fits(freeing) {
        return Victims::AlreadyStopping;
    }
    let mut candidates: Vec<&Running> = on_pool
        .filter(|r| {
            r.preemptible
                && !r.stopping
                && r.priority < job.priority
                && !taken.contains(r.job_id.as_str())
        })
        .collect();
    // Lowest priority first; among equals the most recently started.
    candidates.sort_by(|a, b| {
        a.priority
            .cmp(&b.priority)
            .then(b.started_at.cmp(&a.started_at))
            .then(a.job_id.cmp(&b.job_id))
    });
    let mut chosen = Vec::new();
    let mut avail = freeing;
    for c in candidates {
        if job.total.fits(avail) {
            break;
        }
        avail = avail.plus(c.total);
        chosen.push(c);
    }
    if !job.total.fits(avail) {
        return Victims::None;
    }
    // Drop any victim the others already make room without, most valuable first.
    let mut i = chosen.len();
    while i > 0 {
        i -= 1;
        let without = avail.minus(chosen[i].total);
        if job.total.fits(without) {
            avail = without;
            chosen.remove(i);
        }
    }
    Victims::Chosen(chosen.into_iter().map(|r| r.job_id.clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(cpus: u64) -> Resources {
        Resources {
            cpu_millis: cpus * 1000,
            memory_mb: 100,
            gpus: 0,
        }
    }

    fn q(id: &str, project: &str, priority: i64, at: i64, cpus: u64) -> Queued {
        Queued {
            job_id: id.into(),
            project: project.into(),
            priority,
            submitted_at: at,
            total: res(cpus),
            executor: "local".into(),
        }
    }

    fn r(id: &str, project: &str, priority: i64, at: i64, cpus: u64) -> Running {
        Running {
            job_id: id.into(),
            project: project.into(),
            priority,
            started_at: at,
            total: res(cpus),
            executor: "local".into(),
            preemptible: true,
            stopping: false,
        }
    }

    /// `decide` with no project quotas.
    fn unlimited(queued: &[Queued], running: &[Running], pools: Vec<Pool>) -> Vec<Decision> {
        decide(queued, running, &pools, &HashMap::new())
    }

    fn pool(cpus: u64, free: u64) -> Vec<Pool> {
        vec![Pool {
            executor: "local".into(),
            capacity: Resources {
                cpu_millis: cpus * 1000,
                memory_mb: 100_000,
                gpus: 0,
            },
            free: Resources {
                cpu_millis: free * 1000,
                memory_mb: 100_000,
                gpus: 0,
            },
        }]
    }

    fn started(d: &[Decision]) -> Vec<&str> {
        d.iter()
            .filter_map(|d| match d {
                Decision::Start { job_id } => Some(job_id.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn higher_priority_starts_first_whatever_the_submit_order() {
        let queue = [q("low", "a", 0, 1, 1), q("high", "a", 10, 2, 1)];
        let d = unlimited(&queue, &[], pool(1, 1));
        assert_eq!(started(&d), ["high"]);
        assert!(matches!(&d[1], Decision::Wait { job_id, .. } if job_id == "low"));
    }

    #[test]
    fn fair_share_alternates_projects_within_a_priority() {
        // Project a submitted three jobs before b submitted any; with room for three,
        // b still gets its turn (its share is lower once a's first job starts).
        let queue = [
            q("a1", "a", 0, 1, 1),
            q("a2", "a", 0, 2, 1),
            q("a3", "a", 0, 3, 1),
            q("b1", "b", 0, 4, 1),
        ];
        let d = unlimited(&queue, &[], pool(3, 3));
        assert_eq!(started(&d), ["a1", "b1", "a2"]);
        // A project already using the cluster goes after one that is not.
        let d = unlimited(
            &[q("a1", "a", 0, 1, 1), q("b1", "b", 0, 2, 1)],
            &[r("a0", "a", 0, 0, 2)],
            pool(3, 1),
        );
        assert_eq!(started(&d), ["b1"]);
    }

    #[test]
    fn a_job_over_its_quota_waits_without_holding_others_up() {
        let quotas = HashMap::from([(
            "a".to_string(),
            Limits {
                cpu_millis: Some(1000),
                ..Limits::default()
            },
        )]);
        let queue = [q("a1", "a", 5, 1, 1), q("b1", "b", 0, 2, 1)];
        let d = decide(&queue, &[r("a0", "a", 0, 0, 1)], &pool(4, 3), &quotas);
        assert_eq!(started(&d), ["b1"]);
        assert!(
            matches!(&d[0], Decision::Wait { reason, .. } if reason.contains("project quota: 1 of 1 cpus")),
            "{d:?}"
        );
    }

    #[test]
    fn a_big_job_reserves_its_executor_against_later_small_ones() {
        let queue = [q("big", "a", 0, 1, 4), q("small", "b", 0, 2, 1)];
        let d = unlimited(&queue, &[r("x", "c", 0, 0, 2)], pool(4, 2));
        assert!(started(&d).is_empty(), "{d:?}");
    }

    #[test]
    fn preemption_takes_the_lowest_priority_newest_job_and_no_more() {
        let running = [
            r("old-low", "a", -5, 1, 1),
            r("new-low", "a", -5, 9, 1),
            r("mid", "a", 0, 5, 1),
            r("peer", "a", 10, 3, 1),
        ];
        let d = unlimited(&[q("urgent", "b", 10, 20, 1)], &running, pool(4, 0));
        assert_eq!(
            d,
            [Decision::Preempt {
                job_id: "urgent".into(),
                victims: vec!["new-low".into()]
            }]
        );
        // Needing two cores takes both low jobs before the normal one.
        let d = unlimited(&[q("urgent", "b", 10, 20, 2)], &running, pool(4, 0));
        assert_eq!(
            d,
            [Decision::Preempt {
                job_id: "urgent".into(),
                victims: vec!["new-low".into(), "old-low".into()]
            }]
        );
    }

    #[test]
    fn equal_priority_and_unpreemptible_jobs_are_never_preempted() {
        let mut pinned = r("pinned", "a", -5, 1, 1);
        pinned.preemptible = false;
        let running = [pinned, r("peer", "a", 10, 2, 1)];
        let d = unlimited(&[q("urgent", "b", 10, 3, 1)], &running, pool(2, 0));
        assert!(matches!(&d[0], Decision::Wait { .. }), "{d:?}");
    }

    #[test]
    fn nothing_is_preempted_when_it_would_not_make_room() {
        let running = [r("low", "a", -5, 1, 1), r("peer", "a", 10, 2, 1)];
        let d = unlimited(&[q("urgent", "b", 10, 3, 2)], &running, pool(2, 0));
        assert!(matches!(&d[0], Decision::Wait { .. }), "{d:?}");
    }

    #[test]
    fn jobs_already_stopping_are_waited_for_not_preempted_again() {
        let mut low = r("low", "a", -5, 1, 1);
        low.stopping = true;
        let d = unlimited(&[q("urgent", "b", 10, 3, 1)], &[low], pool(1, 0));
        assert!(
            matches!(&d[0], Decision::Wait { reason, .. } if reason.contains("stopping")),
            "{d:?}"
        );
    }
}
