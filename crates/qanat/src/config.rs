//! `qanat.toml` plus `QANAT_*` environment overrides. Every key is documented in
//! docs/configuration.md; `qanat config show` prints the effective result, redacted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use qanat_store::LocationConfig;
use serde::{Deserialize, Serialize};

const DEFAULT_REGION: &str = "uae-north";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Data directory: metadata DB, master key, local objects.
    pub home: PathBuf,
    pub server: ServerConfig,
    pub log: LogConfig,
    pub metadata: MetadataConfig,
    pub storage: StorageConfig,
    pub security: SecurityConfig,
    pub tracking: TrackingConfig,
    pub audit: AuditConfig,
    pub retention: RetentionConfig,
    pub events: EventsConfig,
    pub jobs: JobsConfig,
    pub features: FeaturesConfig,
    pub serving: ServingConfig,
}

/// Serving.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServingConfig {
    /// Where ONNX models run: `auto` (on the first GPU when there is one and
    /// onnxruntime's CUDA provider starts, else on the CPU), `cpu`, `cuda` or
    /// `cuda:<n>` (that GPU or not at all).
    pub onnx_device: String,
    pub python: PythonConfig,
}

impl Default for ServingConfig {
    fn default() -> Self {
        ServingConfig {
            onnx_device: "auto".into(),
            python: PythonConfig::default(),
        }
    }
}

/// The Python runtime: MLflow `pyfunc` models on sandboxed worker processes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PythonConfig {
    /// Serve `pyfunc` models at all (off: they are refused at deploy).
    pub enabled: bool,
    /// The interpreter model environments are made from.
    pub interpreter: PathBuf,
    /// Where environments are built and kept (default `<home>/serving/python-envs`).
    pub envs_dir: Option<PathBuf>,
    /// The package index pip installs from (pip's own default when unset).
    pub index_url: Option<String>,
    /// Worker processes per served version.
    pub workers: usize,
    pub predict_timeout_secs: u64,
    pub load_timeout_secs: u64,
    pub build_timeout_secs: u64,
    /// A worker's private `/tmp` and `/dev/shm`.
    pub tmp_size: String,
    /// A worker's memory limit, its `/tmp` included: a cgroup's where the cgroup tree
    /// is writable (as for local jobs), else its resident memory sampled.
    pub memory: String,
    /// The most a model's files may take.
    pub max_model_size: String,
    /// Serve every model with a `python_function` flavor here, even one a native
    /// reader serves (to compare the two, or to match the library's own code exactly).
    pub only: bool,
}

impl Default for PythonConfig {
    fn default() -> Self {
        PythonConfig {
            enabled: true,
            interpreter: PathBuf::from("python3"),
            envs_dir: None,
            index_url: None,
            workers: 2,
            predict_timeout_secs: 60,
            load_timeout_secs: 300,
            build_timeout_secs: 1800,
            tmp_size: "1GiB".into(),
            memory: "4GiB".into(),
            max_model_size: "4GiB".into(),
            only: false,
        }
    }
}

/// The feature store.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FeaturesConfig {
    /// Where online features live: `redb://<path>` (default `redb://<home>/online.redb`)
    /// or `redis://host:port/db`.
    pub online_store: Option<String>,
    /// The residency region of the online store's bytes (`uae-north`); the default
    /// storage location's region when unset. A project that does not allow it cannot
    /// materialize or push online features.
    pub online_region: Option<String>,
    /// The NATS server with JetStream whose subjects `stream` sources read
    /// (`nats://host:4222`); `events.nats_url` when unset.
    pub nats_url: Option<String>,
    /// Memory a training set's join may hold (`4GiB`); larger inputs are joined
    /// partition by partition on disk. Default: a quarter of physical memory.
    pub join_memory: Option<String>,
}

impl Config {
    /// The online store's URL, with the default filled in.
    pub fn online_store_url(&self) -> String {
        self.features
            .online_store
            .clone()
            .unwrap_or_else(|| format!("redb://{}", self.home.join("online.redb").display()))
    }

    /// The online store's region, when configured.
    pub fn online_region(&self) -> Result<Option<qanat_store::Region>> {
        self.features
            .online_region
            .as_deref()
            .map(|r| {
                r.parse()
                    .map_err(|e| anyhow::anyhow!("features.online_region = '{r}': {e}"))
            })
            .transpose()
    }

    /// The training-set join's memory budget in bytes.
    pub fn join_memory_bytes(&self) -> Result<u64> {
        let mib = match &self.features.join_memory {
            Some(m) => qanat_jobs::spec::parse_memory(&serde_json::Value::String(m.clone()))
                .map_err(|e| anyhow::anyhow!("features.join_memory: {e}"))?,
            None => qanat_jobs::total_memory_mb() / 4,
        };
        Ok(mib.saturating_mul(1 << 20))
    }

    /// The NATS server stream sources read, if any.
    pub fn feature_streams_url(&self) -> Option<String> {
        self.features
            .nats_url
            .clone()
            .or_else(|| self.events.nats_url.clone())
    }
}

/// Training jobs and the local executor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobsConfig {
    /// Whether this server starts jobs (off: they queue until a server that does).
    pub enabled: bool,
    /// This server's name among servers sharing one metadata store (default: the
    /// host name).
    pub node: Option<String>,
    /// Job directories (working directory, checkpoints, inputs, live logs); default
    /// `<home>/jobs`.
    pub work_dir: Option<PathBuf>,
    /// The URL jobs reach this server at (default: from `server.bind`, loopback when
    /// bound to all addresses).
    pub server_url: Option<String>,
    /// A CA certificate (PEM) jobs trust for `server_url` (default: the server's own
    /// `server.tls_cert` when `server_url` is not set, so jobs reach a server with a
    /// self-signed certificate).
    pub ca_cert: Option<PathBuf>,
    /// The region the local executor runs in (default: the default storage
    /// location's region).
    pub region: Option<String>,
    /// Cores the local executor hands out (default: all this process may use).
    pub cpus: Option<f64>,
    /// Memory the local executor hands out, e.g. `16GiB` (default: 90% of RAM).
    pub memory: Option<String>,
    /// Timeout of a job that names none, e.g. `24h`.
    pub default_timeout: String,
    /// Seconds between SIGTERM and SIGKILL when a job is stopped.
    pub kill_grace_secs: u64,
    /// Seconds before the first retry of a failed attempt (doubles per retry).
    pub retry_backoff_secs: u64,
    /// Seconds between samples of a running job's CPU, memory and GPUs (logged to its
    /// run as MLflow system metrics).
    pub metrics_interval_secs: u64,
    /// Seconds an allocated GPU may stay under 10% utilization before the job is
    /// flagged as holding an idle GPU.
    pub idle_gpu_secs: u64,
    /// Discover GPUs through NVML (off: this server hands out no GPUs).
    pub gpus: bool,
    /// Run each local rank in a cgroup with its limits where the cgroup tree is
    /// writable (off: memory is sampled and enforced by the server instead).
    pub cgroups: bool,
    /// A Slurm cluster jobs may run on (`executor: slurm`).
    pub slurm: SlurmConfig,
    /// A Kubernetes cluster jobs may run on (`executor: kubernetes`).
    pub kubernetes: KubernetesConfig,
    /// The sandbox local ranks run in.
    pub sandbox: SandboxConfig,
    /// Most bytes of declared outputs one attempt may log to its run, e.g. `16GiB`.
    pub max_output: String,
    /// Most bytes of one rank's log kept (its end), e.g. `256MiB`.
    pub max_log: String,
}

