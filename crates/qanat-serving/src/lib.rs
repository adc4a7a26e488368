//! Serving: registered model versions answered in the Open Inference Protocol (KServe
//! v2, the protocol Triton, KServe and MLServer speak), so their clients and load tools
//! work unchanged.
//!
//! A model is a registered model of the project; its OIP versions are the registry's
//! versions. [`Serving::loaded`] loads a version's package from the project's artifact
//! storage (checked against the project's residency) onto the native runtime, once, and
//! keeps it: versions are immutable. [`oip`] holds the wire types and turns request
//! tensors into the table the runtime takes, and its outputs into response tensors.
//!
//! Versions without Qanat's package but with a `model.onnx` (ONNX models made
//! elsewhere) are served tensor by tensor on tract ([`Model::Onnx`]). Deployments
//! ([`deploy`]) route between versions; [`enrich`] reads a deployment's inputs from
//! the feature store; [`batch`] stacks requests; [`log`] records the answers.

pub mod batch;
pub mod deploy;
pub mod enrich;
pub mod flavors;
pub mod log;
pub mod metrics;
pub mod oip;
pub mod outputs;
pub mod python;
mod route;
pub mod tensor;

pub use deploy::{Deployment, DeploymentSpec, Deployments, Revision, Routing, Target};
pub use route::{ArmStatus, DeploymentStatus, RepositoryEntry, ShadowStats};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use qanat_core::{Kind, ObjectRef};
use qanat_governance::Project;
use qanat_runtime::package::NativeModel;
use qanat_store::{MetaStore, ObjectKey, ObjectStorage};
use qanat_tracking::Tracking;

