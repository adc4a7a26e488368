//! Qanat's HTTP API: the native `/api/v1` routes, health and metrics endpoints, the
//! OpenAPI document, and the middleware every request passes through (request ids,
//! metrics, body limits, timeouts, and the one authorization point in [`authz`]).
//!
//! Domain crates know nothing of HTTP; this crate maps their types and errors onto
//! requests and responses. The binary builds an [`AppState`] and serves [`router`].

mod access;
pub mod authz;
mod error;
mod extract;
mod metrics;
mod openapi;
mod rate_limit;
pub mod route_table;

// One module per domain, each returning its fragment of the route table.
mod compliance;
mod datasets;
mod deployments;
mod events;
mod features;
mod gc;
mod grpc;
mod identity;
mod jobs;
mod mlflow;
mod models;
mod monitor;
mod objects;
mod projects;
mod serving;
mod system;
mod ui;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Request, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use qanat_governance::Governance;
use qanat_store::{MetaStore, ObjectStorage};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

pub use error::{ApiError, ErrorBody};
pub use metrics::Metrics;
pub use openapi::openapi_json;

/// Limits applied to requests.
#[derive(Debug, Clone)]
pub struct ApiLimits {
    /// Largest JSON body accepted (object uploads stream and are not bound by it).
    pub max_request_bytes: usize,
    /// Time allowed for a non-streaming request.
    pub request_timeout: Duration,
    /// Longest pause between two pieces of a request body.
    pub body_read_timeout: Duration,
    /// Whether `/metrics` answers callers without a token (a view without labels,
    /// which name projects, models and deployments).
    pub metrics_anonymous: bool,
}

impl Default for ApiLimits {
    fn default() -> Self {
        ApiLimits {
            max_request_bytes: 1 << 20,
            request_timeout: Duration::from_secs(60),
            body_read_timeout: Duration::from_secs(30),
            metrics_anonymous: false,
        }
    }
}

/// Everything a handler may use, shared: every middleware layer and handler that
/// extracts the state takes a clone, so a clone is one reference count (a clone of the
/// services themselves cost about 60% of a trivial request's CPU).
#[derive(Clone, Debug)]
pub struct AppState(Arc<Services>);

impl std::ops::Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.0
    }
}

/// The services behind [`AppState`]: the domains (reached through it as
/// `state.tracking`, `state.serving`, …) and the HTTP layer's own.
#[derive(Clone, Debug)]
pub struct Services {
    pub domains: Domains,
    pub http: Http,
    pub metrics: Arc<Metrics>,
    /// The buckets of tokens that carry a rate limit.
    pub(crate) rate_limits: Arc<rate_limit::RateLimits>,
}

impl std::ops::Deref for Services {
    type Target = Domains;

    fn deref(&self) -> &Domains {
        &self.domains
    }
}

/// The domain services a server answers with, built by the binary (in the order they
/// depend on each other, each with its final settings) and handed over whole.
#[derive(Clone, Debug)]
pub struct Domains {
    pub meta: MetaStore,
    pub gov: Governance,
    pub storage: ObjectStorage,
    pub datasets: qanat_data::Datasets,
    pub tracking: qanat_tracking::Tracking,
    /// Webhooks and the event outbox (registry changes record into it through
    /// `tracking`).
    pub events: qanat_events::Events,
    /// Training jobs and their scheduler's queue.
    pub jobs: qanat_jobs::Jobs,
    /// The feature store: registry, training sets, online features.
    pub features: qanat_features::Features,
    /// Registered models answered in the Open Inference Protocol.
    pub serving: qanat_serving::Serving,
    /// Monitors of deployments: windows, checks, labels, alerts and their actions.
    pub monitor: qanat_monitor::Monitors,
}

/// What the HTTP layer adds to the domains: its limits and the server's policies.
#[derive(Clone, Debug)]
pub struct Http {
    pub limits: ApiLimits,
    /// The project the root-mounted MLflow API (`/api/2.0/mlflow/...`) works in.
    pub mlflow_project: String,
    /// How long deleted datasets, experiments and projects are kept (restorable)
    /// before `gc` purges them.
    pub retention: Duration,
    /// False while a required audit sink cannot be written: writes are then refused
    /// (fail closed), reads go on. Shared with the audit sinks.
    pub audit_sinks_ok: Arc<std::sync::atomic::AtomicBool>,
    /// Whether the UI's cookies are marked Secure (the server speaks TLS).
    pub secure_cookies: bool,
    /// The last audit checkpoint this server's sinks shipped outside the database.
    pub last_checkpoint: Arc<std::sync::Mutex<Option<qanat_governance::AuditCheckpoint>>>,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            limits: ApiLimits::default(),
            mlflow_project: "default".into(),
            retention: Duration::from_secs(30 * 86_400),
            audit_sinks_ok: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            secure_cookies: false,
            last_checkpoint: Arc::default(),
        }
    }
}

