//! Feature enrichment: a deployment that names a feature service takes entity keys
//! (the service's join keys) as its inputs, and the server reads the entities' online
//! features in this process (no HTTP hop) before the model's own preprocessing.
//!
//! An input the request gives itself wins over the stored feature of the same name
//! (a request-time feature). A feature that is missing, null or older than its view's
//! ttl follows the deployment's policy: `reject` answers 400 naming the entity and the
//! feature; `default` uses the declared default, or null (which the model's
//! preprocessing imputes as it did in training).

use std::future::Future;
use std::pin::Pin;

use qanat_governance::Project;
use serde_json::Value;

use crate::oip::{InferRequest, RequestInput, MAX_ROWS};
pub use qanat_types::serving::{Enrichment, Missing};

use crate::{Error, Loaded, Result};

/// The online feature store, as serving reads it. The binary wires Qanat's feature
/// store in (its in-process reads: no HTTP hop), so serving does not depend on it.
pub trait OnlineFeatures: Send + Sync + 'static {
    /// The join keys of feature service `service`, each once, in the order its
    /// features name them, typed as OIP datatypes (`INT64`, `FP64`, `BYTES`, …).
    fn keys<'a>(&'a self, project: &'a Project, service: &'a str) -> Pending<'a, Vec<Key>>;

    /// The online features of `service` for `entities` (per join key, one value per
    /// row), PII included (the server audits and pseudonymizes what it logs).
    fn read<'a>(
        &'a self,
        project: &'a Project,
        service: &'a str,
        entities: Vec<(String, Vec<Value>)>,
    ) -> Pending<'a, FeatureRows>;
}

/// What an [`OnlineFeatures`] call answers, later.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// A join key of a feature service and its OIP datatype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub name: String,
    pub datatype: String,
}

/// The features read for a request's entities, column-major: the entity keys'
/// columns first, then one per feature of the service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FeatureRows {
    pub names: Vec<String>,
    pub columns: Vec<FeatureColumn>,
    /// Per column, whether the feature is personal data.
    pub pii: Vec<bool>,
}

/// One column of [`FeatureRows`]: per entity, its value and status (`PRESENT`,
/// `NULL_VALUE`, `NOT_FOUND`, `OUTSIDE_MAX_AGE`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FeatureColumn {
    pub values: Vec<Value>,
    pub statuses: Vec<String>,
}

/// The inputs a request to an enriched deployment carries: the feature service's join
/// keys, typed as OIP datatypes, one value per row.
pub(crate) async fn key_inputs(
    features: &dyn OnlineFeatures,
    project: &Project,
    spec: &Enrichment,
) -> Result<Vec<crate::oip::TensorMetadata>> {
    Ok(features
        .keys(project, &spec.service)
        .await?
        .into_iter()
        .map(|k| crate::oip::TensorMetadata {
            name: k.name,
            datatype: k.datatype,
            shape: vec![-1, 1],
        })
        .collect())
}

/// A request's entities with their online features, read once and shared by the
/// version that answers and its shadows (which may take other inputs).
#[derive(Debug)]
pub(crate) struct Fetched {
    /// The request without its key inputs.
    base: InferRequest,
    /// The entity key inputs, as sent.
    pub(crate) keys: Vec<RequestInput>,
    online: FeatureRows,
    rows: usize,
}