/// What serving can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller's request is wrong; the message says what to fix.
    #[error("{0}")]
    Invalid(String),
    /// No such model or version.
    #[error("{0}")]
    NotFound(String),
    /// A version whose files no runtime accepts (or that broke its load's budget): the
    /// message says why. Refused at deploy and on every request.
    #[error("{0}")]
    Unservable(String),
    #[error(transparent)]
    Tracking(#[from] qanat_tracking::Error),
    #[error(transparent)]
    Store(#[from] qanat_store::Error),
    #[error(transparent)]
    Governance(#[from] qanat_governance::Error),
    #[error(transparent)]
    Runtime(#[from] qanat_runtime::Error),
    #[error(transparent)]
    Refused(#[from] qanat_core::Refusal),
    /// An error of the online feature store a deployment reads.
    #[error("{0}")]
    Features(Box<dyn qanat_core::DomainError>),
    /// A change lost to a concurrent one; nothing was written.
    #[error("{0}")]
    Conflict(String),
    /// A bounded queue is full: refused at once.
    #[error("{0}")]
    Busy(String),
    /// The request waited in the queue past its timeout and never ran.
    #[error("{0}")]
    TimedOut(String),
    /// Nothing can answer now (no healthy version).
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error("{0}")]
    Internal(String),
}

impl qanat_core::DomainError for Error {
    fn kind(&self) -> qanat_core::ErrorKind {
        use qanat_core::ErrorKind as K;
        match self {
            Error::Invalid(_) | Error::Unservable(_) => K::Invalid,
            Error::NotFound(_) => K::NotFound,
            Error::Conflict(_) => K::Conflict,
            Error::Busy(_) => K::Exhausted,
            Error::TimedOut(_) | Error::Unavailable(_) => K::Unavailable,
            Error::Db(_) | Error::Internal(_) => K::Internal,
            _ => self.wrapped_kind(),
        }
    }

    fn wrapped(&self) -> Option<&dyn qanat_core::DomainError> {
        match self {
            Error::Tracking(e) => Some(e),
            Error::Store(e) => Some(e),
            Error::Governance(e) => Some(e),
            Error::Runtime(e) => Some(e),
            Error::Refused(e) => Some(e),
            Error::Features(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

/// The deployments table, applied after every earlier domain's.
pub static MIGRATIONS: qanat_store::migrations::DomainMigrations =
    qanat_store::domain_migrations!("serving", ["0012_deployments.sql",]);

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A version ready to answer: its model and its tensors.
#[derive(Debug)]
pub struct Loaded {
    pub name: String,
    pub version: String,
    pub model: Model,
    pub inputs: Vec<oip::TensorMetadata>,
    pub outputs: Vec<oip::TensorMetadata>,
}

/// What answers for a version.
// One per loaded version, kept behind the version's `Arc`: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Model {
    /// A package `qanat train` wrote (or `qanat optimize` derived), on the native
    /// runtime: one input per feature column, the outputs its target gives.
    Native(NativeModel),
    /// An ONNX model made elsewhere, served tensor by tensor: its graph's inputs in,
    /// its result out (as Triton serves ONNX); on tract, or on onnxruntime's CUDA
    /// provider ([`OnnxModel`]).
    Onnx(OnnxModel),
    /// An MLflow model of a tree flavor (XGBoost, LightGBM), its trees predicted
    /// natively ([`flavors`]).
    Trees(flavors::TreeModel),
    /// Any other MLflow model with a `python_function` flavor, on a pool of sandboxed
    /// Python workers ([`python`]).
    Python(python::PythonModel),
}

impl Model {
    pub fn native(&self) -> Option<&NativeModel> {
        match self {
            Model::Native(m) => Some(m),
            Model::Onnx(_) | Model::Trees(_) | Model::Python(_) => None,
        }
    }

    /// Values per row the batcher stacks.
    pub fn row_width(&self) -> usize {
        match self {
            Model::Native(m) => m.mlp().inputs(),
            Model::Onnx(m) => m.row_width(),
            Model::Trees(m) => m.forest.features(),
            Model::Python(m) => m.plan.row_width(),
        }
    }

    /// Values per row out.
    pub fn outputs(&self) -> usize {
        match self {
            Model::Native(m) => m.mlp().outputs(),
            Model::Onnx(m) => m.outputs(),
            Model::Trees(m) => m.forest.outputs(),
            Model::Python(m) => m.plan.out_width(),
        }
    }

    /// Runs `rows` rows of `x` (blocking): `f64` values, as the request gave them;
    /// the runtimes that compute in `f32` (native, tract, XGBoost's and LightGBM's
    /// trees, as those libraries do) round them, scikit-learn models and the Python
    /// runtime take them as they are.
    pub fn forward(
        &self,
        x: &[f64],
        rows: usize,
        scratch: &mut qanat_runtime::native::Scratch,
    ) -> Result<Vec<f32>> {
        let f32s = || x.iter().map(|v| *v as f32).collect::<Vec<f32>>();
        Ok(match self {
            Model::Native(m) => m.mlp().forward(&f32s(), rows, scratch)?.to_vec(),
            Model::Onnx(m) => m.run(&f32s(), rows)?,
            Model::Trees(m) => m.forest.predict(x, rows)?,
            Model::Python(m) => m.predict(x, &[], rows, None)?.0,
        })
    }

    /// [`forward`](Self::forward) with text: a request's text columns in (`text`, see
    /// [`oip::Prepared::text`]) and the text outputs' values out (row-major; their
    /// places in the values are NaN). Only the Python runtime has either; its
    /// request waits up to `wait` for a free worker.
    pub fn forward_text(
        &self,
        x: &[f64],
        text: &[Option<String>],
        rows: usize,
        wait: Option<std::time::Duration>,
        scratch: &mut qanat_runtime::native::Scratch,
    ) -> Result<(Vec<f32>, Vec<String>)> {
        match self {
            Model::Python(m) => m.predict(x, text, rows, wait),
            _ => Ok((self.forward(x, rows, scratch)?, Vec::new())),
        }
    }

    /// Whether some input or output is text (a request's rows then skip the batcher).
    pub fn has_text(&self) -> bool {
        matches!(self, Model::Python(m) if m.plan.text_width() + m.plan.text_out_width() > 0)
    }

    /// Whether a prediction only computes on this CPU (the native runtime, trees, ONNX
    /// on tract), never waiting on a device or another process: then a quick one may run
    /// on the thread that asked ([`batch`]'s inline path).
    pub fn computes_only(&self) -> bool {
        match self {
            Model::Native(_) | Model::Trees(_) => true,
            Model::Onnx(m) => matches!(m, OnnxModel::Tract(..)),
            Model::Python(_) => false,
        }
    }

    /// Where it runs: `cpu`, or `cuda:<n>`.
    pub fn device(&self) -> String {
        match self {
            Model::Onnx(m) => m.device(),
            _ => "cpu".into(),
        }
    }

    /// The platform metadata reports.
    pub fn platform(&self) -> &'static str {
        match self {
            Model::Native(_) => PLATFORM,
            // Triton's name for ONNX models.
            Model::Onnx(_) => "onnxruntime_onnx",
            Model::Trees(m) if m.flavor == "sklearn" => SKLEARN_PLATFORM,
            Model::Trees(_) => TREES_PLATFORM,
            Model::Python(_) => PYTHON_PLATFORM,
        }
    }

    /// What runs it, for `deploy status`: the runtime, the format it read, and where
    /// it runs.
    pub fn runtime(&self) -> String {
        match self {
            Model::Native(m) => format!(
                "qanat native ({}, cpu: {})",
                m.spec().precision(),
                m.mlp().kernels()
            ),
            Model::Onnx(m) => m.runtime(),
            Model::Trees(m) if m.flavor == "sklearn" => match m.forest.trees() {
                0 => format!("qanat sklearn ({}, cpu)", m.class),
                n => format!("qanat sklearn ({}, {n} trees, cpu)", m.class),
            },
            Model::Trees(m) => format!(
                "qanat trees ({} {}, {} trees, cpu)",
                m.flavor,
                if m.class.is_empty() {
                    "model"
                } else {
                    m.class.rsplit('.').next().unwrap_or_default()
                },
                m.forest.trees()
            ),
            Model::Python(m) => m.describe.clone(),
        }
    }
}

/// Where ONNX deployments run (`serving.onnx_device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnnxDevice {
    /// On tract, on the CPU.
    Cpu,
    /// On the first GPU when this machine has one and onnxruntime's CUDA provider
    /// starts; else on tract, on the CPU (the version's runtime says why).
    #[default]
    Auto,
    /// On this CUDA device, or not at all (requests answer 503 with the reason).
    Cuda(i32),
}

impl std::str::FromStr for OnnxDevice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "cpu" => Ok(OnnxDevice::Cpu),
            "auto" => Ok(OnnxDevice::Auto),
            "cuda" | "gpu" => Ok(OnnxDevice::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse::<i32>().ok())
                .filter(|n| *n >= 0)
                .map(OnnxDevice::Cuda)
                .ok_or_else(|| format!("'{other}': give cpu, auto, cuda or cuda:<device number>")),
        }
    }
}

/// An ONNX model served tensor by tensor, on tract (CPU) or onnxruntime (a GPU).
#[derive(Debug)]
pub enum OnnxModel {
    /// On tract; with why the GPU is not used, when one was wanted.
    Tract(qanat_runtime::onnx::tract::TensorModel, Option<String>),
    Ort(qanat_runtime::onnx::onnxruntime::OrtTensorModel),
}

impl OnnxModel {
    pub fn graph(&self) -> &qanat_runtime::onnx::OnnxGraph {
        match self {
            OnnxModel::Tract(m, _) => m.graph(),
            OnnxModel::Ort(m) => m.graph(),
        }
    }

    pub fn layout(&self) -> &qanat_runtime::onnx::TensorLayout {
        match self {
            OnnxModel::Tract(m, _) => m.layout(),
            OnnxModel::Ort(m) => m.layout(),
        }
    }

    pub fn row_width(&self) -> usize {
        self.layout().row_width()
    }

    pub fn outputs(&self) -> usize {
        self.layout().outputs()
    }

    pub fn run(&self, x: &[f32], rows: usize) -> qanat_runtime::Result<Vec<f32>> {
        match self {
            OnnxModel::Tract(m, _) => m.run(x, rows),
            OnnxModel::Ort(m) => m.run(x, rows),
        }
    }

    pub fn device(&self) -> String {
        match self {
            OnnxModel::Tract(..) => "cpu".into(),
            OnnxModel::Ort(m) => m.device().to_string(),
        }
    }

    /// For `deploy status`.
    pub fn runtime(&self) -> String {
        match self {
            OnnxModel::Tract(_, None) => "onnx on tract (cpu)".into(),
            OnnxModel::Tract(_, Some(why)) => format!("onnx on tract (cpu; no GPU: {why})"),
            OnnxModel::Ort(m) => format!("onnx on onnxruntime ({})", m.device()),
        }
    }
}

/// The most an ONNX graph and its external data may take together (all are held in
/// memory while the graph loads).
const MAX_ONNX_BYTES: usize = 8 << 30;

/// The platform name metadata reports for tree models served natively.
pub const TREES_PLATFORM: &str = "qanat_trees";

/// The platform name metadata reports for scikit-learn models served natively.
pub const SKLEARN_PLATFORM: &str = "qanat_sklearn";

/// How long `deploy create` waits for a version to load before accepting it and
/// loading it in the background.
const CHECK_BUDGET: std::time::Duration = std::time::Duration::from_secs(40);

/// The platform name metadata reports for models served by the Python runtime.
pub const PYTHON_PLATFORM: &str = "qanat_python";

/// The platform name metadata reports for native models.
pub const PLATFORM: &str = "qanat_native";

type Key = (String, String, String);

/// The model version tag that marks a version no runtime could load, with the reason:
/// set by the first load that fails, read before every later one (so a hostile graph
/// is not loaded again after a restart). Deleting the tag lets the server try again.
pub const UNSERVABLE_TAG: &str = "qanat.unservable";

/// The serving domain: loads versions from the registry, routes requests to them
/// (deployments, or a registered model's versions by name) and batches them.
#[derive(Clone)]
pub struct Serving {
    storage: ObjectStorage,
    tracking: Tracking,
    deployments: Deployments,
    loaded: Arc<Mutex<HashMap<Key, Arc<Loaded>>>>,
    /// Versions whose files no runtime accepts, and why, when the registry could not
    /// be marked ([`UNSERVABLE_TAG`]): refused at once after the first try, instead of
    /// loading an untrusted graph again on every request.
    unservable: Arc<Mutex<HashMap<Key, String>>>,
    /// The program that first loads an ONNX graph in a child process under a memory
    /// and CPU budget ([`qanat_runtime::onnx::load_check`]); unset: loaded here only.
    load_check: Option<Arc<std::path::Path>>,
    /// The Python runtime for `pyfunc` models; unset: such models are refused.
    python: Option<Arc<python::Runtime>>,
    /// Where ONNX models run.
    onnx_device: OnnxDevice,
    routes: route::Routes,
    log: Arc<std::sync::OnceLock<log::InferenceLog>>,
    /// The feature store deployments with enrichment read; without one they answer
    /// 503.
    features: Option<Arc<dyn enrich::OnlineFeatures>>,
    metrics: metrics::ServingMetrics,
}

/// Who is asking, for the inference log, and the key sticky routing uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Caller<'a> {
    pub actor: &'a str,
    pub request_id: &'a str,
    /// `X-Routing-Key`; else the request's `routing_key` parameter is used.
    pub routing_key: Option<&'a str>,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving").finish_non_exhaustive()
    }
}

