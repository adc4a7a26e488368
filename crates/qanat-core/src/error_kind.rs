//! What kind of failure an error is, independent of any transport.

/// The kinds of failure the platform distinguishes. The API maps each to one status
/// code (and MLflow's routes to MLflow's code) in one place; domain crates never pick
/// status codes themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The caller's input is wrong; the message says what to fix.
    Invalid,
    /// The named object does not exist (or the caller may not know that it does).
    NotFound,
    /// A name or number is already taken.
    AlreadyExists,
    /// A concurrent change won; nothing was written and the call may be retried.
    Conflict,
    /// The caller is not authenticated.
    Unauthenticated,
    /// The caller is authenticated but may not do this (RBAC, residency, policy).
    Forbidden,
    /// A dependency is down or busy; retry later.
    Unavailable,
    /// Stored bytes failed verification: the caller must know, and nothing is served.
    Integrity,
    /// A fault inside the platform. Details go to the log, never to the caller.
    Internal,
}

/// Implemented by every domain crate's error type.
///
/// ```
/// use qanat_core::{DomainError, ErrorKind};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("dataset '{0}' does not exist")]
/// struct Missing(String);
///
/// impl DomainError for Missing {
///     fn kind(&self) -> ErrorKind {
///         ErrorKind::NotFound
///     }
/// }
/// assert_eq!(Missing("tx".into()).kind(), ErrorKind::NotFound);
/// ```
pub trait DomainError: std::error::Error + Send + Sync + 'static {
    /// What kind of failure this is.
    fn kind(&self) -> ErrorKind;

    /// A machine-readable code more specific than the kind's default, e.g.
    /// `RESIDENCY_VIOLATION` for a [`ErrorKind::Forbidden`] residency refusal.
    fn code(&self) -> Option<&'static str> {
        None
    }
}
