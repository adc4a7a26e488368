//! Training jobs through the real binary: durability across kill -9, the queue's
//! order, preemption and resume, enforced memory limits, gangs that fail together,
//! cancellation, logs, tokens, residency and the refusals at submit.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Qanat;
use serde_json::{json, Value};

/// A server whose local executor hands out `cpus` cores, stops jobs with a 2 s
/// grace and retries after 1 s.
fn server(cpus: &str) -> Qanat {
    Qanat::start_with(vec![
        ("QANAT_JOBS_CPUS".into(), cpus.into()),
        ("QANAT_JOBS_KILL_GRACE_SECS".into(), "2".into()),
        ("QANAT_JOBS_RETRY_BACKOFF_SECS".into(), "1".into()),
        ("QANAT_JOBS_METRICS_INTERVAL_SECS".into(), "1".into()),
    ])
}

fn id(j: &Value) -> String {
    j["job_id"].as_str().expect("job id").to_string()
}

fn events(j: &Value) -> Vec<String> {
    j["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("").to_string())
        .collect()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

#[test]
fn a_job_survives_a_server_kill_and_completes_exactly_once() {
    let mut q = server("2");
    let out = q.shared();
    let o = out.display();
    let j = q.submit_job(
        "default",
        json!({
            "name": "durable",
            "command": format!(
                "echo start $QANAT_JOB_ATTEMPT >> {o}/trace; echo $$ > {o}/pid-$QANAT_JOB_ATTEMPT; \
                 if [ $QANAT_JOB_ATTEMPT = 1 ]; then sleep 60; fi; echo done >> {o}/trace"
            ),
        }),
    );
    let jid = id(&j);
    // Acknowledged means stored: it is there after a kill -9 even before it ran.
    q.wait_for_job("default", &jid, 20, |_| out.join("pid-1").exists());
    // The pid a rank sees is its sandbox's own; the host knows it by its environment.
    assert!(attempt_runs(&jid, 1), "attempt 1 is not seen running");
    q.kill_hard();
    q.spawn_server();
    let j = q.job_finished("default", &jid, 30);
    assert_eq!(j["state"], "succeeded", "{j:#}");
    assert_eq!(j["attempt"], 2);
    let ev = events(&j);
    assert!(ev.contains(&"lost".to_string()), "{ev:?}");
    assert_eq!(read(&out.join("trace")), "start 1\nstart 2\ndone\n");
    // The first attempt's processes did not outlive the crash: nothing ran twice.
    assert!(!attempt_runs(&jid, 1), "attempt 1 still runs");
}

/// Whether a live process of attempt `attempt` of job `jid` exists on this machine.
fn attempt_runs(jid: &str, attempt: u32) -> bool {
    !common::jobs::processes_with_env(&[
        format!("QANAT_JOB_ID={jid}"),
        format!("QANAT_JOB_ATTEMPT={attempt}"),
    ])
    .is_empty()
}

/// A job that touches 400 MiB under a 64 MiB limit, on a server with `cgroups` on or
/// off; returns the finished job.
fn hungry_job(cgroups: &str) -> (Value, Qanat) {
    let q = Qanat::start_with(vec![
        ("QANAT_JOBS_CPUS".into(), "2".into()),
        ("QANAT_JOBS_KILL_GRACE_SECS".into(), "2".into()),
        ("QANAT_JOBS_CGROUPS".into(), cgroups.into()),
    ]);
    let j = q.submit_job("default",
        json!({
            "name": "hungry",
            "resources": {"memory": "64MiB"},
            "command": ["python3", "-c", "import time\nx = bytearray(400 * 1024 * 1024)\nfor i in range(len(x) // 4096): x[i * 4096] = 1\ntime.sleep(30)"],
        }));
    (q.job_finished("default", &id(&j), 30), q)
}

#[test]
fn a_memory_hungry_job_is_killed_at_its_limit_with_a_clear_reason() {
    // With cgroups where the tree is writable (the kernel holds the limit), else the
    // server's sampler; `enforcement` says which, and the reason matches it.
    let (j, q) = hungry_job("true");
    assert_eq!(j["state"], "failed");
    let reason = j["reason"].as_str().expect("reason");
    let enforcement = j["enforcement"].as_str().expect("enforcement");
    assert!(
        reason.contains("over its limit of 64 MiB") && reason.contains("resources.memory"),
        "{reason}"
    );
    if enforcement.contains("cgroup") {
        assert!(reason.contains("killed by the kernel"), "{reason}");
        // The rank ran in its own cgroup, and it is gone now the attempt is over.
        let probe = q.submit_job(
            "default",
            json!({"name": "where", "command": "cat /proc/self/cgroup"}),
        );
        let probe = q.job_finished("default", &id(&probe), 30);
        assert_eq!(probe["state"], "succeeded", "{probe:#}");
        let (_, log) = q.api(
            "GET",
            &format!("/api/v1/projects/default/jobs/{}/logs", id(&probe)),
            None,
        );
        let log = log["data"].as_str().unwrap_or("").to_string();
        let mine = format!("{}-a1-r0", id(&probe));
        assert!(log.contains(&mine), "not in its cgroup: {log}");
        let dir = enforcement
            .rsplit("cgroups under ")
            .next()
            .expect("cgroup path");
        assert!(
            !Path::new(dir).join(&mine).exists(),
            "{dir}/{mine} left behind"
        );
    } else {
        assert!(reason.contains("used"), "{reason}");
    }
    // With cgroups off the server samples memory itself, and says so.
    let (j, _q) = hungry_job("false");
    assert_eq!(j["state"], "failed");
    let reason = j["reason"].as_str().expect("reason");
    assert!(
        reason.contains("used") && reason.contains("over its limit of 64 MiB"),
        "{reason}"
    );
    assert!(j["enforcement"]
        .as_str()
        .expect("enforcement")
        .contains("resident memory sampled"));
}

#[test]
fn a_two_rank_gang_where_one_rank_dies_fails_together_and_is_retried_whole() {
    let q = server("2");
    let out = q.shared();
    let o = out.display();
    let j = q.submit_job("default",
        json!({
            "name": "gang",
            "ranks": 2,
            "resources": {"cpus": 1},
            "max_retries": 1,
            // Rank 1 fails once rank 0 has written its line: each attempt shows both.
            "command": format!(
                "echo \"$QANAT_JOB_ATTEMPT $RANK/$WORLD_SIZE $MASTER_ADDR\" >> {o}/ranks; \
                 if [ $RANK = 1 ]; then \
                   until grep -q \"^$QANAT_JOB_ATTEMPT 0/\" {o}/ranks; do sleep 0.05; done; exit 3; \
                 fi; sleep 60"
            ),
        }),
    );
    let started = Instant::now();
    let j = q.job_finished("default", &id(&j), 40);
    assert_eq!(j["state"], "failed", "{j:#}");
    assert_eq!(j["attempt"], 2, "the whole gang was retried once");
    assert_eq!(j["failures"], 2);
    let reason = j["reason"].as_str().expect("reason");
    assert!(reason.contains("rank 1 exited with code 3"), "{reason}");
    assert!(reason.contains("other ranks were stopped"), "{reason}");
    // Rank 0 sleeps 60 s: the gang ended long before, twice.
    assert!(started.elapsed() < Duration::from_secs(30));
    let mut lines: Vec<String> = read(&out.join("ranks")).lines().map(String::from).collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "1 0/2 127.0.0.1",
            "1 1/2 127.0.0.1",
            "2 0/2 127.0.0.1",
            "2 1/2 127.0.0.1"
        ]
    );
}