impl Serving {
    pub fn new(meta: MetaStore, storage: ObjectStorage, tracking: Tracking) -> Self {
        Serving {
            storage,
            deployments: Deployments::new(meta, tracking.clone()),
            tracking,
            loaded: Arc::default(),
            unservable: Arc::default(),
            load_check: None,
            python: None,
            onnx_device: OnnxDevice::default(),
            routes: route::Routes::default(),
            log: Arc::default(),
            features: None,
            metrics: metrics::ServingMetrics::default(),
        }
    }

    /// The same service reading `features` for deployments with feature enrichment,
    /// in this process; a server without one refuses such deployments' requests with
    /// 503.
    pub fn with_features(mut self, features: Arc<dyn enrich::OnlineFeatures>) -> Self {
        self.features = Some(features);
        self
    }

    /// Refuses a deployment spec one of whose targets cannot be served (its files
    /// refused by every runtime, or its load over budget); loads each target's version
    /// to know (so the first request finds it loaded). Anything else (a missing file,
    /// storage down) is left to the deployment's health probe.
    #[qanat_macros::boxed]
    pub async fn check_servable(
        &self,
        project: &Project,
        spec: &deploy::DeploymentSpec,
    ) -> Result<()> {
        for t in &spec.targets {
            let version = match (&t.version, &t.alias) {
                (Some(v), _) => v.clone(),
                (_, Some(a)) => match self
                    .tracking
                    .version_by_alias(project, &spec.model, a)
                    .await
                {
                    Ok(v) => v.version,
                    Err(_) => continue,
                },
                _ => continue,
            };
            // A first load may build a Python environment for minutes: past the
            // budget the deployment is accepted, and its load goes on in the
            // background (its status says when it answers).
            match tokio::time::timeout(CHECK_BUDGET, self.loaded(project, &spec.model, &version))
                .await
            {
                Ok(Err(e @ Error::Unservable(_))) => return Err(e),
                Ok(_) => {}
                Err(_) => {
                    let me = self.clone();
                    let (project, model) = (project.clone(), spec.model.clone());
                    tokio::spawn(async move {
                        if let Err(e) = me.loaded(&project, &model, &version).await {
                            tracing::warn!(model = %model, %version, error = %e, "a version accepted at deploy could not be loaded");
                        }
                    });
                }
            }
        }
        Ok(())
    }

