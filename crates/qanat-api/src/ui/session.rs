//! Logging in and out of the UI, the session cookie, and CSRF tokens.
//!
//! A session is a Qanat token of the same user, named `ui-session`, created when the
//! login form is sent a valid token and valid for at most [`SESSION_HOURS`] (never
//! longer than the token it was made from). So everything that ends a token ends a
//! session: logging out revokes it, an admin sees and revokes it with the user's
//! tokens, a disabled user's sessions stop at once. It travels only in an HttpOnly,
//! SameSite cookie scoped to `/ui` (and Secure when the server speaks TLS), and only UI
//! routes read that cookie.
//!
//! CSRF: each session's forms carry a token derived from the session's secret by a
//! keyed hash ([`Csrf::of_session`]): another site can neither read it nor compute it,
//! and it needs no storage. The login form, before any session exists, is protected by
//! the same derivation from a random cookie set with the form (double submit).

use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::html;
use qanat_governance::{pkce_challenge, random_token};
use qanat_governance::{AuditOutcome, AuditRecord, TokenGrant, TokenScope};
use rand::RngCore;
use serde::Deserialize;

use super::layout;
use crate::authz::Policy;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::route_table::{Fragment, Transfer};
use crate::AppState;

/// The cookie that carries a session's token.
const SESSION_COOKIE: &str = "qanat_session";
/// The cookie that carries the login form's random value.
const LOGIN_COOKIE: &str = "qanat_login";
/// The cookie that carries a single sign-on login's state, nonce, PKCE verifier and
/// the page to go to afterwards, from its start to the provider's callback.
const SSO_COOKIE: &str = "qanat_sso";
/// Longest life of a session.
const SESSION_HOURS: i64 = 12;
/// Largest form the UI accepts.
const MAX_FORM_BYTES: usize = 64 * 1024;

pub(super) fn routes(f: Fragment) -> Fragment {
    use axum::http::Method;
    f.foreign(
        Method::GET,
        "/ui/login",
        Policy::public("ui.login_form").ui(),
        Transfer::Bounded,
        login_form,
    )
    .foreign(
        Method::POST,
        "/ui/login",
        Policy::public("ui.login").ui(),
        Transfer::Bounded,
        login,
    )
    .foreign(
        Method::GET,
        "/ui/login/sso",
        Policy::public("ui.login_sso").ui(),
        Transfer::Bounded,
        sso_start,
    )
    .foreign(
        Method::GET,
        "/ui/login/sso/callback",
        Policy::public("ui.login").ui(),
        Transfer::Bounded,
        sso_callback,
    )
    .foreign(
        Method::POST,
        "/ui/logout",
        Policy::authenticated("ui.logout").ui(),
        Transfer::Bounded,
        logout,
    )
}

/// The token a UI request's session cookie carries.
pub(crate) fn session_token(headers: &HeaderMap) -> Option<String> {
    super::cookies(headers)
        .find(|(k, _)| *k == SESSION_COOKIE)
        .map(|(_, v)| v.to_string())
        .filter(|v| !v.is_empty())
}

/// The CSRF token of one session (or of one login form).
#[derive(Debug, Clone)]
pub(crate) struct Csrf(blake3::Hash);

impl Csrf {
    /// The CSRF token the forms of the session `token` carry.
    pub(crate) fn of_session(token: &str) -> Self {
        Csrf(
            blake3::Hasher::new_derive_key("qanat ui csrf 2026-11 session")
                .update(token.as_bytes())
                .finalize(),
        )
    }

    fn of_login(value: &str) -> Self {
        Csrf(
            blake3::Hasher::new_derive_key("qanat ui csrf 2026-11 login")
                .update(value.as_bytes())
                .finalize(),
        )
    }

    /// The value a form's hidden `csrf` field holds.
    pub(crate) fn value(&self) -> String {
        self.0.to_hex().to_string()
    }

    /// Whether `given` is this token (compared in constant time).
    fn matches(&self, given: &str) -> bool {
        blake3::Hash::from_hex(given).is_ok_and(|h| h == self.0)
    }
}

/// Reads a UI form's body and checks its `csrf` field against the session `token`;
/// gives the request back with its body for the handler.
pub(crate) async fn check_csrf(req: Request, token: &str) -> Result<Request, ApiError> {
    let refused = || {
        ApiError::forbidden(
            "this form is missing its CSRF token or has another session's; reload the page and send the form again",
        )
    };
    let is_form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return Err(refused());
    }
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "REQUEST_TOO_LARGE",
                "the form is larger than 64 KiB",
            )
        })?;
    let given = form_urlencoded::parse(&bytes)
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    if !Csrf::of_session(token).matches(&given) {
        return Err(refused());
    }
    Ok(Request::from_parts(parts, axum::body::Body::from(bytes)))
}

