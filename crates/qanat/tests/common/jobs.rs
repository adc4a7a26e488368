//! Waiting on jobs and reading what they left, through the API.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::Qanat;

impl Qanat {
    /// Submits `spec` as a job of `project`, which must be accepted; the job as the
    /// API answered.
    pub fn submit_job(&self, project: &str, spec: Value) -> Value {
        let (s, job) = self.http().send(
            &self.admin_token,
            "POST",
            &format!("/api/v1/projects/{project}/jobs"),
            Some(spec),
        );
        assert_eq!(s, 201, "submit: {job}");
        job
    }

    /// Submits `spec` as a job of `default`; its id.
    pub fn submit(&self, spec: Value) -> String {
        let job = self.submit_job("default", spec);
        job["job_id"].as_str().expect("job id").to_string()
    }

    /// A job of `project` as the API shows it.
    pub fn job(&self, project: &str, id: &str) -> Value {
        let (s, j) = self.http().send(
            &self.admin_token,
            "GET",
            &format!("/api/v1/projects/{project}/jobs/{id}"),
            None,
        );
        assert_eq!(s, 200, "show job {id}: {j}");
        j
    }

    /// Polls until `done` holds for the job, panicking with its state after `secs`.
    pub fn wait_for_job(
        &self,
        project: &str,
        id: &str,
        secs: u64,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        loop {
            let j = self.job(project, id);
            if done(&j) {
                return j;
            }
            assert!(
                start.elapsed() < Duration::from_secs(secs),
                "job {id} did not get there in {secs}s: {j:#}\nthe server's warnings and errors:\n{}",
                self.log_trouble(40)
            );
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// Waits until the job has ended: succeeded, failed or cancelled.
    pub fn job_finished(&self, project: &str, id: &str, secs: u64) -> Value {
        self.wait_for_job(project, id, secs, |j| {
            ["succeeded", "failed", "cancelled"].contains(&j["state"].as_str().unwrap_or(""))
        })
    }

    /// A job's log (rank 0) as the API returns it.
    pub fn job_log(&self, project: &str, id: &str) -> Value {
        let (s, log) = self.http().send(
            &self.admin_token,
            "GET",
            &format!("/api/v1/projects/{project}/jobs/{id}/logs"),
            None,
        );
        assert_eq!(s, 200, "{log}");
        log
    }

    /// The text of rank `rank`'s log of a job of `default` ("" when it has none yet).
    pub fn rank_log(&self, id: &str, rank: u32) -> String {
        let (_, l) = self.http().send(
            &self.admin_token,
            "GET",
            &format!("/api/v1/projects/default/jobs/{id}/logs?rank={rank}"),
            None,
        );
        l["data"].as_str().unwrap_or("").to_string()
    }

    /// `GET /mlflow/{project}/api/2.0/mlflow/{path}`, which must answer 200.
    pub fn mlflow_get(&self, project: &str, path: &str) -> Value {
        let (s, v) = self.http().send(
            &self.admin_token,
            "GET",
            &format!("/mlflow/{project}/api/2.0/mlflow/{path}"),
            None,
        );
        assert_eq!(s, 200, "{path}: {v}");
        v
    }

    /// The paths MLflow's `artifacts/list` gives for run `run`'s artifacts under `path`.
    pub fn artifact_paths(&self, project: &str, run: &str, path: &str) -> Vec<String> {
        let listed = self.mlflow_get(project, &format!("artifacts/list?run_id={run}&path={path}"));
        listed["files"]
            .as_array()
            .unwrap_or_else(|| panic!("files: {listed}"))
            .iter()
            .filter_map(|f| f["path"].as_str().map(str::to_string))
            .collect()
    }

    /// Runs a `train` job in `default` with `spec` (its fields besides `kind`), which
    /// must succeed.
    pub fn train(&self, spec: Value) {
        self.train_in("default", spec);
    }

    /// Runs a `train` job in `project` with `spec`, which must succeed.
    pub fn train_in(&self, project: &str, spec: Value) {
        let mut spec = spec;
        spec["kind"] = Value::from("train");
        let (s, job) = self.http().send(
            &self.admin_token,
            "POST",
            &format!("/api/v1/projects/{project}/jobs"),
            Some(spec),
        );
        assert_eq!(s, 201, "{job}");
        let id = job["job_id"].as_str().expect("id");
        let j = self.job_finished(project, id, 180);
        assert_eq!(
            j["state"],
            "succeeded",
            "{}",
            self.job_log(project, id)["data"]
        );
    }

    /// Creates dataset `name` in `default` and pushes `examples/data/{file}` as its
    /// first version.
    pub fn push_example(&self, name: &str, file: &str) {
        self.push_example_in("default", name, file);
    }

    /// Creates dataset `name` in `project` and pushes `examples/data/{file}` as its
    /// first version.
    pub fn push_example_in(&self, project: &str, name: &str, file: &str) {
        let src = self.dir.path().join(format!("src-{project}-{name}"));
        std::fs::create_dir_all(&src).expect("mkdir");
        std::fs::copy(
            format!("{}/../../examples/data/{file}", env!("CARGO_MANIFEST_DIR")),
            src.join(file),
        )
        .expect("copy the example table");
        let (ok, _, err) = self.cli(&["data", "-p", project, "create", name]);
        assert!(ok, "{err}");
        let (ok, _, err) = self.cli(&[
            "data",
            "-p",
            project,
            "push",
            name,
            src.to_str().expect("utf8"),
        ]);
        assert!(ok, "{err}");
    }
}

/// The live processes on this machine (pids) whose environment holds every one of
/// `vars` (`NAME=value`): how a test finds a job's processes, whose own pids are their
/// sandbox's.
pub fn processes_with_env(vars: &[String]) -> Vec<String> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            // A zombie nobody reaped yet is gone.
            std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
            })
        })
        .filter(|e| {
            std::fs::read(e.path().join("environ")).is_ok_and(|env| {
                let have: Vec<&[u8]> = env.split(|b| *b == 0).collect();
                vars.iter().all(|v| have.contains(&v.as_bytes()))
            })
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}