    /// Loads every ONNX graph in a child process of `launcher` first (the `qanat`
    /// binary, whose `main` calls [`qanat_runtime::onnx::load_check::entry`]), so a
    /// graph that would exhaust memory or spin costs a child, not this server.
    pub fn with_load_check(mut self, launcher: &std::path::Path) -> Self {
        self.load_check = Some(Arc::from(launcher));
        self
    }

    /// Runs ONNX models where `device` says (default: on a GPU when there is one).
    pub fn with_onnx_device(mut self, device: OnnxDevice) -> Self {
        self.onnx_device = device;
        self
    }

    /// Serves MLflow models of no native flavor on the Python runtime ([`python`]).
    pub fn with_python(mut self, settings: python::Settings) -> Self {
        self.python = Some(Arc::new(python::Runtime::new(settings)));
        self
    }

    /// The metric families, for the server's registry.
    pub fn metrics(&self) -> &metrics::ServingMetrics {
        &self.metrics
    }

    /// Starts the background work of a server: the inference log's writer and the
    /// route refresh (every `refresh`).
    pub fn start(&self, refresh: std::time::Duration) {
        self.log.get_or_init(|| {
            log::InferenceLog::start(self.storage.clone(), std::time::Duration::from_secs(1))
        });
        self.spawn_refresh(refresh);
    }

    /// The inference log's counters (zero until [`Serving::start`]).
    pub fn log_stats(&self) -> log::LogStats {
        self.log.get().map(|l| l.stats()).unwrap_or_default()
    }

    /// The newest `limit` inference log records of `name` (a deployment or model).
    #[qanat_macros::boxed]
    pub async fn log_records(
        &self,
        project: &Project,
        name: &str,
        limit: usize,
    ) -> Result<Vec<log::LogRecord>> {
        log::read(&self.storage, project.id.as_str(), name, limit).await
    }

    pub fn deployments(&self) -> &Deployments {
        &self.deployments
    }

    /// The model's versions, newest first (OIP's `versions`).
    #[qanat_macros::boxed]
    pub async fn versions(&self, project: &Project, name: &str) -> Result<Vec<String>> {
        Ok(self
            .tracking
            .versions(project, name)
            .await
            .map_err(|e| not_found(&ObjectRef::unversioned(Kind::Model, name).to_string(), e))?
            .into_iter()
            .map(|v| v.version)
            .collect())
    }

