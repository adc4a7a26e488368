//! Reference profiles: what a model version's live traffic is compared with.
//!
//! A model Qanat trained carries `reference_profile.json` among its files. A version
//! registered from elsewhere (the MLflow client) gets one computed by the platform
//! when it is registered, from the Qanat dataset version its run logged as its
//! training input (`mlflow.log_input` with a `qanat://<project>/<dataset>@<n>`
//! source): the columns of the model's signature, and its one output column as the
//! target when the table has it. That profile is kept under the monitor's own keys;
//! the run's artifacts stay as the client wrote them.

use std::sync::Arc;

use futures::StreamExt;
use qanat_governance::Project;
use qanat_model::package::REFERENCE_PROFILE;
use qanat_store::ObjectKey;
use tokio::io::AsyncWriteExt;

use crate::profile::TableProfile;
use crate::table::{self, TableFile};
use crate::{Error, Monitors, Result};

/// Where the platform keeps the profile it computed for a version.
fn derived_key(project: &Project, model: &str, version: &str) -> Result<ObjectKey> {
    Ok(format!(
        "projects/{}/monitor/references/{model}/{version}.json",
        project.id
    )
    .parse()?)
}

fn parse(bytes: &[u8], model: &str, version: &str) -> Result<TableProfile> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::Internal(format!(
            "the reference profile of {model} version {version} does not parse: {e}"
        ))
    })
}

impl Monitors {
    /// The reference profile of version `version` of `model`: the one stored with its
    /// files, else the one the platform computed from its training dataset (computed
    /// now if it is missing). `None` when there is neither and none can be computed.
    pub(crate) async fn reference(
        &self,
        project: &Project,
        model: &str,
        version: &str,
    ) -> Result<Option<Arc<TableProfile>>> {
        let key = (
            project.id.to_string(),
            model.to_string(),
            version.to_string(),
        );
        let cached = self
            .inner
            .references
            .lock()
            .ok()
            .and_then(|m| m.get(&key).cloned());
        if let Some(hit) = cached {
            return Ok(hit);
        }
        let profile = match self.stored_reference(project, model, version).await? {
            Some(p) => Some(p),
            None => match self.derive_reference(project, model, version).await {
                Ok(p) => p,
                // Not cached: a dataset that could not be read now may be later.
                Err(e) => {
                    tracing::warn!(model, version, error = %e, "no reference profile could be computed");
                    return Ok(None);
                }
            },
        }
        .map(Arc::new);
        if let Ok(mut m) = self.inner.references.lock() {
            m.insert(key, profile.clone());
        }
        Ok(profile)
    }

    /// Computes and stores the reference profile of a newly registered version that
    /// has none among its files. Returns what the profile holds (`None`: the version
    /// has one already, or its run logged no Qanat training dataset).
    #[qanat_macros::boxed]
    pub async fn prepare_reference(
        &self,
        project: &Project,
        model: &str,
        version: &str,
    ) -> Result<Option<TableProfile>> {
        if self.stored_bytes(project, model, version).await?.is_some() {
            return Ok(None);
        }
        self.derive_reference(project, model, version).await
    }

    async fn stored_reference(
        &self,
        project: &Project,
        model: &str,
        version: &str,
    ) -> Result<Option<TableProfile>> {
        let Some(bytes) = self.stored_bytes(project, model, version).await? else {
            return Ok(None);
        };
        let (model, version) = (model.to_string(), version.to_string());
        tokio::task::spawn_blocking(move || parse(&bytes, &model, &version))
            .await
            .map_err(|e| Error::Internal(format!("reading a reference profile: {e}")))?
            .map(Some)
    }

