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
    /// A bounded resource (a queue, a rate limit) is full: refused at once, retry later.
    Exhausted,
    /// The object existed and was destroyed on purpose (an erasure); it will not come
    /// back, and the message says by what.
    Gone,
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
    /// What kind of failure this is. An error that wraps another domain's is of that
    /// error's kind: end the match with `_ => self.wrapped_kind()`.
    fn kind(&self) -> ErrorKind;

    /// The error of another domain (or the shared [`Refusal`]) that this one wraps, if
    /// it is one: its code and refusal are this one's, unless an implementation says
    /// otherwise.
    fn wrapped(&self) -> Option<&dyn DomainError> {
        None
    }

    /// The kind of the [`wrapped`](Self::wrapped) error; internal when there is none.
    fn wrapped_kind(&self) -> ErrorKind {
        self.wrapped().map_or(ErrorKind::Internal, |e| e.kind())
    }

    /// A machine-readable code more specific than the kind's default, e.g.
    /// `RESIDENCY_VIOLATION` for a [`ErrorKind::Forbidden`] residency refusal.
    fn code(&self) -> Option<&'static str> {
        self.wrapped().and_then(|e| e.code())
    }

    /// The shared refusal this error is, if it is one: lets a protocol layer (the
    /// MLflow routes) say it in that protocol's words.
    fn refusal(&self) -> Option<&Refusal> {
        self.wrapped().and_then(|e| e.refusal())
    }
}

/// The refusals every domain shares, with one wording across the platform: a missing
/// object, a name already taken, input that breaks a rule. A domain error wraps it
/// (`#[error(transparent)] Refused(#[from] Refusal)`) next to its own variants.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{kind} '{name}' does not exist")]
    NotFound { kind: &'static str, name: String },
    #[error("{kind} '{name}' already exists")]
    AlreadyExists { kind: &'static str, name: String },
    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },
}

impl Refusal {
    pub fn not_found(kind: &'static str, name: impl Into<String>) -> Self {
        Refusal::NotFound {
            kind,
            name: name.into(),
        }
    }

    pub fn already_exists(kind: &'static str, name: impl Into<String>) -> Self {
        Refusal::AlreadyExists {
            kind,
            name: name.into(),
        }
    }

    pub fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Refusal::Invalid {
            what,
            reason: reason.into(),
        }
    }
}

impl DomainError for Refusal {
    fn kind(&self) -> ErrorKind {
        match self {
            Refusal::NotFound { .. } => ErrorKind::NotFound,
            Refusal::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            Refusal::Invalid { .. } => ErrorKind::Invalid,
        }
    }

    fn refusal(&self) -> Option<&Refusal> {
        Some(self)
    }
}

impl From<crate::NameError> for Refusal {
    fn from(e: crate::NameError) -> Self {
        Refusal::invalid(e.what, e.rule())
    }
}

impl From<crate::UnknownWord> for Refusal {
    fn from(e: crate::UnknownWord) -> Self {
        Refusal::invalid(e.what, e.reason())
    }
}

/// Gives a domain error whose `Refused` variant wraps a [`Refusal`] the constructors
/// `not_found(kind, name)`, `already_exists(kind, name)` and `invalid(what, reason)`,
/// and `From` for [`NameError`](crate::NameError) and
/// [`UnknownWord`](crate::UnknownWord), so `?` turns a broken name rule into a 400.
#[macro_export]
macro_rules! refusals {
    ($err:ident) => {
        #[allow(dead_code)]
        impl $err {
            pub(crate) fn not_found(kind: &'static str, name: impl Into<String>) -> Self {
                $err::Refused($crate::Refusal::not_found(kind, name))
            }

            pub(crate) fn already_exists(kind: &'static str, name: impl Into<String>) -> Self {
                $err::Refused($crate::Refusal::already_exists(kind, name))
            }

            pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
                $err::Refused($crate::Refusal::invalid(what, reason))
            }
        }

        impl From<$crate::NameError> for $err {
            fn from(e: $crate::NameError) -> Self {
                $err::Refused(e.into())
            }
        }

        impl From<$crate::UnknownWord> for $err {
            fn from(e: $crate::UnknownWord) -> Self {
                $err::Refused(e.into())
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Inner {
        #[error("residency")]
        Residency,
        #[error(transparent)]
        Refused(#[from] Refusal),
    }

    impl DomainError for Inner {
        fn kind(&self) -> ErrorKind {
            match self {
                Inner::Residency => ErrorKind::Forbidden,
                _ => self.wrapped_kind(),
            }
        }

        fn wrapped(&self) -> Option<&dyn DomainError> {
            match self {
                Inner::Refused(r) => Some(r),
                _ => None,
            }
        }

        fn code(&self) -> Option<&'static str> {
            matches!(self, Inner::Residency).then_some("RESIDENCY_VIOLATION")
        }
    }

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("broken")]
        Broken,
        #[error(transparent)]
        Inner(#[from] Inner),
    }

    impl DomainError for Outer {
        fn kind(&self) -> ErrorKind {
            match self {
                Outer::Broken => ErrorKind::Internal,
                _ => self.wrapped_kind(),
            }
        }

        fn wrapped(&self) -> Option<&dyn DomainError> {
            match self {
                Outer::Inner(e) => Some(e),
                _ => None,
            }
        }
    }

    #[test]
    fn a_wrapping_error_is_the_wrapped_one_s_kind_code_and_refusal_through_two_levels() {
        let missing = Outer::Inner(Inner::Refused(Refusal::not_found("model", "fraud")));
        assert_eq!(missing.kind(), ErrorKind::NotFound);
        assert_eq!(
            missing.refusal(),
            Some(&Refusal::not_found("model", "fraud"))
        );
        assert_eq!(missing.code(), None);
        let residency = Outer::Inner(Inner::Residency);
        assert_eq!(residency.kind(), ErrorKind::Forbidden);
        assert_eq!(residency.code(), Some("RESIDENCY_VIOLATION"));
        assert_eq!(residency.refusal(), None);
        assert_eq!(Outer::Broken.kind(), ErrorKind::Internal);
        assert_eq!(Outer::Broken.code(), None);
        assert_eq!(Outer::Broken.refusal(), None);
    }
}
