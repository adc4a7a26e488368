//! What the feature store's suites share: the tables they need.

/// Governance, datasets and the feature registry.
pub static SCHEMA: &[&qanat_store::migrations::DomainMigrations] = &[
    &qanat_governance::MIGRATIONS,
    &qanat_data::MIGRATIONS,
    &qanat_features::MIGRATIONS,
];
