//! `--goaway-chance`, as kube-apiserver's flag: after the answer to an HTTP/2 request, with
//! this chance, the connection is sent a graceful GOAWAY, so clients that hold one connection
//! for hours (client-go) reconnect, and a load balancer in front of several replicas spreads
//! them again. Never for a watch (its stream outlives the answer's head; GOAWAY would not end
//! it) nor for CONNECT; streams already open finish, and the client opens a new connection
//! for its next request. No request is lost: GOAWAY is graceful (RFC 9113 §6.8).
//!
//! With a chance of 0 (the default) connections are served by pingora's own HTTP/2 loop; with
//! a chance, by [`Goaway`]'s, which is pingora's public parts put together in the same order
//! (handshake, accept loop, one task per stream, graceful shutdown at the process's, idle
//! timeout, a bound on rejected streams) plus the GOAWAY after a chosen answer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::apps::{HttpServerApp, ServerApp};
use pingora_core::protocols::http::v2::server::{self as h2server, H2Accept, HttpSession};
use pingora_core::protocols::http::ServerSession;
use pingora_core::protocols::{Digest, Stream, ALPN};
use pingora_core::server::ShutdownWatch;
use prometheus::IntCounter;
use tokio::sync::{mpsc, Notify};

/// kube-apiserver's upper bound of `--goaway-chance`.
pub const MAX_CHANCE: f64 = 0.02;

/// Rejected streams after which a connection is closed (pingora's own loop allows as many).
const MAX_REJECTED_STREAMS: usize = 32;

/// An HTTP server app whose HTTP/2 connections get a GOAWAY after an answer, by chance.
pub struct Goaway<A> {
    inner: Arc<A>,
    chance: f64,
    /// `apiagg_goaway_sent_total`.
    sent: IntCounter,
}

impl<A> Goaway<A> {
    /// `inner`, with `chance` in `[0, MAX_CHANCE]` (checked by the flag).
    pub fn new(inner: A, chance: f64, registry: &prometheus::Registry) -> prometheus::Result<Self> {
        let sent = IntCounter::new(
            "apiagg_goaway_sent_total",
            "HTTP/2 connections sent a graceful GOAWAY after an answer (--goaway-chance).",
        )?;
        registry.register(Box::new(sent.clone()))?;
        Ok(Goaway {
            inner: Arc::new(inner),
            chance,
            sent,
        })
    }
}

/// Whether a request may be followed by GOAWAY: not a watch, not CONNECT.
fn eligible(head: &pingora_http::RequestHeader) -> bool {
    if head.method == http::Method::CONNECT {
        return false;
    }
    let path = head.uri.path();
    if path.starts_with("/api/") && path.contains("/watch/")
        || path.starts_with("/apis/") && path.contains("/watch/")
    {
        return false;
    }
    let query = apiagg_requestinfo::QueryParams::parse(head.uri.query().unwrap_or_default());
    !query.watch()
}

/// Open streams of one connection, and a wake-up when the last one ends.
#[derive(Default)]
struct Active {
    count: AtomicUsize,
    /// Streams opened so far: an idle period is one in which this did not change.
    opened: AtomicUsize,
    idle: Notify,
}

