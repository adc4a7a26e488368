/// Everything governance can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] qanat_store::Error),
    #[error("metadata store: {0}")]
    Db(#[from] sqlx::Error),
    #[error("{kind} '{name}' does not exist")]
    NotFound { kind: &'static str, name: String },
    #[error("{kind} '{name}' already exists")]
    AlreadyExists { kind: &'static str, name: String },
    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("data residency: project '{project}' may store data only in {allowed:?}; storage location '{location}' is in region '{region}'")]
    Residency {
        project: String,
        location: String,
        region: String,
        allowed: Vec<String>,
    },
}

impl Error {
    pub(crate) fn not_found(kind: &'static str, name: impl Into<String>) -> Self {
        Error::NotFound {
            kind,
            name: name.into(),
        }
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::Invalid {
            what,
            reason: reason.into(),
        }
    }
}

impl qanat_core::DomainError for Error {
    fn kind(&self) -> qanat_core::ErrorKind {
        use qanat_core::ErrorKind as K;
        match self {
            Error::Store(s) => s.kind(),
            Error::Db(_) => K::Internal,
            Error::NotFound { .. } => K::NotFound,
            Error::AlreadyExists { .. } => K::AlreadyExists,
            Error::Invalid { .. } => K::Invalid,
            Error::Unauthenticated(_) => K::Unauthenticated,
            Error::Forbidden(_) | Error::Residency { .. } => K::Forbidden,
        }
    }

    fn code(&self) -> Option<&'static str> {
        match self {
            Error::Store(s) => s.code(),
            Error::Residency { .. } => Some("RESIDENCY_VIOLATION"),
            _ => None,
        }
    }
}

impl From<qanat_core::NameError> for Error {
    fn from(e: qanat_core::NameError) -> Self {
        Error::Invalid {
            what: e.what,
            reason: e.rule(),
        }
    }
}

impl From<qanat_core::UnknownWord> for Error {
    fn from(e: qanat_core::UnknownWord) -> Self {
        Error::Invalid {
            what: e.what,
            reason: e.reason(),
        }
    }
}
