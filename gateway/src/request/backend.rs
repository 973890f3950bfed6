//! The backend side of one exchange: apiagg's own HTTP/1.1 client over a pooled connection, or
//! a stream of a multiplexed HTTP/2 connection (pingora-core's). Every error it returns is the
//! backend's (`Upstream`).

use std::time::Duration;

use bytes::Bytes;
use pingora_core::protocols::http::v2::client::Http2Session;
use pingora_core::protocols::Stream;
use pingora_error::Result;
use pingora_http::RequestHeader;

use super::framing;
use crate::backends::H1Client;

/// One exchange with a backend. Neither variant is boxed: the exchange lives once in the
/// request's future, and boxing would allocate per request.
#[allow(clippy::large_enum_variant)]
pub(super) enum Backend {
    /// HTTP/1.1 over a connection of the endpoint's pool (or a new one).
    H1(H1Client<Stream>),
    /// A stream of an HTTP/2 connection.
    H2(Http2Session),
}

impl Backend {
    /// Whether the exchange is an HTTP/2 stream.
    pub(super) fn is_h2(&self) -> bool {
        matches!(self, Backend::H2(_))
    }

    /// Bounds each read and each write.
    pub(super) fn set_timeouts(&mut self, read: Option<Duration>, write: Option<Duration>) {
        match self {
            Backend::H1(h1) => {
                h1.set_read_timeout(read);
                h1.set_write_timeout(write);
            }
            Backend::H2(h2) => {
                h2.read_timeout = read;
                h2.write_timeout = write;
            }
        }
    }

    /// Sends the request head.
    pub(super) async fn write_request_header(&mut self, head: Box<RequestHeader>) -> Result<()> {
        match self {
            Backend::H1(h1) => h1.write_request_header(&head).await,
            Backend::H2(h2) => h2.write_request_header(head, false),
        }
        .map_err(|e| e.into_up())
    }

    /// Sends a piece of the request body.
    pub(super) async fn write_request_body(&mut self, data: Bytes) -> Result<()> {
        match self {
            Backend::H1(h1) => h1.write_request_body(data).await,
            Backend::H2(h2) => h2.write_request_body(data, false).await,
        }
        .map_err(|e| e.into_up())
    }

    /// Ends the request body.
    pub(super) async fn finish_request_body(&mut self) -> Result<()> {
        match self {
            Backend::H1(h1) => h1.finish_request_body().await,
            Backend::H2(h2) => h2.finish_request_body(),
        }
        .map_err(|e| e.into_up())
    }

    /// Reads the next response head (an informational one may come first).
    pub(super) async fn read_response_header(&mut self) -> Result<()> {
        match self {
            Backend::H1(h1) => h1.read_response_header().await,
            Backend::H2(h2) => h2.read_response_header().await,
        }
        .map_err(|e| e.into_up())
    }

    /// The last response head read.
    pub(super) fn response_header(&self) -> Option<&http::response::Parts> {
        match self {
            Backend::H1(h1) => h1.response_header(),
            Backend::H2(h2) => h2.response_header().map(|head| &**head),
        }
    }

    /// The last response head, as the client gets it, to edit before it becomes pingora's:
    /// HTTP/1.1's parsed with room for the headers added on the way (taken), HTTP/2's copied
    /// without pingora's case map.
    pub(super) fn relayed_head(&mut self) -> Option<http::response::Parts> {
        match self {
            Backend::H1(h1) => h1.take_response_header(),
            Backend::H2(h2) => h2.response_header().map(framing::relayed_head),
        }
    }

    /// The next piece of the answer's body; `None` at its end.
    pub(super) async fn read_response_body(&mut self) -> Result<Option<Bytes>> {
        match self {
            Backend::H1(h1) => h1.read_response_body().await,
            Backend::H2(h2) => h2.read_response_body().await,
        }
        .map_err(|e| e.into_up())
    }

    /// The answer's trailers (HTTP/2 only: HTTP/1.1 ones are dropped).
    pub(super) async fn read_trailers(&mut self) -> Result<Option<http::HeaderMap>> {
        match self {
            Backend::H1(_) => Ok(None),
            Backend::H2(h2) => h2.read_trailers().await.map_err(|e| e.into_up()),
        }
    }

    /// Whether the answer was read to its end (then the connection or stream may be reused).
    pub(super) fn response_done(&mut self) -> bool {
        match self {
            Backend::H1(h1) => h1.is_body_done(),
            Backend::H2(h2) => h2.response_finished(),
        }
    }

    /// Abandons the exchange: an HTTP/1.1 connection is closed, an HTTP/2 stream reset.
    pub(super) async fn shutdown(&mut self) {
        match self {
            Backend::H1(h1) => h1.shutdown().await,
            Backend::H2(h2) => h2.shutdown(),
        }
    }
}
