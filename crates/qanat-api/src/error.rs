//! The JSON error every route returns: `{"error_code": "...", "message": "..."}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
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
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, message = %self.message, "request failed");
        }
        let body = ErrorBody {
            error_code: self.code.to_string(),
            message: self.message.clone(),
        };
        let mut resp = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp.extensions_mut().insert(ErrorNote(self.message));
        resp
    }
}

impl From<qanat_governance::Error> for ApiError {
    fn from(e: qanat_governance::Error) -> Self {
        use qanat_governance::Error as G;
        match e {
            G::Store(s) => s.into(),
            G::NotFound { .. } => ApiError::not_found(e.to_string()),
            G::AlreadyExists { .. } => ApiError::new(
                StatusCode::CONFLICT,
                "RESOURCE_ALREADY_EXISTS",
                e.to_string(),
            ),
            G::Invalid { .. } => ApiError::bad_request(e.to_string()),
            G::Unauthenticated(m) => ApiError::unauthenticated(m),
            G::Forbidden(m) => ApiError::forbidden(m),
            G::Residency { .. } => {
                ApiError::new(StatusCode::FORBIDDEN, "RESIDENCY_VIOLATION", e.to_string())
            }
            G::Db(db) => ApiError::internal(format!("metadata store error: {db}")),
        }
    }
}

impl From<qanat_store::Error> for ApiError {
    fn from(e: qanat_store::Error) -> Self {
        use qanat_store::Error as S;
        match e {
            S::NotFound { .. } => ApiError::not_found(e.to_string()),
            S::UnknownLocation(_) | S::Invalid { .. } => ApiError::bad_request(e.to_string()),
            S::Source(_) => ApiError::bad_request(e.to_string()),
            S::Integrity { .. } => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "DATA_INTEGRITY_ERROR",
                e.to_string(),
            ),
            _ => ApiError::internal(e.to_string()),
        }
    }
}

impl From<qanat_data::Error> for ApiError {
    fn from(e: qanat_data::Error) -> Self {
        use qanat_data::Error as D;
        match e {
            D::Store(s) => s.into(),
            D::Governance(g) => g.into(),
            D::NotFound { .. } => ApiError::not_found(e.to_string()),
            D::AlreadyExists { .. } => ApiError::new(
                StatusCode::CONFLICT,
                "RESOURCE_ALREADY_EXISTS",
                e.to_string(),
            ),
            D::Invalid { .. } | D::MissingChunks { .. } => ApiError::bad_request(e.to_string()),
            D::Busy(m) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "TEMPORARILY_UNAVAILABLE",
                m,
            ),
            D::SchemaViolation(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "SCHEMA_VIOLATION", e.to_string())
            }
            D::Io(_) => ApiError::internal(e.to_string()),
            D::Db(db) => ApiError::internal(format!("metadata store error: {db}")),
        }
    }
}
