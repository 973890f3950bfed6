//! The one HTTP client stack of the controllers: discovery, OpenAPI, delegate and probe fetches
//! go through [`Clients`], which builds one client per endpoint and trust setting (the endpoint's
//! pool key hashes its URL, server name, CA and verify mode) and keeps it across rounds, so
//! connections and TLS sessions are reused. Every body read is capped.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use dashmap::DashMap;

mod caller;
mod described;
mod lines;

pub use lines::Lines;

use super::credentials::BearerToken;
use super::upstream::Upstream;
use apiagg_observe::error_chain;

/// The identity of the controllers' requests to remote backends (kube-aggregator's
/// `pkg/apiserver/handler_discovery.go` and
/// `pkg/controllers/status/remote/remote_available_controller.go`), presented with the proxy
/// client certificate.
pub const AGGREGATOR_USER: &str = "system:kube-aggregator";
/// The group of [`AGGREGATOR_USER`].
pub const AGGREGATOR_GROUP: &str = "system:masters";

/// Why a fetch failed. Every variant is retryable on the next round: the backend may heal.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The upstream has no endpoint to ask.
    #[error("{0} has no available endpoint")]
    NoEndpoint(String),
    /// The client for an endpoint cannot be built.
    #[error("client for {label}: {message}")]
    Client { label: String, message: String },
    /// Connecting failed: refused, unreachable, or the TLS handshake failed.
    #[error("{url}: {message}")]
    Connect { url: String, message: String },
    /// Sending or reading failed, or the timeout passed.
    #[error("{url}: {message}")]
    Request { url: String, message: String },
    /// apiagg itself ran out of a resource (open files, memory) while connecting: says
    /// nothing about the backend.
    #[error("{url}: apiagg is out of {why}")]
    Exhausted { url: String, why: &'static str },
    /// The body is larger than the configured limit; it was not read further.
    #[error("{url}: the body exceeds the limit of {limit} bytes (--backend-body-limit)")]
    TooLarge { url: String, limit: u64 },
    /// An unexpected status code.
    #[error("{url}: status {code}")]
    Status { url: String, code: u16 },
    /// The body is not the document asked for.
    #[error("{url}: invalid document: {message}")]
    Invalid { url: String, message: String },
}

/// One fetched response.
#[derive(Debug)]
pub struct Fetched {
    /// The URL asked (for messages).
    pub url: String,
    /// Status code.
    pub status: u16,
    /// `Content-Type` (empty when absent).
    pub content_type: String,
    /// `ETag` when sent.
    pub etag: Option<String>,
    /// `Location` when the status is a redirect (3xx) and it was sent (read it with
    /// [`Fetched::location`]); never followed here (the client follows no redirect): a caller
    /// that follows one checks it first. Boxed: one pointer, so that a `Fetched` stays small
    /// in the `Result`s it travels in.
    pub location: Option<Box<http::HeaderValue>>,
    /// Body (at most the configured limit).
    pub body: Bytes,
}

impl Fetched {
    /// The body as JSON of type `T`, which must have come with status 200.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, FetchError> {
        if self.status != 200 {
            return Err(self.unexpected());
        }
        serde_json::from_slice(&self.body).map_err(|e| self.invalid(e))
    }

    /// The `Location` of a redirect, when sent as visible ASCII.
    pub fn location(&self) -> Option<&str> {
        self.location.as_deref().and_then(|v| v.to_str().ok())
    }

    /// The error for a status code the caller does not handle.
    pub fn unexpected(&self) -> FetchError {
        FetchError::Status {
            url: self.url.clone(),
            code: self.status,
        }
    }

    /// The error for a body that is not what was asked for.
    pub fn invalid(&self, why: impl std::fmt::Display) -> FetchError {
        FetchError::Invalid {
            url: self.url.clone(),
            message: why.to_string(),
        }
    }
}

/// Clients for every endpoint the controllers talk to, shared and reused.
pub struct Clients {
    by_endpoint: DashMap<u64, Client>,
    body_limit: u64,
    /// Upper bound of connecting (TCP and TLS): `--backend-connect-timeout`.
    connect_timeout: Duration,
}

impl Clients {
    /// An empty set; bodies larger than `body_limit` bytes are refused, connecting takes at
    /// most `connect_timeout`.
    pub fn new(body_limit: u64, connect_timeout: Duration) -> Clients {
        Clients {
            by_endpoint: DashMap::new(),
            body_limit,
            connect_timeout,
        }
    }

