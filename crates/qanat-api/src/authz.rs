//! The one authorization point, and the audit trail it writes.
//!
//! Every route is registered in the [`RouteTable`](crate::route_table::RouteTable) together with its [`Policy`]
//! (action name and [`Requirement`]); a route cannot exist without one. The
//! [`authorize`] middleware runs after routing for every request:
//!
//! 1. resolves the bearer token to a [`Principal`] (none → anonymous);
//! 2. resolves the `{project}` the path names (or the default MLflow project) and the
//!    caller's role in it, once: handlers receive both through the
//!    [`Scope`](crate::extract::Scope) extractor and never look the project up again;
//! 3. asks [`qanat_governance::authorize`] for the decision — 401, 403, or on to the
//!    handler with the principal in the request extensions;
//! 4. appends an audit entry for every denied request, every mutating request (whatever
//!    its outcome) and every read the policy marks as governed.
//!
//! If the audit entry cannot be written the request fails with 503 `AUDIT_UNAVAILABLE`:
//! an action that cannot be recorded is not reported as done.
//!
//! A handler whose change is one metadata-store transaction may take the request's
//! [`AuditTicket`] and append the success entry inside that transaction: the change and
//! its record then commit together (one commit, not two), and the middleware appends
//! nothing more for it. Refusals and failures are still recorded here.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::RequestExt;
use qanat_governance::{
    AuditOutcome, AuditRecord, Decision, Principal, Project, Requirement, Role, TokenScope,
};

use crate::error::{ApiError, ErrorNote};
use crate::AppState;

/// What a route needs and how it is named in the audit log.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// Dotted action name recorded in the audit log, e.g. `project.create`.
    pub action: &'static str,
    pub requirement: Requirement,
    /// Whether successful reads are audited (reads of governed data).
    pub audit_reads: bool,
    /// Whether successful writes are audited one by one. False only for staging writes
    /// that change nothing visible (content-addressed chunk uploads): the commit that
    /// makes them visible is audited, and their refusals and failures still are.
    pub audit_writes: bool,
    /// When the path names no `{project}`, the request is for the server's default
    /// MLflow project (the root-mounted MLflow API).
    pub default_project: bool,
    /// A POST that only reads (MLflow's searches, checkpoint verification): treated as
    /// a read — not refused while an audit sink is down, audited only as reads are.
    pub query: bool,
    /// An inference endpoint: tokens scoped to inference may call it.
    pub inference: bool,
    /// The metrics endpoint: tokens scoped to metrics may call it (and nothing else),
    /// and so may anonymous callers when `server.metrics_anonymous` is on.
    pub metrics: bool,
    /// A page of the web UI: the caller may also be named by the UI's session cookie
    /// (no other route reads cookies, so no API route can be forged cross-site), its
    /// writes are forms that must carry the session's CSRF token, and refusals are
    /// pages (401 sends a browser to the login page).
    pub ui: bool,
}

impl Policy {
    pub const fn new(action: &'static str, requirement: Requirement) -> Self {
        Policy {
            action,
            requirement,
            audit_reads: false,
            audit_writes: true,
            default_project: false,
            query: false,
            inference: false,
            metrics: false,
            ui: false,
        }
    }

    /// Marks a page of the web UI (see [`Policy::ui`]).
    pub const fn ui(mut self) -> Self {
        self.ui = true;
        self
    }

    /// Marks an inference endpoint, which tokens scoped to inference may call.
    pub const fn inference(mut self) -> Self {
        self.inference = true;
        self
    }

    /// Marks the metrics endpoint (see [`Policy::metrics`]).
    pub const fn metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    /// Marks a POST that changes nothing as the read it is.
    pub const fn query(mut self) -> Self {
        self.query = true;
        self
    }

    /// Whether a request with `method` under this policy changes something.
    fn writes(&self, method: &Method) -> bool {
        is_mutating(method) && !self.query
    }

    /// No identity needed.
    pub const fn public(action: &'static str) -> Self {
        Policy::new(action, Requirement::Public)
    }

    /// Any valid identity.
    pub const fn authenticated(action: &'static str) -> Self {
        Policy::new(action, Requirement::Authenticated)
    }

