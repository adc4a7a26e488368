//! A typed client of Qanat's HTTP API, for the CLI and, later, for jobs that call back
//! into the platform.
//!
//! [`Client`] carries the server's address, the bearer token and the TLS trust; its
//! methods are one per endpoint and return the domain crates' own types (the same
//! structs the server serialises), so no caller walks JSON by hand. An error reply
//! becomes [`Error::Api`] with the server's status, code and message.
//!
//! ```no_run
//! # async fn demo() -> Result<(), qanat_client::Error> {
//! let c = qanat_client::Client::new("http://127.0.0.1:8080", Some("qnt_…".into()), None)?;
//! for d in c.datasets("fraud").await? {
//!     println!("{} latest {:?}", d.name, d.latest_version);
//! }
//! # Ok(()) }
//! ```
//!
//! Endpoints are added here as commands move onto typed replies; until then the
//! generic [`Client::get`] / [`Client::send`] serve the rest.

mod datasets;
mod governance;

pub use datasets::DatasetApi;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::Method;
use serde::de::DeserializeOwned;

/// What went wrong talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("could not reach the Qanat server at {url} (is `qanat server` running?): {source}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The server refused or failed the request, and said why.
    #[error("{code} ({status}): {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    #[error("the server's reply was not the expected JSON: {0}")]
    Decode(String),
    #[error("{0}")]
    Setup(String),
}

/// An API client. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

/// Characters left as they are in one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes one path segment (a name may hold characters a URL may not).
pub fn seg(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

impl Client {
    /// A client of the server at `base` (e.g. `https://qanat.example:8443`), sending
    /// `token` as bearer, trusting `ca_pem` besides the system roots.
    pub fn new(base: &str, token: Option<String>, ca_pem: Option<&[u8]>) -> Result<Client, Error> {
        let mut b = reqwest::Client::builder()
            .user_agent(concat!("qanat-client/", env!("CARGO_PKG_VERSION")));
        if let Some(pem) = ca_pem {
            let cert = reqwest::Certificate::from_pem(pem)
                .map_err(|e| Error::Setup(format!("the CA certificate is not PEM: {e}")))?;
            b = b.add_root_certificate(cert);
        }
        Ok(Client {
            http: b
                .build()
                .map_err(|e| Error::Setup(format!("building the HTTP client: {e}")))?,
            base: base.trim_end_matches('/').to_string(),
            token,
        })
    }

    /// The server's address.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// A request to `path` (which starts with `/`), with the token.
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let rb = self.http.request(method, format!("{}{}", self.base, path));
        match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    /// Sends; a reply that is not a success becomes [`Error::Api`].
    pub async fn send(&self, rb: reqwest::RequestBuilder) -> Result<reqwest::Response, Error> {
        let resp = rb.send().await.map_err(|source| Error::Unreachable {
            url: self.base.clone(),
            source,
        })?;
        check(resp).await
    }

    /// Sends and reads the JSON reply as `T`.
    pub async fn json<T: DeserializeOwned>(&self, rb: reqwest::RequestBuilder) -> Result<T, Error> {
        let resp = self.send(rb).await?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| Error::Decode(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Decode(e.to_string()))
    }

    /// `GET path` as `T`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        self.json(self.request(Method::GET, path)).await
    }
}

/// Passes a success through; turns an error reply into [`Error::Api`].
pub async fn check(resp: reqwest::Response) -> Result<reqwest::Response, Error> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let text = resp.text().await.unwrap_or_default();
    #[derive(serde::Deserialize)]
    struct Body {
        error_code: String,
        #[serde(default)]
        message: String,
    }
    Err(match serde_json::from_str::<Body>(&text) {
        Ok(b) => Error::Api {
            status: status.as_u16(),
            code: b.error_code,
            message: b.message,
        },
        Err(_) => Error::Api {
            status: status.as_u16(),
            code: "HTTP_ERROR".into(),
            message: text,
        },
    })
}
