//! The Kubernetes executor: an attempt becomes a `batch/v1` Job — an *indexed* Job for
//! several ranks, each pod's `JOB_COMPLETION_INDEX` its `RANK`, rank 0 reachable as
//! `<name>-0.<name>` through a headless Service — with `nvidia.com/gpu` limits, a node
//! selector for the executor's region, and the job's token in a Secret. `backoffLimit`
//! is 0: one failed pod fails the Job, Kubernetes stops the other ranks, and Qanat
//! decides about retries. Job status is reconciled from one watch on every Job Qanat
//! manages (re-listed when the watch ends or its resource version expires).
//!
//! Manifests are written as the API's JSON, and only the status fields Qanat reads are
//! declared (below); requests go over the same HTTP client as the rest of Qanat (bearer
//! token, the cluster's CA).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::spec::Resources;
use crate::{Error, Result};

/// How limits are enforced on Kubernetes (shown in `jobs show`).
pub(crate) const ENFORCEMENT: &str =
    "Kubernetes: requests = limits for cpu, memory and nvidia.com/gpu (the kubelet's cgroups)";

/// The label every object Qanat creates carries.
pub(crate) const MANAGED: &str = "app.kubernetes.io/managed-by";

/// Where the cluster is and how jobs run there.
#[derive(Debug, Clone)]
pub struct KubernetesSettings {
    /// The API server, e.g. `https://10.0.0.1:6443` (in a pod: from
    /// `KUBERNETES_SERVICE_HOST`).
    pub api_url: String,
    /// A bearer token file (in a pod: the service account's).
    pub token_file: Option<PathBuf>,
    /// The cluster's CA certificate (PEM).
    pub ca_file: Option<PathBuf>,
    /// The namespace jobs run in.
    pub namespace: String,
    /// The image a job runs in unless its spec names one.
    pub image: String,
    /// The cluster's region: residency, and the node selector
    /// `topology.kubernetes.io/region`.
    pub region: String,
    /// A scheduler that places all pods of a job together (e.g. `volcano`), if any.
    pub scheduler_name: Option<String>,
}

/// What the cluster says about a Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KubeState {
    Waiting(String),
    Running(u32),
    Succeeded,
    Failed(String),
}

#[derive(Debug)]
pub(crate) struct KubeExecutor {
    pub(crate) settings: KubernetesSettings,
    /// What the region's nodes can allocate (unbounded when nodes cannot be listed).
    capacity: Resources,
    http: reqwest::Client,
    token: Option<String>,
    watched: Mutex<HashMap<String, watch::Sender<KubeState>>>,
}

/// What one attempt's objects are built from.
pub(crate) struct Manifest<'a> {
    pub name: &'a str,
    pub job_id: &'a str,
    pub project: &'a str,
    pub attempt: u32,
    pub ranks: u32,
    pub per_rank: Resources,
    pub image: &'a str,
    pub program: &'a str,
    pub args: &'a [String],
    pub working_dir: Option<&'a str>,
    /// Plain variables (no secrets).
    pub env: &'a [(String, String)],
    /// Secret variables (the token), put in the Secret.
    pub secret_env: &'a [(String, String)],
    pub timeout: Option<Duration>,
    pub region: &'a str,
    pub scheduler_name: Option<&'a str>,
}

