//! The feature store as the API shows it: a repo's definitions and the request and
//! response bodies of plan, apply, materialization, training sets and streams
//! (`qanat-features` checks, records and serves them).

pub mod definitions;
pub mod wire;

pub use definitions::{FeatureRef, FeatureRepo, ObjectKind, Ttl, ValueType};
