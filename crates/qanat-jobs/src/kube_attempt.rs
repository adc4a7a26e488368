//! One attempt on Kubernetes, from claim to recorded end: the run, token and
//! environment of any attempt, as a Secret, a headless Service and an (indexed) Job;
//! followed through the executor's watch; cancelled by deleting the Job; each rank's
//! pod log copied into the job's logs when it ends.

use crate::kubernetes::{self, KubeState, Manifest};
use crate::local::{Allocation, Control, Ending};
use crate::remote::Remote;
use crate::rows::JobRow;
use crate::scheduler::show_reason;
use crate::{Error, Jobs, Result};

/// Variables that hold a secret: they go into the Secret, not the Job.
const SECRET: &[&str] = &["QANAT_TOKEN", "MLFLOW_TRACKING_TOKEN"];

/// Variables of the server's machine or set per pod: not passed.
const NOT_PASSED: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "USER",
    "LOGNAME",
    "TMPDIR",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "QANAT_CHECKPOINT_DIR",
    "QANAT_INPUTS",
];

impl Jobs {
    /// Creates the attempt's objects on Kubernetes; the Job's name.
    pub(crate) async fn create_on_kube(&self, job: &mut JobRow) -> Result<String> {
        let inner = &self.inner;
        let cluster = inner
            .kube
            .as_ref()
            .ok_or_else(|| Error::invalid("the Kubernetes executor is not configured"))?;
        let ranks = self.prepare(job, &Allocation::elsewhere(job)).await?;
        let first = ranks
            .first()
            .ok_or_else(|| Error::invalid("a job has at least one rank"))?;
        let mut env = Vec::new();
        let mut secret = Vec::new();
        for (k, v) in &first.env {
            if SECRET.contains(&k.as_str()) {
                secret.push((k.clone(), v.clone()));
            } else if !NOT_PASSED.contains(&k.as_str()) {
                env.push((k.clone(), v.clone()));
            }
        }
        for (k, v) in &job.spec.env {
            if NOT_PASSED.contains(&k.as_str()) && !env.iter().any(|(e, _)| e == k) {
                env.push((k.clone(), v.clone()));
            }
        }
        let name = kubernetes::object_name(&job.job_id, job.attempt);
        let timeout = job.timeout(inner.settings.default_timeout);
        let image = job
            .spec
            .params
            .get("image")
            .and_then(|v| v.as_str())
            .unwrap_or(&cluster.settings.image)
            .to_string();
        let working_dir = job
            .spec
            .params
            .get("working_dir")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        let m = Manifest {
            name: &name,
            job_id: &job.job_id,
            project: &job.project_name,
            attempt: job.attempt,
            ranks: job.ranks,
            per_rank: job.per_rank,
            image: &image,
            program: &first.program,
            args: &first.args,
            working_dir: working_dir.as_deref(),
            env: &env,
            secret_env: &secret,
            timeout,
            region: &cluster.settings.region,
            scheduler_name: cluster.settings.scheduler_name.as_deref(),
        };
        cluster.create(&m).await?;
        let namespace = &cluster.settings.namespace;
        let msg = format!(
            "attempt {} created on Kubernetes as job {namespace}/{name} ({} rank(s))",
            job.attempt, job.ranks
        );
        self.record_started(
            job,
            &name,
            format!("kubernetes job {namespace}/{name}"),
            format!("created on Kubernetes as job {name}"),
            &msg,
        )
        .await?;
        Ok(name)
    }

    pub(crate) async fn watch_kube(
        &self,
        job: &JobRow,
        name: &str,
        mut control: tokio::sync::mpsc::UnboundedReceiver<Control>,
    ) -> Result<Ending> {
        let inner = &self.inner;
        let cluster = inner
            .kube
            .as_ref()
            .ok_or_else(|| Error::invalid("the Kubernetes executor is not configured"))?;
        let mut states = cluster.watch(name);
        let mut last_reason = String::new();
        loop {
            let state = states.borrow_and_update().clone();
            let ending = match &state {
                KubeState::Succeeded => Some(Ending::Succeeded),
                KubeState::Failed(why) => {
                    let pods = cluster.pods(name).await.unwrap_or_default();
                    // The first rank to fail: others were stopped after it (143).
                    let failed = pods
                        .iter()
                        .find(|(_, _, c)| c.is_some_and(|c| c != 0 && c != 143))
                        .or_else(|| pods.iter().find(|(_, _, c)| c.is_some_and(|c| c != 0)));
                    Some(match failed {
                        Some((rank, _, Some(code))) => Ending::Failed {
                            exit_code: Some(*code),
                            reason: format!(
                                "rank {rank} exited with code {code}; Kubernetes failed the Job ({why}) and stopped the other ranks"
                            ),
                        },
                        _ => Ending::Failed {
                            exit_code: None,
                            reason: format!("Kubernetes failed the Job: {why}"),
                        },
                    })
                }
                _ => None,
            };
            if let Some(ending) = ending {
                self.copy_pod_logs(job, name).await;
                if let Err(e) = cluster.delete(name).await {
                    tracing::warn!(job = %job.job_id, error = %e, "cleaning up Kubernetes objects failed");
                }
                return Ok(ending);
            }
            let reason = match &state {
                KubeState::Waiting(w) => format!("Kubernetes job {name}: {w}"),
                KubeState::Running(n) => {
                    format!("running on Kubernetes as job {name} ({n} pod(s) active)")
                }
                _ => String::new(),
            };
            show_reason(self, job, reason, &mut last_reason).await?;
            tokio::select! {
                changed = states.changed() => {
                    if changed.is_err() {
                        return Err(Error::Io("the Kubernetes watch stopped".into()));
                    }
                }
                Some(c) = control.recv() => {
                    let by = match c {
                        Control::Cancel { by } | Control::Preempt { by } => by,
                    };
                    self.copy_pod_logs(job, name).await;
                    if let Err(e) = cluster.delete(name).await {
                        tracing::warn!(job = %job.job_id, error = %e, "deleting a Kubernetes job failed");
                    }
                    return Ok(Ending::Cancelled { by });
                }
            }
        }
    }

    /// After a restart: Kubernetes jobs that were running go on being watched (the
    /// cluster ran them meanwhile); an attempt whose Job is not in the cluster never
    /// got there, and is queued again.
    pub(crate) async fn recover_kube(&self) -> Result<()> {
        let Some(cluster) = self.inner.kube.as_ref() else {
            return Ok(());
        };
        for (job, _) in self.running_on(Remote::Kubernetes).await? {
            let name = kubernetes::object_name(&job.job_id, job.attempt);
            let there = cluster.exists(&name).await?.then_some(name);
            self.resume_on(Remote::Kubernetes, job, there).await?;
        }
        Ok(())
    }

    /// Each rank's pod log into the job's rank log (stored with the attempt's end).
    async fn copy_pod_logs(&self, job: &JobRow, name: &str) {
        let Some(cluster) = self.inner.kube.as_ref() else {
            return;
        };
        let Ok(pods) = cluster.pods(name).await else {
            return;
        };
        for (rank, pod, _) in pods {
            if let Ok(bytes) = cluster.pod_log(&pod).await {
                let path = self.log_path(&job.job_id, job.attempt, rank);
                if let Some(dir) = path.parent() {
                    let _ = tokio::fs::create_dir_all(dir).await;
                }
                let _ = tokio::fs::write(&path, bytes).await;
            }
        }
    }
}
