//! The route table: every endpoint with its policy, how its body is read, and its
//! OpenAPI entry — assembled from one [`Fragment`] per domain.
//!
//! A domain module says each endpoint once:
//!
//! ```ignore
//! pub(crate) fn routes() -> Fragment {
//!     Fragment::default()
//!         .route(routes!(create), Policy::new("dataset.create", Project(Editor)))
//!         .streaming(routes!(file), Policy::new("dataset.read", Project(Viewer)).governed_read())
//! }
//! ```
//!
//! `routes!` (utoipa-axum) reads the method and the path from the handler's
//! `#[utoipa::path]` annotation, which is also its OpenAPI entry: the path is written
//! once, and a route cannot be documented differently from how it is served. Routes
//! that belong to another project's API (MLflow's) are added with their method and
//! path through [`Fragment::mlflow`], which mounts them at the root and under
//! `/mlflow/{project}` from one entry; the Open Inference Protocol's routes are mounted
//! at `/v2` and under `/oip/{project}` by [`Fragment::oip`].
//!
//! Invariant: a route is only reachable through [`RouteTable::into_parts`], which hands
//! out the router together with the policies the authorization middleware enforces,
//! so no handler can exist without a policy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodFilter, MethodRouter};
use axum::Router;
use utoipa::openapi::path::{HttpMethod, PathItem, Paths};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa_axum::router::UtoipaMethodRouter;

use crate::authz::{Policies, Policy};
use crate::{ApiError, ApiLimits, AppState};

/// Where any project's Open Inference Protocol endpoints are mounted: `/oip/{project}`
/// then the protocol's own `/v2…` path.
pub(crate) const OIP_PREFIX: &str = "/oip/{project}";

/// How a route reads its request and writes its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transfer {
    /// Small JSON in and out: the request timeout applies.
    Bounded,
    /// Bytes that stream for as long as they keep flowing (object and artifact
    /// transfers, dataset files, copies, gc): no request timeout.
    Streaming,
}

struct Route {
    method: Method,
    path: String,
    policy: Policy,
    handler: MethodRouter<AppState>,
    transfer: Transfer,
    body_limit: Option<usize>,
    doc: Option<PathItem>,
}

/// One domain's routes.
#[derive(Default)]
pub(crate) struct Fragment {
    routes: Vec<Route>,
    schemas: Vec<(String, RefOr<Schema>)>,
}

impl Fragment {
    /// A documented JSON endpoint (request timeout applies).
    pub(crate) fn route(self, endpoint: UtoipaMethodRouter<AppState>, policy: Policy) -> Self {
        self.documented(endpoint, policy, Transfer::Bounded)
    }

    /// A documented endpoint whose bytes stream (no request timeout).
    pub(crate) fn streaming(self, endpoint: UtoipaMethodRouter<AppState>, policy: Policy) -> Self {
        self.documented(endpoint, policy, Transfer::Streaming)
    }

    /// Raises the body limit of the route added last (e.g. a large manifest).
    pub(crate) fn body_limit(mut self, bytes: usize) -> Self {
        if let Some(last) = self.routes.last_mut() {
            last.body_limit = Some(bytes);
        }
        self
    }

    fn documented(
        mut self,
        (schemas, paths, handler): UtoipaMethodRouter<AppState>,
        policy: Policy,
        transfer: Transfer,
    ) -> Self {
        self.mount(&paths, "", policy, &handler, transfer, true);
        self.schemas.extend(schemas);
        self
    }

    /// Adds each method of each of `paths`, behind `prefix`; with its OpenAPI entry
    /// when `documented`.
    fn mount(
        &mut self,
        paths: &Paths,
        prefix: &str,
        policy: Policy,
        handler: &MethodRouter<AppState>,
        transfer: Transfer,
        documented: bool,
    ) {
        for (path, item) in &paths.paths {
            for method in methods_of(item) {
                self.routes.push(Route {
                    method,
                    path: format!("{prefix}{path}"),
                    policy,
                    handler: handler.clone(),
                    transfer,
                    body_limit: None,
                    doc: documented.then(|| item.clone()),
                });
            }
        }
    }

