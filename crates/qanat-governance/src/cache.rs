//! What the authorization point looks up on every request — a token's principal, a
//! caller's project and role — held for a moment ([`TTL`]) so that a busy server does
//! not ask the metadata store the same question thousands of times a second.
//!
//! Every write to users, tokens, projects or members calls [`auth_changed`], which
//! makes every entry stale at once: a revoked token, a disabled user or a removed
//! member is refused at once by the server that made the change, and within [`TTL`]
//! by other servers sharing the metadata store. Refusals are never held.

use std::time::Duration;

use qanat_core::cache::{Cache, Generation};

/// How long an entry is trusted without a write seen by this process.
pub const TTL: Duration = Duration::from_secs(1);

static AUTH: Generation = Generation::new();

/// Marks every cached principal, project and role of this process as stale. Called by
/// every write to users, tokens, projects and members here, and by callers that change
/// them in a transaction of their own, after it commits.
pub fn auth_changed() {
    AUTH.bump();
}

pub(crate) fn new<K: Eq + std::hash::Hash, V: Clone>() -> std::sync::Arc<Cache<K, V>> {
    std::sync::Arc::new(Cache::new(&AUTH, TTL))
}
