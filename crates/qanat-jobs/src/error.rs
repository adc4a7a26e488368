/// Everything the job layer can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("metadata store: {0}")]
    Db(#[from] sqlx::Error),
    /// A missing job or schedule.
    #[error(transparent)]
    Refused(#[from] qanat_core::Refusal),
    /// Bad input; the message says what to fix.
    #[error("{0}")]
    Invalid(String),
    /// The job can never run as asked (more GPUs than exist, over the project's quota):
    /// refused at submit, never left waiting.
    #[error("{0}")]
    Unsatisfiable(String),
    /// Refused by policy: a spent quota.
    #[error("{0}")]
    Forbidden(String),
    /// The job would run outside the regions its project's data may be in.
    #[error("{0}")]
    Residency(String),
    /// The job is not in a state that allows this (cancel a finished job, …).
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Governance(#[from] qanat_governance::Error),
    #[error(transparent)]
    Tracking(#[from] qanat_tracking::Error),
    #[error(transparent)]
    Data(#[from] qanat_data::Error),
    #[error(transparent)]
    Store(#[from] qanat_store::Error),
    #[error("{0}")]
    Io(String),
}

impl Error {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid(message.into())
    }

    pub(crate) fn not_found(kind: &'static str, name: impl Into<String>) -> Self {
        Error::Refused(qanat_core::Refusal::not_found(kind, name))
    }

    pub(crate) fn io(what: impl std::fmt::Display, e: std::io::Error) -> Self {
        Error::Io(format!("{what}: {e}"))
    }
}

impl qanat_core::DomainError for Error {
    fn kind(&self) -> qanat_core::ErrorKind {
        use qanat_core::ErrorKind as K;
        match self {
            Error::Db(_) | Error::Store(_) | Error::Io(_) => K::Internal,
            Error::Invalid(_) | Error::Unsatisfiable(_) => K::Invalid,
            Error::Forbidden(_) | Error::Residency(_) => K::Forbidden,
            Error::Conflict(_) => K::Conflict,
            _ => self.wrapped_kind(),
        }
    }

    fn wrapped(&self) -> Option<&dyn qanat_core::DomainError> {
        match self {
            Error::Refused(e) => Some(e),
            Error::Governance(e) => Some(e),
            Error::Tracking(e) => Some(e),
            Error::Data(e) => Some(e),
            _ => None,
        }
    }

    fn code(&self) -> Option<&'static str> {
        match self {
            Error::Unsatisfiable(_) => Some("UNSATISFIABLE"),
            Error::Residency(_) => Some("RESIDENCY_VIOLATION"),
            _ => self.wrapped().and_then(|e| e.code()),
        }
    }
}