    /// An endpoint of another API (not in Qanat's OpenAPI document), served as is.
    pub(crate) fn foreign<H, T>(
        mut self,
        method: Method,
        path: &str,
        policy: Policy,
        transfer: Transfer,
        handler: H,
    ) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.routes.push(Route {
            handler: on(&method, handler),
            method,
            path: path.to_string(),
            policy,
            transfer,
            body_limit: None,
            doc: None,
        });
        self
    }

    /// An Open Inference Protocol endpoint (documented at its `/v2…` path), mounted at
    /// that path for the server's default project — or the project a `qanat-project`
    /// header names — and at `/oip/{project}/v2…` for any project: the URL that
    /// Triton's HTTP client takes as a base path (`host:8080/oip/demo`).
    pub(crate) fn oip(mut self, endpoint: UtoipaMethodRouter<AppState>, policy: Policy) -> Self {
        let (schemas, paths, handler) = endpoint;
        let transfer = Transfer::Bounded;
        self.mount(&paths, OIP_PREFIX, policy, &handler, transfer, false);
        self.documented(
            (schemas, paths, handler),
            policy.default_project(),
            transfer,
        )
    }

    /// An MLflow endpoint, mounted from this one entry at `path` for the server's
    /// default MLflow project and at `/mlflow/{project}{path}`; an `/api/…` path also
    /// under `/ajax-api/…` at both, as MLflow's server serves every endpoint to its UI.
    pub(crate) fn mlflow<T: 'static>(
        self,
        method: Method,
        path: &str,
        policy: Policy,
        transfer: Transfer,
        handler: impl Handler<T, AppState>,
    ) -> Self {
        let mut paths = vec![path.to_string()];
        if let Some(rest) = path.strip_prefix("/api/") {
            paths.push(format!("/ajax-api/{rest}"));
        }
        let mut me = self;
        for p in paths {
            let scoped = format!("/mlflow/{{project}}{p}");
            me = me
                .foreign(
                    method.clone(),
                    &p,
                    policy.default_project(),
                    transfer,
                    handler.clone(),
                )
                .foreign(method.clone(), &scoped, policy, transfer, handler.clone());
        }
        me
    }
}

fn on<H: Handler<T, AppState>, T: 'static>(method: &Method, handler: H) -> MethodRouter<AppState> {
    let filter = MethodFilter::try_from(method.clone()).unwrap_or(MethodFilter::GET);
    axum::routing::on(filter, handler)
}

fn methods_of(item: &PathItem) -> Vec<Method> {
    [
        (HttpMethod::Get, &item.get),
        (HttpMethod::Put, &item.put),
        (HttpMethod::Post, &item.post),
        (HttpMethod::Delete, &item.delete),
        (HttpMethod::Patch, &item.patch),
        (HttpMethod::Head, &item.head),
        (HttpMethod::Options, &item.options),
    ]
    .into_iter()
    .filter(|(_, op)| op.is_some())
    .map(|(m, _)| match m {
        HttpMethod::Get => Method::GET,
        HttpMethod::Put => Method::PUT,
        HttpMethod::Post => Method::POST,
        HttpMethod::Delete => Method::DELETE,
        HttpMethod::Patch => Method::PATCH,
        HttpMethod::Head => Method::HEAD,
        HttpMethod::Options => Method::OPTIONS,
        HttpMethod::Trace => Method::TRACE,
    })
    .collect()
}

/// Every route of the API, built from the domains' fragments.
pub struct RouteTable {
    routes: Vec<Route>,
    schemas: Vec<(String, RefOr<Schema>)>,
    timeout: Duration,
}

impl RouteTable {
    pub(crate) fn new(limits: &ApiLimits, fragments: impl IntoIterator<Item = Fragment>) -> Self {
        let mut table = RouteTable {
            routes: Vec::new(),
            schemas: Vec::new(),
            timeout: limits.request_timeout,
        };
        for f in fragments {
            table.routes.extend(f.routes);
            table.schemas.extend(f.schemas);
        }
        table
    }

    /// Every (method, path) with its policy, for tests and docs.
    pub fn policies(&self) -> impl Iterator<Item = (&Method, &str, &Policy)> {
        self.routes
            .iter()
            .map(|r| (&r.method, r.path.as_str(), &r.policy))
    }

    /// Every streaming route (no request timeout), for tests and docs.
    pub fn streaming(&self) -> impl Iterator<Item = (&Method, &str)> {
        self.routes
            .iter()
            .filter(|r| r.transfer == Transfer::Streaming)
            .map(|r| (&r.method, r.path.as_str()))
    }

