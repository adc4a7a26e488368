//! Deployments, their specs and status, the inference log's records and the Open
//! Inference Protocol's answer, as the API shows them (`qanat-serving` stores, routes
//! and serves them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

qanat_core::word_enum! {
    /// How requests are split between weighted targets.
    #[derive(Default, utoipa::ToSchema)]
    pub enum Routing as "routing" {
        /// Each request independently, by weight (a canary).
        #[default]
        Weighted,
        /// By a hash of the request's routing key, so a key always lands on the same
        /// target while the weights stay (an A/B test); requests without a key are
        /// split by weight.
        Sticky,
    }
}

/// One version (or alias) a deployment sends traffic to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// A version number of the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// An alias of the model, followed when it moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// Share of the traffic, in percent (weighted targets add up to 100).
    #[serde(default)]
    pub weight: u32,
    /// Gets a copy of every request; its answers are compared, never returned.
    #[serde(default)]
    pub shadow: bool,
}

impl Target {
    pub fn version(version: impl Into<String>, weight: u32) -> Self {
        Target {
            version: Some(version.into()),
            alias: None,
            weight,
            shadow: false,
        }
    }

    pub fn alias(alias: impl Into<String>, weight: u32) -> Self {
        Target {
            version: None,
            alias: Some(alias.into()),
            weight,
            shadow: false,
        }
    }

    /// `3` for a version, `@champion` for an alias.
    pub fn label(&self) -> String {
        match (&self.version, &self.alias) {
            (Some(v), _) => v.clone(),
            (_, Some(a)) => format!("@{a}"),
            _ => "?".into(),
        }
    }
}

/// What a deployment serves and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeploymentSpec {
    /// The registered model.
    pub model: String,
    /// The first weighted target is the primary; other weighted ones are canaries.
    pub targets: Vec<Target>,
    #[serde(default)]
    pub routing: Routing,
    #[serde(default)]
    pub batching: Batching,
    /// What goes to the inference log.
    #[serde(default)]
    pub log: LogSpec,
    /// Read the model's inputs from a feature service: requests carry entity keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<Enrichment>,
}

impl DeploymentSpec {
    /// Checks the spec's shape (the registry is checked by [`Deployments`]).
    pub fn check(&self) -> Result<(), String> {
        let bad = |m: String| Err(m);
        qanat_core::Name::parse_as("model name", &self.model).map_err(|e| e.to_string())?;
        if self.targets.is_empty() {
            return bad("a deployment needs at least one target (a version or an alias)".into());
        }
        let mut seen = std::collections::HashSet::new();
        let mut total = 0;
        for t in &self.targets {
            match (&t.version, &t.alias) {
                (Some(v), None) => {
                    if v.parse::<u64>().map_or(true, |n| n == 0) {
                        return bad(format!(
                            "target version '{v}': a version is a number from 1"
                        ));
                    }
                }
                (None, Some(a)) => {
                    qanat_core::Name::parse_as("alias", a).map_err(|e| e.to_string())?;
                }
                _ => {
                    return bad(format!(
                        "target '{}': give exactly one of version and alias",
                        t.label()
                    ))
                }
            }
            if !seen.insert((t.label(), t.shadow)) {
                return bad(format!("target '{}' is listed twice", t.label()));
            }
            if t.shadow {
                if t.weight != 0 {
                    return bad(format!(
                        "shadow target '{}' has weight {}: a shadow gets a copy of the traffic, so its weight is 0",
                        t.label(),
                        t.weight
                    ));
                }
            } else {
                if t.weight > 100 {
                    return bad(format!(
                        "target '{}' has weight {}: weights are percentages",
                        t.label(),
                        t.weight
                    ));
                }
                total += t.weight;
            }
        }
        if total != 100 {
            return bad(format!(
                "the weights of the targets that answer add up to {total}, not 100"
            ));
        }
        self.batching.check()?;
        if let Some(f) = &self.features {
            f.check()?;
        }
        self.log.check()
    }

    /// The weighted targets, primary first.
    pub fn weighted(&self) -> impl Iterator<Item = &Target> {
        self.targets.iter().filter(|t| !t.shadow)
    }
}

/// A deployment as stored: its current revision's spec.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Deployment {
    pub name: String,
    pub project: String,
    pub revision: i64,
    pub spec: DeploymentSpec,
    pub created_at: i64,
    pub created_by: String,
    pub updated_at: i64,
    pub updated_by: String,
}

/// One change of a deployment.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Revision {
    pub revision: i64,
    /// `create`, `update`, `promote` or `rollback`.
    pub action: String,
    pub note: String,
    pub spec: DeploymentSpec,
    pub created_at: i64,
    pub created_by: String,
}

/// The request and response bodies of the deployment API.
pub mod wire {
    use super::*;