    /// Version `version` of model `name`, loaded (once: versions are immutable).
    #[qanat_macros::boxed]
    pub async fn loaded(
        &self,
        project: &Project,
        name: &str,
        version: &str,
    ) -> Result<Arc<Loaded>> {
        if version.parse::<u64>().map_or(true, |n| n == 0) {
            return Err(Error::Invalid(format!(
                "version '{version}': a model version is a number from 1"
            )));
        }
        let key = (
            project.id.to_string(),
            name.to_string(),
            version.to_string(),
        );
        if let Some(m) = self.cached(&key) {
            // Versions are immutable, a project's regions are not: one loaded before
            // they changed is handed out only while its bytes' region is allowed.
            let location = self.storage.default_location().to_string();
            qanat_governance::check_residency(project, &self.storage.location(&location)?)?;
            return Ok(m);
        }
        // Marked in the registry by an earlier load (in any process, before any
        // restart): refused without reading its files again.
        let marked = self
            .tracking
            .model_version(project, name, version)
            .await
            .map_err(|e| not_found(&ObjectRef::at(Kind::Model, name, version).to_string(), e))?
            .tags
            .into_iter()
            .find(|t| t.key == UNSERVABLE_TAG)
            .map(|t| t.value);
        if let Some(why) = marked.or_else(|| {
            self.unservable
                .lock()
                .ok()
                .and_then(|u| u.get(&key).cloned())
        }) {
            return Err(Error::Unservable(why));
        }
        let loaded = match self.fetch(project, name, version).await {
            Ok(l) => Arc::new(l),
            Err(Fetch::Unservable(why)) => {
                let tag = qanat_tracking::Tag {
                    key: UNSERVABLE_TAG.into(),
                    value: why.clone(),
                };
                if let Err(e) = self
                    .tracking
                    .set_model_version_tag(project, name, version, &tag)
                    .await
                {
                    // Remembered here at least, so this process does not load it again.
                    tracing::warn!(model = name, version, error = %e, "could not mark a version unservable in the registry");
                    if let Ok(mut u) = self.unservable.lock() {
                        u.insert(key, why.clone());
                    }
                }
                return Err(Error::Unservable(why));
            }
            Err(Fetch::Other(e)) => return Err(e),
        };
        self.metrics
            .loaded
            .get_or_create(&metrics::LoadedLabels {
                project: project.name.clone(),
                model: name.to_string(),
                version: version.to_string(),
                runtime: loaded.model.runtime(),
                device: loaded.model.device(),
            })
            .set(1);
        self.loaded
            .lock()
            .map_err(|_| Error::Internal("the model cache lock is poisoned".into()))?
            .insert(key, loaded.clone());
        Ok(loaded)
    }

    fn cached(&self, key: &Key) -> Option<Arc<Loaded>> {
        self.loaded.lock().ok()?.get(key).cloned()
    }

