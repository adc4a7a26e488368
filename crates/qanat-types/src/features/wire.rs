//! Request and response bodies of the feature API (the server and `qanat-client` share
//! them).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::definitions::FeatureRef;
use super::definitions::{
    EntityDef, FeatureRepo, FeatureServiceDef, FeatureViewDef, ObjectKind, SourceDef,
};

qanat_core::word_enum! {
    /// What applying a repo does to one object.
    #[derive(utoipa::ToSchema)]
    pub enum Action as "plan action" {
        /// A new object: version 1.
        Create,
        /// Its logic changed (or what it depends on did): a new version.
        NewVersion,
        /// Only its metadata changed (description, owner, tags, PII flags): edited in
        /// place, same version.
        Metadata,
        Unchanged,
        /// In the registry, not in the repo: removed (its versions stay for lineage).
        Remove,
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
    /// What the caller should know, e.g. features that hold personal data without
    /// `pii: true`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
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
    #[schema(value_type = String)]
    pub reference: qanat_core::ObjectRef,
    pub dataset: String,
    pub version: i64,
    pub rows: u64,
    pub columns: Vec<String>,
    /// The feature view versions joined.
    pub feature_views: Vec<Dependency>,
    /// The dataset versions read (entity rows and sources).
    #[schema(value_type = Vec<String>)]
    pub sources: Vec<qanat_core::ObjectRef>,
    /// Columns pseudonymized because the caller may not see PII in clear.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pseudonymized: Vec<String>,
}

/// Columns in the order they were sent: `{"driver_id": [1001, 1002], ...}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Columns(pub Vec<(String, Vec<Value>)>);

impl Serialize for Columns {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Columns {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Columns;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of columns, each a list of values")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Columns, A::Error> {
                let mut out: Vec<(String, Vec<Value>)> = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, Vec<Value>>()? {
                    if out.iter().any(|c| c.0 == k) {
                        return Err(serde::de::Error::custom(format!(
                            "column {k} is given twice"
                        )));
                    }
                    out.push((k, v));
                }
                Ok(Columns(out))
            }
        }
        d.deserialize_map(Visit)
    }
}

impl utoipa::PartialSchema for Columns {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .description(Some("columns by name, each a list of values"))
            .into()
    }
}

impl utoipa::ToSchema for Columns {}

/// The body of `/get-online-features` (Feast's shape).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OnlineRequest {
    /// Join key columns: one list of values per key, one value per entity.
    pub entities: Columns,
    /// `view:feature` references.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<Vec<String>>,
    /// A feature service instead of `features`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_service: Option<String>,
    /// Name features `view__feature` instead of `feature`.
    #[serde(default)]
    pub full_feature_names: bool,
}

/// `metadata` of an online response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ResponseMetadata {
    pub feature_names: Vec<String>,
}

/// One column of an online response: a value, a status (PRESENT, NULL_VALUE,
/// NOT_FOUND, OUTSIDE_MAX_AGE) and an event time per entity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FeatureColumn {
    #[schema(value_type = Vec<Object>)]
    pub values: Vec<Value>,
    pub statuses: Vec<String>,
    pub event_timestamps: Vec<String>,
}

/// The answer of `/get-online-features`: column-major, entity keys first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OnlineResponse {
    pub metadata: ResponseMetadata,
    pub results: Vec<FeatureColumn>,
}

qanat_core::word_enum! {
    /// Where pushed rows go.
    #[derive(Default, utoipa::ToSchema)]
    pub enum PushMode as "push destination" {
        #[default]
        Online,
        Offline,
        OnlineAndOffline,
    }
}

/// The body of `/push` (Feast's shape).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PushRequest {
    pub push_source_name: String,
    /// The rows, as columns.
    pub df: Columns,
    #[serde(default)]
    pub to: PushMode,
    /// Accepted for Feast clients; the registry is always read fresh.
    #[serde(default, skip_serializing)]
    pub allow_registry_cache: Option<bool>,
}

