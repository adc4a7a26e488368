//! Training sets: entity rows (keys and timestamps, from a dataset version) joined point
//! in time with feature views, written as a new dataset version whose lineage names
//! the feature view versions and source versions it came from — so the trainer and
//! `command` jobs take it as input like any dataset version.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use qanat_core::{DomainError, ErrorKind, Kind, ObjectRef};
use qanat_governance::Project;

use crate::definitions::{EntityDef, FeatureViewDef, ObjectKind, SourceDef, ValueType};
use crate::error::{Error, Result};
use crate::wire::{Dependency, TrainingSet, TrainingSetRequest};
use crate::{FeatureRef, Features};

/// One view version's part of a request: which features, under which names.
pub(crate) struct ViewPart {
    pub(crate) name: String,
    pub(crate) version: i64,
    pub(crate) def: FeatureViewDef,
    pub(crate) source: SourceDef,
    /// The source's version this view version was made from.
    pub(crate) source_version: i64,
    pub(crate) keys: Vec<String>,
    /// (feature, name in the result, pii)
    pub(crate) features: Vec<(String, String, bool)>,
}

impl Features {
    /// Builds a training set and writes it as a new version of `req.output` (created
    /// when absent). `pii_allowed`: whether the caller may see PII features in clear;
    /// otherwise they are pseudonymized (keyed HMAC).
    #[qanat_macros::boxed]
    pub async fn training_set(
        &self,
        project: &Project,
        req: &TrainingSetRequest,
        by: &str,
        pii_allowed: bool,
    ) -> Result<TrainingSet> {
        let parts = self
            .resolve_features(
                project,
                &req.features,
                req.feature_service.as_deref(),
                req.full_feature_names,
            )
            .await?;
        let entity_ref = ObjectRef::parse_of(Kind::Dataset, &req.entities)
            .map_err(|e| Error::invalid(format!("entities: {e}")))?;
        let entities = self.stage_dataset(project, &entity_ref).await?;
        let mut sources = Vec::new();
        for p in &parts {
            sources.push(self.view_rows(project, p).await?);
        }
        let mut derived = entities.datasets.clone();
        derived.extend(sources.iter().flat_map(|s| s.datasets().iter().cloned()));
        derived.sort_by_key(ToString::to_string);
        derived.dedup();
        let used: Vec<Dependency> = parts
            .iter()
            .map(|p| Dependency {
                kind: ObjectKind::FeatureView,
                name: p.name.clone(),
                version: p.version,
            })
            .collect();
        let timestamp = req.timestamp_column.clone();
        let keyring = self.storage.keyring().clone();
        let purpose = format!("features.pii.{}", project.id);
        let budget = self.join_memory;
        let pii_features: Vec<String> = parts
            .iter()
            .flat_map(|p| p.features.iter().filter(|f| f.2).map(|f| f.1.clone()))
            .collect();
        let hidden: Vec<String> = if pii_allowed {
            Vec::new()
        } else {
            pii_features.clone()
        };
        // What the entity rows bring along declared as personal data stays declared.
        let mut entity_pii: Vec<String> = Vec::new();
        for r in &entities.datasets {
            let d = self.datasets.get(project, &r.name).await?;
            entity_pii.extend(qanat_data::tabular::declared_pii(
                d.schema.as_ref(),
                &d.pii_columns,
            ));
        }
        let out_dir = tempfile::Builder::new()
            .prefix("qanat-training-set-")
            .tempdir()
            .map_err(|e| Error::Corrupt(format!("a directory for the training set: {e}")))?;
        let out = out_dir.path().join("training_set.parquet");
        // Which view each output column comes from (feature, column).
        let used_parts: Vec<(String, Vec<(String, String)>)> = parts
            .iter()
            .map(|p| {
                let f = p.features.iter().map(|f| (f.0.clone(), f.1.clone()));
                (p.name.clone(), f.collect())
            })
            .collect();
        let views: Vec<(ViewPart, crate::sources::Rows)> = parts.into_iter().zip(sources).collect();
        let (written, pseudonymized) = {
            let out = out.clone();
            let hidden = hidden.clone();
            tokio::task::spawn_blocking(move || {
                let mac = move |v: &[u8]| keyring.mac(&purpose, v).1;
                let pii = crate::training_output::Pseudonyms {
                    hide: hidden.clone(),
                    mac: &mac,
                };
                crate::training_output::write(&entities, &timestamp, &views, budget, &pii, &out)
                    .map(|w| (w, hidden))
            })
            .await
            .map_err(|e| Error::Corrupt(format!("the join stopped: {e}")))??
        };
        let rows = written.rows;
        let columns = written.columns;

        let ds = match self.datasets.get(project, req.output.as_str()).await {
            Ok(ds) => ds,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let new: qanat_data::NewDataset = serde_json::from_value(serde_json::json!({
                    "name": req.output.as_str(),
                    "description": "a training set made by the feature store",
                }))
                .map_err(|e| Error::Corrupt(format!("new dataset: {e}")))?;
                self.datasets.create(project, new, by).await?
            }
            Err(e) => return Err(e.into()),
        };
        // The output declares its personal-data columns (PII features, in clear or
        // not, and the entity rows' declared columns), so every later reader of the
        // set without the PII permission gets them pseudonymized, whoever made it.
        let declare: Vec<String> = columns
            .iter()
            .filter(|c| pii_features.contains(c) || entity_pii.contains(c))
            .cloned()
            .collect();
        let ds = if declare.iter().all(|c| ds.pii_columns.contains(c)) {
            ds
        } else {
            let mut all = ds.pii_columns.clone();
            all.extend(declare.into_iter().filter(|c| !ds.pii_columns.contains(c)));
            self.datasets.set_pii_columns(project, &ds, &all).await?
        };
        let edges: Vec<(qanat_core::ObjectRef, String)> = used
            .iter()
            .map(|d| {
                (
                    qanat_core::ObjectRef::feature_view(d.name.as_str(), d.version),
                    "features_from".to_string(),
                )
            })
            .collect();
        let message = if req.message.is_empty() {
            format!(
                "training set: {} × {}",
                req.entities,
                used.iter()
                    .map(|d| format!("{}@{}", d.name, d.version))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            req.message.clone()
        };
        let version = self
            .datasets
            .commit_files(
                project,
                &ds,
                vec![("training_set.parquet".to_string(), out)],
                &message,
                by,
                &derived,
                &edges,
            )
            .await?;
        // The set's column profiles show what its features' values hold: recorded
        // for their views (a failure to record it does not undo the set).
        if let Err(e) = self
            .record_training_set_findings(project, &ds, &version, &used_parts, by)
            .await
        {
            tracing::warn!(project = %project.name, error = %e, "recording personal data found in a training set's features");
        }
        Ok(TrainingSet {
            reference: qanat_core::ObjectRef::dataset(ds.name.as_str(), version.version),
            dataset: ds.name,
            version: version.version,
            rows,
            columns,
            feature_views: used,
            sources: derived,
            pseudonymized,
        })
    }
}

