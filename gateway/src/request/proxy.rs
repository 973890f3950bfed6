//! The forwarding loop: a request for its dispatch's backend goes to one of its healthy
//! endpoints over a pooled connection (pingora-core's connectors), its answer comes back piece
//! by piece, and a failure before anything reached the backend is retried once elsewhere.
//!
//! - Endpoints: a healthy one not tried yet, within `--max-requests-inflight-per-endpoint` when
//!   the backend is bounded; one that refuses connections is ejected (the availability
//!   controller publishes it), unless apiagg itself is out of open files or memory.
//! - Retries: only idempotent requests, only with a body that can be sent again (pingora keeps
//!   up to 64 KiB of it), at most once, and only before the answer's head: where connecting
//!   failed, a pooled connection turned out stale, the connection or HTTP/2 stream died (a
//!   GOAWAY's refused stream), or the endpoint was ejected while the request waited (it went
//!   silent). Never twice on one endpoint, but for a new connection after a dead pooled one.
//! - Bodies stream both ways with back-pressure: each piece is written before the next is read.

use std::time::Duration;

use bytes::Bytes;
use pingora_core::protocols::http::client::HttpSession as BackendSession;
use pingora_error::{Error, ErrorType, Result};
use pingora_http::RequestHeader;

use super::attempts::Attempts;
use super::backend::Backend;
use super::ctx::{Dispatch, RequestCtx, Session};
use super::service::ApiaggProxy;
use super::{deadline, errors, forward, framing, resume};
use crate::backends::H1Client;
use apiagg_audit::AUDIT_ID_HEADER;

/// A request's endpoint was ejected before it answered (first_head).
const ENDPOINT_EJECTED: ErrorType = ErrorType::Custom("EndpointEjected");

/// Attempts beyond the first, at most (never twice on one endpoint unless its pooled connection
/// was stale).
const RETRIES: u8 = 1;

/// More attempts for a request the backend refused unprocessed (`errors::refused_unprocessed`):
/// a backend rolling its HTTP/2 connections with GOAWAY may refuse it on the next one too.
const REFUSED_RETRIES: u8 = 3;

impl ApiaggProxy {
    /// Forwards the request as `dispatch` says and streams the answer back. `Err`: the request
    /// failed for good (the caller answers with a Status when nothing was written yet).
    pub(super) async fn forward(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        dispatch: Dispatch,
    ) -> Result<()> {
        ctx.outcome.sent_to(&dispatch.upstream);
        let mut attempts = Attempts::new(dispatch.upstream.clone(), dispatch.own_connection());
        let has_body = !session.is_body_empty();
        if has_body && session.req_header().method.is_idempotent() {
            session.enable_retry_buffering();
        }
        let mut retries = 0;
        loop {
            let left = self.pick_endpoint(ctx, &mut attempts)?;
            let (mut backend, reused) = match self.connect(&attempts, left).await {
                Ok(connected) => connected,
                Err(e) => {
                    let e = self.fail_to_connect(ctx, &mut attempts, e);
                    if e.retry() && retries < RETRIES {
                        retries += 1;
                        continue;
                    }
                    return Err(e);
                }
            };
            // The deadline bounds the whole exchange (the client's body, informational heads,
            // the answer), as kube-apiserver's request context ends the proxied round trip: a
            // body sent one byte at a time no longer keeps its seat. A watch is cut at its own
            // deadline (relay_answer); each of its reads and writes is bounded by it. A pooled
            // connection keeps the timeouts of its last request: they are set every time.
            let whole = ctx.bounds.deadline.filter(|_| ctx.bounds.watch.is_none());
            let each = if whole.is_some() { None } else { left };
            backend.set_timeouts(each, each);
            let replay = (retries > 0).then(|| session.get_retry_buffer()).flatten();
            let exchange = self.exchange(
                session,
                ctx,
                (&dispatch, &mut attempts),
                &mut backend,
                (has_body, replay),
            );
            let exchanged = match whole {
                Some(deadline) => tokio::time::timeout_at(deadline.into(), exchange)
                    .await
                    .unwrap_or_else(|_| {
                        Error::e_explain(ErrorType::ReadTimedout, "the request deadline passed")
                    }),
                None => exchange.await,
            };
            match exchanged {
                Ok(true) => {
                    self.release(&attempts, backend);
                    return Ok(());
                }
                Ok(false) => {
                    backend.shutdown().await;
                    return Ok(());
                }
                Err(e) => {
                    backend.shutdown().await;
                    let e = self.error_while_proxy(session, e, ctx, &mut attempts, reused);
                    let budget = if errors::refused_unprocessed(&e) {
                        RETRIES + REFUSED_RETRIES
                    } else {
                        RETRIES
                    };
                    if e.retry() && retries < budget && session.response_written().is_none() {
                        retries += 1;
                        continue;
                    }
                    if self.resumes(ctx, &mut attempts, &e) {
                        continue; // a watch whose API server died goes on elsewhere
                    }
                    return Err(e);
                }
            }
        }
    }