impl Active {
    async fn until_idle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// Counts a stream open until dropped.
struct Open(Arc<Active>);

impl Drop for Open {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl<A: HttpServerApp + Send + Sync + 'static> Goaway<A> {
    /// Serves an HTTP/2 connection until it closes.
    async fn serve_h2(&self, stream: Stream, shutdown: &ShutdownWatch) {
        let digest = Arc::new(Digest {
            ssl_digest: stream.get_ssl_digest(),
            timing_digest: stream.get_timing_digest(),
            proxy_digest: stream.get_proxy_digest(),
            socket_digest: stream.get_socket_digest(),
        });
        let mut conn = match h2server::handshake(stream, self.inner.h2_options()).await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::debug!("HTTP/2 handshake with a client failed: {e}");
                return;
            }
        };
        let idle_timeout = self
            .inner
            .server_options()
            .and_then(|options| options.h2_idle_timeout);
        let active = Arc::new(Active::default());
        let (chosen_tx, mut chosen) = mpsc::unbounded_channel::<()>();
        let mut shutdown = shutdown.clone();
        let mut closing = false;
        let mut rejected = 0;
        loop {
            let accepted = tokio::select! {
                biased;
                _ = shutdown.changed(), if !closing => {
                    conn.graceful_shutdown();
                    closing = true;
                    continue;
                }
                Some(()) = chosen.recv(), if !closing => {
                    conn.graceful_shutdown();
                    closing = true;
                    self.sent.inc();
                    continue;
                }
                accepted = HttpSession::from_h2_conn(&mut conn, digest.clone()) => accepted,
                () = idle(&active, idle_timeout), if idle_timeout.is_some() => return,
            };
            let session = match accepted {
                Err(e) => {
                    tracing::debug!("HTTP/2 connection ended: {e}");
                    return;
                }
                Ok(None) => return,
                Ok(Some(H2Accept::Rejected)) => {
                    rejected += 1;
                    if rejected >= MAX_REJECTED_STREAMS {
                        tracing::debug!(
                            "HTTP/2 connection closed after {rejected} rejected streams"
                        );
                        return;
                    }
                    continue;
                }
                Ok(Some(H2Accept::Session(session))) => session,
            };
            let goaway =
                !closing && eligible(session.req_header()) && fastrand::f64() < self.chance;
            active.count.fetch_add(1, Ordering::AcqRel);
            active.opened.fetch_add(1, Ordering::AcqRel);
            let open = Open(active.clone());
            let app = self.inner.clone();
            let shutdown = shutdown.clone();
            let chosen = chosen_tx.clone();
            tokio::spawn(async move {
                let _open = open;
                app.process_new_http(ServerSession::new_http2(session), &shutdown)
                    .await;
                if goaway {
                    let _ = chosen.send(());
                }
            });
        }
    }
}

/// Returns once the connection has had no open stream for `timeout`.
async fn idle(active: &Active, timeout: Option<Duration>) {
    loop {
        active.until_idle().await;
        let opened = active.opened.load(Ordering::Acquire);
        tokio::time::sleep(timeout.unwrap_or_default()).await;
        let quiet = active.opened.load(Ordering::Acquire) == opened;
        if quiet && active.count.load(Ordering::Acquire) == 0 {
            return;
        }
    }
}

#[async_trait]
impl<A: HttpServerApp + Send + Sync + 'static> ServerApp for Goaway<A> {
    async fn process_new(
        self: &Arc<Self>,
        stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let h2 = matches!(stream.selected_alpn_proto(), Some(ALPN::H2));
        if self.chance <= 0.0 || !h2 {
            return ServerApp::process_new(&self.inner, stream, shutdown).await;
        }
        self.serve_h2(stream, shutdown).await;
        None
    }

    async fn cleanup(&self) {
        ServerApp::cleanup(&*self.inner).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, uri: &str) -> pingora_http::RequestHeader {
        let method = http::Method::from_bytes(method.as_bytes()).expect("method");
        pingora_http::RequestHeader::build(method, uri.as_bytes(), None).expect("head")
    }

    #[test]
    fn watches_and_connect_never_get_a_goaway() {
        for (method, uri) in [
            (
                "GET",
                "/apis/wardle.example.com/v1alpha1/flunders?watch=true",
            ),
            ("GET", "/api/v1/pods?watch=1&resourceVersion=5"),
            ("GET", "/api/v1/watch/namespaces/a/pods"),
            ("GET", "/apis/g/v1/watch/things"),
            ("CONNECT", "/api/v1/namespaces/a/pods/p/exec"),
        ] {
            assert!(!eligible(&head(method, uri)), "{method} {uri}");
        }
        for (method, uri) in [
            (
                "GET",
                "/apis/wardle.example.com/v1alpha1/flunders?watch=false",
            ),
            ("GET", "/api/v1/pods?limit=500"),
            ("POST", "/apis/g/v1/namespaces/a/things"),
            ("GET", "/version"),
        ] {
            assert!(eligible(&head(method, uri)), "{method} {uri}");
        }
    }
}
