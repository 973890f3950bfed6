//! Streaming reads for the controllers' watches: a `watch=1` answer is read as it arrives, one
//! JSON event per line, each line capped like any body and every read bounded in time.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::time::Instant;

use super::{Client, FetchError};
use apiagg_observe::error_chain;

/// The lines of a streamed answer (a Kubernetes watch: one JSON event per line).
pub struct Lines {
    url: String,
    response: reqwest::Response,
    buffer: BytesMut,
    limit: u64,
    deadline: Instant,
}

impl Client {
    /// `GET path` (a watch) whose answer is read line by line until `deadline` passes. A status
    /// other than 200 comes back as a whole capped body, for the caller to read the Status.
    pub async fn stream(
        &self,
        path: &str,
        within: Duration,
    ) -> Result<Result<Lines, super::Fetched>, FetchError> {
        let url = format!("{}{path}", self.base);
        let deadline = Instant::now() + within;
        let request = self.http.get(&url).header("Accept", "application/json");
        let sent = tokio::time::timeout_at(deadline, self.identified(request).send()).await;
        let response = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                return Err(FetchError::Request {
                    url,
                    message: error_chain(&e),
                })
            }
            Err(_) => {
                return Err(FetchError::Request {
                    url,
                    message: "timed out waiting for the answer".into(),
                })
            }
        };
        if response.status() != reqwest::StatusCode::OK {
            return self.finish(url, response).await.map(Err);
        }
        Ok(Ok(Lines {
            url,
            response,
            buffer: BytesMut::new(),
            limit: self.body_limit,
            deadline,
        }))
    }
}

impl Lines {
    /// The lines of `response` (asked at `url`), each at most `limit` bytes, read until
    /// `deadline`.
    pub(super) fn of(
        url: String,
        response: reqwest::Response,
        limit: u64,
        deadline: Instant,
    ) -> Lines {
        Lines {
            url,
            response,
            buffer: BytesMut::new(),
            limit,
            deadline,
        }
    }

    /// The next line (without its newline), `None` at the end of the stream or its deadline.
    pub async fn next(&mut self) -> Result<Option<BytesMut>, FetchError> {
        loop {
            if let Some(at) = self.buffer.iter().position(|&b| b == b'\n') {
                let mut line = self.buffer.split_to(at + 1);
                line.truncate(at);
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            if self.buffer.len() as u64 > self.limit {
                return Err(FetchError::TooLarge {
                    url: self.url.clone(),
                    limit: self.limit,
                });
            }
            let chunk = match tokio::time::timeout_at(self.deadline, self.response.chunk()).await {
                Err(_) => return Ok(None),
                Ok(Ok(Some(chunk))) => chunk,
                Ok(Ok(None)) => {
                    let rest = std::mem::take(&mut self.buffer);
                    let blank = rest.iter().all(u8::is_ascii_whitespace);
                    return Ok((!blank).then_some(rest));
                }
                Ok(Err(e)) => {
                    return Err(FetchError::Request {
                        url: self.url.clone(),
                        message: error_chain(&e),
                    })
                }
            };
            self.buffer.extend_from_slice(chunk.chunk());
        }
    }
}
