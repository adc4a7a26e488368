//! `kind:name@selector`: the one way objects are referred to across the platform.

use std::fmt;
use std::str::FromStr;

use crate::name::{Name, NameError};

crate::word_enum! {
    /// The kinds of object a reference can name. Adding a domain whose objects are
    /// referenced (lineage, CLI arguments) adds a variant here.
    #[derive(PartialOrd, Ord)]
    pub enum Kind as "object kind" {
        /// A dataset version: `dataset:tx@3`, `dataset:tx@golden`, `dataset:tx` (latest).
        Dataset,
        /// A registered model version: `model:fraud@2`, `model:fraud@champion`.
        Model,
        /// An experiment run, by id: `run:3f2a…`.
        Run,
        /// An MLflow logged model, by id: `logged_model:m-3f2a…`.
        LoggedModel,
        /// A feature view version: `feature_view:driver_stats@2`.
        FeatureView,
        /// A user, by name, as lineage's `produced_by` parent: `user:alice`.
        User,
        /// A monitor's drift check of a deployment, by check number:
        /// `drift_report:web@12`.
        DriftReport,
        /// A deployment's inference log: `inference_log:web`.
        InferenceLog,
        /// An erasure of a data subject's rows, by the request's id: `erasure:DSR-42`.
        Erasure,
    }
}

impl Kind {
    /// Whether references of this kind name an id, which has no versions.
    fn is_id(self) -> bool {
        matches!(
            self,
            Kind::Run | Kind::LoggedModel | Kind::User | Kind::InferenceLog | Kind::Erasure
        )
    }
}

/// Which version of a versioned object: the newest, a number, or a label (a dataset
/// tag or a model alias; labels are [`Name`]s and never all digits).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Selector {
    Latest,
    Version(i64),
    Label(Name),
}

impl FromStr for Selector {
    type Err = RefError;
    fn from_str(s: &str) -> Result<Self, RefError> {
        if s == "latest" {
            return Ok(Selector::Latest);
        }
        let digits = s.strip_prefix('v').unwrap_or(s);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return match digits.parse::<i64>() {
                Ok(n) if n >= 1 => Ok(Selector::Version(n)),
                _ => Err(RefError::Version(s.to_string())),
            };
        }
        Ok(Selector::Label(
            Name::parse_as("version label", s).map_err(RefError::Name)?,
        ))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Latest => f.write_str("latest"),
            Selector::Version(n) => write!(f, "{n}"),
            Selector::Label(l) => f.write_str(l.as_str()),
        }
    }
}

/// A reference that does not parse, saying what the right shape is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    #[error("'{0}' is not a reference: use kind:name[@version|@alias|@tag], where kind is one of dataset, model, run, logged_model, feature_view, user, drift_report, inference_log")]
    Shape(String),
    #[error(
        "unknown kind '{0}' in a reference: use dataset, model, run, logged_model, feature_view, user, drift_report or inference_log"
    )]
    Kind(String),
    #[error("'{given}' is a {got} reference; this needs a {expected} (e.g. {expected}:name@3)")]
    WrongKind {
        given: String,
        expected: Kind,
        got: Kind,
    },
    #[error("'{0}' is not a valid version: versions are whole numbers from 1 (e.g. 3 or v3)")]
    Version(String),
    #[error("'{0}' names a {1} by id, which has no versions: leave out the '@…'")]
    Unversioned(String, Kind),
    #[error("the name in '{0}' is empty, too long or holds a control character")]
    ForeignName(String),
    #[error(transparent)]
    Name(NameError),
}

/// A reference to an object: `kind:name`, optionally `@version`, `@alias` or `@tag`.
///
/// Names of kinds Qanat names (datasets) follow [`Name`]. Names MLflow assigns or
/// accepts (registered models, run ids, logged-model ids) keep MLflow's looser rule:
/// any text up to 256 bytes without `@` or control characters. Run and logged-model
/// references take no selector.
///
/// ```
/// use qanat_core::{Kind, ObjectRef, Selector};
/// let r: ObjectRef = "model:fraud@champion".parse().unwrap();
/// assert_eq!((r.kind, r.name.as_str()), (Kind::Model, "fraud"));
/// assert!(matches!(r.selector, Some(Selector::Label(_))));
/// assert!("run:0a1b@2".parse::<ObjectRef>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    pub kind: Kind,
    pub name: String,
    /// None when the reference names no version (the newest, for versioned kinds).
    pub selector: Option<Selector>,
}

