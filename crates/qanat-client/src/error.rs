/// What went wrong talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server refused or failed the request, with Qanat's JSON error body.
    #[error("{code} ({status}): {message}")]
    Api {
        /// The HTTP status, e.g. 404.
        status: u16,
        /// The stable `error_code`, e.g. `RESOURCE_DOES_NOT_EXIST` or `PERMISSION_DENIED`.
        code: String,
        message: String,
    },
    /// An error status without Qanat's error body (a proxy in between, say).
    #[error("server answered {status}: {body}")]
    Http { status: u16, body: String },
    /// No answer: the server is down, the address is wrong, or TLS failed.
    #[error("could not reach the Qanat server at {base} (is `qanat server` running?)")]
    Connect {
        base: String,
        #[source]
        source: reqwest::Error,
    },
    /// An answer that is not the JSON this endpoint returns (a different server, or a
    /// version mismatch).
    #[error("the server's answer to {path} is not what this client expects")]
    Decode {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    /// A transfer that broke off part-way.
    #[error("the transfer was interrupted")]
    Transfer(#[source] reqwest::Error),
    #[error("the CA certificate is not a PEM certificate")]
    Certificate(#[source] reqwest::Error),
    #[error("setting up the HTTP client")]
    Setup(#[source] reqwest::Error),
}

/// The body of every error answer of the native API.
#[derive(serde::Deserialize)]
struct ErrorBody {
    error_code: String,
    #[serde(default)]
    message: String,
}

impl Error {
    /// The HTTP status of an error answer; `None` when there was no answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } | Error::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The server's `error_code`, when it sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Passes a success through; reads an error answer into an [`Error`].
    pub(crate) async fn check(resp: reqwest::Response) -> Result<reqwest::Response, Error> {
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        // A body that cannot be read still leaves the status to report.
        let text = resp.text().await.unwrap_or_default();
        Err(Error::from_answer(status.as_u16(), &text))
    }

    fn from_answer(status: u16, text: &str) -> Error {
        match serde_json::from_str::<ErrorBody>(text) {
            Ok(b) => Error::Api {
                status,
                code: b.error_code,
                message: b.message,
            },
            Err(_) => Error::Http {
                status,
                body: text.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_gives_status_code_and_message() {
        let e = Error::from_answer(
            404,
            r#"{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no dataset 'tx'"}"#,
        );
        assert_eq!(e.status(), Some(404));
        assert_eq!(e.code(), Some("RESOURCE_DOES_NOT_EXIST"));
        assert_eq!(
            e.to_string(),
            "RESOURCE_DOES_NOT_EXIST (404): no dataset 'tx'"
        );
    }

    #[test]
    fn another_body_is_kept_as_text() {
        let e = Error::from_answer(502, "Bad Gateway");
        assert_eq!(e.status(), Some(502));
        assert_eq!(e.code(), None);
        assert_eq!(e.to_string(), "server answered 502: Bad Gateway");
    }
}