    /// A connection to the picked endpoint: a multiplexed HTTP/2 one with a free stream, an
    /// idle HTTP/1.1 one from the endpoint's pool, or a new one (`true`: reused).
    async fn connect(
        &self,
        attempts: &Attempts,
        left: Option<Duration>,
    ) -> Result<(Backend, bool)> {
        let (Some(endpoint), Some(pool), Some(template)) =
            (attempts.current(), attempts.idle_pool(), attempts.peer())
        else {
            return Error::e_explain(ErrorType::InternalError, "no endpoint picked");
        };
        let h2 = template.options.alpn.get_max_http_version() == 2;
        if h2 {
            // The endpoint's template has the reuse key of the request's peer (timeouts are
            // not in it).
            if let Some(stream) = self.connector.reused_http_session(template).await? {
                return Ok((Backend::H2(stream), true));
            }
        }
        if let Some(stream) = pool.take() {
            return Ok((Backend::H1(H1Client::new(stream)), true));
        }
        // Boxed: connecting (TCP, TLS, the HTTP/2 handshake) and its peer are the rare, large
        // branch.
        let connected = Box::pin(async {
            // The template bounded by the connect timeout and the deadline.
            let mut peer = template.clone();
            let connect = self.gateway.options.connect_timeout;
            deadline::bound(&mut peer.options, connect, left);
            let peer = &peer;
            if h2 {
                // One new HTTP/2 connection at a time per endpoint: requests arriving together
                // (a burst of watches) wait for it and share its streams.
                let _connecting = endpoint.connecting.lock().await;
                if let Some(stream) = self.connector.reused_http_session(peer).await? {
                    return Ok((Backend::H2(stream), true));
                }
                match self.connector.new_http_session::<_, ()>(peer).await? {
                    BackendSession::H2(stream) => return Ok((Backend::H2(stream), false)),
                    BackendSession::H1(h1) => {
                        // ALPN settled on HTTP/1.1: the connection is apiagg's to speak.
                        return Ok((Backend::H1(H1Client::new(h1.into_inner())), false));
                    }
                    BackendSession::Custom(_) => {
                        return Error::e_explain(ErrorType::InternalError, "custom session")
                    }
                }
            }
            let stream = self.connector.transport().new_stream(peer).await?;
            Ok((Backend::H1(H1Client::new(stream)), false))
        });
        connected.await
    }

    /// Gives back a connection whose exchange completed: an HTTP/1.1 one to its endpoint's pool
    /// (when both sides keep it and its answer was read to its end), an HTTP/2 stream to its
    /// connection.
    fn release(&self, attempts: &Attempts, backend: Backend) {
        match backend {
            Backend::H1(h1) => {
                if let (true, Some(pool)) = (h1.reusable(), attempts.idle_pool()) {
                    pool.put(h1.into_inner());
                }
            }
            Backend::H2(h2) => {
                if let Some(peer) = attempts.peer() {
                    let idle = peer.options.idle_timeout;
                    self.connector.release_http_session(h2, peer, idle);
                }
            }
        }
    }