impl ObjectRef {
    /// A reference to version `version` of `name`.
    pub fn version(kind: Kind, name: impl Into<String>, version: i64) -> ObjectRef {
        ObjectRef {
            kind,
            name: name.into(),
            selector: Some(Selector::Version(version)),
        }
    }

    /// `dataset:name@version`.
    pub fn dataset(name: impl Into<String>, version: i64) -> ObjectRef {
        ObjectRef::version(Kind::Dataset, name, version)
    }

    /// `model:name@version`.
    pub fn model(name: impl Into<String>, version: i64) -> ObjectRef {
        ObjectRef::version(Kind::Model, name, version)
    }

    /// `feature_view:name@version`.
    pub fn feature_view(name: impl Into<String>, version: i64) -> ObjectRef {
        ObjectRef::version(Kind::FeatureView, name, version)
    }

    /// `run:id`.
    pub fn run(id: impl Into<String>) -> ObjectRef {
        ObjectRef::unversioned(Kind::Run, id)
    }

    /// `logged_model:id`.
    pub fn logged_model(id: impl Into<String>) -> ObjectRef {
        ObjectRef::unversioned(Kind::LoggedModel, id)
    }

    /// `user:name`.
    pub fn user(name: impl Into<String>) -> ObjectRef {
        ObjectRef::unversioned(Kind::User, name)
    }

    /// `kind:name`, no version: an object named by id (a run, a logged model, a user),
    /// or the newest version of a versioned one.
    pub fn unversioned(kind: Kind, name: impl Into<String>) -> ObjectRef {
        ObjectRef {
            kind,
            name: name.into(),
            selector: None,
        }
    }

    /// `kind:name@selector`, where `selector` is a version or a label (`@` optional).
    /// A label that breaks the name rule (an MLflow alias may) is kept as written
    /// only for display: the reference is then unversioned with the text in its name.
    pub fn at(kind: Kind, name: impl Into<String>, selector: &str) -> ObjectRef {
        let name = name.into();
        match selector.trim_start_matches('@').parse::<Selector>() {
            Ok(sel) => ObjectRef {
                kind,
                name,
                selector: Some(sel),
            },
            Err(_) => ObjectRef {
                kind,
                name: format!("{name}@{}", selector.trim_start_matches('@')),
                selector: None,
            },
        }
    }

    /// This reference with its selector dropped: the newest version.
    pub fn unpinned(&self) -> ObjectRef {
        ObjectRef {
            kind: self.kind,
            name: self.name.clone(),
            selector: None,
        }
    }

    /// The selector, reading an absent one as [`Selector::Latest`].
    pub fn selector_or_latest(&self) -> Selector {
        self.selector.clone().unwrap_or(Selector::Latest)
    }

    /// Parses `s`, requiring it to be of `kind` (`dataset:` may then be left out).
    pub fn parse_of(kind: Kind, s: &str) -> Result<ObjectRef, RefError> {
        let full = if s.contains(':') {
            s.to_string()
        } else {
            format!("{kind}:{s}")
        };
        let r: ObjectRef = full.parse()?;
        if r.kind != kind {
            return Err(RefError::WrongKind {
                given: s.to_string(),
                expected: kind,
                got: r.kind,
            });
        }
        Ok(r)
    }
}

impl FromStr for ObjectRef {
    type Err = RefError;

    fn from_str(s: &str) -> Result<Self, RefError> {
        let (kind, rest) = s
            .split_once(':')
            .ok_or_else(|| RefError::Shape(s.to_string()))?;
        let kind: Kind = kind.parse().map_err(|_| RefError::Kind(kind.to_string()))?;
        // The selector follows the last '@': names never hold one.
        let (name, selector) = match rest.rsplit_once('@') {
            Some((name, sel)) => (name, Some(sel)),
            None => (rest, None),
        };
        if kind == Kind::Dataset {
            Name::parse_as("dataset name", name).map_err(RefError::Name)?;
        } else if kind == Kind::FeatureView {
            Name::parse_as("feature view name", name).map_err(RefError::Name)?;
        } else if name.is_empty()
            || name.len() > 256
            || name.contains('@')
            || name.chars().any(char::is_control)
        {
            return Err(RefError::ForeignName(s.to_string()));
        }
        let selector = match selector {
            None => None,
            Some(_) if kind.is_id() => return Err(RefError::Unversioned(s.to_string(), kind)),
            Some(sel) => Some(sel.parse()?),
        };
        Ok(ObjectRef {
            kind,
            name: name.to_string(),
            selector,
        })
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.name)?;
        if let Some(sel) = &self.selector {
            write!(f, "@{sel}")?;
        }
        Ok(())
    }
}

