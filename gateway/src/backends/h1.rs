//! HTTP/1.1 to a backend, apiagg's own client side of it: one exchange at a time over a pooled
//! connection. The request head is written as the request path built it (its framing decided by
//! `framing.rs`); the answer's head is parsed once, straight into the head the client gets (no
//! case-preserving second map, room for the headers added on the way), and its body is read
//! piece by piece as RFC 9112 §6.3 frames it:
//!
//! - no body for `HEAD`, 1xx, 204 and 304;
//! - `Transfer-Encoding` ending in `chunked`: chunked (decoded; trailers dropped), and any
//!   `Content-Length` beside it removed, the connection then not reused (a smuggling attempt or a
//!   broken backend); any other `Transfer-Encoding`: up to the close;
//! - `Content-Length`: exactly that many bytes (several values must agree, else the answer is
//!   refused);
//! - neither: up to the close (the connection is not reused).
//!
//! A connection is reused only when both sides keep it (HTTP/1.1 without `Connection: close`,
//! HTTP/1.0 with `keep-alive`) and the answer was read to its end. A failure before any byte of
//! the answer arrived on a reused connection may be retried (the connection was stale).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderValue, Method};
use pingora_error::{Error, ErrorType, Result, RetryType};
use pingora_http::RequestHeader;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest response head read from a backend.
const MAX_HEAD: usize = 64 * 1024;
/// Most headers a response head may have.
const MAX_HEADERS: usize = 128;
/// Headers the request path adds to an answer on its way (`Date`, `Connection`, the audit ID,
/// flow control's two): a relayed head is built with room for them, so its map does not grow
/// again.
pub const ADDED_TO_ANSWERS: usize = 5;
/// Read buffer of an exchange, and what one read asks for at least.
const READ_SIZE: usize = 8 * 1024;
/// Longest chunk-size line (with extensions), and the most trailer bytes read and dropped.
const MAX_CHUNK_LINE: usize = 4 * 1024;
const MAX_TRAILERS: usize = 16 * 1024;
/// Longest wait for a connection's close to be written.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// One backend connection speaking HTTP/1.1.
pub struct H1Client<S> {
    io: S,
    /// Bytes read and not consumed yet.
    buf: BytesMut,
    head: Option<http::response::Parts>,
    body: Body,
    /// How the request's body is framed, and what is left of it.
    request: RequestBody,
    /// The request was `HEAD` (its answer has no body).
    head_request: bool,
    /// Both sides keep the connection after this exchange.
    keep_alive: bool,
    /// Some byte of the answer arrived.
    received: bool,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

/// What is left of the answer's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// No head read yet (or an informational one).
    Unknown,
    Length(u64),
    Chunked(Chunk),
    UntilClose,
    Done,
}

/// Where the chunked decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailers(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RequestBody {
    None,
    Length(u64),
    Chunked,
}

impl<S: AsyncRead + AsyncWrite + Unpin> H1Client<S> {
    /// A client over `io` (a new or pooled connection).
    pub fn new(io: S) -> H1Client<S> {
        H1Client {
            io,
            buf: BytesMut::new(),
            head: None,
            body: Body::Unknown,
            request: RequestBody::None,
            head_request: false,
            keep_alive: false,
            received: false,
            read_timeout: None,
            write_timeout: None,
        }
    }