    /// `POST /api/v1/projects/{project}/deployments`.
    #[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct NewDeployment {
        pub name: String,
        pub spec: DeploymentSpec,
    }

    #[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
    pub struct DeploymentList {
        pub deployments: Vec<Deployment>,
    }

    #[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
    pub struct RevisionList {
        pub revisions: Vec<Revision>,
    }

    /// `GET …/deployments/{name}/log`: the newest records, and how the log keeps up.
    #[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
    pub struct LogList {
        pub records: Vec<LogRecord>,
        pub stats: LogStats,
    }

    /// `POST …/deployments/{name}/promote`: which target (`3`, `@challenger`); by
    /// default the one canary, or the one shadow.
    #[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct Promote {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub to: Option<String>,
    }

    /// `POST …/deployments/{name}/rollback`: the revision to restore; by default the
    /// one before the current.
    #[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
    #[serde(deny_unknown_fields)]
    pub struct Rollback {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub revision: Option<i64>,
    }
}

/// How a served version batches requests (Triton's `dynamic_batching` settings).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Batching {
    /// The most rows one batch carries.
    pub max_batch_size: usize,
    /// How long a batch that is neither full nor of a preferred size waits for more
    /// requests, counted from its oldest request's arrival (microseconds). 0: a batch
    /// is whatever is queued when a worker is free.
    pub max_queue_delay_us: u64,
    /// Batch sizes (rows) sent as soon as they can be formed.
    pub preferred_batch_sizes: Vec<usize>,
    /// The most requests waiting; one more is refused at once.
    pub max_queue_size: usize,
    /// Priority levels: a request's `priority` parameter is 1 (highest) to this.
    pub priority_levels: u32,
    /// The level of a request that names none.
    pub default_priority: u32,
    /// How long a request may wait in the queue when it does not say (its `timeout`
    /// parameter, microseconds); 0: no limit.
    pub default_timeout_us: u64,
    /// Worker threads running batches of this version (Triton's instance count); 0: one
    /// per core.
    pub instances: usize,
}

impl Default for Batching {
    fn default() -> Self {
        Batching {
            max_batch_size: 64,
            max_queue_delay_us: 0,
            preferred_batch_sizes: Vec::new(),
            max_queue_size: 1024,
            priority_levels: 1,
            default_priority: 1,
            default_timeout_us: 0,
            instances: 0,
        }
    }
}

/// The most rows `max_batch_size` may be set to.
pub const MAX_BATCH_LIMIT: usize = 65_536;

/// The most requests `max_queue_size` may be set to.
pub const MAX_QUEUE_LIMIT: usize = 1 << 20;

impl Batching {
    /// Refuses settings that cannot work, saying which and why.
    pub fn check(&self) -> Result<(), String> {
        let bad = |m: String| Err(format!("batching: {m}"));
        if self.max_batch_size == 0 || self.max_batch_size > MAX_BATCH_LIMIT {
            return bad(format!(
                "max_batch_size is {}; it is 1 to {MAX_BATCH_LIMIT} rows",
                self.max_batch_size
            ));
        }
        if let Some(p) = self
            .preferred_batch_sizes
            .iter()
            .find(|&&p| p == 0 || p > self.max_batch_size)
        {
            return bad(format!(
                "preferred batch size {p} is not 1 to max_batch_size ({})",
                self.max_batch_size
            ));
        }
        if self.max_queue_size == 0 || self.max_queue_size > MAX_QUEUE_LIMIT {
            return bad(format!(
                "max_queue_size is {}; it is 1 to {MAX_QUEUE_LIMIT} requests",
                self.max_queue_size
            ));
        }
        if self.priority_levels == 0 || self.priority_levels > 16 {
            return bad(format!(
                "priority_levels is {}; it is 1 to 16",
                self.priority_levels
            ));
        }
        if self.default_priority == 0 || self.default_priority > self.priority_levels {
            return bad(format!(
                "default_priority is {}; it is 1 to priority_levels ({})",
                self.default_priority, self.priority_levels
            ));
        }
        if self.max_queue_delay_us > 10_000_000 {
            return bad("max_queue_delay_us is more than 10 s".into());
        }
        if self.instances > 256 {
            return bad(format!("instances is {}; at most 256", self.instances));
        }
        Ok(())
    }
}

/// Counts kept as batches run, for metrics and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchStats {
    /// Batches run, by their size in rows.
    pub batch_sizes: BTreeMap<usize, u64>,
    /// Requests refused because the queue was full.
    pub rejected: u64,
    /// Requests that timed out in the queue.
    pub timed_out: u64,
    /// Requests waiting now.
    pub waiting: usize,
}

/// What a deployment logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LogSpec {
    /// The share of requests logged, 0 to 1.
    pub sample: f64,
    /// Inputs written as keyed pseudonyms instead of their values.
    pub pii: Vec<String>,
}

