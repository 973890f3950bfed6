//! The server side on pingora-core: pingora's `Server`, listeners, TLS and HTTP sessions hand
//! apiagg each request (a request of an HTTP/1.1 connection, or an HTTP/2 stream); apiagg reads
//! its head, runs the ordered request path (phases.rs), forwards it (proxy.rs) or answers it,
//! records it, and gives a reusable HTTP/1.1 connection back for its next request.
//!
//! The future of a request is what an idle HTTP/2 stream (a watch) holds for its whole life:
//! the rare, large branches (connecting, the upgrade tunnel, the streaming-list emulation, the
//! APIService API) are boxed where they start, so they do not size it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use pingora_core::apps::{
    HttpPersistentSettings, HttpServerApp, HttpServerOptions, ReusedHttpStream,
};
use pingora_core::protocols::http::v2::server::{default_h2_options, H2Options};
use pingora_core::server::ShutdownWatch;

use super::ctx::{RequestCtx, Session, Step};
use super::forward::MAX_H2_HEADER_LIST;
use super::head;
use super::service::ApiaggProxy;
use crate::deadlines::Deadlined;
use apiagg_observe::RouteKind;

/// Streams an HTTP/2 client may open at once on one connection (kube-apiserver's 250).
const MAX_STREAMS_PER_CONNECTION: u32 = 250;

#[async_trait]
impl HttpServerApp for ApiaggProxy {
    // Written out rather than `async fn`: the request's future then holds the session once
    // (an `async fn` argument is stored twice, rust-lang/rust#62958), and pingora boxes (copies)
    // this future for every request.
    fn process_new_http<'life0, 'life1, 'async_trait>(
        self: &'life0 Arc<Self>,
        mut session: Session,
        shutdown: &'life1 ShutdownWatch,
    ) -> Pin<Box<dyn Future<Output = Option<ReusedHttpStream>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            // A connection waiting for its next request is let go once the server stops listening,
            // or stops taking requests at shutdown (phases.rs, step 1: one that arrives after
            // that is read and refused there).
            // One wait serves both: `closing` is also woken when apiagg stops taking requests
            // (`watch_stop`).
            self.watch_stop();
            let closing = self.closing.notified();
            if self.closed.load(Ordering::Acquire) {
                return None;
            }
            let read = tokio::select! {
                biased;
                read = session.read_request() => read,
                () = closing => return None,
            };
            match read {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    // A head pingora cannot read gets a 431 naming the limit it passed, or a
                    // 400, and the connection closes; anything else is a connection that broke
                    // (head.rs). Boxed: it is rare, and lingers with a buffer of its own.
                    Box::pin(head::refuse(session, &e)).await;
                    return None;
                }
            }
            // The head is in: the connection's head and idle deadlines stop until the answer ends.
            if let Some(stream) = session.stream() {
                Deadlined::request_started(stream);
            }
            if *shutdown.borrow() {
                session.set_keepalive(None);
            } else if session.get_keepalive().is_some_and(|k| k != 0) {
                // pingora's own per-read keep-alive timeout gives way to apiagg's idle deadline.
                session.set_keepalive(Some(0));
            }
            // The request's state ends before the connection is finished (its future then holds
            // only what finishing needs).
            let failed = {
                let mut ctx = self.new_ctx();
                let outcome = match self.route(&mut session, &mut ctx).await {
                    Ok(Step::Answer(kind, reply)) => {
                        ctx.outcome.kind = kind;
                        ctx.answer(&mut session, reply).await
                    }
                    Ok(Step::Forward(dispatch)) => {
                        self.forward(&mut session, &mut ctx, dispatch).await
                    }
                    Ok(Step::Tunnel(dispatch)) => {
                        self.tunnel(&mut session, &mut ctx, dispatch).await
                    }
                    Ok(Step::Served) => Ok(()),
                    Err(e) => Err(e),
                };
                let failed = outcome.is_err();
                if let Err(e) = outcome {
                    self.fail(&mut session, &e, &mut ctx).await;
                    session.on_proxy_failure(e);
                }
                self.record(&session, &mut ctx);
                failed
            };
            if let Some(stream) = session.stream() {
                Deadlined::answered(stream);
            }
            if failed {
                return None;
            }
            if self.stopped_taking_requests() {
                // As Go's `Server.Shutdown`: no request after this one on the connection.
                session.set_keepalive(None);
            }
            let settings = HttpPersistentSettings::for_session(&session);
            // Boxed: finishing (draining what the client sent and nobody read) is a large future.
            match Box::pin(session.finish()).await {
                Ok(Some(stream)) => Some(ReusedHttpStream::from_reusable_stream(stream, settings)),
                _ => None,
            }
        })
    }

    fn server_options(&self) -> Option<&HttpServerOptions> {
        Some(&self.server_options)
    }

    /// HTTP/2 as kube-apiserver serves it: 250 streams per connection (Go's default, which
    /// `--http2-max-streams-per-connection` keeps), so a client-go process holds its watches on
    /// as few connections there as here. Header lists of at most 64 KiB each (pingora's bound,
    /// stated here because the forwarded head's bound counts on it: forward/size.rs).
    fn h2_options(&self) -> Option<H2Options> {
        let mut options = default_h2_options();
        options.max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
        options.max_header_list_size(MAX_H2_HEADER_LIST);
        Some(options)
    }

    /// The server stopped listening: connections waiting for another request close.
    async fn http_cleanup(&self) {
        self.closed.store(true, Ordering::Release);
        self.closing.notify_waiters();
    }
}

impl ApiaggProxy {
    /// Per-request state of a request whose head was just read: counted in flight, and
    /// noting whether the mux was complete.
    fn new_ctx(&self) -> RequestCtx {
        self.gateway.metrics.in_flight.inc();
        RequestCtx {
            started: Instant::now(),
            arrived_complete: self.gateway.lifecycle.mux_complete(),
            caller: None,
            outcome: Default::default(),
            bounds: Default::default(),
            flow: Default::default(),
            audit: Default::default(),
            trace: Default::default(),
            resume: None,
            in_flight: Some(self.gateway.lifecycle.track()),
        }
    }

    /// The end of every request: its audit and span end, its seat goes back, and its metrics
    /// are recorded.
    fn record(&self, session: &Session, ctx: &mut RequestCtx) {
        let code = session
            .response_written()
            .map_or(ctx.outcome.code, |r| r.status.as_u16());
        ctx.audit.complete(code);
        let audit_id = ctx.audit.id_header();
        let route = ctx.outcome.kind.as_str();
        ctx.trace
            .end(code, route, ctx.outcome.upstream().map(|u| &**u), audit_id);
        ctx.flow.end();
        let metrics = &self.gateway.metrics;
        metrics.in_flight.dec();
        ctx.in_flight = None;
        if !self.gateway.options.request_metrics {
            return;
        }
        let seconds = ctx.started.elapsed().as_secs_f64();
        metrics.observe(ctx.outcome.kind, code, seconds);
        if ctx.outcome.kind == RouteKind::Proxy {
            if let Some(series) = ctx.outcome.series() {
                series.observe(code, seconds);
            }
        }
        if !ctx.outcome.subresource.is_empty() {
            metrics.observe_apiserver(ctx.outcome.subresource, code, seconds);
        }
    }
}