    /// Bounds every read (`None`: unbounded).
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        self.read_timeout = timeout;
    }

    /// Bounds every write (`None`: unbounded).
    pub fn set_write_timeout(&mut self, timeout: Option<Duration>) {
        self.write_timeout = timeout;
    }

    /// Writes the request head; its `Content-Length` or `Transfer-Encoding: chunked` says how
    /// its body is framed (none: no body).
    pub async fn write_request_header(&mut self, request: &RequestHeader) -> Result<()> {
        self.head_request = request.method == Method::HEAD;
        self.request = request_framing(request)?;
        let mut out = Vec::with_capacity(256 + 64 * request.headers.len());
        out.extend_from_slice(request.method.as_str().as_bytes());
        out.push(b' ');
        let target = request.uri.path_and_query().map_or("/", |pq| pq.as_str());
        out.extend_from_slice(target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in &request.headers {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        self.write(&out).await.map_err(|mut e| {
            // Nothing reached the backend: on a pooled connection, it was stale.
            e.retry = RetryType::ReusedOnly;
            e
        })
    }

    /// Writes a piece of the request body, framed as the head said.
    pub async fn write_request_body(&mut self, data: Bytes) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        match self.request {
            RequestBody::None => Error::e_explain(
                ErrorType::InternalError,
                "a request body without Content-Length or chunked framing",
            ),
            RequestBody::Length(left) => {
                let Some(rest) = left.checked_sub(data.len() as u64) else {
                    return Error::e_explain(
                        ErrorType::InternalError,
                        "the request body is longer than its Content-Length",
                    );
                };
                self.request = RequestBody::Length(rest);
                self.write(&data).await
            }
            RequestBody::Chunked => {
                let size = format!("{:x}\r\n", data.len());
                let mut out = Vec::with_capacity(size.len() + data.len() + 2);
                out.extend_from_slice(size.as_bytes());
                out.extend_from_slice(&data);
                out.extend_from_slice(b"\r\n");
                self.write(&out).await
            }
        }
    }

    /// Ends the request body (the chunked terminator) and sends what is buffered.
    pub async fn finish_request_body(&mut self) -> Result<()> {
        match self.request {
            RequestBody::Chunked => self.write(b"0\r\n\r\n").await?,
            RequestBody::Length(left) if left > 0 => {
                return Error::e_explain(
                    ErrorType::InternalError,
                    "the request body ended before its Content-Length",
                );
            }
            _ => {}
        }
        self.request = RequestBody::None;
        let flushed = self.io.flush();
        with_timeout(self.write_timeout, flushed, ErrorType::WriteTimedout)
            .await?
            .map_err(|e| Error::because(ErrorType::WriteError, "writing to the backend", e))
    }

    /// Reads the next response head (after an informational one, the one after it).
    pub async fn read_response_header(&mut self) -> Result<()> {
        self.head = None;
        self.body = Body::Unknown;
        if self.buf.capacity() == 0 {
            self.buf.reserve(READ_SIZE);
        }
        loop {
            if let Some(head) = self.parse_head()? {
                self.head = Some(head);
                return Ok(());
            }
            if self.buf.len() >= MAX_HEAD {
                let e = format!("the backend's response head is over {MAX_HEAD} bytes");
                return Error::e_explain(ErrorType::InvalidHTTPHeader, e);
            }
            if self.fill().await? == 0 {
                let mut e = Error::explain(
                    ErrorType::ConnectionClosed,
                    "the backend closed the connection before its answer",
                );
                if !self.received {
                    e.retry = RetryType::ReusedOnly;
                }
                return Err(e);
            }
            self.received = true;
        }
    }

    /// The last response head read.
    pub fn response_header(&self) -> Option<&http::response::Parts> {
        self.head.as_ref()
    }

    /// Takes the last response head read (to relay it).
    pub fn take_response_header(&mut self) -> Option<http::response::Parts> {
        self.head.take()
    }

    /// The next piece of the answer's body; `None` at its end.
    pub async fn read_response_body(&mut self) -> Result<Option<Bytes>> {
        loop {
            match self.body {
                Body::Unknown | Body::Done => return Ok(None),
                Body::Length(0) => {
                    self.body = Body::Done;
                    return Ok(None);
                }
                Body::Length(left) if !self.buf.is_empty() => {
                    let n = left.min(self.buf.len() as u64);
                    self.body = Body::Length(left - n);
                    return Ok(Some(self.buf.split_to(n as usize).freeze()));
                }
                Body::UntilClose if !self.buf.is_empty() => {
                    return Ok(Some(self.buf.split().freeze()));
                }
                Body::Chunked(chunk) => {
                    if let Some(piece) = self.decode_chunked(chunk)? {
                        return Ok(piece);
                    }
                }
                Body::Length(_) | Body::UntilClose => {}
            }
            // More bytes are needed.
            if self.fill().await? == 0 {
                if self.body == Body::UntilClose {
                    self.body = Body::Done;
                    return Ok(None);
                }
                return Error::e_explain(
                    ErrorType::ConnectionClosed,
                    "the backend closed the connection before its answer ended",
                );
            }
        }
    }

    /// Whether the answer's body was read to its end.
    pub fn is_body_done(&self) -> bool {
        self.body == Body::Done
    }

    /// Whether the connection may carry another exchange: both sides keep it and the answer
    /// was read to its end with nothing after it.
    pub fn reusable(&self) -> bool {
        self.keep_alive && self.body == Body::Done && self.buf.is_empty()
    }

    /// The connection, for the pool.
    pub fn into_inner(self) -> S {
        self.io
    }

    /// Closes the connection's write side (the backend sees the end of the stream).
    pub async fn shutdown(&mut self) {
        // A TLS close is a write: a backend that reads nothing must not hold it for good.
        let _ = tokio::time::timeout(SHUTDOWN_WAIT, self.io.shutdown()).await;
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<()> {
        let written = self.io.write_all(bytes);
        with_timeout(self.write_timeout, written, ErrorType::WriteTimedout)
            .await?
            .map_err(|e| Error::because(ErrorType::WriteError, "writing to the backend", e))
    }

    /// Reads more bytes into the buffer; 0 at the end of the stream.
    async fn fill(&mut self) -> Result<usize> {
        if self.buf.capacity() - self.buf.len() < READ_SIZE / 4 {
            self.buf.reserve(READ_SIZE);
        }
        let read = self.io.read_buf(&mut self.buf);
        with_timeout(self.read_timeout, read, ErrorType::ReadTimedout)
            .await?
            .map_err(|e| Error::because(ErrorType::ReadError, "reading from the backend", e))
    }
}

mod parse;

#[cfg(test)]
mod tests;

/// How the request head frames its body.
fn request_framing(request: &RequestHeader) -> Result<RequestBody> {
    let chunked = request
        .headers
        .get(TRANSFER_ENCODING)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"chunked"));
    if chunked {
        return Ok(RequestBody::Chunked);
    }
    match request.headers.get(CONTENT_LENGTH) {
        None => Ok(RequestBody::None),
        Some(value) => std::str::from_utf8(value.as_bytes())
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(RequestBody::Length)
            .ok_or_else(|| {
                Error::explain(
                    ErrorType::InvalidHTTPHeader,
                    "invalid request Content-Length",
                )
            }),
    }
}

/// `future`, bounded by `timeout` when there is one (`kind` when it passes).
async fn with_timeout<F: std::future::Future>(
    timeout: Option<Duration>,
    future: F,
    kind: ErrorType,
) -> Result<F::Output> {
    match timeout {
        None => Ok(future.await),
        Some(limit) => match tokio::time::timeout(limit, future).await {
            Ok(output) => Ok(output),
            Err(_) => Error::e_explain(kind, "the backend did not answer in time"),
        },
    }
}

/// A header value's comma-separated tokens, trimmed.
fn tokens(value: &HeaderValue) -> impl Iterator<Item = &[u8]> {
    value
        .as_bytes()
        .split(|&b| b == b',')
        .map(|t| t.trim_ascii())
}

/// Whether a `Connection` header lists `token`.
fn connection_has(headers: &http::HeaderMap, token: &[u8]) -> bool {
    headers
        .get_all(CONNECTION)
        .iter()
        .flat_map(tokens)
        .any(|t| t.eq_ignore_ascii_case(token))
}