/// The sandbox of local ranks: namespaces, an identity of their own, no capabilities,
/// Landlock (docs/security.md, "Jobs, SQL and models").
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Off only as an explicit opt-out: ranks then run as the server's user, can read
    /// its files, and every job and `qanat gpus` say `unsandboxed`.
    pub enabled: bool,
    /// First uid (and gid) of the range a root server hands to running attempts.
    pub uid_base: u32,
    /// How many uids the range holds (the most attempts running at once).
    pub uid_count: u32,
    /// Extra paths ranks may read (a shared virtual environment, a dataset cache);
    /// absolute working directories must lie in one of these or `writable_paths`.
    pub paths: Vec<PathBuf>,
    /// Extra paths ranks may write.
    pub writable_paths: Vec<PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            enabled: true,
            uid_base: 2_000_000_000,
            uid_count: 65_536,
            paths: Vec::new(),
            writable_paths: Vec::new(),
        }
    }
}

/// The Kubernetes executor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// Offer the executor `kubernetes`.
    pub enabled: bool,
    /// The API server (default, in a pod: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`).
    pub api_url: Option<String>,
    /// A bearer token file (default, in a pod: the service account's token).
    pub token_file: Option<PathBuf>,
    /// The cluster's CA certificate (default, in a pod: the service account's ca.crt).
    pub ca_file: Option<PathBuf>,
    /// The namespace jobs run in.
    pub namespace: String,
    /// The image a job runs in unless its spec names one.
    pub image: String,
    /// The cluster's region (default: the local executor's).
    pub region: Option<String>,
    /// A gang scheduler for the pods (e.g. `volcano`), if the cluster has one.
    pub scheduler_name: Option<String>,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            enabled: false,
            api_url: None,
            token_file: None,
            ca_file: None,
            namespace: "qanat-jobs".into(),
            image: "python:3.11-slim".into(),
            region: None,
            scheduler_name: None,
        }
    }
}

/// The Slurm executor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlurmConfig {
    /// Offer the executor `slurm` (its commands must work on this server).
    pub enabled: bool,
    /// The partition jobs go to (the cluster's default when unset).
    pub partition: Option<String>,
    /// An account to charge (`sbatch --account`).
    pub account: Option<String>,
    /// The cluster's region (default: the local executor's).
    pub region: Option<String>,
    /// Where `sbatch`, `squeue`, `scontrol`, `scancel` and `sinfo` are (default: PATH).
    pub bin_dir: Option<PathBuf>,
    /// Milliseconds between polls of `squeue`.
    pub poll_ms: u64,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            enabled: false,
            partition: None,
            account: None,
            region: None,
            bin_dir: None,
            poll_ms: 500,
        }
    }
}

impl Default for JobsConfig {
    fn default() -> Self {
        JobsConfig {
            enabled: true,
            node: None,
            work_dir: None,
            server_url: None,
            ca_cert: None,
            region: None,
            cpus: None,
            memory: None,
            default_timeout: "24h".into(),
            kill_grace_secs: 30,
            retry_backoff_secs: 10,
            metrics_interval_secs: 10,
            idle_gpu_secs: 600,
            gpus: true,
            cgroups: true,
            slurm: SlurmConfig::default(),
            kubernetes: KubernetesConfig::default(),
            sandbox: SandboxConfig::default(),
            max_output: "16GiB".into(),
            max_log: "256MiB".into(),
        }
    }
}

impl Config {
    /// The Slurm executor's settings, when it is enabled.
    pub fn slurm_settings(&self) -> Result<Option<qanat_jobs::SlurmSettings>> {
        let sl = &self.jobs.slurm;
        if !sl.enabled {
            return Ok(None);
        }
        if sl.poll_ms == 0 {
            bail!("jobs.slurm.poll_ms must be at least 1");
        }
        let region = match &sl.region {
            Some(r) => r.clone(),
            None => self.jobs_settings()?.region,
        };
        Ok(Some(qanat_jobs::SlurmSettings {
            partition: sl.partition.clone(),
            account: sl.account.clone(),
            region,
            bin_dir: sl.bin_dir.clone(),
            poll: std::time::Duration::from_millis(sl.poll_ms),
        }))
    }