    /// The file `file` among the model files of version `version` of `name` (checked
    /// against the project's residency), or `None` when the version has no such file.
    #[qanat_macros::boxed]
    pub async fn model_file(
        &self,
        project: &Project,
        name: &str,
        version: &str,
        file: &str,
    ) -> Result<Option<bytes::Bytes>> {
        use qanat_core::DomainError;
        let (location, root) = self.model_root(project, name, version).await?;
        let key: ObjectKey = format!("{root}/{file}").parse()?;
        match self.storage.get_bytes(&location, &key).await {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == qanat_core::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::from(e)),
        }
    }

    /// Where version `version` of `name` keeps its files: the storage location and
    /// the key prefix (checked against the project's residency).
    async fn model_root(
        &self,
        project: &Project,
        name: &str,
        version: &str,
    ) -> Result<(String, String)> {
        let it = ObjectRef::at(Kind::Model, name, version);
        let uri = self
            .tracking
            .download_uri(project, name, version)
            .await
            .map_err(|e| not_found(&it.to_string(), e))?;
        let Some(path) = uri.strip_prefix("mlflow-artifacts:") else {
            return Err(Error::NotFound(format!(
                "{it} is stored at {uri}, outside this server's artifacts"
            )));
        };
        let location = self.storage.default_location().to_string();
        qanat_governance::check_residency(project, &self.storage.location(&location)?)?;
        let root = format!(
            "projects/{}/mlflow-artifacts/{}",
            project.id,
            path.trim_matches('/')
        );
        Ok((location, root))
    }

    /// Every file of version `version` of `name`, relative to the model's root;
    /// refused, before any is read, when together they are over `max_bytes`.
    async fn model_files(
        &self,
        project: &Project,
        name: &str,
        version: &str,
        max_bytes: u64,
    ) -> Result<Vec<python::ModelFile>> {
        let (location, root) = self.model_root(project, name, version).await?;
        let prefix: ObjectKey = root.parse()?;
        let listed = self.storage.list(&location, Some(&prefix)).await?;
        let total: u64 = listed.iter().map(|i| i.size).sum();
        if total > max_bytes {
            return Err(Error::Unservable(format!(
                "{} cannot be served: its files take {} MiB, over the {} MiB serving.python.max_model_size allows",
                ObjectRef::at(Kind::Model, name, version),
                total >> 20,
                max_bytes >> 20
            )));
        }
        let mut files = Vec::new();
        for info in listed {
            let Some(rel) = info
                .key
                .strip_prefix(&root)
                .map(|r| r.trim_start_matches('/'))
            else {
                continue;
            };
            let key: ObjectKey = info.key.parse()?;
            let bytes = self.storage.get_bytes(&location, &key).await?;
            files.push((rel.to_string(), bytes));
        }
        Ok(files)
    }

    async fn fetch(
        &self,
        project: &Project,
        name: &str,
        version: &str,
    ) -> std::result::Result<Loaded, Fetch> {
        let read = |file: &'static str| self.model_file(project, name, version, file);
        let it = ObjectRef::at(Kind::Model, name, version);
        let spec = read(qanat_model::package::SPEC).await?;
        let weights = read(qanat_model::package::WEIGHTS).await?;
        if let (Some(spec), Some(weights)) = (spec, weights) {
            let model = NativeModel::from_bytes(&spec, &weights)
                .map_err(|e| Fetch::Unservable(format!("{it} cannot be served: {e}")))?;
            return Ok(Loaded {
                name: name.to_string(),
                version: version.to_string(),
                inputs: oip::input_metadata(&model),
                outputs: oip::output_metadata(&model),
                model: Model::Native(model),
            });
        }
        // A model made elsewhere: its ONNX graph (as `mlflow.onnx.log_model` stores it).
        let Some(onnx) = read(qanat_model::package::ONNX).await? else {
            // An MLflow model: of a tree flavor, served natively; of another, refused
            // (at deploy too) but not marked in the registry: a later Qanat may have a
            // runtime for it. Files that are missing altogether may yet arrive: not
            // found, and tried again.
            let mlmodel = read(qanat_model::package::MLMODEL).await?;
            if let Some(doc) = mlmodel
                .as_deref()
                .and_then(qanat_model::package::MlModelFile::parse)
            {
                let refused = |why: String| {
                    Fetch::Other(Error::Unservable(format!("{it} cannot be served: {why}")))
                };
                // Natively when its flavor's file is one read here; else (a pickled
                // or skops wrapper) on the Python runtime, when there is one.
                let native = match flavors::plan(&doc) {
                    // Configured to serve every pyfunc on Python.
                    _ if self.python.as_ref().is_some_and(|p| p.settings.only) => None,
                    Ok(plan) => plan,
                    Err(why) if self.python.is_none() => return Err(refused(why)),
                    Err(_) => None,
                };
                if let Some(plan) = native {
                    let sklearn = plan.flavor == "sklearn";
                    let Some(bytes) = self.model_file(project, name, version, &plan.file).await?
                    else {
                        return Err(Fetch::Other(Error::NotFound(format!(
                            "{it} has no {} although its MLmodel names it",
                            plan.file
                        ))));
                    };
                    // Reading a large forest takes a while: off the async workers.
                    let mlmodel = doc.clone();
                    let model = tokio::task::spawn_blocking(move || {
                        let doc = mlmodel;
                        let m = flavors::load(&plan, &bytes, &doc)?;
                        let inputs = flavors::inputs(&m, &doc);
                        Ok::<_, String>((m, inputs))
                    })
                    .await
                    .map_err(|e| {
                        Fetch::Other(Error::Internal(format!("loading the model stopped: {e}")))
                    })?;
                    match model {
                        Ok((model, inputs)) => {
                            return Ok(Loaded {
                                name: name.to_string(),
                                version: version.to_string(),
                                inputs,
                                outputs: flavors::outputs(&model),
                                model: Model::Trees(model),
                            })
                        }
                        // A scikit-learn pickle of estimators not read natively: on
                        // the Python runtime, when there is one.
                        Err(why) if sklearn && self.python.is_some() => {
                            tracing::info!(model = %it, reason = %why, "served by the Python runtime: not read natively");
                        }
                        Err(why) if sklearn => {
                            return Err(refused(format!(
                                "{why}; this server reads scikit-learn's scalers, imputer, one-hot encoder, trees, forests, gradient boosting and linear models natively, and has no Python runtime for the rest ([serving.python] enabled = false)"
                            )))
                        }
                        Err(why) => return Err(refused(why)),
                    }
                }
                if let Some(runtime) = &self.python {
                    if let Some(plan) = python::plan(&doc).map_err(refused)? {
                        let key = format!("{}/{name}/{version}", project.id);
                        // Versions are immutable: files already written are not
                        // read from storage again.
                        let files = if runtime.has_model(&key) {
                            Vec::new()
                        } else {
                            let max = runtime.settings.max_model_bytes;
                            self.model_files(project, name, version, max).await?
                        };
                        let model = runtime
                            .load(it.to_string(), &key, plan.clone(), files)
                            .await
                            .map_err(refused)?;
                        return Ok(Loaded {
                            name: name.to_string(),
                            version: version.to_string(),
                            inputs: python::inputs(&plan),
                            outputs: python::outputs(&plan),
                            model: Model::Python(model),
                        });
                    }
                }
            }
            return Err(Fetch::Other(nothing_to_serve(&it, mlmodel.as_deref())));
        };
        let unservable =
            |e: qanat_runtime::Error| Fetch::Unservable(format!("{it} cannot be served: {e}"));
        // Tensors kept in files beside the graph (what `mlflow.onnx.log_model` writes
        // by default): read in, bounded, so the graph stands alone.
        let external = qanat_runtime::onnx::external_files(&onnx).map_err(unservable)?;
        let onnx = if external.is_empty() {
            onnx
        } else {
            let mut files = std::collections::HashMap::new();
            let mut total = onnx.len();
            for file in external {
                let Some(bytes) = self.model_file(project, name, version, &file).await? else {
                    return Err(Fetch::Other(Error::NotFound(format!(
                        "{it} keeps ONNX tensors in '{file}', which it does not have"
                    ))));
                };
                total = total.saturating_add(bytes.len());
                if total > MAX_ONNX_BYTES {
                    return Err(Fetch::Unservable(format!(
                        "{it} cannot be served: its ONNX graph and external data take over {} GiB",
                        MAX_ONNX_BYTES >> 30
                    )));
                }
                files.insert(file, bytes.to_vec());
            }
            let joined = tokio::task::spawn_blocking(move || {
                qanat_runtime::onnx::with_external(&onnx, &files)
            })
            .await
            .map_err(|e| Fetch::Other(Error::Internal(format!("reading the model stopped: {e}"))))?
            .map_err(unservable)?;
            bytes::Bytes::from(joined)
        };
        // The graph's declared shapes, sizes and node count are checked before tract
        // reads it (qanat_runtime::onnx::check_limits); then a child loads it first.
        if let Some(launcher) = self.load_check.as_deref() {
            first_load(launcher, &onnx).await.map_err(|f| match f {
                Fetch::Unservable(why) => {
                    Fetch::Unservable(format!("{it} cannot be served: {why}"))
                }
                other => other,
            })?;
        }
        let device = self.onnx_device;
        let model = tokio::task::spawn_blocking(move || load_onnx(&onnx, device))
            .await
            .map_err(|e| Fetch::Other(Error::Internal(format!("loading the model stopped: {e}"))))?
            .map_err(|e| match e {
                // The GPU this server was told to use is missing or failed: a fault of
                // the server, not of the version.
                e @ qanat_runtime::Error::Unavailable(_) => {
                    Fetch::Other(Error::Unavailable(format!("{it} cannot be served: {e}")))
                }
                e => unservable(e),
            })?;
        Ok(Loaded {
            name: name.to_string(),
            version: version.to_string(),
            inputs: oip::onnx_input_metadata(model.graph(), model.layout()),
            outputs: oip::onnx_output_metadata(model.graph()),
            model: Model::Onnx(model),
        })
    }
}