impl Default for LogSpec {
    fn default() -> Self {
        LogSpec {
            sample: 1.0,
            pii: Vec::new(),
        }
    }
}

impl Eq for LogSpec {}

impl LogSpec {
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.sample) {
            return Err(format!(
                "log.sample is {}: it is a share of requests, 0 to 1",
                self.sample
            ));
        }
        Ok(())
    }
}

/// One logged answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogRecord {
    /// When it was answered, microseconds since the epoch.
    pub time: i64,
    /// The HTTP request's id (`x-request-id`).
    pub request_id: String,
    /// The request's own `id`, when it gave one.
    pub inference_id: Option<String>,
    pub actor: String,
    /// The OIP model name asked for (a deployment or a registered model).
    pub deployment: String,
    pub model: String,
    pub version: String,
    /// `answer`, or `shadow` for a copy a shadow ran.
    pub role: String,
    pub rows: u32,
    /// Microseconds from the request reaching serving to its answer.
    pub latency_us: u64,
    /// Microseconds it waited in the batcher's queue.
    pub queue_us: u64,
    /// `{input: [values...]}`, PII inputs pseudonymized.
    pub inputs: String,
    /// `{output: [values...]}`, every output the model gives.
    pub outputs: String,
    /// The inputs the deployment does not declare personal data in which some was
    /// found (by the input's name or in its values) and pseudonymized, with its kinds.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub pii_found: std::collections::BTreeMap<String, Vec<String>>,
}

/// How the log is keeping up.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogStats {
    pub written: u64,
    pub dropped: u64,
    pub files: u64,
    pub failed_writes: u64,
}

qanat_core::word_enum! {
    /// What happens when an entity's feature is missing, null or past its ttl.
    #[derive(Default, utoipa::ToSchema)]
    pub enum Missing as "missing-feature policy" {
        /// The request is refused (400), naming the entity and the feature.
        #[default]
        Reject,
        /// The declared default is used, or null (imputed by the model's
        /// preprocessing) when the feature declares none.
        Default,
    }
}

/// Where a deployment's model inputs come from when the request carries keys only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Enrichment {
    /// The feature service whose online features the model takes.
    pub service: String,
    #[serde(default)]
    pub missing: Missing,
    /// Per feature, the value used under `missing: default`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = Object)]
    pub defaults: BTreeMap<String, Value>,
}

impl Enrichment {
    pub fn check(&self) -> Result<(), String> {
        qanat_core::Name::parse_as("feature service", &self.service).map_err(|e| e.to_string())?;
        for (name, v) in &self.defaults {
            if !(v.is_number() || v.is_string() || v.is_boolean()) {
                return Err(format!(
                    "the default of feature '{name}' is {v}: a default is a number, a string or a boolean"
                ));
            }
        }
        if !self.defaults.is_empty() && self.missing == Missing::Reject {
            return Err("defaults are given but missing features are rejected: set missing to default to use them"
                    .into());
        }
        Ok(())
    }
}

/// How a shadow's answers compare with what was returned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ShadowStats {
    /// Requests the shadow answered and that were compared.
    pub compared: u64,
    /// Rows compared.
    pub rows: u64,
    /// Rows where a classifier's label agreed with the answer returned.
    pub agreed: u64,
    /// Mean absolute difference of the raw `output` values.
    pub mean_abs_diff: f64,
    /// Copies not run: the shadow's queue was full, or it failed.
    pub dropped: u64,
}

/// A target's state in this server, for `qanat deploy status`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ArmStatus {
    /// `3` or `@champion`.
    pub target: String,
    /// `primary`, `canary` or `shadow`.
    pub role: String,
    pub weight: u32,
    /// The version it resolved to.
    pub version: Option<String>,
    pub healthy: bool,
    /// Why it gets no traffic, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What serves it and where (`qanat trees (xgboost XGBClassifier, 100 trees,
    /// cpu)`), when it is loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    pub requests: u64,
    pub failures: u64,
    pub batching: Option<BatchStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowStats>,
}

/// A deployment and how this server is serving it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeploymentStatus {
    pub deployment: Deployment,
    pub targets: Vec<ArmStatus>,
}

/// One output tensor of a response.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ResponseOutput {
    pub name: String,
    pub shape: Vec<usize>,
    pub datatype: String,
    /// `binary_data_size` when the data follow the JSON as bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Map<String, Value>>,
    /// Row-major, flat (absent for a binary output).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    #[schema(value_type = Vec<Object>)]
    pub data: Value,
}

/// The answer to an [`InferRequest`].
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InferResponse {
    pub model_name: String,
    pub model_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub outputs: Vec<ResponseOutput>,
}