    /// A global administrator.
    pub const fn global_admin(action: &'static str) -> Self {
        Policy::new(action, Requirement::GlobalAdmin)
    }

    /// At least `role` in the project the request names.
    pub const fn in_project(action: &'static str, role: qanat_governance::Role) -> Self {
        Policy::new(action, Requirement::Project(role))
    }

    pub const fn default_project(mut self) -> Self {
        self.default_project = true;
        self
    }

    pub const fn staging(mut self) -> Self {
        self.audit_writes = false;
        self
    }

    pub const fn governed_read(mut self) -> Self {
        self.audit_reads = true;
        self
    }
}

/// The success entry of an audited write, handed to its handler (as a request
/// extension, or as an extractor) so it can be appended in the handler's own
/// transaction.
#[derive(Debug, Clone)]
pub struct AuditTicket {
    record: AuditRecord,
    written: Arc<AtomicBool>,
}

impl AuditTicket {
    /// The entry to append: outcome success, detail `200`.
    pub fn record(&self) -> &AuditRecord {
        &self.record
    }

    /// Says the entry was committed with the change; call only after the commit, and
    /// only from a handler that then answers with success.
    pub fn committed(&self) {
        self.written.store(true, Ordering::Release);
    }
}

/// Handlers that append their own success entry take the ticket as an argument; a
/// route whose policy hands out none is a programming error, answered 500.
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for AuditTicket {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<AuditTicket>()
            .cloned()
            .ok_or_else(|| ApiError::internal("an audited write is routed without an audit ticket"))
    }
}

/// The project a request names and the caller's standing in it, resolved once by the
/// middleware.
#[derive(Debug, Clone)]
pub(crate) struct ProjectScope {
    pub(crate) project: Project,
    /// None for a global admin who is not a member.
    pub(crate) role: Option<Role>,
}

/// The policy lookup used by the middleware: by route template, then method (looked
/// up on every request, so without building strings).
#[derive(Debug)]
pub(crate) struct Policies(HashMap<String, Vec<(Method, Policy)>>);

impl Policies {
    pub(crate) fn new(policies: BTreeMap<(String, String), Policy>) -> Self {
        let mut by_path: HashMap<String, Vec<(Method, Policy)>> = HashMap::new();
        for ((method, path), policy) in policies {
            let method =
                Method::from_bytes(method.as_bytes()).expect("routes use standard methods");
            by_path.entry(path).or_default().push((method, policy));
        }
        Policies(by_path)
    }

    fn get(&self, method: &Method, path: &str) -> Option<Policy> {
        let m = if method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        self.0
            .get(path)?
            .iter()
            .find(|(known, _)| known == m)
            .map(|(_, p)| *p)
    }
}

fn is_mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn bearer(req: &Request) -> Result<Option<String>, ApiError> {
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthenticated("the Authorization header is not valid text"))?;
    match value.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(Some(token.trim().to_string()))
        }
        _ => Err(ApiError::unauthenticated(
            "use 'Authorization: Bearer <token>'",
        )),
    }
}

/// The header that names the project of a route whose path names none (the root
/// `/v2` and MLflow routes, and gRPC, whose paths are fixed): its value, when it has
/// one; otherwise the server's default project applies. The project is then
/// authorized like one named in the path.
pub const PROJECT_HEADER: &str = "qanat-project";

fn project_header(req: &Request) -> Option<String> {
    let value = req.headers().get(PROJECT_HEADER)?;
    // A value that is not text names no project the server has: kept as is (lossily),
    // it is then refused as an unknown project, not silently replaced by the default.
    let name = String::from_utf8_lossy(value.as_bytes()).trim().to_string();
    (!name.is_empty()).then_some(name)
}

/// The middleware: authenticate, authorize, run, audit.
pub(crate) async fn authorize(
    State((state, policies)): State<(AppState, Arc<Policies>)>,
    req: Request,
    next: Next,
) -> Response {
    let Some(route) = req.extensions().get::<MatchedPath>().cloned() else {
        // No route matched: the fallback answers 404/405 and nothing is exposed.
        return next.run(req).await;
    };
    let method = req.method().clone();
    let Some(policy) = policies.get(&method, route.as_str()) else {
        // Handlers and policies are registered together, so a method without a policy
        // has no handler either: the router answers 405 and nothing runs.
        return next.run(req).await;
    };
    if policy.requirement == Requirement::Public {
        return next.run(req).await;
    }
    if policy.ui {
        let path = req.uri().clone();
        let resp = decide(state, policy, req, next).await;
        return crate::ui::refusal_page(resp, &path);
    }
    decide(state, policy, req, next).await
}

