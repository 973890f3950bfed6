//! Watch streams: newline-delimited JSON events over a chunked response, or with `Accept:
//! application/cbor` a CBOR sequence (`application/cbor-seq`) of the same events.
//!
//! The stream starts with an `ADDED` event for every existing object whose
//! resourceVersion is greater than the `resourceVersion` query parameter (all of
//! them when it is absent or `0`), then follows live `ADDED`/`DELETED` events.
//! It ends after `timeoutSeconds`, when the client goes away, or when the watcher
//! falls more than 1024 events behind (the client should re-list).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::Response;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};

use crate::cbor::{self, Format};
use crate::response::{Body, JSON};
use crate::selector::Selector;
use crate::store::Store;

/// Query parameters of a watch.
#[derive(Debug, Default)]
pub struct WatchParams {
    pub resource_version: u64,
    pub timeout: Option<Duration>,
    /// Only objects whose labels match are sent.
    pub selector: Selector,
    /// JSON lines, or a CBOR sequence (`application/cbor-seq`).
    pub format: Format,
}

/// Starts a watch of `namespace` (all namespaces when `None`).
pub fn respond(
    store: &Arc<Store>,
    namespace: Option<String>,
    params: WatchParams,
) -> Response<Body> {
    let (mut initial, mut events) = store.watch(namespace.as_deref(), params.resource_version);
    let (selector, format) = (params.selector, params.format);
    initial.retain(|o| selector.matches(o));
    let (tx, mut rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let deadline = params.timeout.map(|t| tokio::time::Instant::now() + t);
        let feed = async {
            for object in initial {
                if tx
                    .send(encode_event(format, "ADDED", object))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            loop {
                match events.recv().await {
                    Ok(event)
                        if namespace.as_ref().is_none_or(|ns| *ns == event.namespace)
                            && selector.matches(&event.object) =>
                    {
                        if tx
                            .send(encode_event(format, event.kind, event.object))
                            .await
                            .is_err()
                        {
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