    /// The client of endpoint `index` of `upstream`, built on first use.
    pub fn endpoint(&self, upstream: &Upstream, index: usize) -> Result<Client, FetchError> {
        let endpoint = upstream
            .endpoints
            .get(index)
            .ok_or_else(|| FetchError::NoEndpoint(upstream.label.clone()))?;
        let key = endpoint.own_peer.group_key;
        if let Some(client) = self.by_endpoint.get(&key) {
            return Ok(client.clone());
        }
        let client = Client::build(upstream, index, self.body_limit, self.connect_timeout)?;
        self.by_endpoint.insert(key, client.clone());
        Ok(client)
    }

    /// Forgets the client of one endpoint (its pooled connections close once the requests
    /// using them end); the next request builds a new one.
    pub fn forget(&self, upstream: &Upstream, index: usize) {
        if let Some(endpoint) = upstream.endpoints.get(index) {
            self.by_endpoint.remove(&endpoint.own_peer.group_key);
        }
    }

    /// The client of the next healthy endpoint of `upstream`.
    pub fn pick(&self, upstream: &Upstream) -> Result<Client, FetchError> {
        let index = upstream
            .pick()
            .ok_or_else(|| FetchError::NoEndpoint(upstream.label.clone()))?;
        self.endpoint(upstream, index)
    }

    /// Drops the clients of endpoints no longer in use.
    pub fn retain(&self, live: &HashSet<u64>) {
        self.by_endpoint.retain(|key, _| live.contains(key));
    }
}

/// Who the controllers' requests are from.
#[derive(Clone)]
enum Caller {
    /// `system:kube-aggregator` in `system:masters`, as `X-Remote-*` (remote backends).
    Aggregator,
    /// apiagg's own credentials (the delegate): its bearer token, if any.
    Delegate(Option<Arc<BearerToken>>),
}

/// A client bound to one endpoint: cheap to clone, connections shared between clones.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Arc<str>,
    body_limit: u64,
    caller: Caller,
    /// The endpoint's address (what a refused connection names).
    addr: SocketAddr,
}