/// Travels as its text (`"dataset:tx@3"`), parsed on the way in.
impl serde::Serialize for ObjectRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ObjectRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn name() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9][a-zA-Z0-9._-]{0,40}"
    }

    fn any_ref() -> impl Strategy<Value = ObjectRef> {
        let label = "[a-uw-z][a-zA-Z0-9._-]{0,20}".prop_filter_map("a label", |l| {
            let name: Name = l.parse().ok()?;
            (l != "latest").then_some(Selector::Label(name))
        });
        let selector = prop_oneof![
            Just(None::<Selector>),
            Just(Some(Selector::Latest)),
            (1i64..i64::MAX).prop_map(|n| Some(Selector::Version(n))),
            label.prop_map(Some),
        ];
        let foreign = "[a-zA-Z0-9 ._/-]{0,59}[a-zA-Z0-9]";
        prop_oneof![
            (name(), selector.clone()).prop_map(|(n, s)| ObjectRef {
                kind: Kind::Dataset,
                name: n,
                selector: s
            }),
            (foreign, selector).prop_map(|(n, s)| ObjectRef {
                kind: Kind::Model,
                name: n,
                selector: s
            }),
            "[0-9a-f]{32}".prop_map(|id| ObjectRef::unversioned(Kind::Run, id)),
            "m-[0-9a-f]{32}".prop_map(|id| ObjectRef::unversioned(Kind::LoggedModel, id)),
        ]
    }

    proptest! {
        #[test]
        fn display_then_parse_round_trips(r in any_ref()) {
            let text = r.to_string();
            prop_assert_eq!(text.parse::<ObjectRef>(), Ok(r));
        }
    }

    #[test]
    fn versions_and_labels_are_told_apart() {
        let sel = |s: &str| s.parse::<ObjectRef>().map(|r| r.selector);
        assert_eq!(sel("dataset:tx@v3"), Ok(Some(Selector::Version(3))));
        assert_eq!(sel("dataset:tx@3"), Ok(Some(Selector::Version(3))));
        assert_eq!(sel("dataset:tx@latest"), Ok(Some(Selector::Latest)));
        assert_eq!(sel("dataset:tx"), Ok(None));
        assert!(matches!(
            sel("model:m@champion"),
            Ok(Some(Selector::Label(_)))
        ));
        assert_eq!(sel("dataset:tx@0"), Err(RefError::Version("0".into())));
    }

    #[test]
    fn bad_references_say_what_shape_to_use() {
        for (bad, says) in [
            ("tx@3", "kind:name"),
            ("table:tx@3", "unknown kind 'table'"),
            ("dataset:a b@3", "invalid dataset name"),
            ("dataset:tx@a b", "invalid version label"),
            ("run:abc@2", "no versions"),
            ("model:@2", "empty"),
        ] {
            let err = bad.parse::<ObjectRef>().expect_err(bad).to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn references_travel_as_their_text() {
        let r = ObjectRef::dataset("tx", 3);
        let json = serde_json::to_string(&r).expect("serializes");
        assert_eq!(json, "\"dataset:tx@3\"");
        assert_eq!(serde_json::from_str::<ObjectRef>(&json).ok(), Some(r));
        let err = serde_json::from_str::<ObjectRef>("\"tx@3\"").expect_err("no kind");
        assert!(err.to_string().contains("kind:name"), "{err}");
    }

    #[test]
    fn a_kind_can_be_implied() {
        let r = ObjectRef::parse_of(Kind::Dataset, "tx@2").expect("implied kind");
        assert_eq!(r.to_string(), "dataset:tx@2");
        assert!(ObjectRef::parse_of(Kind::Dataset, "model:m@2").is_err());
    }
}
