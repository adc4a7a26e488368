//! The types Qanat's HTTP API speaks, one module per domain: the records the API
//! returns (a [`Dataset`](data::Dataset), a [`Run`](tracking::Run), a
//! [`Deployment`](serving::Deployment)) and the bodies of its requests and responses
//! (each domain's `wire` module), with the checks that need nothing but the value.
//!
//! The domain crates keep, query and act on these types and re-export them where they
//! always were (`qanat_data::Dataset` is `qanat_types::data::Dataset`); the server
//! serves them and `qanat-client` sends and reads them. This crate has no database, no
//! HTTP and no engine (no Arrow, DataFusion, tract or burn), so a client compiles in
//! seconds, not minutes.

pub mod data;
pub mod events;
pub mod features;
pub mod governance;
pub mod jobs;
pub mod monitor;
pub mod serving;
pub mod store;
pub mod tracking;
