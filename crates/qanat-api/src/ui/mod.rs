//! The web UI: server-rendered pages over every domain, served by `qanat server`
//! itself at `/ui/` (and `/`, where the MLflow client's "View run" links land).
//!
//! Pages are HTML written with `maud` (escaped by default), charts are SVG drawn here
//! ([`chart`]), and the one stylesheet and one small script are compiled into the
//! binary ([`assets`]): nothing is fetched from elsewhere, and every page is sent with
//! a Content-Security-Policy that allows only this server's own script and style.
//!
//! Every page is a route of the route table with a [`Policy`] marked `.ui()`: the one
//! authorization point decides and audits it as it does the API. The difference is
//! how the caller is named — a session cookie, set by the login form from a Qanat
//! token and itself a short-lived token of the same user ([`session`]) — and that
//! every form carries the session's CSRF token, checked there before any handler runs.

mod assets;
mod chart;
mod data;
mod features;
mod governance;
mod jobs;
mod layout;
mod monitor;
mod registry;
mod serving;
mod session;
mod tracking;

use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use qanat_governance::Role;

use crate::authz::Policy;
use crate::error::{ApiError, ErrorNote};
use crate::route_table::{Fragment, Transfer};

pub(crate) use session::{check_csrf, session_token, Csrf};

/// Every page of the UI, its static files, and the landing pages.
pub(crate) fn routes() -> Fragment {
    let f = Fragment::default();
    let f = assets::routes(f);
    let f = session::routes(f);
    let f = governance::routes(f);
    let f = tracking::routes(f);
    let f = registry::routes(f);
    let f = data::routes(f);
    let f = features::routes(f);
    let f = jobs::routes(f);
    let f = serving::routes(f);
    monitor::routes(f)
}

/// A GET page of the UI under `policy`.
fn page<H, T>(f: Fragment, path: &str, policy: Policy, handler: H) -> Fragment
where
    H: axum::handler::Handler<T, crate::AppState>,
    T: 'static,
{
    f.foreign(
        axum::http::Method::GET,
        path,
        policy.ui(),
        Transfer::Bounded,
        handler,
    )
}

/// A form of the UI (POST) under `policy`: its CSRF token is checked before it runs.
fn form<H, T>(f: Fragment, path: &str, policy: Policy, handler: H) -> Fragment
where
    H: axum::handler::Handler<T, crate::AppState>,
    T: 'static,
{
    f.foreign(
        axum::http::Method::POST,
        path,
        policy.ui(),
        Transfer::Bounded,
        handler,
    )
}

/// A page readable by any member of the project the path names.
const fn viewer(action: &'static str) -> Policy {
    Policy::in_project(action, Role::Viewer)
}

/// The headers every page of the UI is sent with: the browser runs only this server's
/// script and style, no page frames it (a page may frame this server's drift reports),
/// and nothing of it is cached.
pub(crate) fn secure_headers(resp: &mut Response) {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        header::HeaderValue::from_static("same-origin"),
    );
    h.insert(
        header::X_FRAME_OPTIONS,
        header::HeaderValue::from_static("DENY"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
    }
}

/// An HTML response with the UI's headers.
pub(crate) fn html_response(status: StatusCode, markup: Markup) -> Response {
    let mut resp = (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response();
    secure_headers(&mut resp);
    resp
}

/// A page's failure, shown as a page: what went wrong and what to do, never internal
/// details (those go to the server log with the request id).
#[derive(Debug)]
pub(crate) struct UiError(pub(crate) ApiError);

impl<E> From<E> for UiError
where
    ApiError: From<E>,
{
    fn from(e: E) -> Self {
        UiError(ApiError::from(e))
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let e = self.0;
        let message = if e.status.is_server_error() {
            tracing::error!(code = e.code, message = %e.message, "a page failed");
            "the server could not show this page; its log has the details".to_string()
        } else {
            e.message.clone()
        };
        let mut resp = error_page(e.status, &message);
        resp.extensions_mut().insert(ErrorNote(message));
        resp
    }
}

pub(crate) type PageResult = Result<Response, UiError>;

fn error_page(status: StatusCode, message: &str) -> Response {
    let title = match status {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::FORBIDDEN => "Not allowed",
        StatusCode::UNAUTHORIZED => "Log in",
        s if s.is_server_error() => "Server error",
        _ => "Cannot do that",
    };
    html_response(
        status,
        layout::bare(
            title,
            html! {
                h1 { (title) }
                p.error role="alert" { (message) }
                p { a href="/ui/" { "Back to the projects" } }
            },
        ),
    )
}

/// Turns what the authorization point answered for a UI page into what a browser
/// needs: a 401 on a page sends it to the login form (and back afterwards); any other
/// refusal becomes a page with its message. Pages the handler rendered pass as they are.
pub(crate) fn refusal_page(resp: Response, uri: &Uri) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if status.is_success() || !is_json {
        return resp;
    }
    if status == StatusCode::UNAUTHORIZED {
        let back = uri.path_and_query().map(|pq| pq.as_str()).unwrap_or("/ui/");
        let location = format!("/ui/login?next={}", layout::query_value(back));
        let mut r = (
            StatusCode::SEE_OTHER,
            [(header::LOCATION, location)],
            session::clear_cookie_header(),
        )
            .into_response();
        secure_headers(&mut r);
        return r;
    }
    let message = resp
        .extensions()
        .get::<ErrorNote>()
        .map(|n| n.0.clone())
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("refused").to_string());
    let mut page = error_page(status, &message);
    page.extensions_mut().insert(ErrorNote(message));
    page
}

/// The cookies of a request, as (name, value) pairs.
fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::COOKIE)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            Some((k.trim(), v.trim()))
        })
}

#[cfg(test)]
mod tests {
    use axum::http::Method;
    use qanat_governance::Requirement;

    use crate::ApiLimits;

    /// The session cookie opens pages of the UI and nothing else: the routes marked
    /// `.ui()` are exactly the UI's paths, and every form but the login needs someone.
    #[test]
    fn the_session_cookie_opens_only_pages_of_the_ui() {
        let table = crate::route_table(&ApiLimits::default());
        let mut pages = 0;
        for (method, path, policy) in table.policies() {
            let ui_path = path == "/"
                || path == "/ui"
                || path.starts_with("/ui/")
                || path == "/mlflow/{project}"
                || path == "/mlflow/{project}/";
            assert_eq!(policy.ui, ui_path, "{method} {path}");
            if policy.ui {
                pages += 1;
                if method == Method::POST && path != "/ui/login" {
                    assert_ne!(policy.requirement, Requirement::Public, "{path}");
                }
            }
        }
        assert!(pages >= 25, "{pages}");
    }
}