/// Authenticates, authorizes, runs and audits one request under `policy`.
async fn decide(state: AppState, policy: Policy, mut req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let request_id = crate::request_id(req.headers()).to_string();
    let project =
        match req.extract_parts::<RawPathParams>().await {
            Ok(params) => params
                .iter()
                .find(|(k, _)| *k == "project")
                .map(|(_, v)| v.to_string()),
            // A segment that is not UTF-8 once percent-decoded names nothing: the caller's
            // mistake, refused before anything is looked up.
            Err(_) => return ApiError::bad_request(
                "the request path is not valid UTF-8 once percent-decoded; encode names as UTF-8",
            )
            .into_response(),
        }
        .or_else(|| {
            policy
                .default_project
                .then(|| project_header(&req).unwrap_or_else(|| state.http.mlflow_project.clone()))
        });
    let resource = req.uri().path().to_string();
    // What every entry of this request adds once the caller is known: who the identity
    // provider says they are, which of grant and groups gave their role, break-glass.
    let note = std::sync::Mutex::new(String::new());
    let audit = |actor: &str, outcome: AuditOutcome, detail: String| AuditRecord {
        request_id: request_id.clone(),
        actor: actor.to_string(),
        action: policy.action.to_string(),
        resource: resource.clone(),
        project: project.clone(),
        outcome,
        detail: format!("{detail}{}", note_text(&note)),
    };

    // 1. Who is calling: the bearer token, or on a UI page the session cookie.
    let presented = match bearer(&req) {
        Ok(None) if policy.ui => Ok(crate::ui::session_token(req.headers())),
        other => other,
    };
    let principal: Option<Principal> = match &presented {
        Ok(None) => None,
        Ok(Some(token)) => match state.gov.authenticate(token).await {
            Ok(p) => Some(p),
            Err(e) => {
                let err = ApiError::from(e);
                return refuse(
                    &state,
                    audit("anonymous", AuditOutcome::Denied, err.message.clone()),
                    err,
                )
                .await;
            }
        },
        Err(err) => {
            return refuse(
                &state,
                audit("anonymous", AuditOutcome::Denied, err.message.clone()),
                err.clone(),
            )
            .await;
        }
    };
    let actor = principal
        .as_ref()
        .map(|p| p.name.clone())
        .unwrap_or_else(|| "anonymous".into());
    let break_glass = principal
        .as_ref()
        .is_some_and(|p| is_break_glass(&state, p));
    if let Some(p) = &principal {
        set_note(&note, identity_note(p, break_glass));
        if break_glass {
            tracing::warn!(
                user = %p.name,
                action = policy.action,
                "break-glass: a local admin acts while single sign-on is configured"
            );
        }
    }
    if let Some(note) = req.extensions().get::<crate::access::AccessNote>() {
        note.set(&actor, project.as_deref());
    }
    // What the token itself allows: its scope, then its rate.
    if let Some(p) = &principal {
        if p.scope == TokenScope::Inference && !policy.inference {
            let err = ApiError::forbidden(
                "this token is scoped to inference: it may call only the inference endpoints (/v2/models/... and /oip/{project}/v2/models/..., and gRPC ModelMetadata, ModelReady, ModelInfer, ModelStreamInfer)",
            );
            return refuse(
                &state,
                audit(&actor, AuditOutcome::Denied, err.message.clone()),
                err,
            )
            .await;
        }
        if p.scope == TokenScope::Metrics && !policy.metrics {
            let err =
                ApiError::forbidden("this token is scoped to metrics: it may call only /metrics");
            return refuse(
                &state,
                audit(&actor, AuditOutcome::Denied, err.message.clone()),
                err,
            )
            .await;
        }
        if let Err(r) = rate_check(&state, p) {
            let mut resp = match r.audit_detail {
                // Refusals are audited one entry per interval, with their count.
                Some(detail) => {
                    refuse(&state, audit(&actor, AuditOutcome::Denied, detail), r.err).await
                }
                None => r.err.into_response(),
            };
            if let Ok(v) = header::HeaderValue::from_str(&r.retry_after_s.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
            return resp;
        }
    }

    // 2. The project the path names, and their role in it.
    let mut role = None;
    let mut scope = None;
    if let (Some(p), Some(name), Requirement::Project(_)) =
        (&principal, &project, policy.requirement)
    {
        match state.gov.project_role_and_source(&p.user_id, name).await {
            Ok((found, decided)) => {
                role = decided.as_ref().map(|(r, _)| *r);
                if let (Some(_), Some((r, source))) = (&p.provider, &decided) {
                    // Which of an admin's grant and the provider's groups decided.
                    let more = format!("{} · role {r} by {source}", note_text(&note));
                    set_note(&note, more);
                }
                scope = Some(ProjectScope {
                    project: found,
                    role,
                });
            }
            Err(e) => {
                let err = ApiError::from(e);
                let outcome = if err.status == StatusCode::NOT_FOUND {
                    AuditOutcome::Failure
                } else {
                    AuditOutcome::Denied
                };
                return refuse(&state, audit(&actor, outcome, err.message.clone()), err).await;
            }
        }
    }

    // 3. The decision. `/metrics` also admits a token scoped to it, and anonymous
    // callers where an admin opted in (they get a view without labels).
    let metrics_pass = policy.metrics
        && match &principal {
            Some(p) => p.scope == TokenScope::Metrics,
            None => state.http.limits.metrics_anonymous,
        };
    let decision = if metrics_pass {
        Decision::Allow
    } else {
        qanat_governance::authorize(
            principal.as_ref(),
            policy.requirement,
            project.as_deref(),
            role,
        )
    };
    match decision {
        Decision::Allow => {}
        Decision::Unauthenticated => {
            let err = ApiError::unauthenticated(
                "authentication required: send 'Authorization: Bearer <token>' (create one with `qanat tokens create`)",
            );
            return refuse(
                &state,
                audit(&actor, AuditOutcome::Denied, err.message.clone()),
                err,
            )
            .await;
        }
        Decision::Hidden { reply, reason } => {
            let err = ApiError::not_found(reply);
            return refuse(&state, audit(&actor, AuditOutcome::Denied, reason), err).await;
        }
        Decision::Deny(reason) => {
            let err = ApiError::forbidden(reason);
            return refuse(
                &state,
                audit(&actor, AuditOutcome::Denied, err.message.clone()),
                err,
            )
            .await;
        }
    }

    // A write that could not reach a required audit sink is not done at all.
    if policy.writes(&method) && !state.http.audit_sinks_ok.load(Ordering::Acquire) {
        return audit_refusal(
            "a required audit sink cannot be written, so writes are refused until it can (audit.required); reads go on",
        );
    }

    // A form of the UI carries the CSRF token of the session that posts it: a page of
    // another site cannot read it, so it cannot make a browser post for its user.
    if policy.ui {
        if let (Some(_), Ok(Some(token))) = (&principal, &presented) {
            if policy.writes(&method) {
                req = match crate::ui::check_csrf(req, token).await {
                    Ok(req) => req,
                    Err(err) => {
                        return refuse(
                            &state,
                            audit(&actor, AuditOutcome::Denied, err.message.clone()),
                            err,
                        )
                        .await
                    }
                };
            }
            req.extensions_mut()
                .insert(crate::ui::Csrf::of_session(token));
        }
    }

    // 4. Run, then record.
    if let Some(p) = &principal {
        req.extensions_mut().insert(p.clone());
    }
    if let Some(scope) = scope {
        req.extensions_mut().insert(scope);
    }
    let written = Arc::new(AtomicBool::new(false));
    if policy.writes(&method) && policy.audit_writes {
        req.extensions_mut().insert(AuditTicket {
            record: audit(
                &actor,
                AuditOutcome::Success,
                StatusCode::OK.as_u16().to_string(),
            ),
            written: written.clone(),
        });
    }
    let resp = next.run(req).await;
    let status = resp.status();
    let must_audit = (policy.writes(&method) && (policy.audit_writes || !status.is_success()))
        || policy.audit_reads
        || break_glass
        || status == StatusCode::FORBIDDEN;
    let recorded = written.load(Ordering::Acquire) && status.is_success();
    if !must_audit || recorded {
        return resp;
    }
    let outcome = if status.is_success() || status.is_redirection() {
        AuditOutcome::Success
    } else if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        AuditOutcome::Denied
    } else {
        AuditOutcome::Failure
    };
    let detail = match (
        resp.extensions().get::<ErrorNote>(),
        resp.extensions().get::<crate::error::ReadNote>(),
    ) {
        (Some(note), _) => format!("{} {}", status.as_u16(), note.0),
        (None, Some(note)) => format!("{} · {}", status.as_u16(), note.0),
        (None, None) => status.as_u16().to_string(),
    };
    match state
        .gov
        .append_audit(&audit(&actor, outcome, detail))
        .await
    {
        Ok(_) => resp,
        Err(e) => audit_unavailable(e),
    }
}