/// A `Set-Cookie` header that ends the session cookie.
pub(super) fn clear_cookie_header() -> [(header::HeaderName, String); 1] {
    [(
        header::SET_COOKIE,
        format!("{SESSION_COOKIE}=; Path=/ui; HttpOnly; SameSite=Lax; Max-Age=0"),
    )]
}

fn cookie(
    name: &str,
    value: &str,
    path: &str,
    same_site: &str,
    max_age: i64,
    secure: bool,
) -> String {
    format!(
        "{name}={value}; Path={path}; HttpOnly; SameSite={same_site}; Max-Age={max_age}{}",
        if secure { "; Secure" } else { "" }
    )
}

/// Where to go after logging in: a page of the UI, nothing else (no open redirect).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if (n == "/ui" || n.starts_with("/ui/"))
                && !n.contains("//")
                && !n.contains('\\')
                && !n.chars().any(char::is_control) =>
        {
            n.to_string()
        }
        _ => "/ui/".to_string(),
    }
}

#[derive(Deserialize)]
struct LoginQuery {
    next: Option<String>,
}

async fn login_form(State(state): State<AppState>, Query(q): Query<LoginQuery>) -> Response {
    login_page(&state, StatusCode::OK, &safe_next(q.next.as_deref()), None)
}

fn login_page(state: &AppState, status: StatusCode, next: &str, problem: Option<&str>) -> Response {
    let mut random = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut random);
    let value = blake3::Hash::from_bytes(random).to_hex().to_string();
    let csrf = Csrf::of_login(&value);
    let sso = state.gov.oidc().is_some();
    let sso_href = format!(
        "/ui/login/sso?next={}",
        form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
    );
    let body = html! {
        h1 { "Log in to Qanat" }
        @if let Some(p) = problem {
            p.error role="alert" { (p) }
        }
        @if sso {
            p { a #sso .button href=(sso_href) { "Log in with single sign-on" } }
            p.hint { "Or with an API token (service accounts, and local admins when the identity provider is down):" }
        }
        form.login method="post" action="/ui/login" {
            input type="hidden" name="csrf" value=(csrf.value());
            input type="hidden" name="next" value=(next);
            label for="token" { "API token" }
            input #token type="password" name="token" autocomplete="off" required
                placeholder="qnt_…" aria-describedby="token-help";
            p #token-help .hint {
                "A token of yours: " code { "qanat tokens create" } " prints one, and so did "
                code { "qanat quickstart" } ". The page keeps a session of its own, not the token."
            }
            button type="submit" { "Log in" }
        }
    };
    let mut resp = super::html_response(status, layout::bare("Log in", body));
    if let Ok(v) = header::HeaderValue::from_str(&cookie(
        LOGIN_COOKIE,
        &value,
        "/ui/login",
        "Strict",
        1800,
        state.http.secure_cookies,
    )) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

#[derive(Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
    next: Option<String>,
}

