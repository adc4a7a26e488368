//! What a feature repo declares: entities, sources, feature views and feature
//! services, as `qanat features plan/apply` send them (`qanat-features` reads them from
//! YAML, checks them as a whole and records their versions).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use qanat_core::Name;
use serde::{Deserialize, Serialize};
use serde_json::Value;

qanat_core::word_enum! {
    /// The type of a join key or a feature value.
    #[derive(utoipa::ToSchema)]
    pub enum ValueType as "value type" {
        Bool,
        Int32,
        Int64,
        Float32,
        Float64,
        String,
        Bytes,
        /// A point in time (UTC, microseconds).
        Timestamp,
    }
}

impl ValueType {
    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            ValueType::Int32 | ValueType::Int64 | ValueType::Float32 | ValueType::Float64
        )
    }
}

qanat_core::word_enum! {
    /// Where a source's rows come from.
    #[derive(utoipa::ToSchema)]
    pub enum SourceType as "source type" {
        /// A Qanat dataset version's Parquet or CSV files (`dataset: name@3`, or the
        /// newest version when no version is given).
        Dataset,
        /// Parquet or CSV files at a path in the project's storage.
        File,
        /// SQL over other sources of the repo (run by DataFusion).
        Sql,
        /// Rows pushed through `/push`.
        Push,
        /// Rows read from a NATS JetStream subject.
        Stream,
    }
}

qanat_core::word_enum! {
    /// The format of a `file` source.
    #[derive(utoipa::ToSchema)]
    pub enum FileFormat as "file format" {
        Parquet,
        Csv,
    }
}

/// A duration written as `1d`, `12h`, `90m`, `3600s` (or a number of seconds); `0`
/// means unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, utoipa::ToSchema)]
#[schema(value_type = String, example = "1day")]
pub struct Ttl(pub Duration);

impl Ttl {
    pub fn is_unbounded(self) -> bool {
        self.0.is_zero()
    }
}

impl fmt::Display for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_zero() {
            f.write_str("0s")
        } else {
            write!(f, "{}", humantime::format_duration(self.0))
        }
    }
}

impl FromStr for Ttl {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let s = s.trim();
        if let Ok(secs) = s.parse::<u64>() {
            return Ok(Ttl(Duration::from_secs(secs)));
        }
        humantime::parse_duration(s).map(Ttl).map_err(|e| {
            format!(
                "'{s}' is not a duration ({e}): write e.g. 1d, 12h, 90m, 3600s, or 0 for unbounded"
            )
        })
    }
}

impl Serialize for Ttl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ttl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Secs(n) => Ok(Ttl(Duration::from_secs(n))),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// A column that identifies an entity (`driver_id: int64`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JoinKey {
    #[schema(value_type = String)]
    pub name: Name,
    #[serde(rename = "type")]
    pub value_type: ValueType,
}

/// What features are about: a driver, a customer, a card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EntityDef {
    #[schema(value_type = String)]
    pub name: Name,
    pub join_keys: Vec<JoinKey>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// Where a view's rows come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceDef {
    #[schema(value_type = String)]
    pub name: Name,
    #[serde(rename = "type")]
    pub source_type: SourceType,
    /// `dataset`: the dataset, `name` (newest version) or `name@3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// `file`: a path (or prefix) in the project's storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `file`: parquet (the default) or csv.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<FileFormat>,
    /// `sql`: a query over other sources of the repo, named as tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql: Option<String>,
    /// `stream`: the NATS JetStream subject to consume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The column with each row's event time.
    pub timestamp_field: String,
    /// The column with the time each row was written, which breaks ties between rows
    /// with the same event time (the later write wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_timestamp_field: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// An inclusive range a numeric feature must lie in.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ValueRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

/// One feature of a view: its type and the rules its values follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeatureDef {
    #[schema(value_type = String)]
    pub name: Name,
    #[serde(rename = "type")]
    pub value_type: ValueType,
    /// Whether a value may be null (default true).
    #[serde(default = "yes")]
    pub nullable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<ValueRange>,
    /// The only values allowed (strings, or whole numbers for integer features).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub allowed: Option<Vec<Value>>,
    /// Personal data: pseudonymized for callers without the project's PII permission.
    #[serde(default, skip_serializing_if = "is_false")]
    pub pii: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

