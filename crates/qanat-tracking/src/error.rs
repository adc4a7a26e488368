/// Everything tracking can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("metadata store: {0}")]
    Db(sqlx::Error),
    /// A concurrent writer took the same name, number or slot first; the transaction
    /// rolled back whole and the call may be retried.
    #[error("a concurrent change to the same object won; nothing was written, retry")]
    Conflict,
    /// A missing object or a taken name (invalid input is [`Error::Invalid`], whose
    /// message is MLflow's wording as is).
    #[error(transparent)]
    Refused(#[from] qanat_core::Refusal),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Governance(#[from] qanat_governance::Error),
    /// Recording a registry event (in the change's own transaction).
    #[error(transparent)]
    Events(#[from] qanat_events::Error),
}

impl Error {
    pub(crate) fn not_found(kind: &'static str, name: impl Into<String>) -> Self {
        Error::Refused(qanat_core::Refusal::not_found(kind, name))
    }

    pub(crate) fn already_exists(kind: &'static str, name: impl Into<String>) -> Self {
        Error::Refused(qanat_core::Refusal::already_exists(kind, name))
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid(message.into())
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) if db.is_unique_violation() => Error::Conflict,
            _ => Error::Db(e),
        }
    }
}

impl qanat_core::DomainError for Error {
    fn kind(&self) -> qanat_core::ErrorKind {
        use qanat_core::ErrorKind as K;
        match self {
            Error::Db(_) => K::Internal,
            Error::Conflict => K::Conflict,
            Error::Invalid(_) => K::Invalid,
            _ => self.wrapped_kind(),
        }
    }

    fn wrapped(&self) -> Option<&dyn qanat_core::DomainError> {
        match self {
            Error::Refused(e) => Some(e),
            Error::Governance(e) => Some(e),
            Error::Events(e) => Some(e),
            _ => None,
        }
    }

    fn code(&self) -> Option<&'static str> {
        match self {
            Error::Conflict => Some("RESOURCE_CONFLICT"),
            _ => self.wrapped().and_then(|e| e.code()),
        }
    }
}
