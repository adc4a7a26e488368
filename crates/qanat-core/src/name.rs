//! The one naming rule for objects, and its variant for identities.

use std::fmt;
use std::str::FromStr;

/// Longest name accepted, in bytes (names are ASCII).
const MAX_LEN: usize = 128;

/// A name as one token of a NATS subject: NATS separates tokens with `.` and reserves
/// `*`, `>` and whitespace, so every character but letters, digits, `-` and `_`
/// becomes `_` (the event bus and the feature store's stream consumers name their
/// subjects and consumers with it).
pub fn subject_token(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A name that breaks the rule, with the rule spelled out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {}", self.rule())]
pub struct NameError {
    /// What was being named ("name", "user name", ...).
    pub what: &'static str,
    pub value: String,
    allowed: &'static str,
}

impl NameError {
    /// The offending value and the rule, e.g. `'a b': use 1-128 letters, …`.
    pub fn rule(&self) -> String {
        format!(
            "'{}': use 1-{MAX_LEN} letters, digits, {}, starting with a letter or digit",
            self.value, self.allowed
        )
    }

    /// The same error, saying what was being named (e.g. "dataset name").
    pub fn naming(mut self, what: &'static str) -> Self {
        self.what = what;
        self
    }
}

fn check(value: &str, extra: &[char], allowed: &'static str) -> Result<(), NameError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_LEN
        && value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') || extra.contains(&c)
        });
    if ok {
        Ok(())
    } else {
        Err(NameError {
            what: "name",
            value: value.to_string(),
            allowed,
        })
    }
}

/// The name of an object a user creates: a project, a dataset, a tag, an alias, a
/// feature view, a deployment. 1–128 ASCII letters, digits, `.`, `_` or `-`, starting
/// with a letter or digit. Safe in URLs, file names and [`ObjectRef`](crate::ObjectRef)s
/// (it never holds `:`, `@` or `/`).
///
/// ```
/// use qanat_core::Name;
/// assert!("fraud-v2".parse::<Name>().is_ok());
/// assert!("a@b".parse::<Name>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Name(String);

impl Name {
    /// Checks `value` against the rule; `what` names it in the error ("dataset name").
    pub fn parse_as(what: &'static str, value: &str) -> Result<Name, NameError> {
        check(value, &[], "'.', '_' or '-'")
            .map(|()| Name(value.to_string()))
            .map_err(|e| e.naming(what))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl FromStr for Name {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Name::parse_as("name", s)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The name of an identity (a user, a service account) or of a token: the [`Name`]
/// rule, plus `@` so that e-mail addresses work as user names. Identities are never
/// the subject of an [`ObjectRef`](crate::ObjectRef), so the `@` is unambiguous.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct IdentityName(String);

impl IdentityName {
    /// Checks `value` against the rule; `what` names it in the error ("user name").
    pub fn parse_as(what: &'static str, value: &str) -> Result<IdentityName, NameError> {
        check(value, &['@'], "'.', '_', '@' or '-'")
            .map(|()| IdentityName(value.to_string()))
            .map_err(|e| e.naming(what))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for IdentityName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IdentityName::parse_as("user name", s)
    }
}

impl fmt::Display for IdentityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_one_rule() {
        for ok in ["a", "7days", "fraud.v2", "tx_2024-01", &"x".repeat(128)] {
            assert!(ok.parse::<Name>().is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            ".a",
            "a b",
            "a@b",
            "a:b",
            "a/b",
            "é",
            &"x".repeat(129),
        ] {
            let err = bad.parse::<Name>().expect_err(bad);
            assert!(err.to_string().contains("1-128"), "{err}");
        }
    }

    #[test]
    fn identity_names_also_take_an_at_sign() {
        assert!("alice@example.com".parse::<IdentityName>().is_ok());
        assert!("@alice".parse::<IdentityName>().is_err());
        let err = IdentityName::parse_as("token name", "a b").expect_err("space");
        assert!(
            err.to_string().starts_with("invalid token name 'a b': use"),
            "{err}"
        );
    }
}