fn yes() -> bool {
    true
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A named, typed set of features about some entities, read from one source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeatureViewDef {
    #[schema(value_type = String)]
    pub name: Name,
    #[schema(value_type = Vec<String>)]
    pub entities: Vec<Name>,
    #[schema(value_type = String)]
    pub source: Name,
    /// How long a value stays valid after its event time: older values are not joined
    /// into training sets and are served online as OUTSIDE_MAX_AGE. 0 = forever.
    #[serde(default)]
    pub ttl: Ttl,
    pub schema: Vec<FeatureDef>,
    /// SQL over the source (named `source` in the query) that computes the features.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transformation: Option<String>,
    /// Whether the view is materialized into the online store (default true).
    #[serde(default = "yes")]
    pub online: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// A named set of features that a model consumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeatureServiceDef {
    #[schema(value_type = String)]
    pub name: Name,
    /// `view` (all its features), `view:feature`, and either pinned to a version
    /// (`view@3`, `view@3:feature`); unpinned ones follow the newest version.
    #[schema(value_type = Vec<String>)]
    pub features: Vec<FeatureRef>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// `view[@version][:feature]`: a view's features (all, or one), at a version or the
/// newest.
///
/// ```
/// use qanat_types::features::FeatureRef;
/// let r: FeatureRef = "driver_stats@3:conv_rate".parse().unwrap();
/// assert_eq!((r.view.as_str(), r.version, r.feature.as_ref().map(|f| f.as_str())),
///            ("driver_stats", Some(3), Some("conv_rate")));
/// assert_eq!(r.to_string(), "driver_stats@3:conv_rate");
/// assert!("driver_stats@0".parse::<FeatureRef>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FeatureRef {
    pub view: Name,
    pub version: Option<i64>,
    pub feature: Option<Name>,
}

impl FromStr for FeatureRef {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (head, feature) = match s.split_once(':') {
            Some((h, f)) => (h, Some(f)),
            None => (s, None),
        };
        let (view, version) = match head.split_once('@') {
            Some((v, n)) => (v, Some(n)),
            None => (head, None),
        };
        let view = Name::parse_as("feature view name", view)
            .map_err(|e| format!("'{s}' is not a feature reference: {e}"))?;
        let version = match version {
            None => None,
            Some(n) => match n.strip_prefix('v').unwrap_or(n).parse::<i64>() {
                Ok(v) if v >= 1 => Some(v),
                _ => {
                    return Err(format!(
                        "'{s}' is not a feature reference: '{n}' is not a version (whole numbers from 1)"
                    ))
                }
            },
        };
        let feature = match feature {
            None => None,
            Some(f) => Some(
                Name::parse_as("feature name", f)
                    .map_err(|e| format!("'{s}' is not a feature reference: {e}"))?,
            ),
        };
        Ok(FeatureRef {
            view,
            version,
            feature,
        })
    }
}

impl fmt::Display for FeatureRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.view.as_str())?;
        if let Some(v) = self.version {
            write!(f, "@{v}")?;
        }
        if let Some(feat) = &self.feature {
            write!(f, ":{feat}")?;
        }
        Ok(())
    }
}

impl Serialize for FeatureRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for FeatureRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Everything a feature repo declares: what `qanat features plan/apply` send.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeatureRepo {
    #[serde(default)]
    pub entities: Vec<EntityDef>,
    #[serde(default)]
    pub sources: Vec<SourceDef>,
    #[serde(default)]
    pub feature_views: Vec<FeatureViewDef>,
    #[serde(default)]
    pub feature_services: Vec<FeatureServiceDef>,
}

qanat_core::word_enum! {
    /// The kinds of object a feature repo holds.
    #[derive(PartialOrd, Ord, utoipa::ToSchema)]
    pub enum ObjectKind as "feature object kind" {
        Entity,
        Source,
        FeatureView,
        FeatureService,
    }
}