#[test]
fn priorities_and_quotas_order_the_queue() {
    let q = server("1");
    q.create_project("other", &["uae-north"]);
    let out = q.shared();
    let order = out.join("order");
    let gate = out.join("gate");
    // Holds the only core until the gate file appears, and cannot be preempted.
    let blocker = q.submit_job(
        "default",
        json!({
            "name": "blocker", "preemptible": false,
            "command": format!("while [ ! -e {} ]; do sleep 0.1; done", gate.display()),
        }),
    );
    q.wait_for_job("default", &id(&blocker), 20, |j| j["state"] == "running");
    let step = |name: &str, priority: i64, project: &str| {
        q.submit_job(
            project,
            json!({
                "name": name, "priority": priority, "resources": {"cpus": 1},
                "command": format!("echo {name} >> {}", order.display()),
            }),
        )
    };
    let low = step("low", -10, "default");
    let normal = step("normal", 0, "default");
    let high = step("high", 10, "default");
    let other = step("other", 0, "other");
    // While it waits, a job says why.
    let w = q.wait_for_job("default", &id(&high), 10, |j| {
        j["reason"]
            .as_str()
            .is_some_and(|r| r.contains("waiting for resources"))
    });
    assert_eq!(w["state"], "queued");
    std::fs::write(&gate, "").expect("open the gate");
    for j in [&low, &normal, &high] {
        assert_eq!(q.job_finished("default", &id(j), 30)["state"], "succeeded");
    }
    assert_eq!(
        q.job_finished("other", &id(&other), 30)["state"],
        "succeeded"
    );
    // Priority first; the two of priority 0 come from projects with equal (zero) use
    // once 'high' is done, so the one submitted first goes first; 'low' last.
    let got: Vec<String> = read(&order).lines().map(String::from).collect();
    assert_eq!(got[0], "high", "{got:?}");
    assert_eq!(got[3], "low", "{got:?}");
    assert_eq!(&got[1..3], ["normal", "other"], "{got:?}");

    // A job bigger than its project's quota can never run: refused at submit.
    let (s, body) = q.api(
        "PUT",
        "/api/v1/projects/other/quota",
        Some(json!({"running_jobs": 1, "cpus": 0.5})),
    );
    assert_eq!(s, 200, "{body}");
    let (s, body) = q.api(
        "POST",
        "/api/v1/projects/other/jobs",
        Some(json!({"name": "too-big", "resources": {"cpus": 1}, "command": ["true"]})),
    );
    assert_eq!(s, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("project quota"),
        "{body}"
    );
}