    /// The Kubernetes executor's settings, when it is enabled.
    pub fn kubernetes_settings(&self) -> Result<Option<qanat_jobs::KubernetesSettings>> {
        let k = &self.jobs.kubernetes;
        if !k.enabled {
            return Ok(None);
        }
        const SA: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
        let in_pod = std::env::var("KUBERNETES_SERVICE_HOST").ok();
        let api_url = match (&k.api_url, &in_pod) {
            (Some(u), _) => u.clone(),
            (None, Some(host)) => format!(
                "https://{host}:{}",
                std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into())
            ),
            (None, None) => bail!(
                "jobs.kubernetes.enabled is set but jobs.kubernetes.api_url is not, and this is not a pod"
            ),
        };
        let sa = |f: &str| {
            let p = std::path::Path::new(SA).join(f);
            (in_pod.is_some() && p.exists()).then_some(p)
        };
        let region = match &k.region {
            Some(r) => r.clone(),
            None => self.jobs_settings()?.region,
        };
        Ok(Some(qanat_jobs::KubernetesSettings {
            api_url,
            token_file: k.token_file.clone().or_else(|| sa("token")),
            ca_file: k.ca_file.clone().or_else(|| sa("ca.crt")),
            namespace: k.namespace.clone(),
            image: k.image.clone(),
            region,
            scheduler_name: k.scheduler_name.clone(),
        }))
    }

    /// The settings the job scheduler runs with on this server.
    pub fn jobs_settings(&self) -> Result<qanat_jobs::Settings> {
        let j = &self.jobs;
        let url = match &j.server_url {
            Some(u) => u.clone(),
            None => {
                let scheme = if self.server.tls_cert.is_some() {
                    "https"
                } else {
                    "http"
                };
                let bind = &self.server.bind;
                let port = bind.rsplit(':').next().unwrap_or("8080");
                let host = bind.rsplit_once(':').map_or("127.0.0.1", |(h, _)| h);
                let host = if host == "0.0.0.0" || host == "[::]" || host.is_empty() {
                    "127.0.0.1"
                } else {
                    host
                };
                format!("{scheme}://{host}:{port}")
            }
        };
        let region = match &j.region {
            Some(r) => r.clone(),
            None => self
                .storage
                .locations
                .iter()
                .find(|l| l.name == self.storage.default_location)
                .map(|l| l.region.to_string())
                .unwrap_or_else(|| DEFAULT_REGION.into()),
        };
        let mut s = qanat_jobs::Settings::new(
            j.work_dir.clone().unwrap_or_else(|| self.home.join("jobs")),
            url,
            region,
        );
        if let Some(n) = &j.node {
            s.node = n.clone();
        }
        s.ca_cert = match (&j.ca_cert, &j.server_url) {
            (Some(ca), _) => Some(ca.clone()),
            (None, None) => self.server.tls_cert.clone(),
            (None, Some(_)) => None,
        }
        // Jobs run in their own directories.
        .map(|p| std::path::absolute(&p).unwrap_or(p));
        s.enabled = j.enabled;
        s.cpus = j.cpus;
        s.memory_mb = match &j.memory {
            Some(m) => Some(
                qanat_jobs::spec::parse_memory(&serde_json::Value::String(m.clone()))
                    .map_err(|e| anyhow::anyhow!("jobs.memory: {e}"))?,
            ),
            None => None,
        };
        s.default_timeout = Some(humantime::parse_duration(&j.default_timeout).with_context(
            || {
                format!(
                    "jobs.default_timeout = '{}': write a duration like 24h",
                    j.default_timeout
                )
            },
        )?);
        s.kill_grace = std::time::Duration::from_secs(j.kill_grace_secs);
        s.retry_backoff = std::time::Duration::from_secs(j.retry_backoff_secs);
        if j.metrics_interval_secs == 0 {
            bail!("jobs.metrics_interval_secs must be at least 1");
        }
        s.metrics_interval = std::time::Duration::from_secs(j.metrics_interval_secs);
        s.idle_gpu_after = std::time::Duration::from_secs(j.idle_gpu_secs);
        s.discover_gpus = j.gpus;
        s.cgroups = j.cgroups;
        let sb = &j.sandbox;
        if sb.uid_count == 0 || sb.uid_base == 0 || sb.uid_base.checked_add(sb.uid_count).is_none()
        {
            bail!(
                "jobs.sandbox: uid_base = {} and uid_count = {} must give a range of non-root uids below 2^32",
                sb.uid_base,
                sb.uid_count
            );
        }
        for p in sb.paths.iter().chain(&sb.writable_paths) {
            if !p.is_absolute() {
                bail!("jobs.sandbox: '{}' must be an absolute path", p.display());
            }
        }
        s.sandbox.enabled = sb.enabled;
        s.sandbox.launcher = std::env::current_exe()
            .context("finding this binary (it builds local jobs' sandboxes)")?;
        s.sandbox.uid_base = sb.uid_base;
        s.sandbox.uid_count = sb.uid_count;
        s.sandbox.paths = sb.paths.clone();
        s.sandbox.writable_paths = sb.writable_paths.clone();
        // The server's own data directory is never a job's to see, nor any file it
        // keeps secrets or data in elsewhere (under a user namespace a rank is the
        // server's uid outside, so permissions would not stop it).
        let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let mut secret: Vec<PathBuf> = vec![self.home.clone(), self.master_key_file()];
        secret.extend(self.server.tls_key.clone());
        secret.extend(self.audit.file.clone());
        if let Some(db) = self.metadata_url().strip_prefix("sqlite://") {
            let db = db.split('?').next().unwrap_or(db);
            for suffix in ["", "-wal", "-shm"] {
                secret.push(PathBuf::from(format!("{db}{suffix}")));
            }
        }
        if let Some(redb) = self.online_store_url().strip_prefix("redb://") {
            secret.push(PathBuf::from(redb));
        }
        for l in &self.storage.locations {
            let local = l
                .url
                .strip_prefix("file://")
                .or(Some(l.url.as_str()).filter(|u| !u.contains("://")));
            secret.extend(local.map(PathBuf::from));
        }
        let config_file = env("QANAT_CONFIG")
            .map(PathBuf::from)
            .or_else(|| Some(PathBuf::from("qanat.toml")).filter(|p| p.exists()));
        secret.extend(config_file);
        secret.push(PathBuf::from(format!(
            "/run/user/{}",
            rustix::process::getuid().as_raw()
        )));
        s.sandbox.hide.extend(secret.iter().map(|p| abs(p)));
        let bytes = |what: &str, v: &str| -> Result<u64> {
            qanat_jobs::spec::parse_memory(&serde_json::Value::String(v.to_string()))
                .map(|mib| mib.saturating_mul(1 << 20))
                .map_err(|e| anyhow::anyhow!("jobs.{what}: {e}"))
        };
        s.max_output_bytes = bytes("max_output", &j.max_output)?;
        s.max_log_bytes = bytes("max_log", &j.max_log)?;
        Ok(s)
    }
}

/// A list of paths in one variable, separated by ':' (as PATH is).
fn env_paths(v: &str) -> Vec<PathBuf> {
    v.split(':')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// Registry webhooks and the NATS stream every event is published to.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EventsConfig {
    /// URL schemes a webhook may use.
    pub webhook_schemes: Vec<String>,
    /// Whether webhooks may reach loopback, private and link-local addresses.
    pub allow_private_networks: bool,
    /// Seconds one delivery attempt may take.
    pub timeout_secs: u64,
    /// Attempts per delivery (the first and its retries, 1 s, 2 s, 4 s … apart).
    pub max_attempts: u32,
    /// A NATS server with JetStream (`nats://host:4222`): every event is also
    /// published there.
    pub nats_url: Option<String>,
    /// Events go to `<prefix>.<project>.<entity>.<action>`.
    pub nats_subject_prefix: String,
    /// The JetStream stream that keeps them (created when missing).
    pub nats_stream: String,
}

impl Default for EventsConfig {
    fn default() -> Self {
        let d = qanat_events::Settings::default();
        let n = qanat_events::NatsSettings::new("");
        EventsConfig {
            webhook_schemes: d.allowed_schemes,
            allow_private_networks: d.allow_private_networks,
            timeout_secs: d.timeout.as_secs(),
            max_attempts: d.max_attempts,
            nats_url: None,
            nats_subject_prefix: n.subject_prefix,
            nats_stream: n.stream,
        }
    }
}

impl EventsConfig {
    /// The settings the event layer runs with.
    pub fn settings(&self) -> qanat_events::Settings {
        qanat_events::Settings {
            allowed_schemes: self.webhook_schemes.clone(),
            allow_private_networks: self.allow_private_networks,
            timeout: std::time::Duration::from_secs(self.timeout_secs),
            max_attempts: self.max_attempts,
            nats: self
                .nats_url
                .as_ref()
                .map(|url| qanat_events::NatsSettings {
                    url: url.clone(),
                    subject_prefix: self.nats_subject_prefix.clone(),
                    stream: self.nats_stream.clone(),
                }),
            ..qanat_events::Settings::default()
        }
    }
}

/// How long deleted things are kept before `gc` purges them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Days a deleted dataset, experiment or project (and its bytes) is kept and can be
    /// restored; `gc` purges it after that. 0: the next `gc` purges it.
    pub deleted_days: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig { deleted_days: 30 }
    }
}

/// Where audit entries go besides the database.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// An append-only JSON-lines file that receives every entry and the checkpoints.
    pub file: Option<PathBuf>,
    /// A syslog receiver for every entry and checkpoint (RFC 5424):
    /// `udp://host:514`, `tcp://host:601` or `unix:///dev/log`.
    pub syslog: Option<String>,
    /// An HTTP(S) endpoint that receives every entry and checkpoint, POSTed in batches
    /// as a JSON array.
    pub webhook: Option<String>,
    /// Sent to the webhook as `Authorization: Bearer <token>` (never logged or shown).
    pub webhook_token: Option<String>,
    /// A signed checkpoint after this many entries…
    pub checkpoint_every: u64,
    /// …or this many seconds after the last, when entries came since.
    pub checkpoint_secs: u64,
    /// Refuse writes while the file cannot be written (fail closed).
    pub required: bool,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            file: None,
            syslog: None,
            webhook: None,
            webhook_token: None,
            checkpoint_every: 100,
            checkpoint_secs: 60,
            required: true,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrackingConfig {
    /// The project the root-mounted MLflow API (`MLFLOW_TRACKING_URI=http://host:port`)
    /// works in; `/mlflow/<project>` reaches any other.
    pub default_project: String,
    /// Most params one run may hold (a batch that would exceed it is refused whole).
    pub max_params_per_run: i64,
    /// Most tags one run may hold.
    pub max_tags_per_run: i64,
}