fn note_text(note: &std::sync::Mutex<String>) -> String {
    note.lock().map(|n| n.clone()).unwrap_or_default()
}

fn set_note(note: &std::sync::Mutex<String>, text: String) {
    if let Ok(mut n) = note.lock() {
        *n = text;
    }
}

/// Whether `p` is a local admin acting while single sign-on is configured: the
/// break-glass way in when the provider is down, every use of which is audited (reads
/// too) and logged as a warning.
fn is_break_glass(state: &AppState, p: &Principal) -> bool {
    state.gov.oidc().is_some()
        && p.is_admin
        && p.provider.is_none()
        && p.kind == qanat_governance::UserKind::User
}

/// What an audit entry adds about its caller: the identity provider's issuer and
/// subject for a person it vouches for, break-glass for a local admin under SSO.
fn identity_note(p: &Principal, break_glass: bool) -> String {
    match (&p.provider, break_glass) {
        (Some(id), _) => format!(" · sso issuer {} subject {}", id.issuer, id.subject),
        (None, true) => " · BREAK-GLASS: a local admin, not the identity provider's".to_string(),
        (None, false) => String::new(),
    }
}

/// A request over its token's rate limit.
pub(crate) struct RateRefusal {
    /// 429 `RESOURCE_EXHAUSTED`, saying what the limit is.
    pub(crate) err: ApiError,
    /// Whole seconds until the bucket holds a request again (at least 1).
    pub(crate) retry_after_s: u64,
    /// Set on the one refusal per interval that is audited: the entry's detail, with
    /// the count of refusals since the last entry.
    pub(crate) audit_detail: Option<String>,
}

