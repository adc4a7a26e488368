//! Feature enrichment wired: serving reads a deployment's online features through its
//! [`OnlineFeatures`] trait, and this is Qanat's feature store behind it (reads in
//! this process, no HTTP hop). Here, where the domains meet, so that serving does not
//! depend on the feature store.

use qanat_features::wire::{Columns, OnlineRequest};
use qanat_features::{Features, ValueType};
use qanat_governance::Project;
use qanat_serving::enrich::{FeatureColumn, FeatureRows, Key, OnlineFeatures, Pending};
use serde_json::Value;

/// The feature store as serving's source of online features.
pub struct FeatureStore(pub Features);

fn failed(e: qanat_features::Error) -> qanat_serving::Error {
    qanat_serving::Error::Features(Box::new(e))
}

/// The OIP datatype a join key of `t` is sent as.
fn datatype(t: ValueType) -> &'static str {
    match t {
        ValueType::Bool => "BOOL",
        ValueType::Int32 => "INT32",
        ValueType::Int64 | ValueType::Timestamp => "INT64",
        ValueType::Float32 => "FP32",
        ValueType::Float64 => "FP64",
        ValueType::String | ValueType::Bytes => "BYTES",
    }
}

impl OnlineFeatures for FeatureStore {
    fn keys<'a>(&'a self, project: &'a Project, service: &'a str) -> Pending<'a, Vec<Key>> {
        Box::pin(async move {
            let keys = self
                .0
                .service_keys(project, service)
                .await
                .map_err(failed)?;
            Ok(keys
                .into_iter()
                .map(|(name, t)| Key {
                    name,
                    datatype: datatype(t).to_string(),
                })
                .collect())
        })
    }

    fn read<'a>(
        &'a self,
        project: &'a Project,
        service: &'a str,
        entities: Vec<(String, Vec<Value>)>,
    ) -> Pending<'a, FeatureRows> {
        Box::pin(async move {
            let request = OnlineRequest {
                entities: Columns(entities),
                features: None,
                feature_service: Some(service.to_string()),
                full_feature_names: false,
            };
            let (online, pii) = self
                .0
                .online_for_model(project, &request)
                .await
                .map_err(failed)?;
            Ok(FeatureRows {
                names: online.metadata.feature_names,
                columns: online
                    .results
                    .into_iter()
                    .map(|c| FeatureColumn {
                        values: c.values,
                        statuses: c.statuses,
                    })
                    .collect(),
                pii,
            })
        })
    }
}
