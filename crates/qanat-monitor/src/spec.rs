//! What a monitor watches and what it does (the types are `qanat_types::monitor::spec`).

pub use qanat_types::monitor::spec::*;
