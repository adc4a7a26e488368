//! Serving: registered model versions answered in the Open Inference Protocol (KServe
//! v2, the protocol Triton, KServe and MLServer speak), so their clients and load tools
//! work unchanged.
//!
//! A model is a registered model of the project; its OIP versions are the registry's
//! versions. [`Serving::model`] loads a version's package from the project's artifact
//! storage (checked against the project's residency) onto the native runtime, once, and
//! keeps it: versions are immutable. [`oip`] holds the wire types and turns request
//! tensors into the table the runtime takes, and its outputs into response tensors.
//!
//! State: the first slice of issue 18 — REST health, metadata and JSON inference for
//! models trained by `qanat train` (and versions `qanat optimize` made from them).
//! Deployments, dynamic batching, gRPC, the binary tensor extension and ONNX models
//! made elsewhere come next (docs/serving.md).

pub mod oip;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use qanat_governance::Project;
use qanat_runtime::package::NativeModel;
use qanat_store::{ObjectKey, ObjectStorage};
use qanat_tracking::Tracking;

/// What serving can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller's request is wrong; the message says what to fix.
    #[error("{0}")]
    Invalid(String),
    /// No such model or version (or one that cannot be served: the message says why).
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Tracking(#[from] qanat_tracking::Error),
    #[error(transparent)]
    Store(#[from] qanat_store::Error),
    #[error(transparent)]
    Governance(#[from] qanat_governance::Error),
    #[error(transparent)]
    Runtime(#[from] qanat_runtime::Error),
    #[error("{0}")]
    Internal(String),
}

impl qanat_core::DomainError for Error {
    fn kind(&self) -> qanat_core::ErrorKind {
        use qanat_core::ErrorKind as K;
        match self {
            Error::Invalid(_) => K::Invalid,
            Error::NotFound(_) => K::NotFound,
            Error::Tracking(e) => e.kind(),
            Error::Store(e) => e.kind(),
            Error::Governance(e) => e.kind(),
            Error::Runtime(e) => e.kind(),
            Error::Internal(_) => K::Internal,
        }
    }

    fn code(&self) -> Option<&'static str> {
        match self {
            Error::Tracking(e) => e.code(),
            Error::Store(e) => e.code(),
            Error::Governance(e) => e.code(),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A version ready to answer: its model on the native runtime and its tensors.
#[derive(Debug)]
pub struct Loaded {
    pub name: String,
    pub version: String,
    pub model: NativeModel,
    pub inputs: Vec<oip::TensorMetadata>,
    pub outputs: Vec<oip::TensorMetadata>,
}

/// The platform name metadata reports.
pub const PLATFORM: &str = "qanat_native";

type Key = (String, String, String);

/// The serving domain: loads versions from the registry and answers for them.
#[derive(Clone)]
pub struct Serving {
    storage: ObjectStorage,
    tracking: Tracking,
    loaded: Arc<Mutex<HashMap<Key, Arc<Loaded>>>>,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving").finish_non_exhaustive()
    }
}

impl Serving {
    pub fn new(storage: ObjectStorage, tracking: Tracking) -> Self {
        Serving {
            storage,
            tracking,
            loaded: Arc::default(),
        }
    }

    /// The model's versions, newest first (OIP's `versions`).
    pub async fn versions(&self, project: &Project, name: &str) -> Result<Vec<String>> {
        Ok(self
            .tracking
            .versions(project, name)
            .await
            .map_err(|e| not_found(name, e))?
            .into_iter()
            .map(|v| v.version)
            .collect())
    }

    /// Version `version` of `name`, or its newest version, loaded (once).
    pub async fn model(
        &self,
        project: &Project,
        name: &str,
        version: Option<&str>,
    ) -> Result<Arc<Loaded>> {
        let version = match version {
            Some(v) => {
                if v.parse::<u64>().map_or(true, |n| n == 0) {
                    return Err(Error::Invalid(format!(
                        "version '{v}': a model version is a number from 1"
                    )));
                }
                v.to_string()
            }
            None => self
                .versions(project, name)
                .await?
                .into_iter()
                .next()
                .ok_or_else(|| Error::NotFound(format!("model '{name}' has no versions")))?,
        };
        let key = (project.id.to_string(), name.to_string(), version.clone());
        if let Some(m) = self.cached(&key) {
            return Ok(m);
        }
        let loaded = Arc::new(self.load(project, name, &version).await?);
        self.loaded
            .lock()
            .map_err(|_| Error::Internal("the model cache lock is poisoned".into()))?
            .insert(key, loaded.clone());
        Ok(loaded)
    }

    fn cached(&self, key: &Key) -> Option<Arc<Loaded>> {
        self.loaded.lock().ok()?.get(key).cloned()
    }

    async fn load(&self, project: &Project, name: &str, version: &str) -> Result<Loaded> {
        let uri = self
            .tracking
            .download_uri(project, name, version)
            .await
            .map_err(|e| not_found(&format!("{name} version {version}"), e))?;
        let Some(path) = uri.strip_prefix("mlflow-artifacts:") else {
            return Err(Error::NotFound(format!(
                "model '{name}' version {version} is stored at {uri}, outside this server's artifacts"
            )));
        };
        let path = path.trim_matches('/');
        let location = self.storage.default_location().to_string();
        qanat_governance::check_residency(project, &self.storage.location(&location)?)?;
        let read = |file: &'static str| {
            let key = format!("projects/{}/mlflow-artifacts/{path}/{file}", project.id);
            let storage = self.storage.clone();
            let location = location.clone();
            async move {
                let key: ObjectKey = key.parse()?;
                match storage.get_bytes(&location, &key).await {
                    Ok(b) => Ok(Some(b)),
                    Err(e) if e.kind() == qanat_core::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(Error::from(e)),
                }
            }
        };
        use qanat_core::DomainError;
        let spec = read(qanat_runtime::package::SPEC).await?;
        let weights = read(qanat_runtime::package::WEIGHTS).await?;
        let (Some(spec), Some(weights)) = (spec, weights) else {
            return Err(Error::NotFound(format!(
                "model '{name}' version {version} has no {} and {}: this server serves models \
                 trained by `qanat train` (ONNX models made elsewhere are not served yet)",
                qanat_runtime::package::SPEC,
                qanat_runtime::package::WEIGHTS
            )));
        };
        let model = NativeModel::from_bytes(&spec, &weights)?;
        Ok(Loaded {
            name: name.to_string(),
            version: version.to_string(),
            inputs: oip::input_metadata(&model),
            outputs: oip::output_metadata(&model),
            model,
        })
    }

    /// Answers `request` with version `version` (or the newest) of `name`; the model
    /// runs off the async runtime.
    pub async fn infer(
        &self,
        project: &Project,
        name: &str,
        version: Option<&str>,
        request: oip::InferRequest,
    ) -> Result<oip::InferResponse> {
        let loaded = self.model(project, name, version).await?;
        tokio::task::spawn_blocking(move || oip::infer(&loaded, request))
            .await
            .map_err(|e| Error::Internal(format!("inference stopped: {e}")))?
    }
}

/// A registry "not found" as serving's own, naming what was asked for.
fn not_found(what: &str, e: qanat_tracking::Error) -> Error {
    use qanat_core::DomainError;
    if e.kind() == qanat_core::ErrorKind::NotFound {
        Error::NotFound(format!("model '{what}' not found: {e}"))
    } else {
        Error::Tracking(e)
    }
}