/// Loads an ONNX graph where `device` says: on a GPU through onnxruntime's CUDA
/// provider, or on tract.
fn load_onnx(onnx: &[u8], device: OnnxDevice) -> qanat_runtime::Result<OnnxModel> {
    use qanat_runtime::onnx::onnxruntime::{Device, OrtTensorModel};
    use qanat_runtime::onnx::tract::TensorModel;
    let why_not = match device {
        OnnxDevice::Cpu => None,
        OnnxDevice::Cuda(id) => {
            return OrtTensorModel::load(onnx, Device::Cuda(id))
                .map(OnnxModel::Ort)
                .map_err(|e| match e {
                    qanat_runtime::Error::Unavailable(why) => {
                        qanat_runtime::Error::Unavailable(format!(
                            "ONNX models run on cuda:{id} here (serving.onnx_device), and {why}"
                        ))
                    }
                    e => e,
                })
        }
        OnnxDevice::Auto if !qanat_runtime::onnx::onnxruntime::gpu_present() => None,
        OnnxDevice::Auto => match OrtTensorModel::load(onnx, Device::Cuda(0)) {
            Ok(m) => return Ok(OnnxModel::Ort(m)),
            Err(e) => {
                tracing::warn!(error = %e, "a GPU is present but this ONNX model runs on the CPU");
                Some(e.to_string())
            }
        },
    };
    TensorModel::load(onnx).map(|m| OnnxModel::Tract(m, why_not))
}

/// Why a version with neither Qanat's model files nor an ONNX graph is not served:
/// unservable when its `MLmodel` lists MLflow flavors (named, with what is served
/// instead); not found when it has no model files at all.
fn nothing_to_serve(it: &ObjectRef, mlmodel: Option<&[u8]>) -> Error {
    use qanat_model::package::{ONNX, SPEC, WEIGHTS};
    let served = format!(
        "this server serves models trained by `qanat train` ({SPEC} and {WEIGHTS}), \
         ONNX graphs ({ONNX}, as `mlflow.onnx.log_model` stores them), XGBoost and \
         LightGBM boosters (`mlflow.xgboost`, `mlflow.lightgbm`), scikit-learn's \
         common estimators (`mlflow.sklearn`), and, with the Python runtime, any \
         `python_function` model"
    );
    let flavors = mlmodel
        .map(qanat_model::package::flavors)
        .unwrap_or_default();
    if flavors.is_empty() {
        Error::NotFound(format!(
            "{it} has none of {SPEC}, {WEIGHTS} or {ONNX}: there is nothing to serve; {served}"
        ))
    } else {
        Error::Unservable(format!(
            "{it} cannot be served: it is an MLflow model with the flavors {}, which no \
             runtime here loads yet; {served} (a scikit-learn model can be logged as \
             ONNX, e.g. converted with skl2onnx)",
            flavors.join(", ")
        ))
    }
}