async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let form: LoginForm = match serde_urlencoded_form(&body) {
        Some(f) => f,
        None => {
            return login_page(
                &state,
                StatusCode::BAD_REQUEST,
                "/ui/",
                Some("the form could not be read; send it again"),
            )
        }
    };
    let next = safe_next(form.next.as_deref());
    let request_id = crate::request_id(&headers).to_string();
    let record = |actor: &str, outcome: AuditOutcome, detail: &str| AuditRecord {
        request_id: request_id.clone(),
        actor: actor.to_string(),
        action: "ui.login".into(),
        resource: "/ui/login".into(),
        project: None,
        outcome,
        detail: detail.to_string(),
    };
    let form_cookie = super::cookies(&headers)
        .find(|(k, _)| *k == LOGIN_COOKIE)
        .map(|(_, v)| v.to_string())
        .unwrap_or_default();
    if form_cookie.is_empty() || !Csrf::of_login(&form_cookie).matches(&form.csrf) {
        return login_page(
            &state,
            StatusCode::FORBIDDEN,
            &next,
            Some("this form has expired or came from another page; log in again"),
        );
    }
    let refused = |status: StatusCode, why: &str| {
        refuse_login(
            state.clone(),
            record(
                "anonymous",
                AuditOutcome::Denied,
                &format!("{} {why}", status.as_u16()),
            ),
            status,
            why.to_string(),
            next.clone(),
        )
    };
    let principal = match state.gov.authenticate(form.token.trim()).await {
        Ok(p) => p,
        Err(e) => {
            let e = ApiError::from(e);
            if e.status.is_server_error() {
                return super::UiError(e).into_response();
            }
            return refused(StatusCode::UNAUTHORIZED, &e.message).await;
        }
    };
    if principal.token_id.starts_with("oidc:") {
        return refused(
            StatusCode::UNAUTHORIZED,
            "this is the identity provider's token: use \"Log in with single sign-on\" instead, so that the session is checked at the provider",
        )
        .await;
    }
    if principal.scope != TokenScope::All {
        return refused(
            StatusCode::FORBIDDEN,
            &format!(
                "this token is scoped to {}: log in with a token that is not scoped",
                principal.scope
            ),
        )
        .await;
    }
    let mut cap = None;
    if let Ok(info) = state.gov.token(&principal.token_id).await {
        cap = info
            .expires_at
            .as_deref()
            .and_then(|e| chrono::DateTime::parse_from_rfc3339(e).ok())
            .map(|e| e.timestamp_micros());
    }
    let from = format!("token {}", principal.token_id);
    open_session(&state, &request_id, &principal, cap, &from, None, next).await
}

/// A refused login: audited (`rec`), then the login form again with the reason.
async fn refuse_login(
    state: AppState,
    rec: AuditRecord,
    status: StatusCode,
    why: String,
    next: String,
) -> Response {
    if let Err(e) = state.gov.append_audit(&rec).await {
        tracing::error!(error = %e, "audit log append failed");
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "AUDIT_UNAVAILABLE",
            "the audit log could not be written; retry later",
        )
        .into_response();
    }
    login_page(&state, status, &next, Some(&why))
}

/// Opens a UI session for `principal` (a token `ui-session`, living at most
/// [`SESSION_HOURS`] and never past `cap`), audits it, and sends the browser to `next`
/// with the session cookie. A single sign-on login passes `sso` (its refresh token,
/// if any): the session is then checked at the provider again while it lives.
async fn open_session(
    state: &AppState,
    request_id: &str,
    principal: &qanat_governance::Principal,
    cap: Option<i64>,
    from: &str,
    sso: Option<Option<String>>,
    next: String,
) -> Response {
    let now = qanat_store::now_micros();
    let mut expires = now + SESSION_HOURS * 3_600_000_000;
    if let Some(cap) = cap {
        expires = expires.min(cap);
    }
    let grant = TokenGrant {
        expires_at: Some(expires),
        scope: TokenScope::All,
        rate_limit: principal.rate_limit,
    };
    let session = match state
        .gov
        .create_token_with(&principal.name, "ui-session", &grant)
        .await
    {
        Ok(t) => t,
        Err(e) => return super::UiError(ApiError::from(e)).into_response(),
    };
    if let Some(refresh) = &sso {
        if let Err(e) = state
            .gov
            .keep_sso_session(&session.info.id, &principal.user_id, refresh.as_deref())
            .await
        {
            let _ = state.gov.revoke_token(&session.info.id).await;
            return super::UiError(ApiError::from(e)).into_response();
        }
    }
    let who = match &principal.provider {
        Some(id) => format!(" · sso issuer {} subject {}", id.issuer, id.subject),
        None => String::new(),
    };
    let rec = AuditRecord {
        request_id: request_id.to_string(),
        actor: principal.name.clone(),
        action: "ui.login".into(),
        resource: "/ui/login".into(),
        project: None,
        outcome: AuditOutcome::Success,
        detail: format!("200 session {} from {from}{who}", session.info.id),
    };
    if let Err(e) = state.gov.append_audit(&rec).await {
        tracing::error!(error = %e, "audit log append failed");
        let _ = state.gov.revoke_token(&session.info.id).await;
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "AUDIT_UNAVAILABLE",
            "the audit log could not be written; retry later",
        )
        .into_response();
    }
    let max_age = ((expires - now) / 1_000_000).max(1);
    let mut resp = (StatusCode::SEE_OTHER, [(header::LOCATION, next)]).into_response();
    for c in [
        cookie(
            SESSION_COOKIE,
            &session.token,
            "/ui",
            "Lax",
            max_age,
            state.http.secure_cookies,
        ),
        cookie(
            LOGIN_COOKIE,
            "",
            "/ui/login",
            "Strict",
            0,
            state.http.secure_cookies,
        ),
        cookie(
            SSO_COOKIE,
            "",
            "/ui/login/sso",
            "Lax",
            0,
            state.http.secure_cookies,
        ),
    ] {
        if let Ok(v) = header::HeaderValue::from_str(&c) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    super::secure_headers(&mut resp);
    resp
}

