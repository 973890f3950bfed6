//! What a backend answers over HTTP/1.1 (a compromised backend is an attacker), through apiagg's
//! own client (`gateway/src/backends/h1.rs`, `h1/parse.rs`): the response head, informational
//! heads before it, and the body as the head frames it (length, chunked with extensions and
//! trailers, up to the close), read the way the request path reads it.
//!
//! Input: one flags byte (bit 0: the request was `HEAD`), three bytes giving the sizes of the
//! reads the backend's bytes arrive in (cycled; 0 is the rest at once), then the bytes the
//! backend sends before it closes the connection. The client runs over an in-memory stream
//! that is always ready, polled without a runtime (no timer: the client's timeouts are unset).
//!
//! Checked beyond "no panic": the outcome (heads, body, how it ended) is the same whatever the
//! read sizes (the framing must not depend on where the TCP segments end); a body read to its
//! end has the length its `Content-Length` says; the head of an answer with a body keeps no
//! `Content-Length` beside a `Transfer-Encoding`; a reusable connection had its answer read to
//! the end; the body is never larger than what was sent.
#![no_main]

use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};

use apiagg_gateway::fuzzing::H1Client;
use libfuzzer_sys::fuzz_target;
use pingora_http::RequestHeader;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The client's largest response head (`MAX_HEAD` in h1.rs): below it, a head's outcome does
/// not depend on the read sizes.
const MAX_HEAD: usize = 64 * 1024;
/// Informational heads read before giving up (the request path bounds them itself).
const MAX_HEADS: usize = 16;

/// The backend's side of the connection: its bytes, delivered in reads of the given sizes,
/// then the end of the stream. Whatever the client writes is dropped.
struct Wire<'a> {
    data: &'a [u8],
    sizes: [usize; 3],
    reads: usize,
}

impl AsyncRead for Wire<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let size = self.sizes[self.reads % 3];
        self.reads += 1;
        let size = if size == 0 { self.data.len() } else { size };
        let n = size.min(self.data.len()).min(buf.remaining());
        let (now, later) = self.data.split_at(n);
        buf.put_slice(now);
        self.data = later;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Wire<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Runs a future whose every poll is ready (the wire never waits).
fn now<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the in-memory wire never waits"),
    }
}

/// What the client made of an answer.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    /// Status and headers of each head read (informational ones first).
    heads: Vec<(u16, Vec<(String, Vec<u8>)>)>,
    body: Vec<u8>,
    /// The error that ended the exchange, if any (its type and context).
    error: Option<String>,
    done: bool,
    reusable: bool,
}

fn exchange(head_request: bool, sizes: [usize; 3], wire: &[u8]) -> Outcome {
    let mut client = H1Client::new(Wire {
        data: wire,
        sizes,
        reads: 0,
    });
    let method = if head_request { "HEAD" } else { "GET" };
    let mut request =
        RequestHeader::build(method, b"/apis/metrics.k8s.io/v1beta1/pods", None).expect("head");
    request.insert_header("host", "backend.test").expect("host");
    now(client.write_request_header(&request)).expect("an in-memory write");
    now(client.finish_request_body()).expect("an in-memory flush");

    let mut outcome = Outcome {
        heads: Vec::new(),
        body: Vec::new(),
        error: None,
        done: false,
        reusable: false,
    };
    let mut final_head = false;
    for _ in 0..MAX_HEADS {
        if let Err(e) = now(client.read_response_header()) {
            outcome.error = Some(format!("{:?}: {:?}", e.etype(), e.context));
            break;
        }
        let head = client.response_header().expect("a head after Ok");
        let headers = head
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
            .collect::<Vec<_>>();
        let status = head.status;
        // (Only an answer with a body is framed: a 1xx, 204 or 304 head, or the head of a HEAD
        // request, is relayed as it came.)
        let bodiless =
            head_request || status.is_informational() || matches!(status.as_u16(), 204 | 304);
        if !bodiless && head.headers.contains_key(http::header::TRANSFER_ENCODING) {
            assert!(
                !head.headers.contains_key(http::header::CONTENT_LENGTH),
                "Content-Length kept beside Transfer-Encoding"
            );
        }
        outcome.heads.push((status.as_u16(), headers));
        if !status.is_informational() {
            final_head = true;
            break;
        }
    }
    if final_head {
        loop {
            match now(client.read_response_body()) {
                Ok(Some(piece)) => {
                    assert!(!piece.is_empty(), "an empty body piece");
                    outcome.body.extend_from_slice(&piece);
                    assert!(
                        outcome.body.len() <= wire.len(),
                        "more body than bytes sent"
                    );
                }
                Ok(None) => break,
                Err(e) => {
                    outcome.error = Some(format!("{:?}: {:?}", e.etype(), e.context));
                    break;
                }
            }
        }
    }
    outcome.done = client.is_body_done();
    outcome.reusable = client.reusable();
    if outcome.reusable {
        assert!(outcome.done, "reusable before the answer's end");
    }
    if let (true, None, Some((status, headers))) =
        (outcome.done, &outcome.error, outcome.heads.last())
    {
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse::<usize>().ok());
        let framed_by_length = !head_request
            && !matches!(status, 100..=199 | 204 | 304)
            && !headers.iter().any(|(n, _)| n == "transfer-encoding");
        if let (true, Some(length)) = (framed_by_length, length) {
            assert_eq!(
                outcome.body.len(),
                length,
                "a body of another length than its head said"
            );
        }
        if head_request || matches!(status, 204 | 304) {
            assert!(outcome.body.is_empty(), "a body where none may be");
        }
    }
    outcome
}

fuzz_target!(|data: &[u8]| {
    let Some((&[flags, a, b, c], wire)) = data.split_first_chunk::<4>() else {
        return;
    };
    let head_request = flags & 1 == 1;
    let sizes = [usize::from(a), usize::from(b), usize::from(c)];
    let split = exchange(head_request, sizes, wire);
    if wire.len() < MAX_HEAD {
        // One read of everything: the same outcome.
        let mut whole = exchange(head_request, [0; 3], wire);
        // Except reuse: bytes after the answer make it not reusable only once they are read
        // (a backend's stray bytes still in flight are the pool's to see: it peeks at an idle
        // connection's socket before reusing it).
        whole.reusable = split.reusable;
        assert_eq!(
            split, whole,
            "the outcome depends on the read sizes {sizes:?}"
        );
    }
});
