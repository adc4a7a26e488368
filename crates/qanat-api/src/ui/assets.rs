//! The UI's static files (one stylesheet, one script, compiled in) and the landing
//! pages: `/`, `/ui` and `/mlflow/{project}/`, where the links the MLflow client
//! prints arrive.

use axum::extract::{Path, State};
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::html;

use super::layout;
use crate::authz::Policy;
use crate::route_table::{Fragment, Transfer};
use crate::AppState;

const CSS: &str = include_str!("static/qanat.css");
const JS: &str = include_str!("static/qanat.js");

/// Where the stylesheet is served; the version in the path changes with every
/// release, so browsers may keep it.
pub(super) const CSS_PATH: &str = concat!("/ui/static/", env!("CARGO_PKG_VERSION"), "/qanat.css");
pub(super) const JS_PATH: &str = concat!("/ui/static/", env!("CARGO_PKG_VERSION"), "/qanat.js");

pub(super) fn routes(f: Fragment) -> Fragment {
    let get = |path: &str, action: &'static str| {
        (
            Method::GET,
            path.to_string(),
            Policy::public(action).ui(),
            Transfer::Bounded,
        )
    };
    let (m, p, pol, t) = get("/ui/static/{version}/{file}", "ui.static");
    let f = f.foreign(m, &p, pol, t, file);
    let (m, p, pol, t) = get("/", "ui.landing");
    let f = f.foreign(m, &p, pol, t, root);
    let (m, p, pol, t) = get("/ui", "ui.landing");
    let f = f.foreign(m, &p, pol, t, to_ui);
    let (m, p, pol, t) = get("/mlflow/{project}", "ui.landing");
    let f = f.foreign(m, &p, pol, t, mlflow_root);
    let (m, p, pol, t) = get("/mlflow/{project}/", "ui.landing");
    f.foreign(m, &p, pol, t, mlflow_root)
}

/// `/`: the UI for a browser. A link the MLflow client printed
/// (`/#/experiments/1/runs/…`) is sent on by the script to its page in the server's
/// default MLflow project; anything else to the projects.
async fn root(State(state): State<AppState>) -> Response {
    landing(&state.http.mlflow_project)
}

/// `/mlflow/{project}/`: the same for a client whose tracking URI names a project.
async fn mlflow_root(Path(project): Path<String>) -> Response {
    landing(&project)
}

async fn to_ui() -> Response {
    let mut resp = (StatusCode::SEE_OTHER, [(header::LOCATION, "/ui/")]).into_response();
    super::secure_headers(&mut resp);
    resp
}

fn landing(project: &str) -> Response {
    let base = layout::project_url(project, "");
    super::html_response(
        StatusCode::OK,
        layout::bare(
            "Qanat",
            html! {
                div #landing data-base=(base) {
                    h1 { "Qanat" }
                    p { "Opening the page… " a href="/ui/" { "Open the UI" } }
                }
            },
        ),
    )
}

async fn file(Path((_, name)): Path<(String, String)>) -> Response {
    let (body, kind) = match name.as_str() {
        "qanat.css" => (CSS, "text/css; charset=utf-8"),
        "qanat.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return super::UiError(crate::ApiError::not_found("no such file")).into_response(),
    };
    let mut resp = (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        body,
    )
        .into_response();
    super::secure_headers(&mut resp);
    resp
}
