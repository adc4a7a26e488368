//! The scheduler's durability, step by step: a failure injected at each durable
//! step of an attempt (see [`crate::faults`]), then a restart — a new `Jobs` on the
//! same store and work directory, whose recovery looks at what the first left —
//! and the state checked: no job run twice, none lost, no token left alive, no run
//! left `RUNNING`. Then random sequences of submits, cancels, preemptions and
//! crashes, checked the same way.

use std::path::{Path, PathBuf};
use std::time::Duration;

use qanat_governance::Project;
use qanat_store::testing::TestDb;
use qanat_store::ObjectStorage;
use serde_json::json;
use sqlx::Row;

use crate::{Jobs, Kinds, Settings};

/// One store, storage and work directory that servers come and go on.
struct Site {
    db: TestDb,
    storage: ObjectStorage,
    _storage_dir: tempfile::TempDir,
    work: tempfile::TempDir,
    project: Project,
}

impl Site {
    async fn new() -> Site {
        let db = TestDb::sqlite(&[
            &qanat_governance::MIGRATIONS,
            &qanat_data::MIGRATIONS,
            &qanat_tracking::MIGRATIONS,
            &crate::MIGRATIONS,
        ])
        .await;
        let (storage, storage_dir) = qanat_store::testing::local_storage(&db).await;
        let gov = qanat_governance::Governance::new(db.store.clone());
        let [project] = qanat_governance::testing::projects(&gov, ["p"]).await;
        Site {
            db,
            storage,
            _storage_dir: storage_dir,
            work: tempfile::tempdir().expect("work dir"),
            project,
        }
    }

    /// A server on this site (as one started after the last one stopped).
    async fn server(&self) -> Jobs {
        let mut s = Settings::new(
            self.work.path().to_path_buf(),
            "http://127.0.0.1:9",
            "uae-north",
        );
        s.sandbox.enabled = false;
        s.cgroups = false;
        s.discover_gpus = false;
        s.cpus = Some(2.0);
        s.memory_mb = Some(4096);
        s.kill_grace = Duration::from_millis(500);
        s.retry_backoff = Duration::from_millis(10);
        s.watch_interval = Duration::from_millis(20);
        let jobs = Jobs::new(
            self.db.store.clone(),
            self.storage.clone(),
            qanat_tracking::Tracking::new(self.db.store.clone()),
            s,
            Kinds::standard(),
        );
        jobs.inner.local.probe_sandbox(&jobs.inner.settings).await;
        jobs
    }

    /// A trace file a job's command appends to.
    fn trace(&self, name: &str) -> PathBuf {
        self.work.path().join(format!("trace-{name}"))
    }

