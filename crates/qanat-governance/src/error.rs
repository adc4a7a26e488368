/// Everything governance can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] qanat_store::Error),
    #[error("metadata store: {0}")]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    Refused(#[from] qanat_core::Refusal),
    /// A batch of audit entries could not be committed (the store's error, in words).
    #[error("audit log: {0}")]
    AuditWrite(String),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    /// The identity provider could not be asked (a session due for its check waits).
    #[error("{0}")]
    ProviderUnavailable(String),
    #[error("data residency: project '{project}' may store data only in {allowed:?}; storage location '{location}' is in region '{region}'")]
    Residency {
        project: String,
        location: String,
        region: String,
        allowed: Vec<String>,
    },
}

qanat_core::refusals!(Error);

impl qanat_core::DomainError for Error {
    fn kind(&self) -> qanat_core::ErrorKind {
        use qanat_core::ErrorKind as K;
        match self {
            Error::Db(_) | Error::AuditWrite(_) => K::Internal,
            Error::Unauthenticated(_) => K::Unauthenticated,
            Error::Forbidden(_) | Error::Residency { .. } => K::Forbidden,
            Error::ProviderUnavailable(_) => K::Unavailable,
            _ => self.wrapped_kind(),
        }
    }

    fn wrapped(&self) -> Option<&dyn qanat_core::DomainError> {
        match self {
            Error::Store(e) => Some(e),
            Error::Refused(e) => Some(e),
            _ => None,
        }
    }

    fn code(&self) -> Option<&'static str> {
        match self {
            Error::Residency { .. } => Some("RESIDENCY_VIOLATION"),
            _ => self.wrapped().and_then(|e| e.code()),
        }
    }
}
