//! Enums that are stored, sent and shown as one word: roles, classifications,
//! outcomes, and the states the domains still to come will have (job states, stages).

use std::fmt;

/// A word that names none of an enum's variants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownWord {
    /// What the word was meant to be, e.g. `role`.
    pub what: &'static str,
    pub got: String,
    /// The words that are accepted.
    pub allowed: &'static [&'static str],
}

impl UnknownWord {
    /// What to write instead: `'x': use a, b or c`.
    pub fn reason(&self) -> String {
        let list = match self.allowed {
            [] => String::new(),
            [one] => (*one).to_string(),
            [init @ .., last] => format!("{} or {last}", init.join(", ")),
        };
        format!("'{}': use {list}", self.got)
    }
}

impl fmt::Display for UnknownWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.what, self.reason())
    }
}

impl std::error::Error for UnknownWord {}

/// Declares an enum whose variants are words, with `as_str`, `ALL`, `Display`, a
/// `FromStr` that names the accepted words when it refuses one, and serde (and so
/// OpenAPI schemas) using the same words. It derives `Debug, Clone, Copy, PartialEq,
/// Eq, Hash, Serialize, Deserialize`; add others (`PartialOrd`, `utoipa::ToSchema`)
/// as attributes:
///
/// ```
/// qanat_core::word_enum! {
///     /// How urgent.
///     pub enum Urgency as "urgency" {
///         Low = "low",
///         High = "high",
///     }
/// }
/// assert_eq!("high".parse::<Urgency>().unwrap(), Urgency::High);
/// assert_eq!(Urgency::Low.to_string(), "low");
/// assert_eq!(
///     "soon".parse::<Urgency>().unwrap_err().to_string(),
///     "invalid urgency: 'soon': use low or high"
/// );
/// ```
///
#[macro_export]
macro_rules! word_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident as $what:literal {
            $($(#[$vmeta:meta])* $variant:ident = $word:literal),+ $(,)?
        }
    ) => {
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize,
        )]
        $(#[$meta])*
        $vis enum $name {
            $($(#[$vmeta])* #[serde(rename = $word)] $variant),+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The word for this variant.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word),+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::UnknownWord;
            fn from_str(s: &str) -> ::std::result::Result<Self, $crate::UnknownWord> {
                match s {
                    $($word => Ok($name::$variant),)+
                    other => Err($crate::UnknownWord {
                        what: $what,
                        got: other.to_string(),
                        allowed: &[$($word),+],
                    }),
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    crate::word_enum! {
        enum Light as "light" {
            Red = "red",
            Amber = "amber",
            Green = "green",
        }
    }

    #[test]
    fn words_round_trip_and_refusals_list_the_choices() {
        for l in Light::ALL {
            assert_eq!(l.as_str().parse::<Light>().expect("a listed word"), *l);
            assert_eq!(l.to_string(), l.as_str());
        }
        let e = "blue".parse::<Light>().expect_err("not a light");
        assert_eq!(e.what, "light");
        assert_eq!(e.reason(), "'blue': use red, amber or green");
        assert_eq!(
            e.to_string(),
            "invalid light: 'blue': use red, amber or green"
        );
        assert_eq!(
            serde_json::to_string(&Light::Amber).expect("serialize"),
            "\"amber\""
        );
        assert_eq!(
            serde_json::from_str::<Light>("\"green\"").expect("deserialize"),
            Light::Green
        );
    }
}
