//! A typed client for Qanat's HTTP API: one method per endpoint, returning the types
//! the server itself serves (`qanat-types`: a [`Dataset`](qanat_types::data::Dataset),
//! a [`DatasetVersion`](qanat_types::data::DatasetVersion), an
//! [`AuditVerification`](qanat_types::governance::AuditVerification)), with the same
//! request and response bodies (each domain's `wire` module). It depends on no domain
//! crate, so it compiles without a database driver or an engine. The `qanat` CLI is
//! built on it; jobs and tests use it the same way.
//!
//! ```no_run
//! # async fn demo() -> Result<(), qanat_client::Error> {
//! use qanat_client::Client;
//!
//! let client = Client::builder("http://127.0.0.1:8080").token("qnt_…").build()?;
//! let me = client.whoami().await?;
//! println!("{} sees {} projects", me.principal.name, me.projects.len());
//! for d in client.datasets("fraud").await? {
//!     println!("{} (latest version {:?})", d.name, d.latest_version);
//! }
//! # Ok(()) }
//! ```
//!
//! Errors are [`Error`]s: an answer of the server's carries its status, its
//! `error_code` (e.g. `RESOURCE_DOES_NOT_EXIST`) and its message. Transfers of bytes
//! (objects, dataset files, chunk packs) stream in both directions.
//!
//! The methods are grouped by domain, one module each, as the server's routes are.

mod compliance;
mod datasets;
mod deployments;
mod error;
mod events;
mod features;
mod identity;
mod jobs;
mod mlflow;
mod models;
mod monitor;
mod objects;
mod projects;

use std::pin::Pin;

use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use error::Error;
/// A request body that streams (from a file, or any stream of bytes).
pub use reqwest::Body;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Bytes as they arrive from the server.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes>> + Send>>;

/// A client of one Qanat server. Cheap to clone (the connection pool is shared).
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

/// Builds a [`Client`]: the server's URL, a token, a CA certificate to trust.
#[derive(Debug)]
pub struct ClientBuilder {
    base: String,
    token: Option<String>,
    ca_pem: Option<Vec<u8>>,
    user_agent: String,
}

impl ClientBuilder {
    /// The API token sent as `Authorization: Bearer …`.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Trusts this PEM certificate (for a server with a self-signed certificate).
    pub fn ca_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Sent as `User-Agent` (default `qanat-client/<version>`).
    pub fn user_agent(mut self, agent: impl Into<String>) -> Self {
        self.user_agent = agent.into();
        self
    }

    pub fn build(self) -> Result<Client> {
        let mut b = reqwest::Client::builder().user_agent(self.user_agent);
        if let Some(pem) = &self.ca_pem {
            let cert = reqwest::Certificate::from_pem(pem).map_err(Error::Certificate)?;
            b = b.add_root_certificate(cert);
        }
        Ok(Client {
            http: b.build().map_err(Error::Setup)?,
            base: self.base.trim_end_matches('/').to_string(),
            token: self.token,
        })
    }
}

impl Client {
    /// A builder for a client of the server at `base` (e.g. `https://qanat.example:8080`).
    pub fn builder(base: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base: base.into(),
            token: None,
            ca_pem: None,
            user_agent: concat!("qanat-client/", env!("CARGO_PKG_VERSION")).to_string(),
        }
    }

    /// The server's URL, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let rb = self.http.request(method, format!("{}{}", self.base, path));
        match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    /// Sends; an error status becomes [`Error::Api`] (or [`Error::Http`]).
    async fn send(&self, rb: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let resp = rb.send().await.map_err(|source| Error::Connect {
            base: self.base.clone(),
            source,
        })?;
        Error::check(resp).await
    }

    /// Sends and reads the JSON answer as `T`.
    async fn json<T: DeserializeOwned>(
        &self,
        rb: reqwest::RequestBuilder,
        path: &str,
    ) -> Result<T> {
        let resp = self.send(rb).await?;
        let body = resp.bytes().await.map_err(Error::Transfer)?;
        serde_json::from_slice(&body).map_err(|source| Error::Decode {
            path: path.to_string(),
            source,
        })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.json(self.request(Method::GET, path), path).await
    }

    async fn get_query<Q: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        query: &Q,
    ) -> Result<T> {
        self.json(self.request(Method::GET, path).query(query), path)
            .await
    }

    async fn with_body<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<T> {
        self.json(self.request(method, path).json(body), path).await
    }

    /// Sends a request whose answer has no body worth reading (204, or one ignored).
    async fn no_content(&self, method: Method, path: &str) -> Result<()> {
        self.send(self.request(method, path)).await.map(|_| ())
    }

    /// Sends and streams the answer's bytes.
    async fn download(&self, rb: reqwest::RequestBuilder) -> Result<ByteStream> {
        Ok(self.download_with_headers(rb).await?.0)
    }

    /// Sends and streams the answer's bytes, with its headers.
    async fn download_with_headers(
        &self,
        rb: reqwest::RequestBuilder,
    ) -> Result<(ByteStream, reqwest::header::HeaderMap)> {
        let resp = self.send(rb).await?;
        let headers = resp.headers().clone();
        Ok((
            Box::pin(resp.bytes_stream().map_err(Error::Transfer)),
            headers,
        ))
    }
}

/// What a path segment may keep unencoded: the unreserved characters of RFC 3986.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes one path segment (a `/` in it is encoded too).
fn seg(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// Percent-encodes a `/`-separated object key, keeping the slashes.
fn key_path(key: &str) -> String {
    key.split('/').map(seg).collect::<Vec<_>>().join("/")
}

/// `/api/v1/projects/{project}` with the name encoded.
fn project_path(project: &str) -> String {
    format!("/api/v1/projects/{}", seg(project))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_encoded_and_keys_keep_their_slashes() {
        assert_eq!(seg("a b/c?d#e%"), "a%20b%2Fc%3Fd%23e%25");
        assert_eq!(seg("tx-2024_v1.0~x"), "tx-2024_v1.0~x");
        assert_eq!(key_path("dir/sub dir/f.csv"), "dir/sub%20dir/f.csv");
    }

    #[test]
    fn the_base_url_loses_its_trailing_slash() {
        let c = Client::builder("http://127.0.0.1:8080/")
            .build()
            .expect("client");
        assert_eq!(c.base(), "http://127.0.0.1:8080");
    }
}