/// Where the provider sends the browser back: the configured URL, else this server's
/// callback at the host the browser used.
fn redirect_uri(
    state: &AppState,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
) -> Result<String, ApiError> {
    if let Some(u) = state
        .gov
        .oidc()
        .and_then(|o| o.config().redirect_url.clone())
    {
        return Ok(u);
    }
    // HTTP/1.1 names the host in `Host`; HTTP/2 in the request's authority.
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .ok_or_else(|| {
            ApiError::bad_request(
                "the request names no usable Host; set security.oidc.redirect_url to this server's /ui/login/sso/callback",
            )
        })?;
    let scheme = if state.http.secure_cookies {
        "https"
    } else {
        "http"
    };
    Ok(format!("{scheme}://{host}/ui/login/sso/callback"))
}

/// Starts a single sign-on login: the browser goes to the provider with a fresh
/// state, nonce and PKCE challenge; their values wait in a short-lived cookie of
/// this path.
async fn sso_start(
    State(state): State<AppState>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    Query(q): Query<LoginQuery>,
) -> super::PageResult {
    let Some(oidc) = state.gov.oidc() else {
        return Err(super::UiError(ApiError::not_found(
            "single sign-on is not configured on this server ([security.oidc] in its configuration); log in with a token",
        )));
    };
    let next = safe_next(q.next.as_deref());
    let (st, nonce, verifier) = (random_token(), random_token(), random_token());
    let redirect = redirect_uri(&state, &headers, &uri)?;
    let url = oidc
        .authorization_url(&redirect, &st, &nonce, &pkce_challenge(&verifier))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "IDENTITY_PROVIDER_UNAVAILABLE",
                format!("{e}; log in with a token meanwhile"),
            )
        })?;
    let value = format!(
        "{st}.{nonce}.{verifier}.{}",
        form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
    );
    let mut resp = (StatusCode::SEE_OTHER, [(header::LOCATION, url)]).into_response();
    if let Ok(v) = header::HeaderValue::from_str(&cookie(
        SSO_COOKIE,
        &value,
        "/ui/login/sso",
        "Lax",
        600,
        state.http.secure_cookies,
    )) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    super::secure_headers(&mut resp);
    Ok(resp)
}

