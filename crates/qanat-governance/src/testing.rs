//! Set-up shared by the test suites of governance and the domains above it (feature
//! `testing`): the bootstrap admin of a fresh store and projects created by it.

use crate::{Governance, Principal, Project};

/// The bootstrap admin of a fresh store, authenticated. Panics on a store that
/// already has one: tests start from an empty database.
#[qanat_macros::boxed]
pub async fn admin(gov: &Governance) -> Principal {
    let token = gov
        .bootstrap_admin("admin")
        .await
        .expect("bootstrap the admin")
        .expect("a fresh store has no admin yet");
    gov.authenticate(&token.token).await.expect("authenticate")
}

/// Projects with these names, allowed in `uae-north`, created by a fresh admin.
pub async fn projects<const N: usize>(gov: &Governance, names: [&str; N]) -> [Project; N] {
    let admin = admin(gov).await;
    let mut out = Vec::with_capacity(N);
    for name in names {
        out.push(
            gov.create_project(name, "", &["uae-north".into()], &admin)
                .await
                .unwrap_or_else(|e| panic!("create project {name}: {e}")),
        );
    }
    out.try_into().unwrap_or_else(|_| unreachable!())
}