/// A pushed row that was not written, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RejectedRow {
    /// Its position in the request, from 0.
    pub row: usize,
    pub reasons: Vec<String>,
}

/// What a push did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PushResult {
    /// Rows that passed every check.
    pub accepted: u64,
    /// Records written to the online store (per view).
    pub written: u64,
    /// Records older than what was stored, left out.
    pub stale: u64,
    pub rejected: Vec<RejectedRow>,
    /// Parquet files appended to the source's offline store (one per event date).
    #[serde(default)]
    pub offline_files: u64,
    /// The views the rows were written to.
    pub feature_views: Vec<String>,
}

/// The body of `features/materialize`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MaterializeRequest {
    /// The views (default: every online view).
    #[serde(default)]
    pub feature_views: Vec<String>,
    /// The window's start (RFC 3339); absent: where each view's last
    /// materialization ended (incremental).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// The window's end (default: now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// The run's id, to follow its progress while it goes (1 to 64 letters, digits,
    /// '-' or '_'; default: a new one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

qanat_core::word_enum! {
    /// Where a materialization run is.
    #[derive(utoipa::ToSchema)]
    pub enum RunState as "run state" {
        Running,
        Succeeded,
        Failed,
    }
}

qanat_core::word_enum! {
    /// Where one view of a materialization run is.
    #[derive(utoipa::ToSchema)]
    pub enum ViewState as "view state" {
        /// Not started yet.
        Pending,
        /// Reading the source: the newest row per entity within the window.
        Scanning,
        /// Writing those rows to the online store, oldest first, a chunk at a time.
        Writing,
        Done,
        /// Fed as rows arrive (push or stream source): nothing to materialize.
        Skipped,
        Failed,
    }
}

/// One view of a materialization run, as it goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ViewProgress {
    pub feature_view: String,
    pub state: ViewState,
    /// Source rows read so far.
    pub rows_scanned: u64,
    /// Of those, rows with an event time in the window.
    pub rows_in_window: u64,
    /// Entities found in the window (known once the scan ends).
    pub entities: u64,
    /// Entities written so far.
    pub written: u64,
    /// Entities whose stored row was already as new.
    pub stale: u64,
    /// How far the view is materialized: every entity's newest row up to this time
    /// is online (moves after every chunk written, so a run cut short resumes here).
    pub materialized_until: Option<String>,
}

/// A materialization run, as it goes or as it ended (`GET …/features/materializations`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MaterializationRun {
    pub id: String,
    pub state: RunState,
    pub requested_by: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    pub views: Vec<ViewProgress>,
}

/// This server's recent materialization runs in a project, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MaterializationRuns {
    pub runs: Vec<MaterializationRun>,
}

/// What materializing one view did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Materialized {
    pub feature_view: String,
    pub version: i64,
    pub start: Option<String>,
    pub end: String,
    /// Source rows with an event time in the window.
    pub rows_in_window: u64,
    /// Entities written (the newest row of each).
    pub written: u64,
    /// Entities whose stored row was already as new.
    pub stale: u64,
    pub last_event_at: Option<String>,
}

/// How fresh one view's online values are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Freshness {
    pub feature_view: String,
    pub version: i64,
    /// The end of the last materialization window.
    pub materialized_until: Option<String>,
    /// The newest event time written (materialized, pushed or streamed).
    pub last_event_at: Option<String>,
    /// Now minus `last_event_at`.
    pub lag_seconds: Option<f64>,
    pub rows_written: i64,
    pub updated_at: String,
}

/// Every view's freshness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FreshnessList {
    pub feature_views: Vec<Freshness>,
}

/// One stream source's consumer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StreamStatus {
    pub project: String,
    pub source: String,
    pub subject: String,
    /// Whether the consumer is attached to its JetStream stream.
    pub connected: bool,
    /// Messages on the subject not yet consumed (the consumer's lag).
    pub pending: u64,
    /// Rows written since the server started.
    pub ingested: u64,
    /// Rows refused since the server started.
    pub rejected: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_rejection: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The stream consumers of a project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StreamList {
    pub streams: Vec<StreamStatus>,
}