    /// One attempt on a connected backend: the request head and body, then the answer.
    /// `Ok(true)`: the backend connection may carry another request.
    async fn exchange(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        (dispatch, attempts): (&Dispatch, &mut Attempts),
        backend: &mut Backend,
        (has_body, replay): (bool, Option<Bytes>),
    ) -> Result<bool> {
        // The connection is up: the backend's span starts (its context goes upstream).
        ctx.trace
            .backend(&attempts.upstream, Some(attempts.endpoint));
        let head =
            self.backend_request(session, ctx, dispatch, attempts.endpoint, backend, has_body)?;
        backend.write_request_header(head).await?;
        if has_body {
            self.send_body(session, ctx, backend, replay).await?;
        }
        backend.finish_request_body().await?;
        first_head(session, attempts, backend).await?;
        attempts.answered = true;
        self.relay_answer(session, ctx, backend).await
    }

    /// The head the backend gets: the client's, under the one header policy (forward.rs), framed
    /// for the backend's protocol.
    fn backend_request(
        &self,
        session: &Session,
        ctx: &RequestCtx,
        dispatch: &Dispatch,
        endpoint: usize,
        backend: &Backend,
        has_body: bool,
    ) -> Result<Box<RequestHeader>> {
        let h2 = backend.is_h2();
        let forwarding = self.forwarding(session, ctx, dispatch);
        let Some(endpoint) = dispatch.upstream.endpoints.get(endpoint) else {
            return Error::e_explain(ErrorType::InternalError, "no endpoint picked");
        };
        let mut request = forward::forwarded_head(
            session.req_header(),
            &forwarding,
            &endpoint.authority_header,
        )?;
        if let Some(seconds) = ctx.bounds.watch_timeout {
            forward::add_timeout_seconds(&mut request, seconds)?;
        }
        resume::retarget(ctx.resume.as_deref(), &mut request)?;
        if let Some(id) = ctx.audit.id_header() {
            // The same audit ID at the backend and the delegate (the caller's own was removed
            // or replaced: it is what apiagg audited).
            request.insert_header(AUDIT_ID_HEADER, id)?;
        }
        if h2 {
            framing::h2_target(&mut request, endpoint.tls, &endpoint.authority_header)?;
        } else {
            framing::h1_framing(&mut request, has_body)?;
        }
        Ok(request)
    }

    /// The request body, piece by piece (after what a retry replays): recorded for the audit,
    /// each piece written before the next is read. An empty last piece is no piece: the body is
    /// framed exactly once (cloudflare/pingora#935).
    async fn send_body(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        backend: &mut Backend,
        replay: Option<Bytes>,
    ) -> Result<()> {
        if let Some(replayed) = replay.filter(|b| !b.is_empty()) {
            backend.write_request_body(replayed).await?;
        } else if framing::expects_continue(session.req_header()) && !session.is_http2() {
            // The `Expect` header stays here: apiagg asks for the body itself.
            session
                .write_continue_response()
                .await
                .map_err(|e| e.into_down())?;
        }
        while let Some(piece) = session
            .read_request_body()
            .await
            .map_err(|e| e.into_down())?
        {
            if piece.is_empty() {
                continue;
            }
            ctx.audit.request_body(&piece);
            backend.write_request_body(piece).await?;
        }
        Ok(())
    }

    /// Picks a healthy endpoint of the chosen upstream (again on each retry); returns the time
    /// left to the request's deadline (`None`: it has none), an error when it passed.
    fn pick_endpoint(
        &self,
        ctx: &mut RequestCtx,
        attempts: &mut Attempts,
    ) -> Result<Option<Duration>> {
        let cap = ctx
            .bounds
            .backend_slot
            .is_some()
            .then_some(self.gateway.options.max_requests_per_endpoint);
        attempts.pick(cap)?;
        if let Some((_, endpoint)) = ctx.outcome.backend.as_mut() {
            *endpoint = attempts.endpoint;
        }
        let left = deadline::left(ctx.bounds.deadline)?;
        ctx.trace.connect(&attempts.upstream, attempts.endpoint);
        Ok(left)
    }