impl Manifest<'_> {
    fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (MANAGED.to_string(), "qanat".to_string()),
            ("qanat.io/job".to_string(), self.job_id.to_string()),
            ("qanat.io/project".to_string(), self.project.to_string()),
            ("qanat.io/attempt".to_string(), self.attempt.to_string()),
        ])
    }

    fn meta(&self) -> Value {
        json!({"name": self.name, "labels": self.labels()})
    }

    /// The Secret holding the job's token.
    pub(crate) fn secret(&self) -> Value {
        let data: BTreeMap<&str, &str> = self
            .secret_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": self.meta(),
            "type": "Opaque",
            "stringData": data,
        })
    }

    /// The headless Service that gives each rank a stable name (`<name>-<i>.<name>`).
    pub(crate) fn service(&self) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.meta(),
            "spec": {
                "clusterIP": "None",
                "selector": {"qanat.io/job": self.job_id},
                "publishNotReadyAddresses": true,
            },
        })
    }

    pub(crate) fn job(&self) -> Value {
        let mut limits = json!({
            "cpu": format!("{}m", self.per_rank.cpu_millis),
            "memory": format!("{}Mi", self.per_rank.memory_mb),
        });
        if self.per_rank.gpus > 0 {
            limits["nvidia.com/gpu"] = json!(self.per_rank.gpus.to_string());
        }
        let mut env: Vec<Value> = self
            .env
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        env.push(json!({
            "name": "RANK",
            "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            }},
        }));
        for (name, value) in [
            ("WORLD_SIZE", self.ranks.to_string()),
            ("LOCAL_RANK", "0".into()),
            ("LOCAL_WORLD_SIZE", "1".into()),
            ("MASTER_ADDR", format!("{}-0.{}", self.name, self.name)),
            ("MASTER_PORT", "29500".into()),
        ] {
            env.push(json!({"name": name, "value": value}));
        }
        let mut container = json!({
            "name": "rank",
            "image": self.image,
            "command": [self.program],
            "args": self.args,
            "env": env,
            "envFrom": [{"secretRef": {"name": self.name, "optional": false}}],
            "resources": {"requests": limits.clone(), "limits": limits},
            // A job's code is untrusted: no capability, no way to gain one, the
            // runtime's seccomp filter (the image keeps its own user).
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        });
        if let Some(dir) = self.working_dir {
            container["workingDir"] = json!(dir);
        }
        let mut pod_labels = self.labels();
        pod_labels.insert("qanat.io/rank-of".into(), self.name.to_string());
        let mut pod = json!({
            "restartPolicy": "Never",
            "subdomain": self.name,
            "containers": [container],
            "nodeSelector": {"topology.kubernetes.io/region": self.region},
            "automountServiceAccountToken": false,
        });
        if let Some(scheduler) = self.scheduler_name {
            pod["schedulerName"] = json!(scheduler);
        }
        let mut spec = json!({
            "completions": self.ranks,
            "parallelism": self.ranks,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": pod_labels}, "spec": pod},
        });
        if let Some(t) = self.timeout {
            spec["activeDeadlineSeconds"] = json!(t.as_secs().max(1));
        }
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": self.meta(),
            "spec": spec,
        })
    }
}

/// The parts of the API's objects that Qanat reads (every other field is ignored; a
/// field the API leaves out or sends as null is `None`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    annotations: Option<BTreeMap<String, String>>,
}

/// A `batch/v1` Job: its name and status.
#[derive(Debug, Deserialize)]
pub(crate) struct KubeJob {
    #[serde(default)]
    metadata: Meta,
    status: Option<JobStatus>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobStatus {
    conditions: Option<Vec<Condition>>,
    active: Option<i32>,
}

#[derive(Debug, Deserialize)]
struct Condition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
    reason: Option<String>,
    message: Option<String>,
}

/// A Pod: its name, annotations (the rank) and how its container ended.
#[derive(Debug, Deserialize)]
struct Pod {
    #[serde(default)]
    metadata: Meta,
    status: Option<PodStatus>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStatus {
    container_statuses: Option<Vec<ContainerStatus>>,
}

#[derive(Debug, Deserialize)]
struct ContainerStatus {
    state: Option<ContainerState>,
}

#[derive(Debug, Deserialize)]
struct ContainerState {
    terminated: Option<Terminated>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Terminated {
    exit_code: i32,
}

/// A Node: what it can allocate (`cpu`, `memory`, `nvidia.com/gpu`, as quantities).
#[derive(Debug, Deserialize)]
struct Node {
    status: Option<NodeStatus>,
}

#[derive(Debug, Deserialize)]
struct NodeStatus {
    allocatable: Option<BTreeMap<String, String>>,
}

/// A Job's state from its status.
pub(crate) fn state_of(job: &KubeJob) -> KubeState {
    let Some(st) = &job.status else {
        return KubeState::Waiting("created".into());
    };
    for c in st.conditions.iter().flatten() {
        if c.status != "True" {
            continue;
        }
        match c.kind.as_str() {
            "Complete" => return KubeState::Succeeded,
            "Failed" => {
                return KubeState::Failed(format!(
                    "{}{}",
                    c.reason.clone().unwrap_or_else(|| "Failed".into()),
                    c.message
                        .as_ref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                ))
            }
            _ => {}
        }
    }
    match st.active.unwrap_or(0) {
        0 => KubeState::Waiting("pods pending".into()),
        n => KubeState::Running(n as u32),
    }
}

#[derive(Deserialize)]
struct WatchEvent {
    #[serde(rename = "type")]
    kind: String,
    object: serde_json::Value,
}

#[derive(Deserialize)]
struct List<T> {
    items: Vec<T>,
    metadata: ListMeta,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

impl KubeExecutor {
    pub(crate) fn new(settings: KubernetesSettings) -> Result<Self> {
        let mut b = reqwest::Client::builder().timeout(Duration::from_secs(30));
        if let Some(ca) = &settings.ca_file {
            let pem = std::fs::read(ca).map_err(|e| Error::io(ca.display(), e))?;
            let cert = reqwest::Certificate::from_pem(&pem).map_err(|e| {
                Error::invalid(format!("{}: not a PEM certificate ({e})", ca.display()))
            })?;
            b = b.add_root_certificate(cert);
        }
        let http = b
            .build()
            .map_err(|e| Error::Io(format!("building the Kubernetes client: {e}")))?;
        let token = match &settings.token_file {
            Some(f) => Some(
                std::fs::read_to_string(f)
                    .map_err(|e| Error::io(f.display(), e))?
                    .trim()
                    .to_string(),
            ),
            None => None,
        };
        Ok(KubeExecutor {
            settings,
            capacity: UNBOUNDED,
            http,
            token,
            watched: Mutex::new(HashMap::new()),
        })
    }

