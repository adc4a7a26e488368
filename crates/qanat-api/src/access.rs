//! The access log: one structured line per request — request id, actor, project,
//! method, route template, status, response bytes and latency — under the target
//! `qanat::access` (JSON when the server logs as JSON). Route templates, never raw
//! paths, so object keys and names stay out of it.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::header::CONTENT_LENGTH;
use axum::middleware::Next;
use axum::response::Response;

/// Who made the request and in which project, as the authorization point resolved
/// them; filled in while the request runs.
#[derive(Clone, Default)]
pub(crate) struct AccessNote(Arc<Mutex<(Option<String>, Option<String>)>>);

impl AccessNote {
    /// Records the actor and the project of the request.
    pub(crate) fn set(&self, actor: &str, project: Option<&str>) {
        if let Ok(mut n) = self.0.lock() {
            *n = (Some(actor.to_string()), project.map(str::to_string));
        }
    }

    fn get(&self) -> (String, String) {
        let n = self.0.lock().map(|n| n.clone()).unwrap_or_default();
        (
            n.0.unwrap_or_else(|| "-".into()),
            n.1.unwrap_or_else(|| "-".into()),
        )
    }
}

pub(crate) async fn log(mut req: Request, next: Next) -> Response {
    // With the access log off (a log level above info), nothing is gathered for it.
    if !tracing::enabled!(target: "qanat::access", tracing::Level::INFO) {
        return next.run(req).await;
    }
    let start = Instant::now();
    let note = AccessNote::default();
    req.extensions_mut().insert(note.clone());
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "-".to_string(), |m| m.as_str().to_string());
    let request_id = crate::request_id(req.headers()).to_string();
    let resp = next.run(req).await;
    let (actor, project) = note.get();
    let bytes = resp
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    tracing::info!(
        target: "qanat::access",
        request_id = %request_id,
        actor = %actor,
        project = %project,
        method = %method,
        route = %route,
        status = resp.status().as_u16(),
        bytes = bytes.unwrap_or(0),
        streamed = bytes.is_none(),
        latency_ms = start.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    resp
}
