//! Shared set-up of the tracking store tests.

use qanat_governance::{testing, Governance, Project};
use qanat_store::testing::TestDb;
use qanat_tracking::Tracking;

/// The tables tracking's tests use: governance's, datasets' (the lineage edges),
/// tracking's own and events' (registry changes queue their webhook deliveries).
pub static SCHEMA: &[&qanat_store::migrations::DomainMigrations] = &[
    &qanat_governance::MIGRATIONS,
    &qanat_data::MIGRATIONS,
    &qanat_tracking::MIGRATIONS,
    &qanat_events::MIGRATIONS,
];

/// The store over `db` with two projects, `a` and `b`, created by the bootstrap admin.
pub async fn setup(db: &TestDb) -> (Tracking, Governance, Project, Project) {
    let gov = Governance::new(db.store.clone());
    let [a, b] = testing::projects(&gov, ["a", "b"]).await;
    (Tracking::new(db.store.clone()), gov, a, b)
}