impl Client {
    /// TLS endpoints are addressed by the upstream's server name, resolved to the endpoint
    /// address, so the certificate is verified exactly as the proxy verifies it.
    fn build(
        upstream: &Upstream,
        index: usize,
        body_limit: u64,
        connect_timeout: Duration,
    ) -> Result<Client, FetchError> {
        let endpoint = &upstream.endpoints[index];
        let mut builder = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .user_agent(concat!("apiagg/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(90));
        let base = if endpoint.tls {
            builder = builder.use_preconfigured_tls((*upstream.own_tls_config).clone());
            let name = upstream.server_name.as_str();
            if name.parse::<IpAddr>().is_ok() {
                format!("https://{}", endpoint.authority)
            } else {
                builder = builder.resolve(name, endpoint.addr);
                format!("https://{name}:{}", endpoint.addr.port())
            }
        } else {
            format!("http://{}", endpoint.authority)
        };
        let http = builder.build().map_err(|e| FetchError::Client {
            label: upstream.label.clone(),
            message: error_chain(&e),
        })?;
        let caller = if upstream.remote {
            Caller::Aggregator
        } else {
            Caller::Delegate(upstream.token.clone())
        };
        Ok(Client {
            http,
            base: base.into(),
            body_limit,
            caller,
            addr: endpoint.addr,
        })
    }

    /// `request` with the controllers' identity.
    fn identified(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.caller {
            Caller::Aggregator => request
                .header("X-Remote-User", AGGREGATOR_USER)
                .header("X-Remote-Group", AGGREGATOR_GROUP),
            Caller::Delegate(Some(token)) => match token.header() {
                Some(value) => request.header(http::header::AUTHORIZATION, (*value).clone()),
                None => request,
            },
            Caller::Delegate(None) => request,
        }
    }

    /// `GET path` with `Accept`, an optional `If-None-Match`, bounded by `timeout`; the body is
    /// read up to the limit.
    pub async fn get(
        &self,
        path: &str,
        accept: &str,
        if_none_match: Option<&str>,
        timeout: Duration,
    ) -> Result<Fetched, FetchError> {
        let url = format!("{}{path}", self.base);
        let mut request = self
            .http
            .get(&url)
            .header("Accept", accept)
            .timeout(timeout);
        if let Some(etag) = if_none_match {
            request = request.header("If-None-Match", etag);
        }
        self.send(url, request).await
    }

    /// `POST path` with a JSON body, bounded by `timeout`; the answer is read up to the limit.
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
        timeout: Duration,
    ) -> Result<Fetched, FetchError> {
        let url = format!("{}{path}", self.base);
        let request = self
            .http
            .post(&url)
            .header("Accept", "application/json")
            .json(body)
            .timeout(timeout);
        self.send(url, request).await
    }

    async fn send(
        &self,
        url: String,
        request: reqwest::RequestBuilder,
    ) -> Result<Fetched, FetchError> {
        let failed = |url: &str, e: reqwest::Error| FetchError::Request {
            url: url.to_string(),
            message: described::cause(&e, self.addr),
        };
        let response = self
            .identified(request)
            .send()
            .await
            .map_err(|e| failed(&url, e))?;
        self.finish(url, response).await
    }

    /// Reads a response into a [`Fetched`], its body capped.
    async fn finish(
        &self,
        url: String,
        mut response: reqwest::Response,
    ) -> Result<Fetched, FetchError> {
        let failed = |url: &str, e: reqwest::Error| FetchError::Request {
            url: url.to_string(),
            message: error_chain(&e),
        };
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let content_type = header("content-type").unwrap_or_default();
        let etag = header("etag");
        let status = response.status().as_u16();
        let location = if response.status().is_redirection() {
            response.headers().get("location").cloned().map(Box::new)
        } else {
            None
        };
        let too_large = |url: &str| FetchError::TooLarge {
            url: url.to_string(),
            limit: self.body_limit,
        };
        if response
            .content_length()
            .is_some_and(|n| n > self.body_limit)
        {
            return Err(too_large(&url));
        }
        let body = read_capped(&mut response, self.body_limit)
            .await
            .map_err(|e| match e {
                Some(e) => failed(&url, e),
                None => too_large(&url),
            })?;
        Ok(Fetched {
            url,
            status,
            content_type,
            etag,
            location,
            body,
        })
    }

    /// Availability probe: `GET path` as the aggregator identity; returns the status code.
    /// The caller bounds it. A failure's message is its cause in the words of Go's HTTP client
    /// (kube-aggregator's probe messages).
    pub async fn probe(&self, path: &str) -> Result<u16, FetchError> {
        let url = format!("{}{path}", self.base);
        let request = self.http.get(&url).header("Accept", "application/json");
        let response = self.identified(request).send().await.map_err(|e| {
            if let Some(why) = super::own_exhaustion(&e) {
                return FetchError::Exhausted { url, why };
            }
            let message = described::cause(&e, self.addr);
            if e.is_connect() {
                FetchError::Connect { url, message }
            } else {
                FetchError::Request { url, message }
            }
        })?;
        Ok(response.status().as_u16())
    }
}

/// Bodies are copied into blocks of this size as they arrive, then joined once (64 KiB blocks
/// pack well in the allocator: 1 MiB blocks left a refused 64 MiB body at 200 MiB of RSS).
const BLOCK: usize = 64 << 10;

/// Reads a body of at most `limit` bytes; `Err(None)` when it is larger. The network's chunks
/// are copied into fixed blocks (a chunk may pin a much larger receive buffer), so a body
/// refused at the limit never holds much more than the limit.
async fn read_capped(
    response: &mut reqwest::Response,
    limit: u64,
) -> Result<Bytes, Option<reqwest::Error>> {
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    let mut total = 0u64;
    while let Some(mut chunk) = response.chunk().await.map_err(Some)? {
        total += chunk.len() as u64;
        if total > limit {
            return Err(None);
        }
        while !chunk.is_empty() {
            let block = match blocks.last_mut() {
                Some(block) if block.len() < BLOCK => block,
                _ => {
                    blocks.push(Vec::with_capacity(BLOCK));
                    blocks.last_mut().ok_or(None)?
                }
            };
            let take = chunk.len().min(BLOCK - block.len());
            block.extend_from_slice(&chunk.split_to(take));
        }
    }
    if blocks.len() == 1 {
        return Ok(Bytes::from(blocks.remove(0)));
    }
    let mut joined = BytesMut::with_capacity(total as usize);
    for block in blocks {
        joined.extend_from_slice(&block);
    }
    Ok(joined.freeze())
}
