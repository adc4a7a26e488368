//! Storage as the API shows it: a project's objects, storage locations, master keys.

pub mod wire;