/// Reads the online features of `request`'s entities: every input that is not one
/// of `loaded`'s model inputs is an entity key.
pub(crate) async fn fetch(
    features: &dyn OnlineFeatures,
    project: &Project,
    spec: &Enrichment,
    deployment: &str,
    loaded: &Loaded,
    mut request: InferRequest,
) -> Result<Fetched> {
    let model_inputs = &loaded.inputs;
    let (given, keys): (Vec<RequestInput>, Vec<RequestInput>) = std::mem::take(&mut request.inputs)
        .into_iter()
        .partition(|i| model_inputs.iter().any(|m| m.name == i.name));
    if keys.is_empty() {
        return Err(Error::Invalid(format!(
            "deployment '{deployment}' reads its model's inputs from feature service '{}': send the entity keys (the service's join keys) as inputs",
            spec.service
        )));
    }
    let mut rows = None;
    let mut entities = Vec::with_capacity(keys.len());
    for k in &keys {
        let n = match k.shape[..] {
            [n] | [n, 1] => usize::try_from(n).ok().filter(|&n| n <= MAX_ROWS),
            _ => None,
        }
        .ok_or_else(|| {
            Error::Invalid(format!(
                "entity key input '{}' has shape {:?}: a key input is [N] or [N, 1] with N at most {MAX_ROWS}",
                k.name, k.shape
            ))
        })?;
        if rows.is_some_and(|r| r != n) {
            return Err(Error::Invalid(format!(
                "entity key input '{}' has {n} rows but another input has {}: every input carries the same rows",
                k.name,
                rows.unwrap_or_default()
            )));
        }
        rows = Some(n);
        let have = k.element_count();
        if have != n {
            return Err(Error::Invalid(format!(
                "entity key input '{}' has shape {:?} but {have} data values",
                k.name, k.shape
            )));
        }
        entities.push((k.name.clone(), k.elements().map(|e| e.to_json()).collect()));
    }
    let rows = rows.unwrap_or_default();
    for g in &given {
        let n = g.shape.first().and_then(|&n| usize::try_from(n).ok());
        if n != Some(rows) {
            return Err(Error::Invalid(format!(
                "input '{}' has shape {:?}, but the entity keys give {rows} rows",
                g.name, g.shape
            )));
        }
    }
    request.inputs = given;
    let online = if rows == 0 {
        FeatureRows::default()
    } else {
        features.read(project, &spec.service, entities).await?
    };
    Ok(Fetched {
        base: request,
        keys,
        online,
        rows,
    })
}

impl Fetched {
    /// The request `loaded` takes: its inputs from the request where given, else from
    /// the online features, with `spec`'s policy for what is missing.
    pub(crate) fn for_model(
        &self,
        loaded: &Loaded,
        spec: &Enrichment,
        deployment: &str,
    ) -> Result<InferRequest> {
        let names = &self.online.names;
        let first_feature = self.keys.len().min(names.len());
        let mut inputs = Vec::with_capacity(loaded.inputs.len());
        for want in &loaded.inputs {
            if let Some(g) = self.base.inputs.iter().find(|g| g.name == want.name) {
                inputs.push(g.clone());
                continue;
            }
            let Some(col) = names[first_feature..]
                .iter()
                .position(|n| *n == want.name)
                .map(|i| &self.online.columns[first_feature + i])
            else {
                return Err(Error::Invalid(format!(
                    "model input '{}' is neither in the request nor a feature of service '{}' (it gives {})",
                    want.name,
                    spec.service,
                    names[first_feature..].join(", ")
                )));
            };
            if want.shape[1..].iter().product::<i64>() != 1 {
                return Err(Error::Invalid(format!(
                    "model input '{}' is {:?}: features fill inputs of one value a row",
                    want.name, want.shape
                )));
            }
            let text = want.datatype == "BYTES";
            let mut data = Vec::with_capacity(self.rows);
            for (i, (v, status)) in col.values.iter().zip(&col.statuses).enumerate() {
                let v = if status == "PRESENT" {
                    v.clone()
                } else {
                    match spec.missing {
                        Missing::Reject => {
                            return Err(Error::Invalid(format!(
                                "entity {}: feature '{}' is {status}, and deployment '{deployment}' rejects requests with missing features (set missing: default to use a default)",
                                self.entity(i),
                                want.name
                            )))
                        }
                        Missing::Default => spec.defaults.get(&want.name).cloned().unwrap_or(Value::Null),
                    }
                };
                data.push(match v {
                    Value::Bool(b) if !text => Value::from(u8::from(b)),
                    Value::Number(n) if text => Value::String(n.to_string()),
                    Value::Bool(b) if text => Value::String(b.to_string()),
                    v => v,
                });
            }
            inputs.push(RequestInput {
                name: want.name.clone(),
                shape: std::iter::once(self.rows as i64)
                    .chain(want.shape[1..].iter().copied())
                    .collect(),
                datatype: if text {
                    "BYTES".into()
                } else {
                    want.datatype.clone()
                },
                parameters: None,
                data: Value::Array(data),
                raw: None,
            });
        }
        Ok(InferRequest {
            inputs,
            ..self.base.clone()
        })
    }

    /// The names of the PII features read.
    pub(crate) fn pii(&self) -> impl Iterator<Item = &String> {
        self.online
            .names
            .iter()
            .zip(&self.online.pii)
            .filter(|(_, p)| **p)
            .map(|(n, _)| n)
    }

    /// Entity `i` as `key=value, ...`, for messages.
    fn entity(&self, i: usize) -> String {
        let mut parts = Vec::new();
        for k in &self.keys {
            if let Some(v) = k.elements().nth(i) {
                parts.push(format!("{}={v}", k.name));
            }
        }
        parts.join(", ")
    }
}