    /// Reads what the nodes of the executor's region can allocate; a cluster that does
    /// not let Qanat list nodes counts as unbounded (the cluster then refuses what does
    /// not fit by leaving it pending).
    pub(crate) async fn discover_capacity(&mut self) {
        let path = format!(
            "/api/v1/nodes?labelSelector=topology.kubernetes.io%2Fregion%3D{}",
            self.settings.region
        );
        let Ok(resp) = self
            .send(self.req(reqwest::Method::GET, &path), "list nodes")
            .await
        else {
            return;
        };
        let Ok(list) = resp.json::<List<Node>>().await else {
            return;
        };
        let mut r = Resources::default();
        for n in &list.items {
            let Some(a) = n.status.as_ref().and_then(|s| s.allocatable.as_ref()) else {
                continue;
            };
            r.cpu_millis += a
                .get("cpu")
                .and_then(|q| parse_quantity(q))
                .map_or(0, |c| (c * 1000.0) as u64);
            r.memory_mb += a
                .get("memory")
                .and_then(|q| parse_quantity(q))
                .map_or(0, |b| (b / 1048576.0) as u64);
            r.gpus += a
                .get("nvidia.com/gpu")
                .and_then(|q| parse_quantity(q))
                .map_or(0, |g| g as u32);
        }
        if !list.items.is_empty() {
            self.capacity = r;
        }
    }

    pub(crate) fn capacity(&self) -> Resources {
        self.capacity
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.settings.api_url.trim_end_matches('/'))
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let rb = self.http.request(method, self.url(path));
        match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    async fn send(&self, rb: reqwest::RequestBuilder, what: &str) -> Result<reqwest::Response> {
        let resp = rb
            .send()
            .await
            .map_err(|e| Error::Io(format!("Kubernetes API ({what}): {e}")))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let body = resp.text().await.unwrap_or_default();
            return Err(Error::Io(format!(
                "Kubernetes API ({what}) answered {status}: {}",
                body.chars().take(500).collect::<String>()
            )));
        }
        Ok(resp)
    }

    fn ns(&self) -> &str {
        &self.settings.namespace
    }

    /// Creates the Secret, the Service and the Job of an attempt.
    pub(crate) async fn create(&self, m: &Manifest<'_>) -> Result<()> {
        let ns = self.ns();
        for (path, body, what) in [
            (
                format!("/api/v1/namespaces/{ns}/secrets"),
                m.secret(),
                "create secret",
            ),
            (
                format!("/api/v1/namespaces/{ns}/services"),
                m.service(),
                "create service",
            ),
            (
                format!("/apis/batch/v1/namespaces/{ns}/jobs"),
                m.job(),
                "create job",
            ),
        ] {
            self.send(self.req(reqwest::Method::POST, &path).json(&body), what)
                .await?;
        }
        Ok(())
    }

    /// Whether the Job `name` exists.
    pub(crate) async fn exists(&self, name: &str) -> Result<bool> {
        let path = format!("/apis/batch/v1/namespaces/{}/jobs/{name}", self.ns());
        let resp = self
            .req(reqwest::Method::GET, &path)
            .send()
            .await
            .map_err(|e| Error::Io(format!("Kubernetes API (get job): {e}")))?;
        match resp.status() {
            s if s.is_success() => Ok(true),
            reqwest::StatusCode::NOT_FOUND => Ok(false),
            s => Err(Error::Io(format!("Kubernetes API (get job) answered {s}"))),
        }
    }