    /// The stored profile's bytes, unparsed: the one among the model's files, else
    /// the one the platform computed.
    async fn stored_bytes(
        &self,
        project: &Project,
        model: &str,
        version: &str,
    ) -> Result<Option<bytes::Bytes>> {
        let serving = &self.inner.serving;
        if let Some(b) = serving
            .model_file(project, model, version, REFERENCE_PROFILE)
            .await?
        {
            return Ok(Some(b));
        }
        let location = self.inner.storage.default_location().to_string();
        match self
            .inner
            .storage
            .get_bytes(&location, &derived_key(project, model, version)?)
            .await
        {
            Ok(b) => Ok(Some(b)),
            Err(e) if qanat_core::DomainError::kind(&e) == qanat_core::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Profiles the training dataset the version's run logged, and stores the profile
    /// under the monitor's keys.
    async fn derive_reference(
        &self,
        project: &Project,
        model: &str,
        version: &str,
    ) -> Result<Option<TableProfile>> {
        let Some((dataset, n)) = self
            .inner
            .tracking
            .training_dataset(project, model, version)
            .await?
        else {
            return Ok(None);
        };
        let datasets = &self.inner.datasets;
        let training = qanat_core::ObjectRef::dataset(dataset.as_str(), n);
        let ds = datasets.get(project, &dataset).await?;
        let v = datasets
            .resolve(&ds, &qanat_core::Selector::Version(n))
            .await?;
        let tables: Vec<_> = datasets
            .manifest(&ds, &v)
            .await?
            .files
            .into_iter()
            .filter(|f| {
                let lower = f.path.to_ascii_lowercase();
                [".csv", ".parquet", ".pq"]
                    .iter()
                    .any(|e| lower.ends_with(e))
            })
            .collect();
        let [file] = <[_; 1]>::try_from(tables).map_err(|t| {
            Error::Invalid(format!(
                "{training} holds {} table files; a reference profile is made from a dataset of one .csv or .parquet file",
                t.len()
            ))
        })?;
        let mlmodel = self
            .inner
            .serving
            .model_file(project, model, version, qanat_model::package::MLMODEL)
            .await?;
        let side = |s: &str| {
            mlmodel
                .as_deref()
                .and_then(|m| qanat_model::package::signature_columns(m, s))
        };
        let inputs = side("inputs");
        let target = side("outputs").and_then(|o| match o.as_slice() {
            [one] => Some(one.clone()),
            _ => None,
        });

        let dir =
            tempfile::tempdir().map_err(|e| Error::Internal(format!("a staging folder: {e}")))?;
        let ext = std::path::Path::new(&file.path)
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("csv")
            .to_ascii_lowercase();
        let path = dir.path().join(format!("training.{ext}"));
        // Personal-data columns (declared or found) go into the reference as the
        // inference log's pseudonyms: a drift report, which any viewer reads, shows
        // no value of them, and their categories still compare with the log's.
        let protected = datasets.pii_columns(&ds, &v).await?.remove(&file.path);
        if let Some(t) = protected {
            let hidden = datasets
                .pseudonymized_file_for(
                    &ds,
                    &file,
                    t.columns,
                    qanat_serving::log_pii_purpose(&project.id),
                )
                .await?;
            tokio::fs::copy(hidden.file.path(), &path)
                .await
                .map_err(|e| Error::Internal(format!("staging {training}: {e}")))?;
        } else {
            let mut out = tokio::fs::File::create(&path)
                .await
                .map_err(|e| Error::Internal(format!("staging {training}: {e}")))?;
            let mut stream = std::pin::pin!(datasets.file_stream(&ds, file));
            while let Some(chunk) = stream.next().await {
                out.write_all(&chunk?)
                    .await
                    .map_err(|e| Error::Internal(format!("staging {training}: {e}")))?;
            }
            out.flush()
                .await
                .map_err(|e| Error::Internal(format!("staging {training}: {e}")))?;
        }

        let keep_target = target.clone();
        let mut profile = tokio::task::spawn_blocking(move || {
            let keep = |c: &str| {
                inputs.as_ref().is_none_or(|i| i.iter().any(|x| x == c))
                    || keep_target.as_deref() == Some(c)
            };
            let profile = table::reference_where(&TableFile::new(&path), keep);
            drop(dir);
            profile
        })
        .await
        .map_err(|e| Error::Internal(format!("profiling a training set stopped: {e}")))?
        .map_err(|e| Error::Invalid(format!("{training}: {e}")))?;
        profile.target = target.filter(|t| profile.columns.iter().any(|(c, _)| c == t));

        let location = self.inner.storage.default_location().to_string();
        qanat_governance::check_residency(project, &self.inner.storage.location(&location)?)?;
        let bytes = serde_json::to_vec(&profile)
            .map_err(|e| Error::Internal(format!("writing a reference profile: {e}")))?;
        self.inner
            .storage
            .put_bytes(
                &location,
                &derived_key(project, model, version)?,
                bytes::Bytes::from(bytes),
            )
            .await?;
        tracing::info!(model, version, dataset = %training, columns = profile.columns.len(), "reference profile computed from the training dataset");
        Ok(Some(profile))
    }
}
