//! What a client gets when pingora cannot read its HTTP/1.1 request head. pingora-core's parser
//! reads at most 256 header lines (`MAX_HEADERS`) and 1 MiB (`MAX_HEADER_SIZE`); past either,
//! the client gets 431 `RequestHeaderFieldsTooLarge` naming the limit (a user impersonating or
//! stated in hundreds of groups sends a line per group), any other head it cannot parse 400
//! `BadRequest`; both as a Status. The connection then closes, but only once the client had
//! the time to read the answer: what it still sends is read and dropped for a moment first, so
//! the close is no reset that destroys the answer before the client reads it (Go's servers wait
//! the same way after such an answer).
//!
//! Over HTTP/2 the header list is bounded instead (`forward::MAX_H2_HEADER_LIST`), and the
//! HTTP/2 layer answers a larger one itself: 431 without a body, the stream reset.

use std::time::Duration;

use pingora_error::{Error, ErrorType};
use tokio::io::AsyncReadExt;

use pingora_core::protocols::http::ServerSession as Session;

use super::refusal::Refusal;
use super::reply::Reply;
use apiagg_apis::Reason;

/// Header lines pingora-core's HTTP/1 parser reads (its `MAX_HEADERS`).
pub const MAX_H1_HEADER_LINES: usize = 256;
/// Bytes of an HTTP/1.1 head pingora-core reads (its `MAX_HEADER_SIZE`).
pub const MAX_H1_HEAD_BYTES: usize = 1_048_575;
/// How long what the client still sends after the answer is read and dropped.
const LINGER: Duration = Duration::from_millis(500);
/// How much of it, at most.
const LINGER_BYTES: usize = 1 << 20;

/// Why a head was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadRefusal {
    /// More header lines than the parser reads. Not retryable as it is.
    #[error(
        "the request head has more header lines than the limit of {MAX_H1_HEADER_LINES} apiagg \
         reads over HTTP/1.1 (one line per value: a user in many groups may be stated over \
         HTTP/2, up to 64 KiB of header fields)"
    )]
    TooManyLines,
    /// More bytes than the parser reads. Not retryable as it is.
    #[error(
        "the request head is larger than the limit of {MAX_H1_HEAD_BYTES} bytes (1 MiB) apiagg \
         reads over HTTP/1.1"
    )]
    TooLarge,
    /// Not HTTP/1.1 that pingora parses. Not retryable.
    #[error("malformed request head")]
    Malformed,
}

impl HeadRefusal {
    /// Why pingora failed to read a head, when it is about the head (`None`: the connection
    /// broke).
    pub fn of(e: &Error) -> Option<HeadRefusal> {
        if e.etype() != &ErrorType::InvalidHTTPHeader {
            return None;
        }
        let cause = e.root_cause().downcast_ref::<httparse::Error>();
        if cause == Some(&httparse::Error::TooManyHeaders) {
            return Some(HeadRefusal::TooManyLines);
        }
        // pingora says so only in its context: "Request header larger than 1048575".
        let context = e.context.as_ref().map_or("", |c| c.as_str());
        if context.starts_with("Request header larger than") {
            return Some(HeadRefusal::TooLarge);
        }
        Some(HeadRefusal::Malformed)
    }

    /// The Status answering it.
    pub fn reply(self) -> Reply {
        let message = self.to_string();
        let refusal = match self {
            HeadRefusal::TooManyLines | HeadRefusal::TooLarge => {
                Refusal::new(Reason::RequestHeaderFieldsTooLarge, message)
            }
            HeadRefusal::Malformed => Refusal::bad_request(message),
        };
        Reply::from(refusal).unnegotiated()
    }
}

/// Answers a head pingora could not read (`e`) and ends the connection: the answer, the end of
/// apiagg's side, then what the client still sends is dropped for a moment before the close.
pub async fn refuse(mut session: Session, e: &Error) {
    let Some(refusal) = HeadRefusal::of(e) else {
        session.shutdown().await;
        return;
    };
    tracing::debug!("request head refused ({refusal:?}): {e}");
    session.set_keepalive(None);
    let _ = refusal.reply().send(&mut session).await;
    session.shutdown().await;
    if let Session::H1(h1) = session {
        let mut stream = h1.into_inner();
        let mut dropped = vec![0u8; 16 * 1024];
        let mut read = 0;
        let _ = tokio::time::timeout(LINGER, async {
            while read < LINGER_BYTES {
                match stream.read(&mut dropped).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read += n,
                }
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_past_the_parsers_limits_name_them_and_other_failures_are_400() {
        let lines = Error::because(
            ErrorType::InvalidHTTPHeader,
            "buf: …",
            httparse::Error::TooManyHeaders,
        );
        assert_eq!(HeadRefusal::of(&lines), Some(HeadRefusal::TooManyLines));
        assert_eq!(lines_reply_code(&lines), 431);
        let size = Error::explain(
            ErrorType::InvalidHTTPHeader,
            "Request header larger than 1048575",
        );
        assert_eq!(HeadRefusal::of(&size), Some(HeadRefusal::TooLarge));
        let token = Error::because(
            ErrorType::InvalidHTTPHeader,
            "buf: …",
            httparse::Error::Token,
        );
        assert_eq!(HeadRefusal::of(&token), Some(HeadRefusal::Malformed));
        assert_eq!(lines_reply_code(&token), 400);
        let broken = Error::explain(ErrorType::ReadError, "while reading request headers");
        assert_eq!(HeadRefusal::of(&broken), None);
        assert!(HeadRefusal::TooManyLines
            .to_string()
            .contains("limit of 256"));
        assert!(HeadRefusal::TooLarge
            .to_string()
            .contains("limit of 1048575 bytes"));
    }

    fn lines_reply_code(e: &Error) -> u16 {
        HeadRefusal::of(e).map_or(0, |r| r.reply().code())
    }
}
