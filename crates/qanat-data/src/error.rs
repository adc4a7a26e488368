/// Everything the dataset layer can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] qanat_store::Error),
    #[error(transparent)]
    Governance(#[from] qanat_governance::Error),
    #[error("metadata store: {0}")]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    Refused(#[from] qanat_core::Refusal),
    #[error("{0}")]
    Busy(String),
    /// A concurrent change won; nothing was written.
    #[error("{0}")]
    Conflict(String),
    #[error("reading a stored file failed: {0}")]
    Io(#[source] std::io::Error),
    #[error("{}", describe_violations(.0))]
    SchemaViolation(Vec<crate::SchemaViolation>),
    #[error("the manifest names {count} chunk(s) that are not stored, e.g. {example}; upload them and commit again")]
    MissingChunks { count: usize, example: String },
    #[error("{what} was removed on {at} by the project's retention of dataset versions ({days} days; a dataset's latest and tagged versions are kept)")]
    Expired { what: String, at: String, days: i64 },
    #[error("{what} held personal data erased by request '{request_id}' on {at}: its data keys were destroyed and it cannot be read any more{}", later.as_ref().map(|v| format!("; version {v} holds the data without the erased rows")).unwrap_or_default())]
    Erased {
        what: String,
        request_id: String,
        at: String,
        later: Option<i64>,
    },
    #[error("{}", describe_undeclared(project, dataset, found))]
    UndeclaredPii {
        project: String,
        dataset: String,
        found: Vec<crate::UndeclaredPii>,
    },
}

fn describe_undeclared(project: &str, dataset: &str, found: &[crate::UndeclaredPii]) -> String {
    let mut columns: Vec<&str> = found.iter().map(|f| f.column.as_str()).collect();
    columns.sort_unstable();
    columns.dedup();
    let mut s = format!(
        "project '{project}' requires personal data to be declared, and this push holds some that dataset '{dataset}' does not declare; nothing was stored as a version:"
    );
    for f in found.iter().take(20) {
        s.push_str(&format!("\n  {}", f.describe()));
    }
    s.push_str(&format!(
        "\ndeclare them (qanat data declare-pii {dataset} {}), or remove them, and push again",
        columns.join(" ")
    ));
    s
}

qanat_core::refusals!(Error);

fn describe_violations(v: &[crate::SchemaViolation]) -> String {
    let mut s = format!("the push breaks the dataset's declared schema ({} problem(s)); nothing was stored as a version:", v.len());
    for x in v.iter().take(20) {
        s.push_str(&format!(
            "\n  {} / column '{}': {}",
            x.file, x.column, x.problem
        ));
        if !x.examples.is_empty() {
            s.push_str(&format!(" (e.g. {})", x.examples.join(", ")));
        }
    }
    s
}

impl qanat_core::DomainError for Error {
    fn kind(&self) -> qanat_core::ErrorKind {
        use qanat_core::ErrorKind as K;
        match self {
            Error::Db(_) | Error::Io(_) => K::Internal,
            Error::MissingChunks { .. }
            | Error::SchemaViolation(_)
            | Error::UndeclaredPii { .. } => K::Invalid,
            Error::Busy(_) => K::Unavailable,
            Error::Conflict(_) => K::Conflict,
            Error::Erased { .. } | Error::Expired { .. } => K::Gone,
            _ => self.wrapped_kind(),
        }
    }

    fn wrapped(&self) -> Option<&dyn qanat_core::DomainError> {
        match self {
            Error::Store(e) => Some(e),
            Error::Governance(e) => Some(e),
            Error::Refused(e) => Some(e),
            _ => None,
        }
    }

    fn code(&self) -> Option<&'static str> {
        match self {
            Error::SchemaViolation(_) => Some("SCHEMA_VIOLATION"),
            Error::Busy(_) => Some("TEMPORARILY_UNAVAILABLE"),
            Error::Erased { .. } => Some("DATA_ERASED"),
            Error::Expired { .. } => Some("VERSION_EXPIRED"),
            _ => self.wrapped().and_then(|e| e.code()),
        }
    }
}

impl From<qanat_core::RefError> for Error {
    fn from(e: qanat_core::RefError) -> Self {
        Error::invalid("version", e.to_string())
    }
}
