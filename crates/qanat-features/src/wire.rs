//! Request and response bodies of the feature API (the server and `qanat-client` share
//! them).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::definitions::{
    EntityDef, FeatureRepo, FeatureServiceDef, FeatureViewDef, ObjectKind, SourceDef,
};
use crate::FeatureRef;

qanat_core::word_enum! {
    /// What applying a repo does to one object.
    #[derive(utoipa::ToSchema)]
    pub enum Action as "plan action" {
        /// A new object: version 1.
        Create = "create",
        /// Its logic changed (or what it depends on did): a new version.
        NewVersion = "new_version",
        /// Only its metadata changed (description, owner, tags, PII flags): edited in
        /// place, same version.
        Metadata = "metadata",
        Unchanged = "unchanged",
        /// In the registry, not in the repo: removed (its versions stay for lineage).
        Remove = "remove",
    }
}

/// One object's line of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Change {
    pub kind: ObjectKind,
    pub name: String,
    pub action: Action,
    /// The version it is at now (absent for a new object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_version: Option<i64>,
    /// The version it will be at (absent for a removal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_version: Option<i64>,
    /// What changed, one line per field (`ttl: 1day → 2h`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
}

/// What applying a repo does (or did), object by object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Plan {
    /// The registry revision the plan was made against; an apply moves it on by one.
    pub revision: i64,
    /// Whether this plan was applied.
    pub applied: bool,
    pub changes: Vec<Change>,
}

impl Plan {
    /// Whether applying it would change anything.
    pub fn has_changes(&self) -> bool {
        self.changes.iter().any(|c| c.action != Action::Unchanged)
    }
}

/// The body of `features/plan` and `features/apply`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyRequest {
    pub repo: FeatureRepo,
    /// Refuse the apply (409) unless the registry is still at this revision: apply
    /// exactly what a plan showed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<i64>,
}

/// A version of an object that another depends on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Dependency {
    pub kind: ObjectKind,
    pub name: String,
    pub version: i64,
}

/// An object of the registry at one version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RegisteredObject {
    pub kind: ObjectKind,
    pub name: String,
    pub version: i64,
    /// The newest version (equal to `version` unless an older one was asked for).
    pub latest_version: i64,
    /// The definition at this version, with the object's current metadata.
    #[schema(value_type = Object)]
    pub definition: Value,
    pub depends_on: Vec<Dependency>,
    pub fingerprint: String,
    /// When this version was made, and by whom.
    pub created_at: String,
    pub created_by: String,
    /// When the object (its metadata or its versions) last changed.
    pub updated_at: String,
    /// Set when it was removed from the repo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<String>,
}

impl RegisteredObject {
    /// The definition as a feature view, when it is one.
    pub fn as_view(&self) -> Option<FeatureViewDef> {
        (self.kind == ObjectKind::FeatureView)
            .then(|| serde_json::from_value(self.definition.clone()).ok())
            .flatten()
    }
}

/// The registry of a project: every live object at its newest version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Registry {
    pub revision: i64,
    pub objects: Vec<RegisteredObject>,
}

impl Registry {
    /// The registry as a repo: what `plan` against it shows as unchanged.
    pub fn to_repo(&self) -> FeatureRepo {
        let mut repo = FeatureRepo::default();
        for o in &self.objects {
            let d = o.definition.clone();
            match o.kind {
                ObjectKind::Entity => repo.entities.extend(serde_json::from_value::<EntityDef>(d)),
                ObjectKind::Source => repo.sources.extend(serde_json::from_value::<SourceDef>(d)),
                ObjectKind::FeatureView => repo
                    .feature_views
                    .extend(serde_json::from_value::<FeatureViewDef>(d)),
                ObjectKind::FeatureService => repo
                    .feature_services
                    .extend(serde_json::from_value::<FeatureServiceDef>(d)),
            }
        }
        repo
    }
}

/// Every version of one object, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ObjectHistory {
    pub kind: ObjectKind,
    pub name: String,
    pub versions: Vec<RegisteredObject>,
}

fn event_timestamp() -> String {
    "event_timestamp".into()
}

/// The body of `features/training-sets`: entity rows and the features to join onto
/// them, point in time.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TrainingSetRequest {
    /// The entity rows: a dataset version (`dataset:drivers@2`, `drivers@2`, or the
    /// newest with no version) whose Parquet/CSV files hold the join keys and a
    /// timestamp column.
    pub entities: String,
    /// The entity rows' time column (default `event_timestamp`).
    #[serde(default = "event_timestamp")]
    pub timestamp_column: String,
    /// `view:feature`, `view@3:feature`, or `view` (all its features).
    #[serde(default)]
    #[schema(value_type = Vec<String>)]
    pub features: Vec<FeatureRef>,
    /// A feature service instead of `features`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_service: Option<String>,
    /// Name feature columns `view__feature` instead of `feature`.
    #[serde(default)]
    pub full_feature_names: bool,
    /// The dataset the training set becomes a new version of (created when absent).
    #[schema(value_type = String)]
    pub output: qanat_core::Name,
    /// The version's message (default: what it was made from).
    #[serde(default)]
    pub message: String,
}

/// A training set, written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TrainingSet {
    /// `dataset:NAME@N`: what jobs take as input.
    pub reference: String,
    pub dataset: String,
    pub version: i64,
    pub rows: u64,
    pub columns: Vec<String>,
    /// The feature view versions joined.
    pub feature_views: Vec<Dependency>,
    /// The dataset versions read (entity rows and sources).
    pub sources: Vec<String>,
    /// Columns pseudonymized because the caller may not see PII in clear.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pseudonymized: Vec<String>,
}
