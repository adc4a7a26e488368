/// Everything the dataset layer can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] qanat_store::Error),
    #[error(transparent)]
    Governance(#[from] qanat_governance::Error),
    #[error("metadata store: {0}")]
    Db(#[from] sqlx::Error),
    #[error("{kind} '{name}' does not exist")]
    NotFound { kind: &'static str, name: String },
    #[error("{kind} '{name}' already exists")]
    AlreadyExists { kind: &'static str, name: String },
    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },
    #[error("{0}")]
    Busy(String),
    #[error("the manifest names {count} chunk(s) that are not stored, e.g. {example}; upload them and commit again")]
    MissingChunks { count: usize, example: String },
}

impl Error {
    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::Invalid {
            what,
            reason: reason.into(),
        }
    }
}
