//! Watch streams: newline-delimited JSON events over a chunked response, or with `Accept:
//! application/cbor` a CBOR sequence (`application/cbor-seq`) of the same events.
//!
//! From `resourceVersion` 0 (or none) the stream starts with an `ADDED` event for every
//! existing object; from another it replays the changes after it (an `ERROR` event with a 410
//! `Expired` Status when the history no longer holds them, as upstream; with
//! `--watch-expired-status` a `410 Gone` answer instead). A streaming list
//! (`sendInitialEvents=true`, `--watch-list native`) ends its initial events with the BOOKMARK
//! annotated `k8s.io/initial-events-end`. Live `ADDED`/`MODIFIED`/`DELETED` events follow.
//! It ends after `timeoutSeconds`, when the client goes away, or when the watcher falls more
//! than 1024 events behind (the client should re-list).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_TYPE};
use hyper::Response;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};

use crate::cbor::{self, Format};
use crate::listing::Filter;
use crate::response::{Body, JSON};
use crate::store::{Event, Store};

/// Query parameters of a watch.
#[derive(Debug, Default)]
pub struct WatchParams {
    pub resource_version: u64,
    pub timeout: Option<Duration>,
    /// Only objects the selectors match are sent.
    pub filter: Filter,
    /// JSON lines, or a CBOR sequence (`application/cbor-seq`).
    pub format: Format,
    /// A streaming list: the initial events end with the annotated BOOKMARK.
    pub initial_events: bool,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// Gzipped, each event flushed (a streaming list to a client that accepts gzip).
    pub gzip: bool,
    /// A watch from a compacted resourceVersion gets `410 Gone` rather than an `ERROR` event.
    pub expired_status: bool,
}

/// Starts a watch of `namespace` (all namespaces when `None`).
pub fn respond(
    store: &Arc<Store>,
    namespace: Option<String>,
    params: WatchParams,
) -> Response<Body> {
    let (filter, format) = (params.filter, params.format);
    let mut first = Vec::new();
    let watched = store.watch(namespace.as_deref(), params.resource_version);
    let (initial, mut events, at) = match watched {
        Ok(started) => started,
        Err(expired) => {
            let status = json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {} ({})", expired.asked, expired.oldest),
                "reason": "Expired", "code": 410,
            });
            if params.expired_status {
                return crate::response::json(hyper::StatusCode::GONE, &status);
            }
            first.push(encode_event(format, "ERROR", status));
            (Vec::new(), store.closed_feed(), 0)
        }
    };
    let ended = !first.is_empty();
    for event in initial.into_iter().filter(|e| filter.matches(&e.object)) {
        first.push(encode_event(format, event.kind, event.object));
    }
    if params.initial_events && params.bookmarks {
        first.push(encode_event(
            format,
            "BOOKMARK",
            store.initial_events_end(at),
        ));
    }
    let (tx, mut rx) = mpsc::channel::<Bytes>(16);
    let gzip = params.gzip;
    tokio::spawn(async move {
        let deadline = params.timeout.map(|t| tokio::time::Instant::now() + t);
        let mut packer = Packer::new(gzip);
        let packer = &mut packer;
        let tx = &tx;
        let feed = async {
            for event in first {
                if tx.send(packer.pack(&event)).await.is_err() {
                    return;
                }
            }
            if ended {
                return;
            }
            loop {
                match events.recv().await {
                    Ok(Event {
                        kind,
                        namespace: ns,
                        object,
                        ..
                    }) if namespace.as_ref().is_none_or(|want| *want == ns)
                        && filter.matches(&object) =>
                    {
                        let event = encode_event(format, kind, object);
                        if tx.send(packer.pack(&event)).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "watcher fell behind; closing the stream");
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        };
        // Stop as soon as the client goes away, even when no event comes.
        let run = async {
            tokio::select! {
                () = feed => {}
                () = tx.closed() => {}
            }
        };
        match deadline {
            Some(deadline) => {
                let _ = tokio::time::timeout_at(deadline, run).await;
            }
            None => run.await,
        }
        if let Some(trailer) = packer.finish() {
            let _ = tx.send(trailer).await;
        }
    });
    let frames = stream::poll_fn(move |cx| {
        rx.poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok::<_, std::convert::Infallible>(Frame::data(c))))
    });
    let mut resp = Response::new(StreamBody::new(frames).boxed_unsync());
    let headers = resp.headers_mut();
    let content_type = match format {
        Format::Json => JSON,
        Format::Cbor => cbor::CBOR_SEQ,
    };
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    if gzip {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    resp
}

/// One event: a line of JSON, or one CBOR document of the sequence.
fn encode_event(format: Format, kind: &str, object: Value) -> Bytes {
    let event = json!({"type": kind, "object": object});
    match format {
        Format::Json => {
            let mut bytes = serde_json::to_vec(&event).unwrap_or_default();
            bytes.push(b'\n');
            Bytes::from(bytes)
        }
        Format::Cbor => Bytes::from(cbor::encode(&event)),
    }
}

/// Writes a stream's events as they are, or gzipped with a sync flush after each (what
/// kube-apiserver 1.37 does with a streaming list for a client that accepts gzip).
struct Packer(Option<flate2::write::GzEncoder<Vec<u8>>>);

impl Packer {
    fn new(gzip: bool) -> Packer {
        Packer(gzip.then(|| flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast())))
    }

    fn pack(&mut self, event: &Bytes) -> Bytes {
        use std::io::Write;
        match &mut self.0 {
            None => event.clone(),
            Some(encoder) => {
                let _ = encoder.write_all(event);
                let _ = encoder.flush();
                Bytes::from(std::mem::take(encoder.get_mut()))
            }
        }
    }

    /// The gzip trailer, once the stream ends.
    fn finish(&mut self) -> Option<Bytes> {
        let encoder = self.0.take()?;
        encoder.finish().ok().map(Bytes::from)
    }
}
