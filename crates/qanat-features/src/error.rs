//! Everything the feature store can refuse or fail at.

/// The feature store's errors; each says its kind through [`qanat_core::DomainError`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("metadata store: {0}")]
    Db(#[from] sqlx::Error),
    /// A missing object.
    #[error(transparent)]
    Refused(#[from] qanat_core::Refusal),
    /// Bad input; the message says what to fix.
    #[error("{0}")]
    Invalid(String),
    /// A feature repo with problems: all of them, one per line.
    #[error("the feature repo has {} problem{}:\n  {}", .0.len(), if .0.len() == 1 { "" } else { "s" }, .0.join("\n  "))]
    Definitions(Vec<String>),
    /// A backend (the online store) cannot be reached.
    #[error("{0}")]
    Unavailable(String),
    /// The registry changed since the plan was made.
    #[error("{0}")]
    Conflict(String),
    /// The caller's role does not allow this change (removing a PII flag).
    #[error("{0}")]
    Forbidden(String),
    #[error(transparent)]
    Governance(#[from] qanat_governance::Error),
    #[error(transparent)]
    Store(#[from] qanat_store::Error),
    #[error(transparent)]
    Data(#[from] qanat_data::Error),
    /// Stored metadata that does not read back (a bug or a damaged database).
    #[error("{0}")]
    Corrupt(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid(message.into())
    }

    pub(crate) fn not_found(kind: &'static str, name: impl Into<String>) -> Self {
        Error::Refused(qanat_core::Refusal::not_found(kind, name))
    }
}

impl From<qanat_core::UnknownWord> for Error {
    fn from(e: qanat_core::UnknownWord) -> Self {
        Error::Invalid(e.to_string())
    }
}

impl qanat_core::DomainError for Error {
    fn kind(&self) -> qanat_core::ErrorKind {
        use qanat_core::ErrorKind as K;
        match self {
            Error::Db(_) | Error::Corrupt(_) => K::Internal,
            Error::Invalid(_) | Error::Definitions(_) => K::Invalid,
            Error::Conflict(_) => K::Conflict,
            Error::Forbidden(_) => K::Forbidden,
            Error::Unavailable(_) => K::Unavailable,
            _ => self.wrapped_kind(),
        }
    }

    fn wrapped(&self) -> Option<&dyn qanat_core::DomainError> {
        match self {
            Error::Refused(e) => Some(e),
            Error::Governance(e) => Some(e),
            Error::Data(e) => Some(e),
            Error::Store(e) => Some(e),
            _ => None,
        }
    }

    fn code(&self) -> Option<&'static str> {
        match self {
            Error::Definitions(_) => Some("INVALID_FEATURE_REPO"),
            _ => self.wrapped().and_then(|e| e.code()),
        }
    }
}
