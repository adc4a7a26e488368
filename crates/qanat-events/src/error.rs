/// Everything the event layer can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("metadata store: {0}")]
    Db(#[from] sqlx::Error),
    /// A missing webhook.
    #[error(transparent)]
    Refused(#[from] qanat_core::Refusal),
    /// Bad input; the message is MLflow's wording where MLflow has one.
    #[error("{0}")]
    Invalid(String),
    /// Sealing or opening a webhook secret.
    #[error(transparent)]
    Store(#[from] qanat_store::Error),
}

impl Error {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid(message.into())
    }

    pub(crate) fn not_found(kind: &'static str, name: impl Into<String>) -> Self {
        Error::Refused(qanat_core::Refusal::not_found(kind, name))
    }
}

impl qanat_core::DomainError for Error {
    fn kind(&self) -> qanat_core::ErrorKind {
        use qanat_core::ErrorKind as K;
        match self {
            Error::Db(_) | Error::Store(_) => K::Internal,
            Error::Invalid(_) => K::Invalid,
            _ => self.wrapped_kind(),
        }
    }

    fn wrapped(&self) -> Option<&dyn qanat_core::DomainError> {
        match self {
            Error::Refused(e) => Some(e),
            _ => None,
        }
    }
}