#[derive(Deserialize)]
struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// Where the provider sends the browser back: the state checked against the cookie,
/// the code traded (with the PKCE verifier) for tokens, the ID token verified with the
/// nonce, the person signed in, and a session opened that is re-checked at the
/// provider while it lives.
async fn sso_callback(
    State(state): State<AppState>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    Query(q): Query<Callback>,
) -> Response {
    let request_id = crate::request_id(&headers).to_string();
    let kept = super::cookies(&headers)
        .find(|(k, _)| *k == SSO_COOKIE)
        .map(|(_, v)| v.to_string())
        .unwrap_or_default();
    let parts: Vec<&str> = kept.splitn(4, '.').collect();
    let next = parts.get(3).map(|n| {
        form_urlencoded::parse(format!("n={n}").as_bytes())
            .map(|(_, v)| v.into_owned())
            .next()
            .unwrap_or_default()
    });
    let next = safe_next(next.as_deref());
    let refused = |status: StatusCode, why: String| {
        let rec = AuditRecord {
            request_id: request_id.clone(),
            actor: "anonymous".into(),
            action: "ui.login".into(),
            resource: "/ui/login/sso/callback".into(),
            project: None,
            outcome: AuditOutcome::Denied,
            detail: format!("{} {why}", status.as_u16()),
        };
        let state = state.clone();
        let next = next.clone();
        async move {
            // Whatever went wrong, this login's state is spent.
            let mut resp = refuse_login(state.clone(), rec, status, why, next).await;
            if let Ok(v) = header::HeaderValue::from_str(&cookie(
                SSO_COOKIE,
                "",
                "/ui/login/sso",
                "Lax",
                0,
                state.http.secure_cookies,
            )) {
                resp.headers_mut().append(header::SET_COOKIE, v);
            }
            resp
        }
    };
    // A state, nonce and verifier are 43 characters of base64url each (256 bits).
    let well_formed = parts.len() == 4
        && parts[..3].iter().all(|p| {
            p.len() == 43
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !well_formed {
        return refused(
            StatusCode::BAD_REQUEST,
            "this login took longer than 10 minutes or began in another browser; log in again"
                .into(),
        )
        .await;
    }
    let (st, nonce, verifier) = (parts[0], parts[1], parts[2]);
    let given = q.state.as_deref().unwrap_or_default();
    if !qanat_governance::constant_eq(given.as_bytes(), st.as_bytes()) {
        return refused(
            StatusCode::FORBIDDEN,
            "the login's state does not match the one this browser sent (a forged or replayed login); log in again".into(),
        )
        .await;
    }
    // Only now, with the state checked, is the provider's error shown (else anyone
    // could put words on the login page and in the audit log).
    if let Some(err) = &q.error {
        let clip = |t: &str| t.chars().take(200).collect::<String>();
        let why = match &q.error_description {
            Some(d) => format!(
                "the identity provider refused the login: {} ({})",
                clip(err),
                clip(d)
            ),
            None => format!("the identity provider refused the login: {}", clip(err)),
        };
        return refused(StatusCode::UNAUTHORIZED, why).await;
    }
    let Some(code) = q.code.as_deref().filter(|c| !c.is_empty()) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "the identity provider sent no authorization code; log in again".into(),
        )
        .await;
    };
    let redirect = match redirect_uri(&state, &headers, &uri) {
        Ok(r) => r,
        Err(e) => return refused(e.status, e.message).await,
    };
    let login = match state
        .gov
        .sign_in_with_code(code, verifier, &redirect, nonce)
        .await
    {
        Ok(l) => l,
        Err(e) => {
            let e = ApiError::from(e);
            if e.status.is_server_error() {
                return super::UiError(e).into_response();
            }
            return refused(e.status, e.message).await;
        }
    };
    let from = "single sign-on".to_string();
    open_session(
        &state,
        &request_id,
        &login.principal,
        None,
        &from,
        Some(login.tokens.refresh_token.clone()),
        next,
    )
    .await
}

fn serde_urlencoded_form(body: &[u8]) -> Option<LoginForm> {
    if body.len() > MAX_FORM_BYTES {
        return None;
    }
    let mut form = LoginForm {
        token: String::new(),
        csrf: String::new(),
        next: None,
    };
    for (k, v) in form_urlencoded::parse(body) {
        match &*k {
            "token" => form.token = v.into_owned(),
            "csrf" => form.csrf = v.into_owned(),
            "next" => form.next = Some(v.into_owned()),
            _ => {}
        }
    }
    Some(form)
}

/// Ends the session: its token is revoked, its cookie cleared.
async fn logout(
    State(state): State<AppState>,
    Caller(caller): Caller,
    headers: HeaderMap,
) -> super::PageResult {
    // Only a session is ended here: a bearer token sent by a script stays valid.
    if headers.get(header::AUTHORIZATION).is_none() && session_token(&headers).is_some() {
        state.gov.revoke_token(&caller.token_id).await?;
        state.gov.forget_sso_session(&caller.token_id).await?;
    }
    let mut resp = (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, "/ui/login".to_string())],
        clear_cookie_header(),
    )
        .into_response();
    super::secure_headers(&mut resp);
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pages_of_the_ui_are_where_a_login_leads() {
        assert_eq!(
            safe_next(Some("/ui/p/demo/runs/abc?x=1")),
            "/ui/p/demo/runs/abc?x=1"
        );
        assert_eq!(safe_next(Some("/ui")), "/ui");
        for bad in [
            "https://evil.example/",
            "//evil.example/ui/",
            "/ui//evil",
            "/api/v1/projects",
            "/ui\\..",
            "/ui/\n",
        ] {
            assert_eq!(safe_next(Some(bad)), "/ui/", "{bad:?}");
        }
        assert_eq!(safe_next(None), "/ui/");
    }

    #[test]
    fn a_csrf_token_belongs_to_one_session() {
        let a = Csrf::of_session("qnt_a");
        assert!(a.matches(&a.value()));
        assert!(!a.matches(&Csrf::of_session("qnt_b").value()));
        assert!(!a.matches(""));
        assert!(!a.matches("zz"));
        // The login form's token is another derivation of its own value.
        assert!(!a.matches(&Csrf::of_login("qnt_a").value()));
    }
}
