//! The Slurm executor against a real one-node Slurm cluster (`scripts/slurm-one-node.sh`,
//! which `.ci/run` starts and then sets `QANAT_TEST_SLURM=1`). Skipped on a machine
//! without one; CI cannot skip it.

mod common;

use std::time::{Duration, Instant};

use common::Qanat;
use serde_json::json;

fn slurm_server() -> Option<Qanat> {
    qanat_store::testing::service_var("QANAT_TEST_SLURM")?;
    Some(Qanat::start_with(vec![
        ("QANAT_JOBS_SLURM_ENABLED".into(), "true".into()),
        ("QANAT_JOBS_SLURM_POLL_MS".into(), "200".into()),
        ("QANAT_JOBS_METRICS_INTERVAL_SECS".into(), "1".into()),
    ]))
}

#[test]
fn a_two_rank_job_runs_as_one_slurm_job_with_a_log_per_rank() {
    let Some(q) = slurm_server() else { return };
    let id = q.submit(json!({
            "name": "on-slurm", "executor": "slurm", "ranks": 2,
            "resources": {"cpus": 1, "memory": "256MiB"},
            "command": "echo rank $RANK of $WORLD_SIZE local $LOCAL_RANK at $MASTER_ADDR; test -n \"$MLFLOW_RUN_ID\"",
        }),
    );
    let j = q.job_finished("default", &id, 120);
    assert_eq!(j["state"], "succeeded", "{j:#}");
    assert!(j["placement"]
        .as_str()
        .expect("placement")
        .starts_with("slurm job "));
    assert!(
        q.rank_log(&id, 0).contains("rank 0 of 2 local 0"),
        "{}",
        q.rank_log(&id, 0)
    );
    assert!(
        q.rank_log(&id, 1).contains("rank 1 of 2 local 1"),
        "{}",
        q.rank_log(&id, 1)
    );
    // The server's own environment does not reach the job.
    let id = q.submit(json!({"name": "env", "executor": "slurm", "command": "env | grep -c QANAT_MASTER_KEY || true; env | grep -c '^QANAT_TOKEN='"}),
    );
    assert_eq!(q.job_finished("default", &id, 120)["state"], "succeeded");
    assert_eq!(q.rank_log(&id, 0).lines().collect::<Vec<_>>(), ["0", "1"]);
    // Declared outputs are collected from the shared working directory into the run.
    let id = q.submit(json!({"name": "outputs", "executor": "slurm", "outputs": ["model"],
               "command": "mkdir -p model/sub && echo w > model/weights.txt && echo c > model/sub/config.txt"}));
    let j = q.job_finished("default", &id, 120);
    assert_eq!(j["state"], "succeeded", "{j:#}");
    let run = j["run_id"].as_str().expect("run id");
    let paths = q.artifact_paths("default", run, "model");
    assert!(
        paths.iter().any(|p| p == "model/weights.txt") && paths.iter().any(|p| p == "model/sub"),
        "{paths:?}"
    );
    // A declared output that is not produced fails the job, saying which.
    let id = q.submit(json!({"name": "no-output", "executor": "slurm", "outputs": ["missing.bin"], "command": "true"}));
    let j = q.job_finished("default", &id, 120);
    assert_eq!(j["state"], "failed", "{j:#}");
    assert!(
        j["reason"].as_str().unwrap_or("").contains("missing.bin"),
        "{j:#}"
    );
}

#[test]
fn a_failing_rank_fails_the_slurm_job_and_cancel_uses_scancel() {
    let Some(q) = slurm_server() else { return };
    let id = q.submit(json!({
        "name": "bad-rank", "executor": "slurm", "ranks": 2, "resources": {"memory": "256MiB"},
        "command": "if [ $RANK = 1 ]; then exit 4; fi; sleep 60",
    }));
    let start = Instant::now();
    let j = q.job_finished("default", &id, 120);
    assert_eq!(j["state"], "failed", "{j:#}");
    assert!(
        start.elapsed() < Duration::from_secs(50),
        "the gang waited for rank 0's sleep"
    );
    let id = q.submit(json!({"name": "long", "executor": "slurm", "resources": {"memory": "256MiB"}, "command": ["sleep", "120"]}));
    q.wait_for_job("default", &id, 60, |j| {
        j["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("running as Slurm job"))
    });
    let (s, body) = q.api(
        "POST",
        &format!("/api/v1/projects/default/jobs/{id}/cancel"),
        Some(json!({})),
    );
    assert_eq!(s, 200, "{body}");
    assert_eq!(q.job_finished("default", &id, 120)["state"], "cancelled");
}

#[test]
fn a_slurm_job_outlives_a_server_kill_and_is_not_run_twice() {
    let Some(mut q) = slurm_server() else { return };
    let out = tempfile::tempdir().expect("tempdir");
    let trace = out.path().join("trace");
    let id = q.submit(json!({
        "name": "outlives", "executor": "slurm", "resources": {"memory": "256MiB"},
        "command": format!("echo start >> {t}; sleep 4; echo done >> {t}", t = trace.display()),
    }));
    q.wait_for_job("default", &id, 60, |_| trace.exists());
    q.kill_hard();
    q.spawn_server();
    let j = q.job_finished("default", &id, 120);
    assert_eq!(j["state"], "succeeded", "{j:#}");
    assert_eq!(j["attempt"], 1, "Slurm kept running it: no second attempt");
    assert_eq!(
        std::fs::read_to_string(&trace).expect("trace"),
        "start\ndone\n"
    );
}
