//! Requests in a caller's name, for apiagg's streaming-list emulation: the headers come from
//! the request path's forwarding policy (the caller as `X-Remote-*`, its credentials removed),
//! over the same connections and TLS identity as the controllers' requests to that endpoint;
//! and the streaming-list probe's, in apiagg's own name.

use std::time::Duration;

use tokio::time::Instant;

use super::{Client, FetchError, Fetched, Lines};

impl Client {
    /// `GET path` with exactly `headers`; the answer's head must arrive within `within`. The
    /// body is the caller's to read ([`Client::body`], or chunk by chunk).
    pub async fn open_as(
        &self,
        path: &str,
        headers: http::HeaderMap,
        within: Duration,
    ) -> Result<(String, reqwest::Response), FetchError> {
        let url = format!("{}{path}", self.base);
        let request = self.http.get(&url).headers(headers);
        self.opened(url, request, within).await
    }

    /// `GET path` in apiagg's own name (the controllers' identity); the answer's head must
    /// arrive within `within`.
    pub async fn open_own(
        &self,
        path: &str,
        within: Duration,
    ) -> Result<(String, reqwest::Response), FetchError> {
        let url = format!("{}{path}", self.base);
        let request = self.identified(self.http.get(&url));
        self.opened(url, request, within).await
    }

    /// Sends `request` to `url`, its answer's head due within `within`.
    async fn opened(
        &self,
        url: String,
        request: reqwest::RequestBuilder,
        within: Duration,
    ) -> Result<(String, reqwest::Response), FetchError> {
        match tokio::time::timeout(within, request.send()).await {
            Ok(Ok(response)) => Ok((url, response)),
            Ok(Err(e)) => Err(if let Some(why) = super::super::own_exhaustion(&e) {
                FetchError::Exhausted { url, why }
            } else if e.is_connect() {
                FetchError::Connect {
                    url,
                    message: super::described::cause(&e, self.addr),
                }
            } else {
                FetchError::Request {
                    url,
                    message: super::described::cause(&e, self.addr),
                }
            }),
            Err(_) => Err(FetchError::Request {
                url,
                message: "timed out waiting for the answer".into(),
            }),
        }
    }

    /// The whole body of an answer [`Client::open_as`] opened, capped like every body.
    pub async fn body(
        &self,
        url: String,
        response: reqwest::Response,
    ) -> Result<Fetched, FetchError> {
        self.finish(url, response).await
    }

    /// The lines of an answer [`Client::open_as`] opened, read until `deadline`.
    pub fn lines(&self, url: String, response: reqwest::Response, deadline: Instant) -> Lines {
        Lines::of(url, response, self.body_limit, deadline)
    }
}
