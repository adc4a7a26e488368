//! Ids that cross crates, as types: a `ProjectId` cannot be passed where a `UserId` is
//! meant. Each is the opaque text the metadata store generated; it serialises as a plain
//! string, binds and reads as text in SQL (with the `sqlx` feature), and is never
//! parsed for meaning.

use std::fmt;

/// Declares an id newtype over `String`. A new domain whose ids cross crates adds one
/// line below.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        #[derive(serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps an id the store generated (or a caller received from it).
            pub fn new(id: impl Into<String>) -> Self {
                $name(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                $name(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                $name(id.to_string())
            }
        }

        #[cfg(feature = "sqlx")]
        impl sqlx::Type<sqlx::Any> for $name {
            fn type_info() -> sqlx::any::AnyTypeInfo {
                <String as sqlx::Type<sqlx::Any>>::type_info()
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'q> sqlx::Encode<'q, sqlx::Any> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut <sqlx::Any as sqlx::Database>::ArgumentBuffer<'q>,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <String as sqlx::Encode<'q, sqlx::Any>>::encode_by_ref(&self.0, buf)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'r> sqlx::Decode<'r, sqlx::Any> for $name {
            fn decode(
                value: <sqlx::Any as sqlx::Database>::ValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                <String as sqlx::Decode<'r, sqlx::Any>>::decode(value).map($name)
            }
        }
    };
}

id_type!(
    /// A project's id (governance creates it; datasets, runs, models and audit scope by it).
    ProjectId
);
id_type!(
    /// A user's or service account's id (governance creates it; tokens and members name it).
    UserId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_serialise_as_plain_strings() {
        let id = ProjectId::new("p-1");
        assert_eq!(serde_json::to_string(&id).unwrap_or_default(), "\"p-1\"");
        let back: ProjectId = serde_json::from_str("\"p-1\"").expect("parse");
        assert_eq!(back, id);
        assert_eq!(id.to_string(), "p-1");
    }
}