/// Longest a child may take to load a graph.
const LOAD_CHECK_WALL: std::time::Duration = std::time::Duration::from_secs(180);

/// Loads `onnx` in a child process of `launcher` under its budget. A graph the child
/// refused, or whose load broke the budget, is unservable; a child that could not be
/// started is this server's trouble, tried again next time.
async fn first_load(
    launcher: &std::path::Path,
    onnx: &bytes::Bytes,
) -> std::result::Result<(), Fetch> {
    use qanat_runtime::onnx::load_check::{CPU_SECS, ENTRY, MEMORY_BYTES, REFUSED};
    use std::os::unix::process::ExitStatusExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut child = tokio::process::Command::new(launcher)
        .arg(ENTRY)
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            Fetch::Other(Error::Internal(format!(
                "starting a process to load a model: {e}"
            )))
        })?;
    if let Some(pid) = child.id() {
        // Under memory pressure the kernel should kill the load, not the server.
        let _ = std::fs::write(format!("/proc/{pid}/oom_score_adj"), "1000");
    }
    let mut stdin = child.stdin.take();
    let mut stderr = child.stderr.take();
    let graph = onnx.clone();
    let feed = async move {
        if let Some(s) = stdin.as_mut() {
            let _ = s.write_all(&graph).await;
        }
        drop(stdin);
    };
    // What it says is kept to its first 4 KiB (a graph's names can be long).
    let said = async move {
        let mut buf = Vec::new();
        if let Some(e) = stderr.as_mut() {
            let _ = e.take(4096).read_to_end(&mut buf).await;
            let _ = tokio::io::copy(e, &mut tokio::io::sink()).await;
        }
        buf
    };
    let waited = async {
        let (_, said, status) = tokio::join!(feed, said, child.wait());
        status.map(|s| (s, said))
    };
    let (status, said) = tokio::time::timeout(LOAD_CHECK_WALL, waited)
        .await
        .map_err(|_| {
            Fetch::Unservable(format!(
                "loading it took over {} s, and was stopped",
                LOAD_CHECK_WALL.as_secs()
            ))
        })?
        .map_err(|e| Fetch::Other(Error::Internal(format!("waiting for a model's load: {e}"))))?;
    let said = String::from_utf8_lossy(&said).into_owned();
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok(()),
        (Some(c), _) if c == i32::from(REFUSED) => Err(Fetch::Unservable(said)),
        (_, Some(sig)) => Err(Fetch::Unservable(format!(
            "loading it went over its budget ({} GiB of memory, {CPU_SECS} s of CPU) and was stopped by signal {sig}",
            MEMORY_BYTES >> 30
        ))),
        (code, _) => {
            // A runtime that crashed on the graph: its words stay in the server's log.
            tracing::warn!(?code, said = %said, "a model's first load failed");
            Err(Fetch::Unservable(format!(
                "the runtime failed while loading it (it asked for more than its budget of {} GiB, or could not read it)",
                MEMORY_BYTES >> 30
            )))
        }
    }
}

/// Why a version's files did not load: the files themselves (kept, so the version is
/// refused at once from then on), or anything else (tried again next time).
enum Fetch {
    Unservable(String),
    Other(Error),
}

impl From<Error> for Fetch {
    fn from(e: Error) -> Self {
        Fetch::Other(e)
    }
}

/// A registry "not found" as serving's own, naming what was asked for.
pub(crate) fn not_found(what: &str, e: qanat_tracking::Error) -> Error {
    use qanat_core::DomainError;
    if e.kind() == qanat_core::ErrorKind::NotFound {
        // `what` is a reference (`model:NAME`, `model:NAME@VERSION`), as every message
        // writes one.
        Error::NotFound(format!("{what} not found: {e}"))
    } else {
        Error::Tracking(e)
    }
}

/// What the inference log's pseudonyms of personal-data inputs are keyed for, in
/// project `id` (a drift reference made from a training set keys its personal-data
/// columns the same way, so they compare).
pub fn log_pii_purpose(id: &qanat_core::ProjectId) -> String {
    format!("pii:{id}")
}

#[cfg(test)]
mod tests {
    use super::OnnxDevice;

    #[test]
    fn onnx_devices_parse_and_a_wrong_one_says_what_to_give() {
        assert_eq!("auto".parse::<OnnxDevice>(), Ok(OnnxDevice::Auto));
        assert_eq!("cpu".parse::<OnnxDevice>(), Ok(OnnxDevice::Cpu));
        assert_eq!("cuda".parse::<OnnxDevice>(), Ok(OnnxDevice::Cuda(0)));
        assert_eq!("cuda:3".parse::<OnnxDevice>(), Ok(OnnxDevice::Cuda(3)));
        for bad in ["cuda:-1", "tpu", "cuda:x", ""] {
            let e = bad.parse::<OnnxDevice>().expect_err(bad);
            assert!(e.contains("cpu, auto, cuda or cuda:<device number>"), "{e}");
        }
    }
}