impl AppState {
    /// The state handlers share: `domains` as built, with the HTTP layer's own.
    pub fn new(domains: Domains, http: Http) -> Self {
        AppState(Arc::new(Services {
            metrics: Arc::new(Metrics::with_serving(&domains.serving)),
            domains,
            http,
            rate_limits: Arc::default(),
        }))
    }
}

/// Every route with its policy, from each domain's fragment. Adding a domain adds its
/// line here.
pub fn route_table(limits: &ApiLimits) -> route_table::RouteTable {
    route_table::RouteTable::new(
        limits,
        [
            system::routes(),
            identity::routes(),
            projects::routes(),
            compliance::routes(),
            objects::routes(),
            datasets::routes(),
            gc::routes(),
            models::routes(),
            events::routes(),
            jobs::routes(),
            features::routes(),
            serving::routes(),
            grpc::routes(),
            deployments::routes(),
            monitor::routes(),
            mlflow::routes(),
            ui::routes(),
        ],
    )
}

/// The header that carries a request's id (the client's, or one the server sets).
const REQUEST_ID: &str = "x-request-id";

/// The request's id, as the request-id layer set it ("" before that layer runs).
pub(crate) fn request_id(headers: &axum::http::HeaderMap) -> &str {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The complete application: routes, authorization, metrics, request ids, tracing.
pub fn router(state: AppState) -> Router {
    let table = route_table(&state.http.limits);
    app(state, table)
}

/// What `qanat serve` answers: the Open Inference Protocol, health and metrics — a
/// data plane with no control-plane routes. Authorization, auditing of refusals,
/// request ids and limits are the same layers as [`router`]'s.
pub fn data_plane_router(state: AppState) -> Router {
    let table = route_table::RouteTable::new(
        &state.http.limits,
        [system::routes(), serving::routes(), grpc::routes()],
    );
    app(state, table)
}

fn app(state: AppState, table: route_table::RouteTable) -> Router {
    let (routes, policies) = table.into_parts();
    let x_request_id = HeaderName::from_static(REQUEST_ID);
    let app = routes
        .fallback(|| async {
            ApiError::not_found("no such endpoint; see /api/v1/openapi.json").into_response()
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "METHOD_NOT_ALLOWED",
                "this endpoint does not accept that method; see /api/v1/openapi.json",
            )
            .into_response()
        })
        .layer(axum::middleware::from_fn_with_state(
            (state.clone(), policies),
            authz::authorize,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::record,
        ))
        .layer(DefaultBodyLimit::max(state.http.limits.max_request_bytes))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            state.http.limits.body_read_timeout,
        ))
        .layer(axum::middleware::from_fn(error::hide_internal_errors))
        .layer(axum::middleware::from_fn(serving::one_error_shape))
        .layer(axum::middleware::from_fn(access::log))
        .layer(
            TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
                let id = request_id(req.headers());
                // No raw path: object keys and names are user data. The access line
                // names the route template.
                tracing::info_span!("request", method = %req.method(), request_id = %id)
            }),
        )
        .layer(PropagateRequestIdLayer::new(x_request_id.clone()))
        .layer(SetRequestIdLayer::new(x_request_id, MakeRequestUuid))
        .with_state(state);
    Router::new().fallback_service(tower::ServiceExt::map_request(app, one_leading_slash))
}

/// `//model-versions/…` is `/model-versions/…`: a tracking URI that ends in `/` joined
/// with a path gives a doubled slash, which MLflow's server (werkzeug) merges. Only the
/// leading run is merged: inside a path an empty segment stays an error.
fn one_leading_slash(mut req: Request<axum::body::Body>) -> Request<axum::body::Body> {
    let path = req.uri().path();
    if path.starts_with("//") {
        let fixed = format!("/{}", path.trim_start_matches('/'));
        let with_query = match req.uri().query() {
            Some(q) => format!("{fixed}?{q}"),
            None => fixed,
        };
        if let Ok(pq) = with_query.parse::<axum::http::uri::PathAndQuery>() {
            let mut parts = req.uri().clone().into_parts();
            parts.path_and_query = Some(pq);
            if let Ok(uri) = axum::http::Uri::from_parts(parts) {
                *req.uri_mut() = uri;
            }
        }
    }
    req
}
