//! The JSON error every route returns: `{"error_code": "...", "message": "..."}`, and
//! the one place where a domain error's [`ErrorKind`] becomes a status code.
//!
//! Internal errors never reach the caller: the response says "internal error" and
//! names the request id; the details go to the log under that id (see
//! [`hide_internal_errors`]).

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use qanat_core::{DomainError, ErrorKind};
use serde::Serialize;

/// An error as the API reports it. Codes follow MLflow's names where MLflow has one.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

/// The body of every error response.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error_code: String,
    pub message: String,
}

/// Carried on error responses so the audit middleware can record why a request failed.
#[derive(Clone, Debug)]
pub(crate) struct ErrorNote(pub String);

/// Carried on a successful governed read's response: what the audit entry adds (e.g.
/// the personal data read in clear).
#[derive(Clone, Debug)]
pub(crate) struct ReadNote(pub String);

/// Carried on internal-error responses: the detail for the log, never for the caller.
#[derive(Clone, Debug)]
struct InternalDetail(String);

/// What the caller is told about an internal error.
const INTERNAL_MESSAGE: &str = "internal error; the server log has the details";

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "INVALID_PARAMETER_VALUE", message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "RESOURCE_DOES_NOT_EXIST", message)
    }
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "PERMISSION_DENIED", message)
    }
    /// A fault inside the server; `detail` is logged, the caller sees a generic message.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR", detail)
    }

    /// The status and default code of each kind: the native API's one mapping.
    pub(crate) fn of_kind(kind: ErrorKind) -> (StatusCode, &'static str) {
        match kind {
            ErrorKind::Invalid => (StatusCode::BAD_REQUEST, "INVALID_PARAMETER_VALUE"),
            ErrorKind::NotFound => (StatusCode::NOT_FOUND, "RESOURCE_DOES_NOT_EXIST"),
            ErrorKind::AlreadyExists => (StatusCode::CONFLICT, "RESOURCE_ALREADY_EXISTS"),
            ErrorKind::Conflict => (StatusCode::CONFLICT, "RESOURCE_CONFLICT"),
            ErrorKind::Unauthenticated => (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED"),
            ErrorKind::Forbidden => (StatusCode::FORBIDDEN, "PERMISSION_DENIED"),
            ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "TEMPORARILY_UNAVAILABLE"),
            ErrorKind::Exhausted => (StatusCode::TOO_MANY_REQUESTS, "RESOURCE_EXHAUSTED"),
            ErrorKind::Gone => (StatusCode::GONE, "RESOURCE_GONE"),
            ErrorKind::Integrity => (StatusCode::INTERNAL_SERVER_ERROR, "DATA_INTEGRITY_ERROR"),
            ErrorKind::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
        }
    }

    /// `e` as `status_of` maps its kind, with the domain's own code when it has one.
    pub(crate) fn from_domain(
        e: &dyn DomainError,
        status_of: fn(ErrorKind) -> (StatusCode, &'static str),
    ) -> Self {
        let (status, code) = status_of(e.kind());
        ApiError::new(status, e.code().unwrap_or(code), e.to_string())
    }
}

impl<E: DomainError> From<E> for ApiError {
    fn from(e: E) -> Self {
        ApiError::from_domain(&e, ApiError::of_kind)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let internal = self.code == "INTERNAL_ERROR";
        let message = if internal {
            INTERNAL_MESSAGE.to_string()
        } else {
            self.message.clone()
        };
        let body = ErrorBody {
            error_code: self.code.to_string(),
            message: message.clone(),
        };
        let mut resp = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if internal {
            resp.extensions_mut().insert(InternalDetail(self.message));
        } else if self.status.is_server_error() {
            tracing::error!(code = self.code, message = %self.message, "request failed");
        }
        resp.extensions_mut().insert(ErrorNote(message));
        resp
    }
}

/// Logs the detail of an internal error under the request's id and tells the caller
/// that id, so an operator can find the one from the other.
pub(crate) async fn hide_internal_errors(req: Request, next: Next) -> Response {
    let request_id = crate::request_id(req.headers()).to_string();
    let mut resp = next.run(req).await;
    let Some(InternalDetail(detail)) = resp.extensions_mut().remove::<InternalDetail>() else {
        return resp;
    };
    tracing::error!(request_id = %request_id, detail = %detail, "internal error");
    let body = ErrorBody {
        error_code: "INTERNAL_ERROR".into(),
        message: format!("{INTERNAL_MESSAGE} (request id {request_id})"),
    };
    let (mut parts, _) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    match serde_json::to_vec(&body) {
        Ok(bytes) => Response::from_parts(parts, axum::body::Body::from(bytes)),
        Err(_) => Response::from_parts(parts, axum::body::Body::empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("metadata store: disk I/O error at /var/lib/qanat/meta.db")]
    struct Broken;

    impl DomainError for Broken {
        fn kind(&self) -> ErrorKind {
            ErrorKind::Internal
        }
    }

    #[tokio::test]
    async fn internal_errors_reach_the_caller_without_their_details() {
        let resp = ApiError::from(Broken).into_response();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .expect("body");
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("/var/lib"), "{text}");
        assert!(text.contains("INTERNAL_ERROR"), "{text}");
    }

    #[test]
    fn every_kind_maps_to_one_status() {
        use ErrorKind::*;
        for (kind, status) in [
            (Invalid, 400),
            (NotFound, 404),
            (AlreadyExists, 409),
            (Conflict, 409),
            (Unauthenticated, 401),
            (Forbidden, 403),
            (Unavailable, 503),
            (Integrity, 500),
            (Internal, 500),
        ] {
            assert_eq!(ApiError::of_kind(kind).0.as_u16(), status, "{kind:?}");
        }
    }
}