    /// Connecting failed: eject the endpoint; retry on another healthy one (the request never
    /// reached this one). Unless apiagg itself is out of open files or memory: then nothing is
    /// ejected and the client gets a 503 saying so.
    fn fail_to_connect(
        &self,
        ctx: &mut RequestCtx,
        attempts: &mut Attempts,
        mut e: Box<Error>,
    ) -> Box<Error> {
        ctx.trace.connect_failed(&e);
        if errors::exhausted(&e).is_some() {
            // apiagg's own exhaustion: no endpoint is to blame, and another would fail alike.
            e.set_retry(false);
        } else {
            let health = &self.gateway.health;
            errors::eject(health, &attempts.upstream, attempts.endpoint, &e);
            e.set_retry(attempts.has_untried());
        }
        e
    }

    /// Proxying failed after connecting: eject a broken endpoint; retry only idempotent
    /// requests whose body can be replayed, and only when the request never reached the
    /// backend (a stale pooled connection).
    fn error_while_proxy(
        &self,
        session: &Session,
        e: Box<Error>,
        ctx: &mut RequestCtx,
        attempts: &mut Attempts,
        reused: bool,
    ) -> Box<Error> {
        ctx.trace.backend_failed(&e);
        if errors::endpoint_broken(&e, reused) {
            let health = &self.gateway.health;
            errors::eject(health, &attempts.upstream, attempts.endpoint, &e);
        }
        let url = attempts
            .current()
            .map_or("", |endpoint| endpoint.url.as_str());
        let mut e = e.more_context(format!("Endpoint: {url}"));
        // pingora's own verdict: a stale pooled connection is retried (the request never
        // reached the backend).
        e.retry.decide_reuse(reused);
        let next = errors::after_exchange(&errors::Exchanged {
            movable: movable(session),
            from_backend: e.esource() == &pingora_error::ErrorSource::Upstream,
            retryable: e.retry(),
            lost_unanswered: !attempts.answered && connection_lost(&e),
            reused,
            untried: attempts.has_untried(),
        });
        e.set_retry(next.again);
        attempts.retry_same = next.same_endpoint;
        e
    }
}

/// Whether `e` says the connection (or the HTTP/2 stream) died or its endpoint was ejected,
/// rather than timed out or carried something malformed.
fn connection_lost(e: &Error) -> bool {
    errors::connection_died(e) || e.etype() == &ENDPOINT_EJECTED
}

/// Whether the request may be sent again: idempotent, with a body that can be replayed.
fn movable(session: &Session) -> bool {
    session.req_header().method.is_idempotent() && !session.retry_buffer_truncated()
}

/// Waits for the backend's first response head. A request that may be sent again stops waiting
/// when its endpoint is ejected meanwhile (it went silent: its probes time out, kubernetes#141318)
/// while another endpoint is healthy, and fails with [`ENDPOINT_EJECTED`] to be retried there.
async fn first_head(session: &Session, attempts: &Attempts, backend: &mut Backend) -> Result<()> {
    let endpoint = attempts.current().filter(|_| movable(session));
    let mut read = std::pin::pin!(backend.read_response_header());
    if let Some(endpoint) = endpoint {
        // Registered before the health is read: an ejection in between is not missed.
        let ejected = endpoint.health.ejected();
        if endpoint.health.is_healthy() {
            tokio::select! {
                biased;
                read = &mut read => return read,
                () = ejected => {
                    if attempts.has_untried() {
                        let e = Error::explain(
                            ENDPOINT_EJECTED,
                            "the endpoint was ejected while the request waited for its answer",
                        );
                        return Err(e.into_up());
                    }
                }
            }
        }
    }
    read.await
}