    async fn submit(&self, jobs: &Jobs, name: &str, extra: serde_json::Value) -> String {
        let trace = self.trace(name);
        let mut spec = json!({
            "name": name,
            "resources": {"cpus": 0.5, "memory": "64MiB"},
            "command": format!(
                "echo start $QANAT_JOB_ATTEMPT >> {t}; sleep 0.3; echo done >> {t}",
                t = trace.display()
            ),
        });
        if let (Some(o), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        let spec = serde_json::from_value(spec).expect("a spec");
        jobs.submit(&self.project, spec, "admin", None)
            .await
            .expect("submit")
            .job_id
    }

    /// Runs scheduling passes until every job in `ids` is finished (or `secs` pass).
    async fn settle(&self, jobs: &Jobs, ids: &[String], secs: u64) -> Vec<(String, String)> {
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        loop {
            jobs.pass().await.expect("a pass");
            let states = self.states(ids).await;
            let open = states
                .iter()
                .any(|(_, s)| !matches!(s.as_str(), "succeeded" | "failed" | "cancelled"));
            // Finished, and every attempt's task over (it closes the run after the
            // end is recorded).
            let idle = idle(jobs);
            if (!open && idle) || std::time::Instant::now() > deadline {
                return states;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn states(&self, ids: &[String]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for id in ids {
            let s: String = sqlx::query_scalar("SELECT state FROM jobs WHERE job_id = $1")
                .bind(id)
                .fetch_one(self.db.store.reader())
                .await
                .expect("state");
            out.push((id.clone(), s));
        }
        out
    }

    /// (attempt, event) of job `id`, in order.
    async fn events(&self, id: &str) -> Vec<(i64, String)> {
        sqlx::query("SELECT attempt, event FROM job_events WHERE job_id = $1 ORDER BY seq")
            .bind(id)
            .fetch_all(self.db.store.reader())
            .await
            .expect("events")
            .iter()
            .map(|r| (r.get::<i64, _>("attempt"), r.get::<String, _>("event")))
            .collect()
    }

    /// What every finished job must show, whatever happened on the way: each
    /// attempt started at most once and ended before the next started; the user's
    /// code finished at most once (exactly once when the job succeeded); no live
    /// token of any of its attempts; its run closed.
    async fn check_invariants(&self, id: &str, name: &str) {
        self.check(id, name, true).await;
    }

    /// [`Site::check_invariants`], allowing a succeeded job's code to have finished
    /// more than once: a crash after the code finished but before its end was
    /// recorded runs it again (at least once, as any scheduler that outlives a crash).
    async fn check_invariants_at_least_once(&self, id: &str, name: &str) {
        self.check(id, name, false).await;
    }

    async fn check(&self, id: &str, name: &str, exactly_once: bool) {
        let events = self.events(id).await;
        let mut open: Option<i64> = None;
        let mut started = std::collections::BTreeSet::new();
        for (attempt, e) in &events {
            match e.as_str() {
                "started" => {
                    assert!(
                        open.is_none(),
                        "{id}: attempt {attempt} started while attempt {open:?} ran: {events:?}"
                    );
                    assert!(
                        started.insert(*attempt),
                        "{id}: attempt {attempt} started twice: {events:?}"
                    );
                    open = Some(*attempt);
                }
                "succeeded" | "failed" | "retrying" | "cancelled" | "preempted" | "lost"
                    if open == Some(*attempt) =>
                {
                    open = None;
                }
                _ => {}
            }
        }
        let state = self.states(&[id.to_string()]).await[0].1.clone();
        assert!(
            matches!(state.as_str(), "succeeded" | "failed" | "cancelled"),
            "{id} is still {state}: {events:?}"
        );
        let trace = std::fs::read_to_string(self.trace(name)).unwrap_or_default();
        let done = trace.lines().filter(|l| l.starts_with("done")).count();
        if state == "succeeded" && exactly_once {
            assert_eq!(
                done, 1,
                "{id}: the code finished {done} times: {trace:?} {events:?}"
            );
        } else if state == "succeeded" {
            assert!(
                done >= 1,
                "{id}: succeeded, its code never finished: {trace:?} {events:?}"
            );
        } else if exactly_once {
            assert!(done <= 1, "{id}: {trace:?}");
        }
        // Every start the code saw is an attempt the store recorded as started.
        for l in trace.lines().filter_map(|l| l.strip_prefix("start ")) {
            let a: i64 = l.parse().expect("an attempt");
            assert!(
                started.contains(&a),
                "{id}: attempt {a} ran unrecorded: {events:?}"
            );
        }
        let live: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM tokens WHERE name LIKE $1 AND revoked_at IS NULL",
        )
        .bind(format!("{id}-%"))
        .fetch_one(self.db.store.reader())
        .await
        .expect("tokens");
        assert_eq!(live, 0, "{id}: a token of one of its attempts is alive");
        let run: Option<String> = sqlx::query_scalar(
            "SELECT r.status FROM jobs j JOIN runs r ON r.run_id = j.run_id WHERE j.job_id = $1",
        )
        .bind(id)
        .fetch_optional(self.db.store.reader())
        .await
        .expect("run");
        assert_ne!(
            run.as_deref(),
            Some("RUNNING"),
            "{id}: its run is left running"
        );
    }
}

/// Whether every attempt task of `jobs` is over (each holds its allocation until
/// it has recorded its end and closed its run).
fn idle(jobs: &Jobs) -> bool {
    jobs.inner.local.free().cpu_millis == jobs.inner.local.capacity().cpu_millis
}

/// A failure at `at` in the first server's attempt, a restart, and the job run to
/// its end by the second server: (the job's id, its events).
async fn fail_then_restart(
    at: &'static str,
    times: u32,
    slow_first: bool,
) -> (Site, String, Vec<(i64, String)>) {
    let site = Site::new().await;
    let first = site.server().await;
    first.inner.faults.fail(at, times);
    let extra = if slow_first {
        slow_first_attempt(&site.trace("j"))
    } else {
        json!({})
    };
    let id = site.submit(&first, "j", extra).await;
    // The first server runs until the failure has happened and its attempt is over.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        first.pass().await.expect("a pass");
        let reached = first.inner.faults.reached().contains(&at);
        let idle = idle(&first);
        let state = site.states(std::slice::from_ref(&id)).await[0].1.clone();
        if reached && idle || matches!(state.as_str(), "succeeded" | "failed" | "cancelled") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{at} was never reached"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(first);
    let second = site.server().await;
    second.recover().await.expect("recover");
    let states = site.settle(&second, std::slice::from_ref(&id), 30).await;
    assert_eq!(
        states[0].1,
        "succeeded",
        "after a failure at {at}: {:?}",
        site.events(&id).await
    );
    site.check_invariants(&id, "j").await;
    let events = site.events(&id).await;
    (site, id, events)
}

fn names(events: &[(i64, String)]) -> Vec<String> {
    events.iter().map(|(a, e)| format!("{a}:{e}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_the_claim_leaves_a_job_that_the_restart_runs_once() {
    let (_site, _id, events) = fail_then_restart("claim.after", 1, false).await;
    // Claimed (attempt 1) but never started: found lost at the restart, run as 2.
    assert_eq!(
        names(&events),
        ["0:queued", "1:lost", "2:started", "2:succeeded"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_the_start_is_recorded_never_runs_the_code_unrecorded() {
    let (site, _id, events) = fail_then_restart("start.recorded", 1, false).await;
    // Recorded as started, but the barrier never opened: the code of attempt 1 never
    // ran; the restart found it lost.
    assert_eq!(
        names(&events),
        [
            "0:queued",
            "1:started",
            "1:lost",
            "2:started",
            "2:succeeded"
        ],
    );
    let trace = std::fs::read_to_string(site.trace("j")).expect("trace");
    assert_eq!(trace, "start 2\ndone\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_the_barrier_opens_is_found_lost_and_run_again_whole() {
    // Attempt 1's code is still running, unwatched, when the server restarts: the
    // recovery kills it (its pids are recorded) before the job runs again.
    let (site, _id, events) = fail_then_restart("barrier.opened", 1, true).await;
    assert_eq!(
        names(&events),
        [
            "0:queued",
            "1:started",
            "1:lost",
            "2:started",
            "2:succeeded"
        ],
    );
    let trace = std::fs::read_to_string(site.trace("j")).expect("trace");
    assert_eq!(trace, "start 1\nstart 2\ndone\n", "attempt 1 was stopped");
}

/// A command whose first attempt runs for a minute (until something stops it) and
/// whose later attempts finish at once.
fn slow_first_attempt(trace: &Path) -> serde_json::Value {
    json!({"command": format!(
        "echo start $QANAT_JOB_ATTEMPT >> {t}; if [ $QANAT_JOB_ATTEMPT = 1 ]; then sleep 60; fi; echo done >> {t}",
        t = trace.display()
    )})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_refused_before_its_commit_is_recorded_once_on_the_next_try() {
    let (_site, _id, events) = fail_then_restart("end.before_commit", 1, false).await;
    // The refused try left nothing; the retry recorded the end.
    assert_eq!(names(&events), ["0:queued", "1:started", "1:succeeded"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_committed_but_not_confirmed_is_not_counted_twice() {
    let site = Site::new().await;
    let jobs = site.server().await;
    // A failing job with a retry left: the end is committed (retrying, failures 1),
    // then the try reports an error, and the next try must not count it again.
    jobs.inner.faults.fail("end.committed", 1);
    let trace = site.trace("f");
    let id = site
        .submit(
            &jobs,
            "f",
            json!({"max_retries": 1, "command": format!("echo start $QANAT_JOB_ATTEMPT >> {}; exit 3", trace.display())}),
        )
        .await;
    // Settling waits for every attempt's task too: attempt 1's tries its end again
    // after a pause, maybe after attempt 2 has ended.
    site.settle(&jobs, std::slice::from_ref(&id), 30).await;
    let passed = jobs.inner.faults.reached();
    assert_eq!(
        passed.iter().filter(|f| **f == "end.committed").count(),
        2,
        "injected once after attempt 1's commit, passed after attempt 2's: {passed:?}"
    );
    let events = site.events(&id).await;
    assert_eq!(
        names(&events),
        [
            "0:queued",
            "1:started",
            "1:retrying",
            "2:started",
            "2:failed"
        ],
    );
    let failures: i64 = sqlx::query_scalar("SELECT failures FROM jobs WHERE job_id = $1")
        .bind(&id)
        .fetch_one(site.db.store.reader())
        .await
        .expect("failures");
    assert_eq!(failures, 2, "each failed attempt counted once");
    site.check_invariants(&id, "f").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_asked_for_before_a_crash_ends_the_job_instead_of_leaving_it_queued() {
    let site = Site::new().await;
    let first = site.server().await;
    // The first server stops watching its attempt once the code runs (as a crash
    // would leave it)...
    first.inner.faults.fail("barrier.opened", 1);
    let id = site
        .submit(&first, "c", slow_first_attempt(&site.trace("c")))
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !first.inner.faults.reached().contains(&"barrier.opened") {
        first.pass().await.expect("a pass");
        assert!(std::time::Instant::now() < deadline, "never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(first);
    // ...and a cancel is asked for, which no server carries out before the restart.
    sqlx::query("UPDATE jobs SET cancel_requested = 1 WHERE job_id = $1")
        .bind(&id)
        .execute(site.db.store.writer())
        .await
        .expect("cancel requested");
    let second = site.server().await;
    second.recover().await.expect("recover");
    let states = site.settle(&second, std::slice::from_ref(&id), 10).await;
    assert_eq!(states[0].1, "cancelled", "{:?}", site.events(&id).await);
    let events = names(&site.events(&id).await);
    assert!(
        events.ends_with(&["1:lost".to_string(), "1:cancelled".to_string()]),
        "{events:?}"
    );
    site.check_invariants(&id, "c").await;
}

/// What a random sequence does.
#[derive(Debug, Clone)]
enum Op {
    /// A job of this priority, one core of the executor's two, whose attempts run
    /// `long` (a second) or short.
    Submit { priority: i64, long: bool },
    /// Cancel the n-th job submitted (modulo how many there are).
    Cancel(usize),
    /// The server dies (its tasks are dropped where they are, its processes left) and
    /// another starts on the same store and recovers.
    Crash,
    /// Scheduling passes, 100 ms apart.
    Run(u8),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (prop_oneof![Just(0i64), Just(100)], any::<bool>())
            .prop_map(|(priority, long)| Op::Submit { priority, long }),
        1 => (0usize..8).prop_map(Op::Cancel),
        1 => Just(Op::Crash),
        3 => (1u8..6).prop_map(Op::Run),
    ]
}

/// A server with a runtime of its own, so that a crash drops everything it was doing.
struct Life {
    rt: tokio::runtime::Runtime,
    jobs: Jobs,
}

impl Life {
    fn start(site: &Site) -> Life {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let jobs = rt.block_on(async {
            let jobs = site.server().await;
            jobs.recover().await.expect("recover");
            jobs
        });
        Life { rt, jobs }
    }
}

/// A job's trace, checked: no attempt's code ran on after a later attempt started
/// (never two at once), and the code finished at most once per attempt.
fn check_trace(trace: &str, id: &str) {
    let mut latest = 0;
    for l in trace.lines() {
        let (what, a) = l.split_once(' ').expect("a line");
        let a: u32 = a.parse().expect("an attempt");
        match what {
            "start" => {
                assert!(
                    a > latest,
                    "{id}: attempt {a} started after {latest}: {trace:?}"
                );
                latest = a;
            }
            "done" => assert_eq!(
                a, latest,
                "{id}: attempt {a} ran on after {latest} started: {trace:?}"
            ),
            _ => panic!("{trace:?}"),
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 10, ..proptest::prelude::ProptestConfig::default() })]
    /// Whatever the order of submits, cancels, preemptions (a priority-100 job
    /// arriving while priority-0 jobs hold both cores) and crashes, once the last
    /// server has run the queue out: every job is finished (none lost), no attempt
    /// started twice or while another ran, every succeeded job's code finished,
    /// no token left alive and no run left running.
    #[test]
    fn random_submits_cancels_preemptions_and_crashes_never_run_a_job_twice_nor_lose_one(
        ops in proptest::collection::vec(op(), 1..10)
    ) {
        let main = tokio::runtime::Runtime::new().expect("runtime");
        let site = main.block_on(Site::new());
        let mut life = Life::start(&site);
        let mut ids: Vec<(String, String)> = Vec::new();
        for op in ops {
            match op {
                Op::Submit { priority, long } => {
                    let name = format!("j{}", ids.len());
                    let t = site.trace(&name);
                    let spec = json!({
                        "priority": priority,
                        "resources": {"cpus": 1, "memory": "64MiB"},
                        "command": format!(
                            "echo start $QANAT_JOB_ATTEMPT >> {t}; sleep {}; echo done $QANAT_JOB_ATTEMPT >> {t}",
                            if long { "1" } else { "0.1" },
                            t = t.display()
                        ),
                    });
                    let id = life.rt.block_on(site.submit(&life.jobs, &name, spec));
                    ids.push((id, name));
                }
                Op::Cancel(n) => {
                    if !ids.is_empty() {
                        let (id, _) = &ids[n % ids.len()];
                        // Refused when it is already finished: that is fine.
                        let _ = life.rt.block_on(life.jobs.cancel(&site.project, id, "admin", None));
                    }
                }
                Op::Crash => {
                    let Life { rt, jobs } = life;
                    drop(jobs);
                    rt.shutdown_background();
                    life = Life::start(&site);
                }
                Op::Run(n) => {
                    for _ in 0..n {
                        life.rt.block_on(async {
                            life.jobs.pass().await.expect("a pass");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        });
                    }
                }
            }
        }
        let all: Vec<String> = ids.iter().map(|(id, _)| id.clone()).collect();
        let states = life.rt.block_on(site.settle(&life.jobs, &all, 60));
        for ((id, name), (_, state)) in ids.iter().zip(&states) {
            let trace = std::fs::read_to_string(site.trace(name)).unwrap_or_default();
            check_trace(&trace, id);
            main.block_on(site.check_invariants_at_least_once(id, name));
            // Two crashes in a row during its attempts fail a job on purpose (a job
            // that may be what kills the server is not started a third time).
            let reason: Option<String> = main
                .block_on(
                    sqlx::query_scalar("SELECT reason FROM jobs WHERE job_id = $1")
                        .bind(id)
                        .fetch_one(site.db.store.reader()),
                )
                .expect("reason");
            let crash_loop = state == "failed"
                && reason.as_deref().is_some_and(|r| r.contains("crash loop"));
            proptest::prop_assert!(
                matches!(state.as_str(), "succeeded" | "cancelled") || crash_loop,
                "{} ended {} ({:?}): {:?}",
                id,
                state,
                reason,
                main.block_on(site.events(id))
            );
        }
        let Life { rt, jobs } = life;
        drop(jobs);
        rt.shutdown_background();
    }
}