/// Whether `p` may make one more request now, against its token's rate limit (one
/// bucket per token, shared by every request and every message of a stream).
pub(crate) fn rate_check(state: &AppState, p: &Principal) -> Result<(), RateRefusal> {
    let Some(rate) = p.rate_limit else {
        return Ok(());
    };
    state.rate_limits.check(&p.token_id, rate).map_err(|limited| {
        let err = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "RESOURCE_EXHAUSTED",
            format!(
                "token {} is limited to {rate} requests a second; retry after the Retry-After header's seconds",
                p.token_id
            ),
        );
        RateRefusal {
            audit_detail: limited
                .audit
                .map(|n| format!("{} (refused {n} time(s) since the last entry)", err.message)),
            retry_after_s: limited.retry_after.as_secs().max(1),
            err,
        }
    })
}

async fn refuse(state: &AppState, mut record: AuditRecord, err: ApiError) -> Response {
    record.detail = format!("{} {}", err.status.as_u16(), record.detail);
    match state.gov.append_audit(&record).await {
        Ok(_) => err.into_response(),
        Err(e) => audit_unavailable(e),
    }
}

fn audit_unavailable(e: qanat_governance::Error) -> Response {
    tracing::error!(error = %e, "audit log append failed");
    audit_refusal(
        "the audit log could not be written, so the request is not confirmed; retry later",
    )
}

/// 503 `AUDIT_UNAVAILABLE`: what could not be recorded is not done.
fn audit_refusal(message: &'static str) -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "AUDIT_UNAVAILABLE",
        message,
    )
    .into_response()
}
