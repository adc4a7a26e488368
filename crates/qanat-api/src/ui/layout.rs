//! The frame every page shares (navigation, breadcrumbs, the logout form) and small
//! helpers for links, times and numbers.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup, DOCTYPE};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use qanat_governance::Principal;

use super::Csrf;
use crate::error::ApiError;

/// Who is looking at a page, and the CSRF token their forms carry.
pub(crate) struct Session {
    pub(crate) user: Principal,
    pub(crate) csrf: Csrf,
}

impl<S: Send + Sync> FromRequestParts<S> for Session {
    type Rejection = super::UiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let user = parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| super::UiError(ApiError::unauthenticated("log in first")))?;
        let csrf = parts.extensions.get::<Csrf>().cloned().ok_or_else(|| {
            super::UiError(ApiError::internal("a page is routed without its session"))
        })?;
        Ok(Session { user, csrf })
    }
}

impl Session {
    /// The hidden field every form of this session carries.
    pub(crate) fn csrf_field(&self) -> Markup {
        html! { input type="hidden" name="csrf" value=(self.csrf.value()); }
    }
}

/// The sections of the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Projects,
    Overview,
    Experiments,
    Models,
    Datasets,
    Features,
    Jobs,
    Deployments,
    Monitors,
    Audit,
    Compliance,
}

/// Where a page sits: its project (if any) and section, for the navigation.
pub(crate) struct Nav<'a> {
    pub(crate) project: Option<&'a str>,
    pub(crate) section: Section,
}

impl<'a> Nav<'a> {
    pub(crate) fn global(section: Section) -> Self {
        Nav {
            project: None,
            section,
        }
    }

    pub(crate) fn project(project: &'a str, section: Section) -> Self {
        Nav {
            project: Some(project),
            section,
        }
    }
}

const PROJECT_SECTIONS: [(Section, &str, &str); 8] = [
    (Section::Overview, "Overview", ""),
    (Section::Experiments, "Experiments", "/experiments"),
    (Section::Models, "Models", "/models"),
    (Section::Datasets, "Datasets", "/datasets"),
    (Section::Features, "Features", "/features"),
    (Section::Jobs, "Jobs", "/jobs"),
    (Section::Deployments, "Deployments", "/deployments"),
    (Section::Monitors, "Monitors", "/monitors"),
];

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · Qanat" }
            // No favicon request (it would be one more 404 in every page's log).
            link rel="icon" href="data:,";
            link rel="stylesheet" href=(super::assets::CSS_PATH);
            script src=(super::assets::JS_PATH) defer {}
        }
    }
}

/// A page of the UI: the frame around `body`, with breadcrumbs `crumbs` (label, link)
/// before the page's own title.
pub(crate) fn page(
    s: &Session,
    nav: Nav<'_>,
    title: &str,
    crumbs: &[(&str, String)],
    body: Markup,
) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                a.skip href="#main" { "Skip to the content" }
                header.top {
                    a.brand href="/ui/" { "Qanat" }
                    nav.sections aria-label="Sections" {
                        ul {
                            li { a href="/ui/" aria-current=[(nav.section == Section::Projects).then_some("page")] { "Projects" } }
                            @if let Some(p) = nav.project {
                                @for (section, label, rest) in PROJECT_SECTIONS {
                                    li { a href=(project_url(p, rest)) aria-current=[(nav.section == section).then_some("page")] { (label) } }
                                }
                            }
                            @if s.user.is_admin {
                                li { a href="/ui/audit" aria-current=[(nav.section == Section::Audit).then_some("page")] { "Audit log" } }
                                li { a href="/ui/compliance" aria-current=[(nav.section == Section::Compliance).then_some("page")] { "Compliance" } }
                            }
                        }
                    }
                    div.who {
                        span { (s.user.name) }
                        form method="post" action="/ui/logout" {
                            (s.csrf_field())
                            button.link type="submit" { "Log out" }
                        }
                    }
                }
                nav.crumbs aria-label="Breadcrumb" {
                    ol {
                        @if let Some(p) = nav.project {
                            li { a href=(project_url(p, "")) { (p) } }
                        }
                        @for (label, href) in crumbs {
                            li { a href=(href) { (label) } }
                        }
                        li aria-current="page" { (title) }
                    }
                }
                main #main {
                    (body)
                }
            }
        }
    };
    super::html_response(StatusCode::OK, markup)
}

/// A page outside any session (login, errors, the landing page).
pub(crate) fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body.bare {
                header.top { a.brand href="/ui/" { "Qanat" } }
                main #main { (body) }
            }
        }
    }
}

/// Characters escaped in one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// One path segment, percent-encoded.
pub(crate) fn seg(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// One query-string value, percent-encoded.
pub(crate) fn query_value(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// The UI's page `rest` of `project`.
pub(crate) fn project_url(project: &str, rest: &str) -> String {
    format!("/ui/p/{}{rest}", seg(project))
}

/// An RFC 3339 time as shown: to the second, UTC.
pub(crate) fn time(rfc3339: &str) -> Markup {
    let shown = rfc3339.get(..19).unwrap_or(rfc3339).replace('T', " ");
    html! { time datetime=(rfc3339) { (shown) } }
}

/// Milliseconds since the epoch (MLflow's times) as shown.
pub(crate) fn time_ms(ms: i64) -> Markup {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => time(&t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        None => html! { "—" },
    }
}

/// A number as shown in tables: six significant digits, trailing zeros dropped.
pub(crate) fn num(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x == 0.0 {
        return "0".into();
    }
    let a = x.abs();
    if !(1e-4..1e7).contains(&a) {
        return format!("{x:.4e}");
    }
    let int_digits = a.log10().floor() as i32 + 1;
    let decimals = (6 - int_digits).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Bytes as shown.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A status word shown as a badge.
pub(crate) fn badge(word: &str) -> Markup {
    let class = match word.to_ascii_lowercase().as_str() {
        "finished" | "succeeded" | "success" | "ready" | "ok" | "active" | "live" | "healthy"
        | "serving" => "ok",
        "failed" | "killed" | "failure" | "denied" | "drift" | "unservable" | "error"
        | "cancelled" | "alert" => "bad",
        "running" | "queued" | "pending" | "scheduled" | "waiting" | "canary" | "shadow"
        | "loading" => "busy",
        _ => "plain",
    };
    html! { span class={"badge " (class)} { (word) } }
}

/// A table that scrolls sideways on a narrow screen, with a caption for screen readers.
pub(crate) fn table(caption: &str, head: &[&str], rows: Markup) -> Markup {
    html! {
        div.scroll role="region" aria-label=(caption) tabindex="0" {
            table {
                caption.sr { (caption) }
                thead { tr { @for h in head { th scope="col" { (h) } } } }
                tbody { (rows) }
            }
        }
    }
}

/// A paragraph shown where a list is empty.
pub(crate) fn empty(what: &str) -> Markup {
    html! { p.empty { (what) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short_and_exact_enough() {
        assert_eq!(num(0.5), "0.5");
        assert_eq!(num(1.0), "1");
        assert_eq!(num(0.123456789), "0.123457");
        assert_eq!(num(12345.6789), "12345.7");
        assert_eq!(num(1e-9), "1.0000e-9");
        assert_eq!(num(f64::NAN), "NaN");
        assert_eq!(num(-3.25), "-3.25");
    }

    #[test]
    fn segments_cannot_leave_their_place_in_a_path() {
        assert_eq!(seg("a/b?c#d"), "a%2Fb%3Fc%23d");
        assert_eq!(seg("run_1.v-2"), "run_1.v-2");
    }
}