#[test]
fn a_preempted_job_resumes_from_its_checkpoint() {
    let q = server("1");
    // The step is written beside the checkpoint and renamed over it, as a checkpoint
    // must be: a preemption between truncating the file and writing it would leave an
    // empty one.
    let counter = "c=$QANAT_CHECKPOINT_DIR/step; s=$(cat $c 2>/dev/null || echo 0); \
                   echo \"attempt $QANAT_JOB_ATTEMPT resumes at $s\"; \
                   while [ $s -lt 15 ]; do s=$((s+1)); echo $s > $c.new; mv $c.new $c; sleep 0.2; done; \
                   echo finished at $s";
    let low = q.submit_job(
        "default",
        json!({"name": "long", "priority": -5, "command": counter}),
    );
    let lid = id(&low);
    q.wait_for_job("default", &lid, 20, |j| j["state"] == "running");
    std::thread::sleep(Duration::from_millis(1200));
    let high = q.submit_job(
        "default",
        json!({"name": "urgent", "priority": 10, "command": ["true"]}),
    );
    assert_eq!(
        q.job_finished("default", &id(&high), 30)["state"],
        "succeeded"
    );
    let l = q.job_finished("default", &lid, 60);
    assert_eq!(l["state"], "succeeded", "{l:#}");
    assert_eq!(l["preemptions"], 1);
    assert_eq!(l["failures"], 0, "a preemption spends no retry");
    assert!(events(&l).contains(&"preempted".to_string()));
    let (ok, log, err) = q.cli(&["jobs", "-p", "default", "logs", &lid]);
    assert!(ok, "{err}");
    let resumed: u32 = log
        .lines()
        .find_map(|l| l.strip_prefix("attempt 2 resumes at "))
        .expect("attempt 2's log")
        .parse()
        .expect("a step");
    assert!(resumed > 1, "attempt 2 started over: {log}");
    assert!(log.contains("finished at 15"), "{log}");
}