    /// The documented routes as OpenAPI paths (axum's `{*rest}` written `{rest}`) and
    /// the schemas they use.
    pub(crate) fn documentation(&self) -> (Paths, Vec<(String, RefOr<Schema>)>) {
        let mut paths = Paths::new();
        for r in &self.routes {
            if let Some(item) = &r.doc {
                let path = r.path.replace("{*", "{");
                match paths.paths.get_mut(&path) {
                    Some(existing) => existing.merge_operations(item.clone()),
                    None => {
                        paths.paths.insert(path, item.clone());
                    }
                }
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        let schemas = self
            .schemas
            .iter()
            .filter(|(name, _)| seen.insert(name.clone()))
            .cloned()
            .collect();
        (paths, schemas)
    }

    /// The router and the policies its middleware enforces.
    ///
    /// Panics when one method and path is registered twice: a programming error that
    /// every test run catches at start-up.
    pub(crate) fn into_parts(self) -> (Router<AppState>, Arc<Policies>) {
        let mut by_path: BTreeMap<String, MethodRouter<AppState>> = BTreeMap::new();
        let mut policies = BTreeMap::new();
        for r in self.routes {
            let key = (r.method.to_string(), r.path.clone());
            assert!(
                policies.insert(key, r.policy).is_none(),
                "route {} {} registered twice",
                r.method,
                r.path
            );
            let mut handler = r.handler;
            if r.transfer == Transfer::Bounded {
                handler = handler.layer(axum::middleware::from_fn_with_state(
                    self.timeout,
                    request_timeout,
                ));
            }
            if let Some(limit) = r.body_limit {
                handler = handler.layer(DefaultBodyLimit::max(limit));
            }
            let merged = match by_path.remove(&r.path) {
                Some(existing) => existing.merge(handler),
                None => handler,
            };
            by_path.insert(r.path, merged);
        }
        let mut router = Router::new();
        for (path, handler) in by_path {
            router = router.route(&path, handler);
        }
        (router, Arc::new(Policies::new(policies)))
    }
}

/// Ends a request that runs past `limit` with a JSON 408 (the handler is dropped).
async fn request_timeout(
    axum::extract::State(limit): axum::extract::State<Duration>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => axum::response::IntoResponse::into_response(ApiError::new(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            "REQUEST_TIMEOUT",
            format!(
                "the request took longer than {} s (server.request_timeout_secs); send it faster or in smaller parts",
                limit.as_secs()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::ApiLimits;

    /// Only byte transfers and the gRPC inference stream run without the request timeout, and each is declared with
    /// `.streaming(…)`: a new route is bounded unless it says otherwise, and making one
    /// streaming means changing this list on purpose.
    #[test]
    fn streaming_routes_are_exactly_the_byte_transfers() {
        let table = crate::route_table(&ApiLimits::default());
        let mut streaming: Vec<String> =
            table.streaming().map(|(m, p)| format!("{m} {p}")).collect();
        streaming.sort();
        let mut expected = vec![
            "GET /api/v1/projects/{project}/objects/{*key}",
            "PUT /api/v1/projects/{project}/objects/{*key}",
            "GET /api/v1/projects/{project}/datasets/{dataset}/versions/{version}/files/{index}",
            "POST /api/v1/projects/{project}/datasets/{dataset}/copy",
            "POST /api/v1/projects/{project}/gc",
            "POST /api/v1/gc",
            "GET /api/2.0/mlflow-artifacts/artifacts/{*path}",
            "PUT /api/2.0/mlflow-artifacts/artifacts/{*path}",
            "GET /mlflow/{project}/api/2.0/mlflow-artifacts/artifacts/{*path}",
            "PUT /mlflow/{project}/api/2.0/mlflow-artifacts/artifacts/{*path}",
            "GET /ajax-api/2.0/mlflow-artifacts/artifacts/{*path}",
            "PUT /ajax-api/2.0/mlflow-artifacts/artifacts/{*path}",
            "GET /mlflow/{project}/ajax-api/2.0/mlflow-artifacts/artifacts/{*path}",
            "PUT /mlflow/{project}/ajax-api/2.0/mlflow-artifacts/artifacts/{*path}",
            // A gRPC stream of inference requests, open while the client sends.
            "POST /inference.GRPCInferenceService/ModelStreamInfer",
        ];
        // MLflow's UI routes that move one artifact's bytes.
        for route in [
            "POST /api/2.0/mlflow/upload-artifact",
            "GET /api/2.0/mlflow/logged-models/{model_id}/artifacts/files",
            "GET /get-artifact",
            "GET /model-versions/get-artifact",
        ] {
            let (method, path) = route.split_once(' ').unwrap_or_default();
            let mut mounts = vec![path.to_string()];
            if let Some(rest) = path.strip_prefix("/api/") {
                mounts.push(format!("/ajax-api/{rest}"));
            }
            for m in mounts {
                expected.push(format!("{method} {m}").leak());
                expected.push(format!("{method} /mlflow/{{project}}{m}").leak());
            }
        }
        expected.sort();
        assert_eq!(streaming, expected);
    }

    /// Every Open Inference Protocol route answers at `/v2…` for the default project and
    /// at `/oip/{project}/v2…` under the same policy for any project, and only those.
    #[test]
    fn oip_routes_are_mounted_for_the_default_project_and_under_each_project() {
        let table = crate::route_table(&ApiLimits::default());
        let all: std::collections::BTreeMap<(String, String), super::Policy> = table
            .policies()
            .map(|(m, p, pol)| ((m.to_string(), p.to_string()), *pol))
            .collect();
        let root: Vec<_> = all
            .iter()
            .filter(|((_, p), _)| p == "/v2" || p.starts_with("/v2/"))
            .collect();
        let scoped = all.keys().filter(|(_, p)| p.starts_with("/oip/")).count();
        assert!(root.len() >= 12, "{}", root.len());
        assert_eq!(
            root.len(),
            scoped,
            "one /oip/{{project}} twin per /v2 route"
        );
        for ((method, path), policy) in root {
            let twin = format!("{}{path}", super::OIP_PREFIX);
            let other = all
                .get(&(method.clone(), twin.clone()))
                .unwrap_or_else(|| panic!("{method} {path} has no {twin} twin"));
            assert_eq!(other.action, policy.action, "{method} {twin}");
            assert_eq!(other.requirement, policy.requirement, "{method} {twin}");
            assert_eq!(other.inference, policy.inference, "{method} {twin}");
            assert!(!other.default_project, "{method} {twin}");
            assert!(policy.default_project, "{method} {path}");
        }
    }

    /// Every MLflow route is served at the root and under `/mlflow/{project}`, each also
    /// under `/ajax-api/`, with the same action and requirement.
    #[test]
    fn mlflow_routes_are_mounted_twice_from_one_list() {
        let table = crate::route_table(&ApiLimits::default());
        let all: std::collections::BTreeMap<(String, String), _> = table
            .policies()
            .map(|(m, p, pol)| ((m.to_string(), p.to_string()), *pol))
            .collect();
        let mut root = 0;
        // MLflow's UI routes outside `/api/` are mounted at the root and per project.
        let ui = ["/get-artifact", "/model-versions/get-artifact"];
        let mut ui_routes = 0;
        for ((method, path), policy) in &all {
            if ui.contains(&path.as_str()) {
                let scoped = format!("/mlflow/{{project}}{path}");
                assert!(all.contains_key(&(method.clone(), scoped)), "{path}");
                ui_routes += 1;
                continue;
            }
            if !path.starts_with("/api/2.0/") && !path.starts_with("/api/3.0/") {
                continue;
            }
            root += 1;
            let ajax = format!("/ajax-api/{}", &path["/api/".len()..]);
            for (twin, default) in [
                (format!("/mlflow/{{project}}{path}"), false),
                (ajax.clone(), true),
                (format!("/mlflow/{{project}}{ajax}"), false),
            ] {
                let other = all
                    .get(&(method.clone(), twin.clone()))
                    .unwrap_or_else(|| panic!("{method} {path} has no {twin} twin"));
                assert_eq!(other.action, policy.action, "{method} {twin}");
                assert_eq!(other.requirement, policy.requirement, "{method} {twin}");
                assert_eq!(other.default_project, default, "{method} {twin}");
            }
            assert!(policy.default_project);
        }
        // The UI's landing pages (`/mlflow/{project}` and `…/`) are not MLflow routes.
        let scoped = all
            .keys()
            .filter(|(_, p)| p.starts_with("/mlflow/{project}/") && p != "/mlflow/{project}/")
            .count();
        assert_eq!(
            2 * root + ui_routes,
            scoped,
            "each root route twice under /mlflow/{{project}}"
        );
        assert!(root >= 60, "{root}");
    }
}