    /// Deletes an attempt's Job (and its pods), Service and Secret. Missing is fine.
    pub(crate) async fn delete(&self, name: &str) -> Result<()> {
        let ns = self.ns();
        for (path, what) in [
            (
                format!("/apis/batch/v1/namespaces/{ns}/jobs/{name}?propagationPolicy=Background"),
                "delete job",
            ),
            (
                format!("/api/v1/namespaces/{ns}/services/{name}"),
                "delete service",
            ),
            (
                format!("/api/v1/namespaces/{ns}/secrets/{name}"),
                "delete secret",
            ),
        ] {
            let resp = self
                .req(reqwest::Method::DELETE, &path)
                .send()
                .await
                .map_err(|e| Error::Io(format!("Kubernetes API ({what}): {e}")))?;
            if !resp.status().is_success() && resp.status() != reqwest::StatusCode::NOT_FOUND {
                return Err(Error::Io(format!(
                    "Kubernetes API ({what}) answered {}",
                    resp.status()
                )));
            }
        }
        Ok(())
    }

    /// The pods of a Job, rank by rank, with how each ended (for reasons and logs).
    pub(crate) async fn pods(&self, name: &str) -> Result<Vec<(u32, String, Option<i32>)>> {
        let path = format!(
            "/api/v1/namespaces/{}/pods?labelSelector=qanat.io%2Frank-of%3D{name}",
            self.ns()
        );
        let list: List<Pod> = self
            .send(self.req(reqwest::Method::GET, &path), "list pods")
            .await?
            .json()
            .await
            .map_err(|e| Error::Io(format!("Kubernetes API (list pods): {e}")))?;
        let mut out = Vec::new();
        for p in list.items {
            let pod = p.metadata.name.clone().unwrap_or_default();
            let rank = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("batch.kubernetes.io/job-completion-index"))
                .and_then(|i| i.parse().ok())
                .unwrap_or(0);
            let code = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.first())
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.terminated.as_ref())
                .map(|t| t.exit_code);
            out.push((rank, pod, code));
        }
        out.sort();
        Ok(out)
    }

    pub(crate) async fn pod_log(&self, pod: &str) -> Result<Vec<u8>> {
        let path = format!(
            "/api/v1/namespaces/{}/pods/{pod}/log?limitBytes=104857600",
            self.ns()
        );
        Ok(self
            .send(self.req(reqwest::Method::GET, &path), "pod log")
            .await?
            .bytes()
            .await
            .map_err(|e| Error::Io(format!("Kubernetes API (pod log): {e}")))?
            .to_vec())
    }

    pub(crate) fn watch(&self, name: &str) -> watch::Receiver<KubeState> {
        let mut w = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        w.entry(name.to_string())
            .or_insert_with(|| watch::channel(KubeState::Waiting("submitted".into())).0)
            .subscribe()
    }

    fn publish(&self, job: &KubeJob) {
        let Some(name) = job.metadata.name.as_deref() else {
            return;
        };
        let state = state_of(job);
        let w = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = w.get(name) {
            tx.send_if_modified(|cur| {
                let changed = *cur != state;
                *cur = state.clone();
                changed
            });
        }
    }

    /// Lists, then watches, every Job Qanat manages, publishing each change; returns
    /// when the watch ends (the caller starts it again).
    pub(crate) async fn watch_once(&self) -> Result<()> {
        let sel = format!("labelSelector={}%3Dqanat", MANAGED.replace('/', "%2F"));
        let path = format!("/apis/batch/v1/namespaces/{}/jobs?{sel}", self.ns());
        let list: List<KubeJob> = self
            .send(self.req(reqwest::Method::GET, &path), "list jobs")
            .await?
            .json()
            .await
            .map_err(|e| Error::Io(format!("Kubernetes API (list jobs): {e}")))?;
        for j in &list.items {
            self.publish(j);
        }
        let rv = list.metadata.resource_version.unwrap_or_default();
        let path = format!(
            "/apis/batch/v1/namespaces/{}/jobs?{sel}&watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=300",
            self.ns()
        );
        let resp = self
            .http
            .get(self.url(&path))
            .timeout(Duration::from_secs(330));
        let resp = match &self.token {
            Some(t) => resp.bearer_auth(t),
            None => resp,
        };
        let resp = self.send(resp, "watch jobs").await?;
        let mut body = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk =
                chunk.map_err(|e| Error::Io(format!("Kubernetes API (watch jobs): {e}")))?;
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let Ok(ev) = serde_json::from_slice::<WatchEvent>(&line) else {
                    continue;
                };
                match ev.kind.as_str() {
                    "ADDED" | "MODIFIED" | "DELETED" => {
                        if let Ok(j) = serde_json::from_value::<KubeJob>(ev.object) {
                            if ev.kind == "DELETED"
                                && !matches!(
                                    state_of(&j),
                                    KubeState::Succeeded | KubeState::Failed(_)
                                )
                            {
                                let w = self.watched.lock().unwrap_or_else(|p| p.into_inner());
                                if let Some(tx) = j.metadata.name.as_deref().and_then(|n| w.get(n))
                                {
                                    let _ =
                                        tx.send(KubeState::Failed("the Job was deleted".into()));
                                }
                            } else {
                                self.publish(&j);
                            }
                        }
                    }
                    // 410 Gone and friends: list again.
                    "ERROR" => return Ok(()),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// What an executor that cannot say what it has offers.
pub(crate) const UNBOUNDED: Resources = Resources {
    cpu_millis: u64::MAX / 4,
    memory_mb: u64::MAX / 4,
    gpus: u32::MAX / 4,
};

/// A Kubernetes quantity (`3800m`, `16Gi`, `16384Ki`, `4`, `1e3`) as a number of units.
pub(crate) fn parse_quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        s if s.starts_with('e') || s.starts_with('E') => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(n * mult)
}

/// A Kubernetes object name for an attempt: DNS-1035, at most 63 characters.
pub(crate) fn object_name(job_id: &str, attempt: u32) -> String {
    let mut n = format!("qanat-{job_id}-{attempt}").to_ascii_lowercase();
    n.retain(|c| c.is_ascii_alphanumeric() || c == '-');
    n.truncate(63);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_json(ranks: u32, gpus: u32) -> (serde_json::Value, serde_json::Value) {
        let args = vec!["train.py".to_string()];
        let env = vec![("QANAT_JOB_ID".to_string(), "job-1".to_string())];
        let secret = vec![("QANAT_TOKEN".to_string(), "qnt_x".to_string())];
        let m = Manifest {
            name: "qanat-job-1-1",
            job_id: "job-1",
            project: "fraud",
            attempt: 1,
            ranks,
            per_rank: Resources {
                cpu_millis: 1500,
                memory_mb: 2048,
                gpus,
            },
            image: "python:3.11",
            program: "python",
            args: &args,
            working_dir: None,
            env: &env,
            secret_env: &secret,
            timeout: Some(Duration::from_secs(3600)),
            region: "uae-north",
            scheduler_name: None,
        };
        (m.job(), m.secret())
    }

    #[test]
    fn a_multi_rank_job_is_an_indexed_job_that_fails_on_the_first_failed_pod() {
        let (j, s) = manifest_json(2, 1);
        let spec = &j["spec"];
        assert_eq!(spec["completionMode"], "Indexed");
        assert_eq!(spec["completions"], 2);
        assert_eq!(spec["parallelism"], 2);
        assert_eq!(spec["backoffLimit"], 0);
        assert_eq!(spec["activeDeadlineSeconds"], 3600);
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Never");
        assert_eq!(pod["subdomain"], "qanat-job-1-1");
        assert_eq!(
            pod["nodeSelector"]["topology.kubernetes.io/region"],
            "uae-north"
        );
        let c = &pod["containers"][0];
        assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], "1");
        assert_eq!(c["resources"]["limits"]["cpu"], "1500m");
        assert_eq!(c["resources"]["requests"]["memory"], "2048Mi");
        assert_eq!(c["envFrom"][0]["secretRef"]["name"], "qanat-job-1-1");
        // The token is only in the Secret.
        assert!(!j.to_string().contains("qnt_x"));
        assert_eq!(s["stringData"]["QANAT_TOKEN"], "qnt_x");
        assert!(c["env"].to_string().contains("job-completion-index"));
    }

    #[test]
    fn job_status_maps_to_a_state() {
        let job: KubeJob = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"},
            "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}
        }))
        .expect("job");
        assert_eq!(
            state_of(&job),
            KubeState::Failed(
                "BackoffLimitExceeded: Job has reached the specified backoff limit".into()
            )
        );
        let job: KubeJob = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "x"}, "status": {"active": 2}}),
        )
        .expect("job");
        assert_eq!(state_of(&job), KubeState::Running(2));
        // Fields the API leaves out or sends as null read as absent.
        let job: KubeJob = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x", "annotations": null},
            "status": {"conditions": null, "active": null}
        }))
        .expect("job with nulls");
        assert_eq!(state_of(&job), KubeState::Waiting("pods pending".into()));
        assert_eq!(object_name("job-AB_c", 3), "qanat-job-abc-3");
        assert!((parse_quantity("3800m").expect("millicores") - 3.8).abs() < 1e-9);
        assert_eq!(
            parse_quantity("16Gi"),
            Some(16.0 * 1024.0 * 1024.0 * 1024.0)
        );
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("lots"), None);
    }
}