#[test]
fn cancel_stops_a_running_job_and_its_token_stops_working() {
    let q = server("2");
    let out = q.shared();
    let j = q.submit_job(
        "default",
        json!({
            "name": "sleeper",
            // A program started directly (no shell, which would reset its signal mask)
            // that stops cleanly on SIGTERM, as a training script saving a checkpoint.
            "command": ["perl", "-e", format!(
                r#"$| = 1; $SIG{{TERM}} = sub {{ print "stopping on SIGTERM\n"; exit 7 }};
                open(my $f, ">", "{}/token") or die; print $f $ENV{{QANAT_TOKEN}}; close $f;
                print "visible-line\n"; sleep 1 while 1;"#,
                out.display()
            )],
        }),
    );
    let jid = id(&j);
    q.wait_for_job("default", &jid, 20, |_| out.join("token").exists());
    let token = read(&out.join("token")).trim().to_string();
    // The job's token works while it runs, in its own project only.
    let (s, _) = q
        .http()
        .send(&token, "GET", "/api/v1/projects/default/jobs", None);
    assert_eq!(s, 200);
    let (ok, _, err) = q.cli(&["jobs", "-p", "default", "cancel", &jid]);
    assert!(ok, "{err}");
    let j = q.job_finished("default", &jid, 20);
    assert_eq!(j["state"], "cancelled");
    let (s, _) = q
        .http()
        .send(&token, "GET", "/api/v1/projects/default/jobs", None);
    assert_eq!(s, 401, "the token is revoked when the attempt ends");
    // Its log was stored (encrypted) and reads back.
    let (ok, log, _) = q.cli(&["jobs", "-p", "default", "logs", &jid]);
    assert!(ok && log.contains("visible-line"), "{log}");
    // The program was asked to stop (SIGTERM) before the grace ran out, and could.
    assert!(log.contains("stopping on SIGTERM"), "{log}");
    let mut plain = false;
    for e in common::files_under(&q.home().join("objects")) {
        if std::fs::read(&e).is_ok_and(|b| b.windows(12).any(|w| w == b"visible-line")) {
            plain = true;
        }
    }
    assert!(!plain, "a stored log is readable on disk");
    // A finished job cannot be cancelled again.
    let (ok, _, err) = q.cli(&["jobs", "-p", "default", "cancel", &jid]);
    assert!(!ok && err.contains("is already cancelled"), "{err}");
}

#[test]
fn bad_submissions_are_refused_with_what_to_fix() {
    let q = Qanat::start_with_locations(&[("frankfurt", "eu-central")]);
    q.create_project("eu", &["eu-central"]);
    let cases = [
        (
            "default",
            json!({"name": "x", "command": ["no-such-program-qanat"]}),
            400,
            "'no-such-program-qanat' was not found on PATH",
        ),
        (
            "default",
            json!({"name": "x", "inputs": ["dataset:nope@1"], "command": ["true"]}),
            400,
            "nope' does not exist",
        ),
        (
            "default",
            json!({"name": "x", "inputs": ["tx@1"], "command": ["true"]}),
            400,
            "'tx@1' is not a reference: use kind:name",
        ),
        (
            "default",
            json!({"name": "x", "resources": {"gpus": 64}, "command": ["true"]}),
            400,
            "could never start",
        ),
        (
            "default",
            json!({"name": "x", "resources": {"cpus": 64}, "command": ["true"]}),
            400,
            "could never start",
        ),
        ("default", json!({"name": "x"}), 400, "needs `command`"),
        (
            "default",
            json!({"name": "x", "command": ["true"], "prioritty": 3}),
            400,
            "unknown field `prioritty`",
        ),
        (
            "eu",
            json!({"name": "x", "command": ["true"]}),
            403,
            "data residency",
        ),
    ];
    for (project, spec, status, needle) in cases {
        let (s, body) = q.api(
            "POST",
            &format!("/api/v1/projects/{project}/jobs"),
            Some(spec.clone()),
        );
        assert_eq!(s, status, "{spec}: {body}");
        let msg = body["message"].as_str().expect("message");
        assert!(msg.contains(needle), "{spec}: {msg}");
    }
    // Nothing was queued by any of them.
    let (_, list) = q
        .http()
        .send(&q.admin_token, "GET", "/api/v1/projects/default/jobs", None);
    assert_eq!(list["jobs"], json!([]));
    // The residency refusal is in the audit log.
    let out = q.cli_ok("--output json audit tail --action job.submit --outcome denied");
    assert!(out.contains("residency"), "{out}");
}