impl Default for TrackingConfig {
    fn default() -> Self {
        let limits = qanat_tracking::RunLimits::default();
        TrackingConfig {
            default_project: "default".into(),
            max_params_per_run: limits.max_params,
            max_tags_per_run: limits.max_tags,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub bind: String,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub max_request_bytes: usize,
    pub request_timeout_secs: u64,
    pub shutdown_grace_secs: u64,
    /// A client must send a request's headers within this long (and, on a kept-alive
    /// connection, start its next request within it), or the connection is closed.
    pub header_read_timeout_secs: u64,
    /// Longest pause between two pieces of a request body (uploads stream for as long
    /// as they keep flowing).
    pub body_read_timeout_secs: u64,
    /// A connection on which no byte moves either way for this long is closed; longer
    /// than `request_timeout_secs`.
    pub idle_timeout_secs: u64,
    /// Most connections open at once; more are closed at accept. Lowered at start-up to
    /// leave file descriptors for the server itself.
    pub max_connections: usize,
    /// Most connections one client (an IPv4 address, an IPv6 /64) may hold open at
    /// once, so one client cannot take the slots every other needs.
    pub max_connections_per_client: usize,
    /// Whether `/metrics` answers without a token: every series summed over its labels
    /// (which name projects, models and deployments). Off: a global admin's token or
    /// one scoped to `metrics` (`qanat tokens create --scope metrics`).
    pub metrics_anonymous: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `auto` (JSON unless stderr is a terminal), `text` or `json`.
    pub format: String,
    /// A tracing filter, e.g. `info` or `qanat=debug,info`.
    pub level: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct MetadataConfig {
    /// `sqlite://…` or `postgres://…`; default `sqlite://<home>/qanat.db`.
    pub url: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    pub default_location: String,
    pub locations: Vec<LocationConfig>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecurityConfig {
    /// Default `<home>/master.key`. Ignored when `QANAT_MASTER_KEY` is set.
    pub master_key_file: Option<PathBuf>,
    /// Name of the global admin created on first start.
    pub bootstrap_admin: String,
    /// Single sign-on with an OpenID provider (docs/security.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<OidcSection>,
}

/// Single sign-on: the OpenID provider whose people may use Qanat (`[security.oidc]`).
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcSection {
    /// The provider's issuer URL, exactly as its tokens' `iss` says
    /// (`https://login.microsoftonline.com/<tenant>/v2.0`, `https://<org>.okta.com`,
    /// `https://<host>/realms/<realm>`, `https://accounts.google.com`). HTTPS, unless
    /// the provider is on this machine (loopback).
    pub issuer: String,
    /// This server's client at the provider: the audience its access tokens name
    /// unless `audience` says otherwise.
    pub client_id: String,
    /// What the provider's access tokens name in `aud` for this server (default:
    /// `client_id`).
    #[serde(default)]
    pub audience: Option<String>,
    /// The claim that gives a person's Qanat user name.
    #[serde(default = "default_username_claim")]
    pub username_claim: String,
    /// The claim that lists a person's groups (or roles).
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// Members of these groups are global admins.
    #[serde(default)]
    pub admin_groups: Vec<String>,
    /// Group → project role lines.
    #[serde(default)]
    pub roles: Vec<OidcRole>,
    /// Clock skew allowed on a token's expiry and not-before, in seconds.
    #[serde(default = "default_leeway")]
    pub leeway_secs: i64,
    /// The web UI client's secret (a confidential client). `QANAT_OIDC_CLIENT_SECRET`
    /// overrides it, so that it need not be written in the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// Scopes the web UI's login asks for.
    #[serde(default = "default_oidc_scopes")]
    pub scopes: String,
    /// The client `qanat login --sso` uses (a public client allowed the device flow;
    /// default: `client_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_client_id: Option<String>,
    /// Scopes `qanat login --sso` asks for (default: `scopes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_scopes: Option<String>,
    /// Where the provider sends the browser back after a UI login:
    /// `https://<this server>/ui/login/sso/callback`, registered at the provider
    /// (default: built from the request's host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_url: Option<String>,
    /// How often a UI session is checked again at the provider, in seconds (a
    /// refresh: a person disabled there loses the session at the next check).
    #[serde(default = "default_session_check")]
    pub session_check_secs: i64,
    /// Extra parameters of the UI's authorization request, e.g. Google's
    /// `{ access_type = "offline", prompt = "consent" }` (for a refresh token) or
    /// Entra ID's `domain_hint`. The flow's own parameters cannot be replaced.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub auth_params: BTreeMap<String, String>,
}

/// Members of `group` get `role` in `project`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcRole {
    pub group: String,
    pub project: String,
    pub role: String,
}

fn default_username_claim() -> String {
    "preferred_username".into()
}
fn default_groups_claim() -> String {
    "groups".into()
}
fn default_leeway() -> i64 {
    60
}
fn default_oidc_scopes() -> String {
    "openid profile email offline_access".into()
}
fn default_session_check() -> i64 {
    300
}

/// Whether `url` names this machine (where plain http to an identity provider is
/// tolerated).
pub fn is_loopback(url: &url::Url) -> bool {
    matches!(url.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"))
}

impl std::fmt::Debug for OidcSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the client secret.
        f.debug_struct("OidcSection")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

impl OidcSection {
    /// Checks the section and makes governance's settings of it.
    pub fn governance(&self) -> Result<qanat_governance::OidcConfig> {
        let url = url::Url::parse(&self.issuer)
            .with_context(|| format!("security.oidc.issuer '{}' is not a URL", self.issuer))?;
        if url.scheme() != "https" && !(url.scheme() == "http" && is_loopback(&url)) {
            bail!("security.oidc.issuer must be an https URL (plain http only for a provider on this machine), not '{}'", self.issuer);
        }
        if !(0..=600).contains(&self.leeway_secs) {
            bail!("security.oidc.leeway_secs must be between 0 and 600 seconds");
        }
        if !(1..=86_400).contains(&self.session_check_secs) {
            bail!("security.oidc.session_check_secs must be between 1 and 86400 seconds");
        }
        if !self.scopes.split_whitespace().any(|s| s == "openid") {
            bail!(
                "security.oidc.scopes must include 'openid' (got '{}')",
                self.scopes
            );
        }
        if let Some(r) = &self.redirect_url {
            let u = url::Url::parse(r)
                .with_context(|| format!("security.oidc.redirect_url '{r}' is not a URL"))?;
            if u.path() != "/ui/login/sso/callback" {
                bail!("security.oidc.redirect_url must end in /ui/login/sso/callback (this server's), not '{r}'");
            }
        }
        for k in self.auth_params.keys() {
            if [
                "response_type",
                "client_id",
                "redirect_uri",
                "scope",
                "state",
                "nonce",
                "code_challenge",
                "code_challenge_method",
                "response_mode",
                "request",
                "request_uri",
            ]
            .contains(&k.as_str())
            {
                bail!("security.oidc.auth_params may not set '{k}': the login sets it");
            }
        }
        let client_secret = std::env::var("QANAT_OIDC_CLIENT_SECRET")
            .ok()
            .filter(|v| !v.is_empty())
            .or_else(|| self.client_secret.clone())
            .map(qanat_governance::ClientSecret);
        let roles = self
            .roles
            .iter()
            .map(|r| {
                Ok(qanat_governance::GroupRole {
                    group: r.group.clone(),
                    project: r.project.clone(),
                    role: r.role.parse().map_err(|e| {
                        anyhow::anyhow!("security.oidc.roles: group '{}': {e}", r.group)
                    })?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(qanat_governance::OidcConfig {
            issuer: self.issuer.clone(),
            client_id: self.client_id.clone(),
            audience: self
                .audience
                .clone()
                .unwrap_or_else(|| self.client_id.clone()),
            username_claim: self.username_claim.clone(),
            groups_claim: self.groups_claim.clone(),
            mapping: qanat_governance::RoleMapping {
                admin_groups: self.admin_groups.clone(),
                roles,
            },
            leeway_secs: self.leeway_secs,
            client_secret,
            scopes: self.scopes.clone(),
            cli_client_id: self
                .cli_client_id
                .clone()
                .unwrap_or_else(|| self.client_id.clone()),
            cli_scopes: self
                .cli_scopes
                .clone()
                .unwrap_or_else(|| self.scopes.clone()),
            redirect_url: self.redirect_url.clone(),
            session_check_secs: self.session_check_secs,
            auth_params: self
                .auth_params
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            home: PathBuf::from(".qanat"),
            server: ServerConfig::default(),
            log: LogConfig::default(),
            metadata: MetadataConfig::default(),
            storage: StorageConfig::default(),
            security: SecurityConfig::default(),
            tracking: TrackingConfig::default(),
            audit: AuditConfig::default(),
            retention: RetentionConfig::default(),
            events: EventsConfig::default(),
            jobs: JobsConfig::default(),
            features: FeaturesConfig::default(),
            serving: ServingConfig::default(),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: "127.0.0.1:8080".into(),
            tls_cert: None,
            tls_key: None,
            max_request_bytes: 1 << 20,
            request_timeout_secs: 60,
            shutdown_grace_secs: 30,
            header_read_timeout_secs: 10,
            body_read_timeout_secs: 30,
            idle_timeout_secs: 75,
            max_connections: 10_000,
            max_connections_per_client: 1_000,
            metrics_anonymous: false,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: "auto".into(),
            level: "info".into(),
        }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            default_location: "local".into(),
            locations: Vec::new(),
        }
    }
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            master_key_file: None,
            bootstrap_admin: "admin".into(),
            oidc: None,
        }
    }
}

/// Settings given on the command line, which win over the file and the environment.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--home`.
    pub home: Option<PathBuf>,
    /// `qanat server --bind`.
    pub bind: Option<String>,
    /// `qanat server --port`: replaces the port of the address, keeping its host.
    pub port: Option<u16>,
}

impl Overrides {
    fn apply(&self, cfg: &mut Config) -> Result<()> {
        if let Some(home) = &self.home {
            cfg.home = home.clone();
        }
        if let Some(bind) = &self.bind {
            cfg.server.bind = bind.clone();
        }
        if let Some(port) = self.port {
            let Some((host, _)) = cfg.server.bind.rsplit_once(':') else {
                bail!(
                    "server.bind = '{}' is not an address like 127.0.0.1:8080, so --port has no host to keep; use --bind",
                    cfg.server.bind
                );
            };
            cfg.server.bind = format!("{host}:{port}");
        }
        Ok(())
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_parse<T: std::str::FromStr>(name: &str, into: &mut T) -> Result<()>
where
    T::Err: std::fmt::Display,
{
    if let Some(v) = env(name) {
        *into = parse_env(name, &v)?;
    }
    Ok(())
}

/// [`env_parse`] for a key that is unset by default.
fn env_some<T: std::str::FromStr>(name: &str, into: &mut Option<T>) -> Result<()>
where
    T::Err: std::fmt::Display,
{
    if let Some(v) = env(name) {
        *into = Some(parse_env(name, &v)?);
    }
    Ok(())
}

fn parse_env<T: std::str::FromStr>(name: &str, v: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    v.parse()
        .map_err(|e| anyhow::anyhow!("{name}='{v}' is not valid: {e}"))
}

impl Config {
    /// Loads `path` (or `$QANAT_CONFIG`, or `./qanat.toml` if present), applies the
    /// environment and then the command line's `overrides`, fills defaults that depend
    /// on `home`, and validates.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config> {
        let explicit = path
            .map(Path::to_path_buf)
            .or_else(|| env("QANAT_CONFIG").map(PathBuf::from));
        let file = match explicit {
            Some(p) => Some(p),
            None => Some(PathBuf::from("qanat.toml")).filter(|p| p.exists()),
        };
        let mut cfg = match &file {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading config file {}", p.display()))?;
                toml::from_str(&text)
                    .with_context(|| format!("config file {} is not valid", p.display()))?
            }
            None => Config::default(),
        };
        cfg.apply_env()?;
        overrides.apply(&mut cfg)?;
        cfg.finish()?;
        Ok(cfg)
    }

    /// `QANAT_<SECTION>_<KEY>` variables, each over its config key.
    fn apply_env(&mut self) -> Result<()> {
        env_parse("QANAT_HOME", &mut self.home)?;
        let s = &mut self.server;
        env_parse("QANAT_SERVER_BIND", &mut s.bind)?;
        env_some("QANAT_SERVER_TLS_CERT", &mut s.tls_cert)?;
        env_some("QANAT_SERVER_TLS_KEY", &mut s.tls_key)?;
        env_parse("QANAT_SERVER_MAX_REQUEST_BYTES", &mut s.max_request_bytes)?;
        env_parse(
            "QANAT_SERVER_REQUEST_TIMEOUT_SECS",
            &mut s.request_timeout_secs,
        )?;
        env_parse(
            "QANAT_SERVER_SHUTDOWN_GRACE_SECS",
            &mut s.shutdown_grace_secs,
        )?;
        env_parse(
            "QANAT_SERVER_HEADER_READ_TIMEOUT_SECS",
            &mut s.header_read_timeout_secs,
        )?;
        env_parse(
            "QANAT_SERVER_BODY_READ_TIMEOUT_SECS",
            &mut s.body_read_timeout_secs,
        )?;
        env_parse("QANAT_SERVER_IDLE_TIMEOUT_SECS", &mut s.idle_timeout_secs)?;
        env_parse("QANAT_SERVER_MAX_CONNECTIONS", &mut s.max_connections)?;
        env_parse(
            "QANAT_SERVER_MAX_CONNECTIONS_PER_CLIENT",
            &mut s.max_connections_per_client,
        )?;
        env_parse("QANAT_SERVER_METRICS_ANONYMOUS", &mut s.metrics_anonymous)?;
        env_parse("QANAT_LOG_FORMAT", &mut self.log.format)?;
        env_parse("QANAT_LOG_LEVEL", &mut self.log.level)?;
        env_some("QANAT_METADATA_URL", &mut self.metadata.url)?;
        let st = &mut self.storage.default_location;
        env_parse("QANAT_STORAGE_DEFAULT_LOCATION", st)?;
        let sec = &mut self.security;
        env_some("QANAT_SECURITY_MASTER_KEY_FILE", &mut sec.master_key_file)?;
        env_parse("QANAT_SECURITY_BOOTSTRAP_ADMIN", &mut sec.bootstrap_admin)?;
        let t = &mut self.tracking;
        env_parse("QANAT_TRACKING_DEFAULT_PROJECT", &mut t.default_project)?;
        env_parse(
            "QANAT_TRACKING_MAX_PARAMS_PER_RUN",
            &mut t.max_params_per_run,
        )?;
        env_parse("QANAT_TRACKING_MAX_TAGS_PER_RUN", &mut t.max_tags_per_run)?;
        let a = &mut self.audit;
        env_some("QANAT_AUDIT_FILE", &mut a.file)?;
        env_some("QANAT_AUDIT_SYSLOG", &mut a.syslog)?;
        env_some("QANAT_AUDIT_WEBHOOK", &mut a.webhook)?;
        env_some("QANAT_AUDIT_WEBHOOK_TOKEN", &mut a.webhook_token)?;
        env_parse("QANAT_AUDIT_CHECKPOINT_EVERY", &mut a.checkpoint_every)?;
        env_parse("QANAT_AUDIT_CHECKPOINT_SECS", &mut a.checkpoint_secs)?;
        env_parse("QANAT_AUDIT_REQUIRED", &mut a.required)?;
        env_parse(
            "QANAT_RETENTION_DELETED_DAYS",
            &mut self.retention.deleted_days,
        )?;
        let e = &mut self.events;
        if let Some(v) = env("QANAT_EVENTS_WEBHOOK_SCHEMES") {
            e.webhook_schemes = v.split(',').map(|s| s.trim().to_string()).collect();
        }
        env_parse(
            "QANAT_EVENTS_ALLOW_PRIVATE_NETWORKS",
            &mut e.allow_private_networks,
        )?;
        env_parse("QANAT_EVENTS_TIMEOUT_SECS", &mut e.timeout_secs)?;
        env_parse("QANAT_EVENTS_MAX_ATTEMPTS", &mut e.max_attempts)?;
        env_some("QANAT_EVENTS_NATS_URL", &mut e.nats_url)?;
        env_parse(
            "QANAT_EVENTS_NATS_SUBJECT_PREFIX",
            &mut e.nats_subject_prefix,
        )?;
        env_parse("QANAT_EVENTS_NATS_STREAM", &mut e.nats_stream)?;
        let j = &mut self.jobs;
        env_parse("QANAT_JOBS_ENABLED", &mut j.enabled)?;
        env_some("QANAT_JOBS_NODE", &mut j.node)?;
        env_some("QANAT_JOBS_WORK_DIR", &mut j.work_dir)?;
        env_some(
            "QANAT_FEATURES_ONLINE_STORE",
            &mut self.features.online_store,
        )?;
        env_some(
            "QANAT_FEATURES_ONLINE_REGION",
            &mut self.features.online_region,
        )?;
        env_some("QANAT_FEATURES_NATS_URL", &mut self.features.nats_url)?;
        env_some("QANAT_FEATURES_JOIN_MEMORY", &mut self.features.join_memory)?;
        env_some("QANAT_JOBS_SERVER_URL", &mut j.server_url)?;
        env_some("QANAT_JOBS_CA_CERT", &mut j.ca_cert)?;
        env_some("QANAT_JOBS_REGION", &mut j.region)?;
        env_some("QANAT_JOBS_CPUS", &mut j.cpus)?;
        env_some("QANAT_JOBS_MEMORY", &mut j.memory)?;
        env_parse("QANAT_JOBS_DEFAULT_TIMEOUT", &mut j.default_timeout)?;
        env_parse("QANAT_JOBS_KILL_GRACE_SECS", &mut j.kill_grace_secs)?;
        env_parse("QANAT_JOBS_RETRY_BACKOFF_SECS", &mut j.retry_backoff_secs)?;
        env_parse(
            "QANAT_JOBS_METRICS_INTERVAL_SECS",
            &mut j.metrics_interval_secs,
        )?;
        env_parse("QANAT_JOBS_IDLE_GPU_SECS", &mut j.idle_gpu_secs)?;
        env_parse("QANAT_JOBS_GPUS", &mut j.gpus)?;
        env_parse("QANAT_JOBS_CGROUPS", &mut j.cgroups)?;
        env_parse("QANAT_JOBS_MAX_OUTPUT", &mut j.max_output)?;
        env_parse("QANAT_JOBS_MAX_LOG", &mut j.max_log)?;
        let sb = &mut j.sandbox;
        env_parse("QANAT_JOBS_SANDBOX_ENABLED", &mut sb.enabled)?;
        env_parse("QANAT_JOBS_SANDBOX_UID_BASE", &mut sb.uid_base)?;
        env_parse("QANAT_JOBS_SANDBOX_UID_COUNT", &mut sb.uid_count)?;
        if let Some(v) = env("QANAT_JOBS_SANDBOX_PATHS") {
            sb.paths = env_paths(&v);
        }
        if let Some(v) = env("QANAT_JOBS_SANDBOX_WRITABLE_PATHS") {
            sb.writable_paths = env_paths(&v);
        }
        let py = &mut self.serving.python;
        env_parse("QANAT_SERVING_PYTHON_ENABLED", &mut py.enabled)?;
        env_parse("QANAT_SERVING_PYTHON_INTERPRETER", &mut py.interpreter)?;
        env_some("QANAT_SERVING_PYTHON_ENVS_DIR", &mut py.envs_dir)?;
        env_some("QANAT_SERVING_PYTHON_INDEX_URL", &mut py.index_url)?;
        env_parse("QANAT_SERVING_PYTHON_WORKERS", &mut py.workers)?;
        env_parse("QANAT_SERVING_PYTHON_ONLY", &mut py.only)?;
        env_parse(
            "QANAT_SERVING_PYTHON_PREDICT_TIMEOUT_SECS",
            &mut py.predict_timeout_secs,
        )?;
        env_parse(
            "QANAT_SERVING_PYTHON_LOAD_TIMEOUT_SECS",
            &mut py.load_timeout_secs,
        )?;
        env_parse(
            "QANAT_SERVING_PYTHON_BUILD_TIMEOUT_SECS",
            &mut py.build_timeout_secs,
        )?;
        env_parse("QANAT_SERVING_PYTHON_TMP_SIZE", &mut py.tmp_size)?;
        env_parse("QANAT_SERVING_PYTHON_MEMORY", &mut py.memory)?;
        env_parse("QANAT_SERVING_ONNX_DEVICE", &mut self.serving.onnx_device)?;
        env_parse(
            "QANAT_SERVING_PYTHON_MAX_MODEL_SIZE",
            &mut py.max_model_size,
        )?;
        let sl = &mut self.jobs.slurm;
        env_parse("QANAT_JOBS_SLURM_ENABLED", &mut sl.enabled)?;
        env_some("QANAT_JOBS_SLURM_PARTITION", &mut sl.partition)?;
        env_some("QANAT_JOBS_SLURM_ACCOUNT", &mut sl.account)?;
        env_some("QANAT_JOBS_SLURM_REGION", &mut sl.region)?;
        env_some("QANAT_JOBS_SLURM_BIN_DIR", &mut sl.bin_dir)?;
        env_parse("QANAT_JOBS_SLURM_POLL_MS", &mut sl.poll_ms)?;
        let k = &mut self.jobs.kubernetes;
        env_parse("QANAT_JOBS_KUBERNETES_ENABLED", &mut k.enabled)?;
        env_some("QANAT_JOBS_KUBERNETES_API_URL", &mut k.api_url)?;
        env_some("QANAT_JOBS_KUBERNETES_TOKEN_FILE", &mut k.token_file)?;
        env_some("QANAT_JOBS_KUBERNETES_CA_FILE", &mut k.ca_file)?;
        env_parse("QANAT_JOBS_KUBERNETES_NAMESPACE", &mut k.namespace)?;
        env_parse("QANAT_JOBS_KUBERNETES_IMAGE", &mut k.image)?;
        env_some("QANAT_JOBS_KUBERNETES_REGION", &mut k.region)?;
        env_some(
            "QANAT_JOBS_KUBERNETES_SCHEDULER_NAME",
            &mut k.scheduler_name,
        )?;
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        if self.home.is_relative() {
            let cwd = std::env::current_dir().context("reading the current directory")?;
            self.home = cwd.join(&self.home);
        }
        if self.metadata.url.is_none() {
            self.metadata.url = Some(format!("sqlite://{}", self.home.join("qanat.db").display()));
        }
        if let Some(o) = &self.security.oidc {
            o.governance()?;
        }
        if self.security.master_key_file.is_none() {
            self.security.master_key_file = Some(self.home.join("master.key"));
        }
        if self.storage.locations.is_empty() {
            self.storage.locations.push(LocationConfig {
                name: "local".into(),
                url: self.home.join("objects").display().to_string(),
                region: DEFAULT_REGION.parse()?,
                options: BTreeMap::new(),
            });
        }
        // QANAT_STORAGE_URL / QANAT_STORAGE_REGION reshape the default location.
        let default = self.storage.default_location.clone();
        if let Some(loc) = self
            .storage
            .locations
            .iter_mut()
            .find(|l| l.name == default)
        {
            if let Some(v) = env("QANAT_STORAGE_URL") {
                loc.url = v;
            }
            if let Some(v) = env("QANAT_STORAGE_REGION") {
                loc.region = v.parse()?;
            }
        } else {
            bail!("storage.default_location = '{default}' names no entry in [[storage.locations]]");
        }
        let e = &self.events;
        if e.webhook_schemes.is_empty()
            || e.webhook_schemes
                .iter()
                .any(|s| s != "https" && s != "http")
        {
            bail!("events.webhook_schemes must list https and/or http");
        }
        if e.timeout_secs == 0 || e.max_attempts == 0 {
            bail!("events.timeout_secs and events.max_attempts must be at least 1");
        }
        for (key, url) in [
            ("events.nats_url", &e.nats_url),
            ("features.nats_url", &self.features.nats_url),
        ] {
            if let Some(url) = url {
                if !url.starts_with("nats://") && !url.starts_with("tls://") {
                    bail!("{key} = '{url}' must look like nats://host:4222");
                }
            }
        }
        if e.nats_subject_prefix.is_empty()
            || e.nats_subject_prefix
                .split('.')
                .any(|t| t.is_empty() || t.contains(['*', '>', ' ']))
        {
            bail!(
                "events.nats_subject_prefix = '{}' must be dot-separated tokens without wildcards",
                e.nats_subject_prefix
            );
        }
        self.jobs_settings()?;
        self.join_memory_bytes()?;
        if self.audit.checkpoint_every == 0 || self.audit.checkpoint_secs == 0 {
            bail!("audit.checkpoint_every and audit.checkpoint_secs must be at least 1");
        }
        let s = &self.server;
        if s.header_read_timeout_secs == 0 || s.body_read_timeout_secs == 0 {
            bail!("server.header_read_timeout_secs and server.body_read_timeout_secs must be at least 1");
        }
        if s.idle_timeout_secs <= s.request_timeout_secs {
            bail!(
                "server.idle_timeout_secs ({}) must be longer than server.request_timeout_secs ({}): a request may be silent while it runs",
                s.idle_timeout_secs,
                s.request_timeout_secs
            );
        }
        if s.max_connections_per_client == 0 {
            bail!("server.max_connections_per_client must be at least 1");
        }
        if s.max_connections == 0 {
            bail!("server.max_connections must be at least 1");
        }
        if self.tracking.max_params_per_run < 1 || self.tracking.max_tags_per_run < 3 {
            bail!("tracking.max_params_per_run must be at least 1 and tracking.max_tags_per_run at least 3 (a run's name, user and one more)");
        }
        if !matches!(self.log.format.as_str(), "auto" | "text" | "json") {
            bail!("log.format = '{}': use auto, text or json", self.log.format);
        }
        if self.server.tls_cert.is_some() != self.server.tls_key.is_some() {
            bail!("server.tls_cert and server.tls_key must be set together");
        }
        if self.server.max_request_bytes < 1024 {
            bail!("server.max_request_bytes must be at least 1024");
        }
        Ok(())
    }

    pub fn metadata_url(&self) -> &str {
        self.metadata.url.as_deref().unwrap_or_default()
    }

    pub fn master_key_file(&self) -> PathBuf {
        self.security
            .master_key_file
            .clone()
            .unwrap_or_else(|| self.home.join("master.key"))
    }

    /// Governance's settings for single sign-on, when `[security.oidc]` is set.
    pub fn oidc(&self) -> Result<Option<qanat_governance::OidcConfig>> {
        self.security
            .oidc
            .as_ref()
            .map(OidcSection::governance)
            .transpose()
    }

    pub fn tls_enabled(&self) -> bool {
        self.server.tls_cert.is_some()
    }

    /// The audit sinks configured in `[audit]`, checked (an address or URL that cannot
    /// work is an error at start-up, not a silent gap in the trail).
    pub fn audit_sinks(&self) -> Result<Vec<crate::audit_sink::Sink>> {
        use crate::audit_sink::{Sink, Target};
        let a = &self.audit;
        let mut targets = Vec::new();
        if let Some(f) = &a.file {
            targets.push((Target::File(f.clone()), "file"));
        }
        if let Some(s) = &a.syslog {
            targets.push((Target::Syslog(s.parse()?), "syslog"));
        }
        if let Some(w) = &a.webhook {
            let url = url::Url::parse(w)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
                .context("audit.webhook is not an http(s) URL like https://siem.example/qanat")?;
            targets.push((
                Target::Webhook {
                    url: url.to_string(),
                    token: a.webhook_token.clone(),
                },
                "webhook",
            ));
        }
        Ok(targets
            .into_iter()
            .map(|(target, kind)| Sink {
                target,
                checkpoint_every: a.checkpoint_every,
                checkpoint_secs: a.checkpoint_secs,
                required: a.required,
                cursor_file: self.home.join("audit-sinks").join(format!("{kind}.cursor")),
            })
            .collect())
    }

    /// The effective configuration as TOML, with every secret replaced.
    pub fn redacted_toml(&self) -> Result<String> {
        let mut shown = self.clone();
        if shown.audit.webhook_token.is_some() {
            shown.audit.webhook_token = Some("REDACTED".into());
        }
        // A webhook URL may carry a credential in its query string.
        shown.audit.webhook = shown
            .audit
            .webhook
            .as_deref()
            .map(|u| match u.split_once('?') {
                Some((base, _)) => format!("{base}?REDACTED"),
                None => u.to_string(),
            });
        shown.metadata.url = shown.metadata.url.as_deref().map(qanat_store::redact_url);
        if let Some(o) = shown.security.oidc.as_mut() {
            if o.client_secret.is_some() {
                o.client_secret = Some("REDACTED".into());
            }
        }
        shown.features.online_store = shown
            .features
            .online_store
            .as_deref()
            .map(qanat_store::redact_url);
        shown.events.nats_url = shown
            .events
            .nats_url
            .as_deref()
            .map(qanat_store::redact_url);
        shown.features.nats_url = shown
            .features
            .nats_url
            .as_deref()
            .map(qanat_store::redact_url);
        for loc in &mut shown.storage.locations {
            for (k, v) in loc.options.iter_mut() {
                let k = k.to_ascii_lowercase();
                if ["secret", "password", "token", "key_id", "access_key"]
                    .iter()
                    .any(|s| k.contains(s))
                {
                    *v = "REDACTED".into();
                }
            }
        }
        let mut text = toml::to_string_pretty(&shown)?;
        if env("QANAT_MASTER_KEY").is_some() {
            text.push_str("\n# master key: from QANAT_MASTER_KEY (REDACTED); security.master_key_file is not used\n");
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_secrets() {
        let mut cfg = Config::default();
        cfg.metadata.url = Some("postgres://qanat:hunter2@db/qanat".into());
        cfg.storage.locations.push(LocationConfig {
            name: "s3".into(),
            url: "s3://b".into(),
            region: "uae-north".parse().expect("region"),
            options: [
                ("aws_secret_access_key".to_string(), "s3cr3t".to_string()),
                ("aws_region".to_string(), "me-central-1".to_string()),
            ]
            .into_iter()
            .collect(),
        });
        cfg.audit.webhook = Some("https://siem.example/hook?key=k3y".into());
        cfg.audit.webhook_token = Some("t0ken".into());
        cfg.events.nats_url = Some("nats://svc:n4ts@nats.internal:4222".into());
        let text = cfg.redacted_toml().expect("toml");
        assert!(!text.contains("n4ts"), "{text}");
        assert!(!text.contains("hunter2"));
        assert!(!text.contains("k3y") && !text.contains("t0ken"), "{text}");
        assert!(!text.contains("s3cr3t"));
        assert!(text.contains("me-central-1"));
    }

    fn oidc(extra: &str) -> Result<qanat_governance::OidcConfig> {
        let text = format!(
            "issuer = \"https://login.example.com/tenant/v2.0\"\nclient_id = \"qanat\"\n{extra}"
        );
        let section: OidcSection = toml::from_str(&text)?;
        section.governance()
    }

    #[test]
    fn the_oidc_section_is_checked_and_defaulted() {
        let c = oidc("").expect("the least a section needs");
        assert_eq!(c.audience, "qanat");
        assert_eq!(c.cli_client_id, "qanat");
        assert_eq!(c.username_claim, "preferred_username");
        assert_eq!(c.groups_claim, "groups");
        assert_eq!(c.scopes, "openid profile email offline_access");
        assert_eq!(c.cli_scopes, c.scopes);
        assert_eq!(c.session_check_secs, 300);
        assert_eq!(c.leeway_secs, 60);

        let c = oidc(
            "audience = \"api://qanat\"\ncli_client_id = \"qanat-cli\"\nclient_secret = \"s3cret\"\n\
             roles = [{ group = \"g\", project = \"fraud\", role = \"maintainer\" }]\nadmin_groups = [\"admins\"]",
        )
        .expect("a full section");
        assert_eq!(c.audience, "api://qanat");
        assert_eq!(c.cli_client_id, "qanat-cli");
        assert_eq!(c.mapping.roles[0].role, qanat_governance::Role::Maintainer);
        assert_eq!(c.mapping.admin_groups, vec!["admins".to_string()]);
        // The secret is never printed.
        assert!(!format!("{c:?}").contains("s3cret"));

        for (bad, says) in [
            ("leeway_secs = 601", "leeway_secs"),
            ("session_check_secs = 0", "session_check_secs"),
            ("scopes = \"profile email\"", "openid"),
            (
                "redirect_url = \"https://qanat.example/elsewhere\"",
                "/ui/login/sso/callback",
            ),
            (
                "roles = [{ group = \"g\", project = \"p\", role = \"owner\" }]",
                "group 'g'",
            ),
            ("unknown_key = 1", "unknown field"),
            ("auth_params = { nonce = \"fixed\" }", "may not set 'nonce'"),
        ] {
            let err = format!("{:#}", oidc(bad).expect_err(bad));
            assert!(err.contains(says), "{bad}: {err}");
        }
        let plain: OidcSection =
            toml::from_str("issuer = \"http://idp.example\"\nclient_id = \"q\"").expect("toml");
        let err = format!("{:#}", plain.governance().expect_err("plain http"));
        assert!(err.contains("https"), "{err}");
        let local: OidcSection =
            toml::from_str("issuer = \"http://127.0.0.1:9000\"\nclient_id = \"q\"").expect("toml");
        local.governance().expect("plain http on loopback");
    }

    #[test]
    fn the_oidc_client_secret_is_redacted() {
        let mut cfg = Config::default();
        cfg.security.oidc = Some(
            toml::from_str(
                "issuer = \"https://idp.example\"\nclient_id = \"q\"\nclient_secret = \"hunter3\"",
            )
            .expect("toml"),
        );
        let text = cfg.redacted_toml().expect("toml");
        assert!(!text.contains("hunter3"), "{text}");
        assert!(text.contains("REDACTED"), "{text}");
    }

    #[test]
    fn port_keeps_the_configured_host_and_bind_replaces_both() {
        let mut cfg = Config::default();
        cfg.server.bind = "0.0.0.0:8080".into();
        let port = Overrides {
            port: Some(9000),
            ..Overrides::default()
        };
        port.apply(&mut cfg).expect("port");
        assert_eq!(cfg.server.bind, "0.0.0.0:9000");
        let both = Overrides {
            bind: Some("[::1]:7000".into()),
            port: Some(7001),
            ..Overrides::default()
        };
        both.apply(&mut cfg).expect("bind and port");
        assert_eq!(cfg.server.bind, "[::1]:7001");
        let home = Overrides {
            home: Some("/srv/qanat".into()),
            ..Overrides::default()
        };
        home.apply(&mut cfg).expect("home");
        assert_eq!(cfg.home, PathBuf::from("/srv/qanat"));
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = toml::from_str::<Config>("[server]\nbnd = 'x'\n").expect_err("typo");
        assert!(err.to_string().contains("bnd"));
    }
}
