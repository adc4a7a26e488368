//! Extractors whose rejections are JSON errors with a message that says what to fix.

use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// `Json<T>` with JSON errors: malformed bodies and wrong types are 400, oversized 413.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        read_json(req, state, |_, rej| json_rejection(rej))
            .await
            .map(ApiJson)
    }
}

/// Reads a JSON body as `T`; a body whose fields have the wrong types or are missing
/// is refused through `data_error` (given the body's bytes), everything else as
/// [`ApiJson`] refuses it.
pub(crate) async fn read_json<T, S>(
    req: Request,
    state: &S,
    data_error: fn(&[u8], JsonRejection) -> ApiError,
) -> Result<T, ApiError>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    if !json_content_type(req.headers()) {
        // axum decides, and says why it refuses.
        return match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(v),
            Err(rej) => Err(json_rejection(rej)),
        };
    }
    let bytes = Bytes::from_request(req, state)
        .await
        .map_err(|e| json_rejection(e.into()))?;
    // Plain serde_json first: axum's own parse tracks the path to every field, which
    // was ~5% of a 1000-metric log-batch. Only a body that fails is parsed again
    // that way, for an error that names the field.
    if let Ok(v) = serde_json::from_slice::<T>(&bytes) {
        return Ok(v);
    }
    match axum::Json::<T>::from_bytes(&bytes) {
        Ok(axum::Json(v)) => Ok(v),
        Err(rej @ JsonRejection::JsonDataError(_)) => Err(data_error(&bytes, rej)),
        Err(rej) => Err(json_rejection(rej)),
    }
}

/// `application/json` or `application/<something>+json`, parameters allowed (a subset
/// of what axum accepts; anything else is left to axum).
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

pub(crate) fn json_rejection(rej: JsonRejection) -> ApiError {
    match rej {
        JsonRejection::JsonDataError(e) => ApiError::bad_request(format!(
            "request body has wrong fields or types: {}",
            e.body_text()
        )),
        JsonRejection::JsonSyntaxError(e) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "MALFORMED_REQUEST",
            format!("request body is not valid JSON: {}", e.body_text()),
        ),
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UNSUPPORTED_MEDIA_TYPE",
            "send the body as JSON with 'Content-Type: application/json'",
        ),
        JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "REQUEST_TOO_LARGE",
                "request body is larger than the server's limit (server.max_request_bytes)",
            )
        }
        other => ApiError::new(other.status(), "MALFORMED_REQUEST", other.body_text()),
    }
}

/// Declares a wrapper around one of axum's parts extractors whose rejection is a JSON
/// 400 that says which part of the request was wrong.
macro_rules! with_json_errors {
    ($(#[$doc:meta])* $name:ident, $inner:ident, $what:literal) => {
        $(#[$doc])*
        pub struct $name<T>(pub T);

        impl<S, T> FromRequestParts<S> for $name<T>
        where
            T: DeserializeOwned + Send,
            S: Send + Sync,
        {
            type Rejection = ApiError;

            async fn from_request_parts(
                parts: &mut Parts,
                state: &S,
            ) -> Result<Self, Self::Rejection> {
                axum::extract::$inner::<T>::from_request_parts(parts, state)
                    .await
                    .map(|v| $name(v.0))
                    .map_err(|e| {
                        ApiError::bad_request(format!(concat!("bad ", $what, ": {}"), e.body_text()))
                    })
            }
        }
    };
}

with_json_errors!(
    /// `Query<T>` with JSON errors.
    ApiQuery,
    Query,
    "query string"
);
with_json_errors!(
    /// `Path<T>` with JSON errors.
    ApiPath,
    Path,
    "path"
);

/// The authenticated caller; present on every route whose policy is not public.
pub struct Caller(pub qanat_governance::Principal);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<qanat_governance::Principal>()
            .cloned()
            .map(Caller)
            .ok_or_else(|| ApiError::unauthenticated("authentication required"))
    }
}

/// The project the request is about (the `{project}` in its path, or the default
/// MLflow project) and the caller's standing in it, as the authorization point
/// resolved them: a handler never looks the project up again.
pub struct Scope {
    pub project: qanat_governance::Project,
    /// None for a global admin who is not a member.
    pub role: Option<qanat_governance::Role>,
}

impl<S: Send + Sync> FromRequestParts<S> for Scope {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .remove::<crate::authz::ProjectScope>()
            .map(|s| Scope {
                project: s.project,
                role: s.role,
            })
            .ok_or_else(|| {
                ApiError::internal("a project-scoped handler is routed without a project policy")
            })
    }
}
