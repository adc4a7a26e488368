//! Enums that are stored, sent and shown as one word: roles, classifications,
//! outcomes, object kinds, the states of runs and checks, drift methods.

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
/// OpenAPI schemas) using the same words. A variant's word is its name in snake case
/// (`NewVersion` is `new_version`, `Int32` is `int32`: serde's `rename_all =
/// "snake_case"`), or the literal written after it. It derives `Debug, Clone, Copy,
/// PartialEq, Eq, Hash, Serialize, Deserialize`; add others (`PartialOrd`,
/// `utoipa::ToSchema`) as attributes:
///
/// ```
/// qanat_core::word_enum! {
///     /// How urgent.
///     pub enum Urgency as "urgency" {
///         Low,
///         RightNow,
///         Later = "eventually",
///     }
/// }
/// assert_eq!("right_now".parse::<Urgency>().unwrap(), Urgency::RightNow);
/// assert_eq!(Urgency::Later.to_string(), "eventually");
/// assert_eq!(
///     "soon".parse::<Urgency>().unwrap_err().to_string(),
///     "invalid urgency: 'soon': use low, right_now or eventually"
/// );
/// ```
///
#[macro_export]
macro_rules! word_enum {
    (@word $variant:ident $word:literal) => {
        $word
    };
    (@word $variant:ident) => {{
        const BYTES: [u8; $crate::words::snake_len(stringify!($variant))] =
            $crate::words::snake(stringify!($variant));
        const WORD: &str = match ::core::str::from_utf8(&BYTES) {
            Ok(word) => word,
            Err(_) => panic!("a variant name is ASCII"),
        };
        WORD
    }};
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident as $what:literal {
            $($(#[$vmeta:meta])* $variant:ident $(= $word:literal)?),+ $(,)?
        }
    ) => {
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize,
        )]
        #[serde(rename_all = "snake_case")]
        $(#[$meta])*
        $vis enum $name {
            $($(#[$vmeta])* $(#[serde(rename = $word)])? $variant),+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Every variant's word, in declaration order.
            pub const WORDS: &'static [&'static str] =
                &[$($crate::word_enum!(@word $variant $($word)?)),+];

            /// The word for this variant.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $crate::word_enum!(@word $variant $($word)?)),+
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
                match Self::WORDS.iter().position(|w| *w == s) {
                    Some(i) => Ok(Self::ALL[i]),
                    None => Err($crate::UnknownWord {
                        what: $what,
                        got: s.to_string(),
                        allowed: Self::WORDS,
                    }),
                }
            }
        }
    };
}

/// The length of `name` in snake case (serde's rule: `_` before every capital but the
/// first, then lower case), for [`word_enum!`].
#[doc(hidden)]
pub const fn snake_len(name: &str) -> usize {
    let b = name.as_bytes();
    let (mut n, mut i) = (b.len(), 1);
    while i < b.len() {
        if b[i].is_ascii_uppercase() {
            n += 1;
        }
        i += 1;
    }
    n
}

/// `name` in snake case, at compile time, for [`word_enum!`].
#[doc(hidden)]
pub const fn snake<const N: usize>(name: &str) -> [u8; N] {
    let b = name.as_bytes();
    let mut out = [0u8; N];
    let (mut i, mut j) = (0, 0);
    while i < b.len() {
        if i > 0 && b[i].is_ascii_uppercase() {
            out[j] = b'_';
            j += 1;
        }
        out[j] = b[i].to_ascii_lowercase();
        j += 1;
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    crate::word_enum! {
        enum Light as "light" {
            Red,
            Amber,
            Green,
            FlashingAmber,
            Int32,
            Off = "dark",
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
        assert_eq!(
            e.reason(),
            "'blue': use red, amber, green, flashing_amber, int32 or dark"
        );
        assert_eq!(
            Light::WORDS,
            ["red", "amber", "green", "flashing_amber", "int32", "dark"]
        );
        // serde's snake case (and so the OpenAPI schema's) is the same word.
        for l in Light::ALL {
            let json = serde_json::to_string(l).expect("serialize");
            assert_eq!(json, format!("\"{l}\""));
        }
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
