//! HTTP client for the documents apiagg reads from its backends and the delegate (discovery,
//! group lists), with the same TLS trust and server name as the proxy.

use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;

use crate::routes::Upstream;

/// One fetched response.
#[derive(Debug)]
pub struct Fetched {
    /// Status code.
    pub status: u16,
    /// `Content-Type` (empty when absent).
    pub content_type: String,
    /// `ETag` when sent.
    pub etag: Option<String>,
    /// Body.
    pub body: Bytes,
}

/// A client bound to one endpoint of an upstream.
pub struct BackendClient {
    client: reqwest::Client,
    base: String,
}

impl BackendClient {
    /// A client for endpoint `index` of `upstream`: TLS endpoints are addressed by the upstream's
    /// server name (resolved to the endpoint address) so the certificate is verified exactly as
    /// the proxy verifies it.
    pub fn new(
        upstream: &Upstream,
        index: usize,
        timeout: Duration,
    ) -> Result<BackendClient, String> {
        let endpoint = upstream
            .endpoints
            .get(index)
            .ok_or_else(|| format!("{} has no endpoint {index}", upstream.label))?;
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("apiagg/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(90));
        let base = if endpoint.tls {
            builder = builder.use_preconfigured_tls((*upstream.tls_config).clone());
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
        let client = builder
            .build()
            .map_err(|e| format!("client for {}: {e}", upstream.label))?;
        Ok(BackendClient { client, base })
    }

    /// `GET path` with `Accept` and an optional `If-None-Match`.
    pub async fn get(
        &self,
        path: &str,
        accept: &str,
        if_none_match: Option<&str>,
    ) -> Result<Fetched, String> {
        let url = format!("{}{path}", self.base);
        let mut request = self.client.get(&url).header("Accept", accept);
        if let Some(etag) = if_none_match {
            request = request.header("If-None-Match", etag);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("GET {url}: {}", error_chain(&e)))?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let content_type = header("content-type").unwrap_or_default();
        let etag = header("etag");
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("GET {url}: {}", error_chain(&e)))?;
        Ok(Fetched {
            status,
            content_type,
            etag,
            body,
        })
    }
}

impl BackendClient {
    /// Availability probe: `GET path` as the aggregator identity; returns the status code.
    pub async fn probe(&self, path: &str) -> Result<u16, String> {
        let url = format!("{}{path}", self.base);
        let response = self
            .client
            .get(&url)
            .header("Accept", "application/json")
            .header("X-Remote-User", "system:kube-aggregator")
            .header("X-Remote-Group", "system:masters")
            .send()
            .await
            .map_err(|e| error_chain(&e))?;
        Ok(response.status().as_u16())
    }
}

/// An error with its causes, the way operators need to read it.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