#[test]
fn a_cron_schedule_submits_its_job_and_a_bad_one_is_refused() {
    let q = server("2");
    let (s, body) = q.api(
        "POST",
        "/api/v1/projects/default/schedules",
        Some(
            json!({"name": "bad", "cron": "61 * * * *", "job": {"name": "x", "command": ["true"]}}),
        ),
    );
    assert_eq!(s, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .expect("message")
            .contains("minute hour"),
        "{body}"
    );
    let (s, body) = q.api("POST", "/api/v1/projects/default/schedules", Some(json!({"name": "bad-job", "cron": "* * * * *", "job": {"name": "x", "command": ["no-such-program-qanat"]}})));
    assert_eq!(s, 400, "the job is checked when it is scheduled: {body}");
    // Every second (six fields: seconds first).
    let (ok, out, err) = q.cli(&[
        "--output",
        "json",
        "jobs",
        "-p",
        "default",
        "schedule",
        "--cron",
        "* * * * * *",
        "--name",
        "tick",
        "--",
        "true",
    ]);
    assert!(ok, "{err}");
    let sched: Value = serde_json::from_str(&out).expect("json");
    let sid = sched["schedule_id"].as_str().expect("id").to_string();
    let start = Instant::now();
    let fired = loop {
        let (_, list) = q
            .http()
            .send(&q.admin_token, "GET", "/api/v1/projects/default/jobs", None);
        let jobs: Vec<Value> = list["jobs"].as_array().cloned().unwrap_or_default();
        if jobs.len() >= 2 {
            break jobs;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the schedule did not fire"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(fired.iter().all(|j| j["schedule_id"] == sid.as_str()));
    assert!(fired.iter().all(|j| j["submitted_by"] == "schedule:tick"));
    let (ok, _, err) = q.cli(&["jobs", "-p", "default", "unschedule", &sid]);
    assert!(ok, "{err}");
}

#[test]
fn a_running_job_logs_its_system_metrics_to_its_run_and_closes_it() {
    let q = server("2");
    let j = q.submit_job("default",
        json!({
            "name": "busy",
            "experiment": "metrics",
            "command": ["python3", "-c", "import time\nx = bytearray(50 * 1024 * 1024)\nt = time.time()\nwhile time.time() - t < 3.5: pass"],
        }));
    let j = q.job_finished("default", &id(&j), 30);
    assert_eq!(j["state"], "succeeded", "{j:#}");
    let run_id = j["run_id"].as_str().expect("a run");
    let (s, run) = q.api(
        "GET",
        &format!("/api/2.0/mlflow/runs/get?run_id={run_id}"),
        None,
    );
    assert_eq!(s, 200, "{run}");
    assert_eq!(run["run"]["info"]["status"], "FINISHED");
    let metrics: Vec<(String, f64)> = run["run"]["data"]["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .map(|m| {
            (
                m["key"].as_str().unwrap_or("").to_string(),
                m["value"].as_f64().unwrap_or(0.0),
            )
        })
        .collect();
    let get = |k: &str| metrics.iter().find(|(key, _)| key == k).map(|(_, v)| *v);
    let mem = get("system/system_memory_usage_megabytes").expect("memory sampled");
    assert!(mem >= 40.0, "the job holds 50 MiB: {metrics:?}");
    let cpu = get("system/cpu_utilization_percentage").expect("cpu sampled");
    assert!(cpu > 20.0, "the job spins one core: {metrics:?}");
    let tags = run["run"]["data"]["tags"].to_string();
    assert!(tags.contains(&id(&j)), "{tags}");
}

#[test]
fn the_cli_submits_from_a_file_follows_logs_retries_and_lists_gpus() {
    let q = server("2");
    // `submit -f` reads the spec; a flag beside it wins over the file's field.
    let spec = q.home().join("job.yaml");
    std::fs::write(
        &spec,
        "name: from-file\ncommand: [\"sh\", \"-c\", \"for i in 1 2 3; do echo line $i; sleep 0.5; done\"]\nresources: {cpus: 1, memory: 256MiB}\n",
    )
    .expect("spec");
    let s = spec.to_str().expect("utf-8");
    let (ok, out, err) = q.cli(&[
        "jobs", "-p", "default", "submit", "-q", "-f", s, "--memory", "300MiB",
    ]);
    assert!(ok, "{err}");
    let jid = out.trim().to_string();
    assert!(
        jid.starts_with("job-") && !jid.contains('\n'),
        "-q prints the id alone: {out}"
    );
    // `logs -f` follows the attempt to its end: every line, in order, then it exits.
    let (ok, logs, err) = q.cli(&["jobs", "-p", "default", "logs", "-f", &jid]);
    assert!(ok, "{err}");
    let at = |l: &str| logs.find(l).unwrap_or_else(|| panic!("{l} in {logs}"));
    assert!(
        at("line 1") < at("line 2") && at("line 2") < at("line 3"),
        "{logs}"
    );
    let shown: Value =
        serde_json::from_str(&q.cli_ok(&format!("jobs -p default -o json show {jid}")))
            .expect("json");
    assert_eq!(shown["state"], "succeeded", "{shown}");
    assert_eq!(shown["name"], "from-file", "{shown}");
    assert_eq!(
        shown["resources"]["memory_mb"], 300,
        "the flag won: {shown}"
    );

    // --wait exits non-zero with the reason when the job fails.
    std::fs::write(&spec, "command: [\"sh\", \"-c\", \"exit 3\"]\n").expect("spec");
    let (ok, out, err) = q.cli(&["jobs", "-p", "default", "submit", "-f", s, "--wait"]);
    assert!(
        !ok && err.contains("failed") && err.contains("code 3"),
        "{out}{err}"
    );

    // retry queues a cancelled job again, as a new attempt of the same job.
    let long = q
        .cli_ok("jobs -p default submit -q -- sleep 600")
        .trim()
        .to_string();
    let cancelled: Value =
        serde_json::from_str(&q.cli_ok(&format!("jobs -p default -o json cancel --wait {long}")))
            .expect("json");
    assert_eq!(cancelled["state"], "cancelled", "--wait: {cancelled}");
    let (ok, out, err) = q.cli(&["jobs", "-p", "default", "-o", "json", "retry", &long]);
    assert!(ok, "{err}");
    let retried: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(retried["job_id"], long.as_str(), "{retried}");
    assert!(
        matches!(retried["state"].as_str(), Some("queued" | "running")),
        "{retried}"
    );
    // A succeeded job is not retried.
    let (ok, _, err) = q.cli(&["jobs", "-p", "default", "retry", &jid]);
    assert!(!ok && err.contains("succeeded"), "{err}");
    q.cli_ok(&format!("jobs -p default cancel {long}"));

    // gpus: the executors and what they offer; none here says so.
    let (ok, out, err) = q.cli(&["gpus"]);
    assert!(ok, "{err}");
    assert!(out.contains("local"), "{out}");
    let list: Value = serde_json::from_str(&q.cli_ok("-o json gpus")).expect("json");
    let local = list["executors"]
        .as_array()
        .and_then(|e| e.iter().find(|x| x["name"] == "local"))
        .unwrap_or_else(|| panic!("the local executor: {list}"))
        .clone();
    assert_eq!(
        local["gpus"].as_array().map(Vec::len).unwrap_or(0) == 0,
        out.contains("no GPUs found"),
        "{out}"
    );
    assert_eq!(
        local["capacity"]["cpu_millis"], 2000,
        "QANAT_JOBS_CPUS: {local}"
    );
}
