//! The bottom of Qanat's crate graph: the vocabulary every other crate shares.
//!
//! - [`Name`]: the one rule for the name of every object a user creates (projects,
//!   datasets, tags, aliases, and the domains still to come), and [`IdentityName`]
//!   for users and tokens, which may also carry `@` (e-mail style).
//! - [`ObjectRef`]: the platform's identifier, `kind:name@version`, `kind:name@alias`
//!   or `kind:name@tag` (ARCHITECTURE.md §5), parsed once at the edge with
//!   [`FromStr`](std::str::FromStr) and printed back with [`Display`](std::fmt::Display).
//! - [`ErrorKind`] and [`DomainError`]: each domain error says what kind of failure it
//!   is; the API turns the kind into a status code in one place.
//! - Id newtypes for the ids that cross crates ([`ProjectId`], [`UserId`]).
//! - [`cache::Cache`]: what a server looks up on every request, held until a write
//!   makes it stale or a short ttl passes.
//! - [`word_enum!`]: enums stored and shown as one word (roles, states), with the
//!   accepted words named when one is refused ([`UnknownWord`]).
//!
//! ```
//! use qanat_core::{Kind, ObjectRef, Selector};
//!
//! let r: ObjectRef = "dataset:transactions@v3".parse().unwrap();
//! assert_eq!(r.kind, Kind::Dataset);
//! assert_eq!(r.name, "transactions");
//! assert_eq!(r.selector, Some(Selector::Version(3)));
//! assert_eq!(r.to_string(), "dataset:transactions@3");
//! ```
//!
//! This crate has no I/O and no heavy dependencies, so everything can depend on it.

pub mod cache;
mod error_kind;
mod ids;
mod name;
mod object_ref;
pub mod pii;
mod table_format;
#[doc(hidden)]
pub mod words;

pub use error_kind::{DomainError, ErrorKind, Refusal};
pub use ids::{ProjectId, UserId};
pub use name::{subject_token, IdentityName, Name, NameError};
pub use object_ref::{Kind, ObjectRef, RefError, Selector};
pub use table_format::TableFormat;
pub use words::UnknownWord;
