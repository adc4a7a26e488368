//! Shared set-up of the tracking store tests.

use qanat_governance::{Governance, Project};
use qanat_store::testing::TestDb;
use qanat_tracking::Tracking;

/// The tables tracking's tests use: governance's, datasets' (the lineage edges) and
/// tracking's own.
pub static SCHEMA: &[&qanat_store::migrations::DomainMigrations] = &[
    &qanat_governance::MIGRATIONS,
    &qanat_data::MIGRATIONS,
    &qanat_tracking::MIGRATIONS,
];

/// The store over `db` with two projects, `a` and `b`, created by the bootstrap admin.
pub async fn setup(db: &TestDb) -> (Tracking, Governance, Project, Project) {
    let gov = Governance::new(db.store.clone());
    let token = gov
        .bootstrap_admin("admin")
        .await
        .expect("boot")
        .expect("token");
    let admin = gov.authenticate(&token.token).await.expect("auth");
    let a = gov
        .create_project("a", "", &["uae-north".into()], &admin)
        .await
        .expect("project a");
    let b = gov
        .create_project("b", "", &["uae-north".into()], &admin)
        .await
        .expect("project b");
    (Tracking::new(db.store.clone()), gov, a, b)
}
