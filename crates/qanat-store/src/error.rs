use std::path::PathBuf;

/// Everything that can go wrong in the metadata store or the object storage layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("metadata store: {0}")]
    Db(#[from] sqlx::Error),
    #[error("metadata store migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    #[error("object '{key}' not found in storage location '{location}'")]
    NotFound { location: String, key: String },
    #[error(
        "unknown storage location '{0}'; configured locations are listed by `qanat config show`"
    )]
    UnknownLocation(String),
    #[error(
        "integrity check failed for '{key}': {reason} (the stored bytes were altered or truncated)"
    )]
    Integrity { key: String, reason: String },
    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },
    #[error("key management: {0}")]
    Keys(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading the data to store failed: {0}")]
    Source(#[source] std::io::Error),
}

impl Error {
    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::Invalid {
            what,
            reason: reason.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Whether the error is a uniqueness violation (a name already taken).
    pub fn is_unique_violation(&self) -> bool {
        match self {
            Error::Db(sqlx::Error::Database(e)) => e.is_unique_violation(),
            _ => false,
        }
    }
}

impl qanat_core::DomainError for Error {
    fn kind(&self) -> qanat_core::ErrorKind {
        use qanat_core::ErrorKind as K;
        match self {
            Error::NotFound { .. } => K::NotFound,
            Error::UnknownLocation(_) | Error::Invalid { .. } | Error::Source(_) => K::Invalid,
            Error::Integrity { .. } => K::Integrity,
            Error::Db(_)
            | Error::Migrate(_)
            | Error::ObjectStore(_)
            | Error::Keys(_)
            | Error::Io { .. } => K::Internal,
        }
    }

    fn code(&self) -> Option<&'static str> {
        matches!(self, Error::Integrity { .. }).then_some("DATA_INTEGRITY_ERROR")
    }
}