impl Features {
    /// Records, for each view a training set read, the personal data its version's
    /// column profiles found in the view's features.
    async fn record_training_set_findings(
        &self,
        project: &Project,
        ds: &qanat_data::Dataset,
        version: &qanat_data::DatasetVersion,
        parts: &[(String, Vec<(String, String)>)],
        by: &str,
    ) -> Result<()> {
        let mut by_column: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for fp in self.datasets.profiles(ds, version).await? {
            for c in fp.profile.iter().flat_map(|t| &t.columns) {
                let kinds = qanat_data::tabular::confirmed_kinds(&c.pii);
                if !kinds.is_empty() {
                    by_column.insert(c.name.clone(), kinds);
                }
            }
        }
        let found_by = format!("training set {}@{} by {by}", ds.name, version.version);
        for (view, features) in parts {
            let found: crate::pii_found::Found = features
                .iter()
                .filter_map(|(f, column)| by_column.get(column).map(|k| (f.clone(), k.clone())))
                .collect();
            self.record_pii_found(project, view, &found_by, &found)
                .await?;
        }
        Ok(())
    }

    /// The view versions and features a request names, grouped by view.
    async fn resolve_features(
        &self,
        project: &Project,
        features: &[FeatureRef],
        service: Option<&str>,
        full_names: bool,
    ) -> Result<Vec<ViewPart>> {
        let refs: Vec<FeatureRef> = match (features.is_empty(), service) {
            (false, None) => features.to_vec(),
            (true, Some(s)) => {
                let o = self.object(project, ObjectKind::FeatureService, s, None).await?;
                if o.deleted_at.is_some() {
                    return Err(Error::not_found("feature service", s));
                }
                let def: crate::definitions::FeatureServiceDef = serde_json::from_value(o.definition)
                    .map_err(|e| Error::Corrupt(format!("feature service {s}: {e}")))?;
                def.features
            }
            (false, Some(_)) => {
                return Err(Error::invalid("give features or feature_service, not both"))
            }
            (true, None) => {
                return Err(Error::invalid(
                    "name the features (view:feature, view@3:feature, or view for all of its features) or a feature_service",
                ))
            }
        };
        let mut parts: BTreeMap<String, ViewPart> = BTreeMap::new();
        let mut order = Vec::new();
        for r in refs {
            let view = r.view.to_string();
            if !parts.contains_key(&view) {
                let part = self.view_part(project, &view, r.version).await?;
                order.push(view.clone());
                parts.insert(view.clone(), part);
            }
            let Some(part) = parts.get_mut(&view) else {
                continue;
            };
            if let Some(v) = r.version {
                if v != part.version {
                    return Err(Error::invalid(format!(
                        "feature view {view} is asked for at versions {} and {v}: use one version per view",
                        part.version
                    )));
                }
            }
            let wanted: Vec<&crate::definitions::FeatureDef> = match &r.feature {
                None => part.def.schema.iter().collect(),
                Some(f) => {
                    vec![part
                        .def
                        .schema
                        .iter()
                        .find(|d| &d.name == f)
                        .ok_or_else(|| {
                            Error::invalid(format!(
                                "feature view {view}@{} has no feature '{f}' (it has {})",
                                part.version,
                                part.def
                                    .schema
                                    .iter()
                                    .map(|d| d.name.to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ))
                        })?]
                }
            };
            for f in wanted {
                let out = if full_names {
                    format!("{view}__{}", f.name)
                } else {
                    f.name.to_string()
                };
                if !part.features.iter().any(|(n, _, _)| n == f.name.as_str()) {
                    part.features.push((f.name.to_string(), out, f.pii));
                }
            }
        }
        let parts: Vec<ViewPart> = order.into_iter().filter_map(|v| parts.remove(&v)).collect();
        let mut names = std::collections::BTreeSet::new();
        for p in &parts {
            for (_, n, _) in &p.features {
                if !names.insert(n.clone()) {
                    return Err(Error::invalid(format!(
                        "two features would both be named '{n}' in the training set: set full_feature_names to name them view__feature"
                    )));
                }
            }
        }
        Ok(parts)
    }

    /// A view at a version (the newest when None) with its source and keys at the
    /// versions that view version was made from.
    pub(crate) async fn view_part(
        &self,
        project: &Project,
        view: &str,
        version: Option<i64>,
    ) -> Result<ViewPart> {
        let o = self
            .object(project, ObjectKind::FeatureView, view, version)
            .await?;
        if version.is_none() && o.deleted_at.is_some() {
            return Err(Error::invalid(format!(
                "feature view {view} was removed from the registry: pin a version (view@N) to use it"
            )));
        }
        let mut def: FeatureViewDef = serde_json::from_value(o.definition.clone())
            .map_err(|e| Error::Corrupt(format!("feature view {view}: {e}")))?;
        self.protect_found(project, view, &mut def).await?;
        let dep = |kind: ObjectKind, name: &str| {
            o.depends_on
                .iter()
                .find(|d| d.kind == kind && d.name == name)
                .map(|d| d.version)
        };
        let source_version = dep(ObjectKind::Source, def.source.as_str()).unwrap_or(1);
        let so = self
            .object(
                project,
                ObjectKind::Source,
                def.source.as_str(),
                Some(source_version),
            )
            .await?;
        let source: SourceDef = serde_json::from_value(so.definition)
            .map_err(|e| Error::Corrupt(format!("source {}: {e}", def.source)))?;
        let mut keys = Vec::new();
        for e in &def.entities {
            let v = dep(ObjectKind::Entity, e.as_str()).unwrap_or(1);
            let eo = self
                .object(project, ObjectKind::Entity, e.as_str(), Some(v))
                .await?;
            let ent: EntityDef = serde_json::from_value(eo.definition)
                .map_err(|err| Error::Corrupt(format!("entity {e}: {err}")))?;
            keys.extend(ent.join_keys.iter().map(|k| k.name.to_string()));
        }
        Ok(ViewPart {
            name: view.to_string(),
            version: o.version,
            def,
            source,
            source_version,
            keys,
            features: Vec::new(),
        })
    }
}

/// The arrow type of a declared value type.
pub(crate) fn arrow_type(t: ValueType) -> DataType {
    match t {
        ValueType::Bool => DataType::Boolean,
        ValueType::Int32 => DataType::Int32,
        ValueType::Int64 => DataType::Int64,
        ValueType::Float32 => DataType::Float32,
        ValueType::Float64 => DataType::Float64,
        ValueType::String => DataType::Utf8,
        ValueType::Bytes => DataType::Binary,
        ValueType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
    }
}

/// The source rows with each requested feature in its declared type. A value that
/// does not convert (text in a numeric column, an overflow) is an error naming the
/// column, never a silent null.
pub(crate) fn typed(rows: &RecordBatch, part: &ViewPart) -> Result<RecordBatch> {
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    let mut wanted: Vec<String> = part.keys.clone();
    wanted.push(part.source.timestamp_field.clone());
    wanted.extend(part.source.created_timestamp_field.clone());
    for (f, _, _) in &part.features {
        wanted.push(f.clone());
    }
    for name in wanted {
        if fields.iter().any(|f: &Field| f.name() == &name) {
            continue;
        }
        let col = rows.column_by_name(&name).ok_or_else(|| {
            Error::invalid(format!(
                "source {} of feature view {} has no column '{name}'",
                part.source.name, part.name
            ))
        })?;
        let declared = part.def.schema.iter().find(|d| d.name.as_str() == name);
        let col = match declared {
            Some(d) if col.data_type() != &arrow_type(d.value_type) => {
                let to = arrow_type(d.value_type);
                arrow_cast::cast::cast_with_options(
                    col.as_ref(),
                    &to,
                    &arrow_cast::cast::CastOptions {
                        safe: false,
                        ..Default::default()
                    },
                )
                .map_err(|e| {
                    Error::invalid(format!(
                        "feature {}:{name} is declared {} but its column holds {} values that do not convert ({e})",
                        part.name,
                        d.value_type,
                        col.data_type()
                    ))
                })?
            }
            _ => col.clone(),
        };
        fields.push(Field::new(&name, col.data_type().clone(), true));
        columns.push(col);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| Error::invalid(format!("feature view {}: {e}", part.name)))
}

/// Replaces column `name` by keyed pseudonyms of its values (nulls stay null): the
/// same value gives the same pseudonym, so it still joins and groups, but cannot be
/// read back without the key.
pub(crate) fn pseudonymize(
    batch: &RecordBatch,
    name: &str,
    mac: impl Fn(&[u8]) -> String,
) -> Result<RecordBatch> {
    let Some(idx) = batch.schema().index_of(name).ok() else {
        return Ok(batch.clone());
    };
    let col = batch.column(idx);
    let text = arrow_cast::cast(col.as_ref(), &DataType::Utf8)
        .map_err(|e| Error::invalid(format!("feature {name}: {e}")))?;
    let text = text
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| Error::Corrupt(format!("feature {name}: not text after a cast")))?;
    let hidden: StringArray = text
        .iter()
        .map(|v| v.map(|v| format!("pii:{}", &mac(v.as_bytes())[..32])))
        .collect();
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields[idx] = Field::new(name, DataType::Utf8, true);
    let mut columns = batch.columns().to_vec();
    columns[idx] = Arc::new(hidden);
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| Error::Corrupt(format!("pseudonymized {name}: {e}")))
}

pub(crate) fn write_parquet(table: &RecordBatch) -> Result<Vec<u8>> {
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .build();
    let mut out = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, table.schema(), Some(props))
        .map_err(|e| Error::Corrupt(format!("writing the training set: {e}")))?;
    w.write(table)
        .map_err(|e| Error::Corrupt(format!("writing the training set: {e}")))?;
    w.close()
        .map_err(|e| Error::Corrupt(format!("writing the training set: {e}")))?;
    Ok(out)
}
