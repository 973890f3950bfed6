//! pingora's phases for apiagg, in the order pingora calls them.

use std::time::Instant;

use apiagg_requestinfo::RequestInfo;
use async_trait::async_trait;
use bytes::Bytes;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, ErrorSource, ErrorType, Result};
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::{FailToProxy, ProxyHttp, Session};

use super::classify::{classify, exempt_from_shutdown, non_canonical, Route};
use super::reply::{self, Reply};
use super::{apiservice_api, body, deadline, errors, forward, ApiaggProxy, Deadlined, RequestCtx};
use crate::auth::ConnectionIdentity;
use apiagg_audit::AUDIT_ID_WIRE;
use apiagg_observe::{Milestone, RouteKind};

/// Why no endpoint was picked when every healthy one holds its bound of requests.
const ENDPOINTS_FULL: &str = "every endpoint has --max-requests-inflight-per-endpoint requests";

#[async_trait]
impl ProxyHttp for ApiaggProxy {
    type CTX = RequestCtx;

    /// No downstream modules: pingora's default adds a disabled compression module, built and
    /// called on every request for nothing (apiagg passes bodies as the backend sent them).
    fn init_downstream_modules(&self, _modules: &mut pingora_core::modules::http::HttpModules) {}

    /// Runs first for every request: counts it in flight and notes whether the mux was complete.
    fn new_ctx(&self) -> RequestCtx {
        self.gateway.metrics.in_flight.inc();
        RequestCtx {
            started: Instant::now(),
            arrived_complete: self.gateway.lifecycle.mux_complete(),
            kind: RouteKind::NotFound,
            upstream: None,
            endpoint: 0,
            code: 0,
            replacement: None,
            replacing: false,
            subresource: "",
            caller: None,
            own_connection: false,
            tried: 0,
            retry_same: false,
            limit: deadline::Limit::LongRunning,
            deadline: None,
            watch: None,
            watch_timeout: None,
            ended_by_us: false,
            streaming_list: false,
            backend_slot: None,
            endpoint_slot: None,
            file: None,
            seat: None,
            classified: None,
            running: None,
            audit: None,
            audit_id: None,
            audit_status: None,
            trace: None,
            _in_flight: Some(self.gateway.lifecycle.track()),
        }
    }

    /// Runs once the request head is read. `Ok(true)`: apiagg answered; `Ok(false)`: pingora
    /// proxies to `ctx.upstream`.
    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        // The head is in: the connection's head and idle deadlines stop until the answer ends;
        // pingora's own per-read keep-alive timeout gives way to them.
        if let Some(stream) = session.stream() {
            Deadlined::request_started(stream);
            if session.get_keepalive().is_some_and(|k| k != 0) {
                session.set_keepalive(Some(0));
            }
        }
        // A Uri clone shares its bytes: no allocation on the request path.
        let uri = session.req_header().uri.clone();
        self.trace_begin(session.req_header(), ctx);

        // 0. Only canonical paths are routed: what apiagg routes on is what the backend sees.
        if let Some(why) = non_canonical(uri.path()) {
            let message =
                format!("the request path is refused because {why}; send its canonical form");
            let reply = reply::failure_reply(400, "BadRequest", &message);
            return self.answer(session, ctx, RouteKind::Refused, reply).await;
        }
        // One parse of the request: routing, authorization, deadlines, the APIService API and
        // metrics all read it; nothing below parses the path or the query again.
        let info = match RequestInfo::new(
            session.req_header().method.as_str(),
            uri.path(),
            uri.query(),
        ) {
            Ok(info) => info,
            Err(e) => {
                let reply = reply::failure_reply(400, "BadRequest", &e.to_string());
                return self.answer(session, ctx, RouteKind::Refused, reply).await;
            }
        };
        let route = classify(&info);

        // 1. Shutdown gate: after the shutdown delay only health and metrics are served.
        let lifecycle = &self.gateway.lifecycle;
        if lifecycle.reached(Milestone::Rejecting) && !exempt_from_shutdown(&route) {
            let agent = session.req_header().headers.get("user-agent");
            let loopback = agent
                .and_then(|v| v.to_str().ok())
                .is_some_and(|a| a.starts_with("kube-apiserver/"));
            if !loopback {
                let reply = Reply::text(
                    429,
                    "The apiserver is shutting down, please try again later.\n",
                )
                .header(http::header::RETRY_AFTER, "5")
                .header(http::header::CONNECTION, "close");
                return self.answer(session, ctx, RouteKind::Shutdown, reply).await;
            }
        }

        // 2. Health answers need no credentials (probes of kubelets and load balancers).
        if let Route::Health(..) = route {
            if let Some((kind, reply)) = self.served_here(session.req_header(), ctx, route) {
                return self.answer(session, ctx, kind, reply).await;
            }
        }

        // 3. Who the caller is: 401 Status when the credentials do not hold.
        let routes = self.gateway.routes.load();
        let connection = session
            .digest()
            .and_then(|d| d.ssl_digest.as_ref())
            .and_then(|tls| tls.extension.get::<ConnectionIdentity>());
        ctx.trace_step("authentication");
        let authenticated = self
            .auth
            .authenticate(
                &session.req_header().headers,
                session.client_addr().and_then(|a| a.as_inet()).copied(),
                connection,
                routes.delegate.as_deref(),
                &self.gateway.clients,
            )
            .await;
        ctx.trace_step_end();
        match authenticated {
            Ok(caller) => {
                // 3a. The audit of the request starts (the policy decides its level).
                self.audit_begin(session, ctx, &info, Some(caller.user.clone()));
                ctx.caller = Some(caller);
            }
            Err(why) => {
                tracing::debug!(path = uri.path(), "unauthenticated: {why}");
                self.audit_begin(session, ctx, &info, None);
                let reply = reply::unauthenticated(&why);
                return self.answer(session, ctx, RouteKind::Refused, reply).await;
            }
        }

        // 4. Impersonation (authorization.mode: Webhook): the caller's `Impersonate-*` headers
        // are authorized and applied before flow control classifies the request, so flow
        // control sees only an identity apiagg has authorized.
        let impersonated = self.impersonate(session, ctx, &info).await;
        if let Err(reply) = impersonated {
            ctx.audit_authorized(false, "");
            return self.answer(session, ctx, RouteKind::Refused, reply).await;
        }

        // 5. API Priority and Fairness: run now, wait in a fair queue, or 429. Before
        // authorization, as kube-apiserver's chain: a flood is throttled before it costs
        // reviews at the delegate.
        if let Some(flow) = &self.flow {
            ctx.trace_step("flow-control");
            let admitted = self.admit(flow, ctx, &info).await;
            ctx.trace_step_end();
            if let Err(reply) = admitted {
                return self.answer(session, ctx, RouteKind::Refused, reply).await;
            }
        }

        // 6. What the caller may do: 403 Status when refused, 500 when nobody could decide.
        ctx.trace_step("authorization");
        let authorized = self.authorize(session, ctx, &info).await;
        ctx.trace_step_end();
        if let Err(reply) = authorized {
            ctx.audit_authorized(false, "");
            return self.answer(session, ctx, RouteKind::Refused, reply).await;
        }
        ctx.audit_authorized(true, "");
        // Whose trace the request joins: the caller's only when it is privileged.
        ctx.trace_authorized();

        // 7. What apiagg answers itself.
        if let Some((kind, reply)) = self.served_here(session.req_header(), ctx, route) {
            return self.answer(session, ctx, kind, reply).await;
        }

        // 8. The APIService API, served by apiagg itself (never by the delegate).
        if info.group_version_key() == Some(crate::apiservices::GROUP_VERSION) {
            ctx.kind = RouteKind::Own;
            // Boxed: the API's state (patches, applies, watches) stays out of every request's
            // future, which pingora moves by value on every request.
            ctx.code = Box::pin(apiservice_api::serve(session, &self.gateway, &info, ctx)).await?;
            return Ok(true);
        }

        // 9. A remote APIService: its backend (a place in its bound taken only now, by a
        // request about to be sent), or 503 while it is unavailable.
        if let Route::GroupVersion(key) = route {
            if let Some(index) = routes.registry.index_of(key) {
                if !routes.registry.entries()[index].is_delegated() {
                    return self.to_remote(session, ctx, &routes, index, &info).await;
                }
            }
        }

        // 10. Everything else is the delegate's; without one, 404 (503 before mux completion).
        self.to_delegate(session, ctx, &routes, &info).await
    }

    /// Picks a healthy endpoint of the chosen upstream (again on each retry).
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        let Some(upstream) = &ctx.upstream else {
            return Error::e_explain(ErrorType::InternalError, "no upstream selected");
        };
        let cap = ctx
            .backend_slot
            .is_some()
            .then_some(self.gateway.options.max_requests_per_endpoint);
        let picked = if std::mem::take(&mut ctx.retry_same) {
            Some(ctx.endpoint)
        } else {
            ctx.endpoint_slot = None;
            upstream.pick_untried(ctx.tried, cap)
        };
        let Some(index) = picked else {
            return Error::e_explain(ErrorType::ConnectNoRoute, "upstream has no endpoints");
        };
        if let (Some(cap), None) = (cap, &ctx.endpoint_slot) {
            match upstream.endpoints[index].health.slots.try_take(cap) {
                Some(slot) => ctx.endpoint_slot = Some(slot),
                None => return Error::e_explain(ErrorType::ConnectNoRoute, ENDPOINTS_FULL),
            }
        }
        ctx.endpoint = index;
        if index < 64 {
            ctx.tried |= 1 << index;
        }
        let endpoint = &upstream.endpoints[index];
        let mut peer = Box::new(if ctx.own_connection {
            endpoint.own_peer.clone()
        } else {
            endpoint.peer.clone()
        });
        let connect = self.gateway.options.connect_timeout;
        if !deadline::bound(&mut peer.options, connect, ctx.deadline) {
            return Error::e_explain(ErrorType::ReadTimedout, "the request deadline passed");
        }
        ctx.trace_connect();
        Ok(peer)
    }

    /// Connecting failed: eject the endpoint; retry on another healthy one (the request never
    /// reached this one). Unless apiagg itself is out of open files or memory: then nothing is
    /// ejected and the client gets a 503 saying so.
    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut RequestCtx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        ctx.trace_connect_failed(&e);
        if errors::exhausted(&e).is_some() {
            // apiagg's own exhaustion: no endpoint is to blame, and another would fail alike.
            e.set_retry(false);
        } else if let Some(upstream) = &ctx.upstream {
            errors::eject(&self.gateway.health, upstream, ctx.endpoint, &e);
            e.set_retry(upstream.has_untried(ctx.tried));
        }
        e
    }

    /// Proxying failed after connecting: eject a broken endpoint; retry only idempotent
    /// requests whose body can be replayed.
    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut RequestCtx,
        client_reused: bool,
    ) -> Box<Error> {
        ctx.trace_backend_failed(&e);
        if let (true, Some(upstream)) = (errors::endpoint_broken(&e, client_reused), &ctx.upstream)
        {
            errors::eject(&self.gateway.health, upstream, ctx.endpoint, &e);
        }
        let mut e = e.more_context(format!("Peer: {peer}"));
        if !session.req_header().method.is_idempotent() || session.as_ref().retry_buffer_truncated()
        {
            e.set_retry(false);
        } else {
            // Only a stale pooled connection is retried (the request never reached the
            // backend), on the same endpoint with a fresh connection.
            e.retry.decide_reuse(client_reused);
            // Another endpoint if there is one (this one may be going away), else a fresh
            // connection to the same.
            ctx.retry_same = e.retry()
                && !ctx
                    .upstream
                    .as_ref()
                    .is_some_and(|u| u.has_untried(ctx.tried));
        }
        e
    }

    /// Runs for each piece of the request body on its way to the backend (`end_of_stream`: no
    /// more follow); `Ok` passes the piece on. An empty last piece is dropped so the body is
    /// framed exactly once (`body.rs`, cloudflare/pingora#935).
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if let (Some(audit), Some(piece)) = (ctx.audit.as_mut(), body.as_ref()) {
            if audit.wants_request_body() {
                audit.request_body(piece);
            }
        }
        body::frame_once(body, end_of_stream);
        Ok(())
    }

    /// Applies the one header policy (`forward.rs`) to the request pingora sends upstream.
    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        // The connection is up: the backend's span starts (its context goes upstream).
        ctx.trace_backend(None);
        let Some(upstream) = &ctx.upstream else {
            return Ok(());
        };
        if let Some(seconds) = ctx.watch_timeout {
            forward::add_timeout_seconds(request, seconds)?;
        }
        if let Some(id) = super::audit::id_header(ctx) {
            // The same audit ID at the backend and the delegate (the caller's own was removed
            // or replaced: it is what apiagg audited).
            request.insert_header(AUDIT_ID_WIRE, id)?;
        }
        let forwarding = self.forwarding(session, ctx, upstream);
        let authority = &upstream.endpoints[ctx.endpoint].authority_header;
        forward::apply(request, &forwarding, authority)
    }

    /// Checks the upstream's response head: remote backends' CORS headers are dropped and
    /// answers apiagg must not pass on are replaced by a Status.
    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        self.filter_head(response, ctx)
    }

    /// Sends the replacement body instead of the upstream's, when the head was replaced; bounds
    /// a watch's writes by its deadline.
    fn response_body_filter(
        &self,
        session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<Option<std::time::Duration>> {
        if let (Some(deadline), Some(_)) = (ctx.deadline, &ctx.watch) {
            // A watch whose client stopped reading blocks in its write: the write may block
            // only until the watch's deadline, so the watch ends then whatever the reader does.
            let left = deadline.saturating_duration_since(Instant::now());
            session.set_write_timeout(Some(left.max(std::time::Duration::from_millis(1))));
        }
        self.filter_body(body, end_of_stream, ctx)
    }

    /// The request failed for good: a Status instead of pingora's empty 502, unless the client
    /// is gone or a response was already started.
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        self.fail(session, e, ctx).await
    }

    /// pingora's error line is never printed: `fail_to_proxy` logs failures itself, a client
    /// that went away (a watch closed, kubectl interrupted) at debug level, a backend failure
    /// once when it starts or changes and then once every ten seconds with a count.
    fn suppress_error_log(&self, _session: &Session, _ctx: &RequestCtx, e: &Error) -> bool {
        if e.esource() == &ErrorSource::Downstream {
            tracing::debug!("client went away: {e}");
        }
        true
    }

    /// Runs last for every request: in-flight accounting and request metrics.
    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut RequestCtx) {
        if let Some(stream) = session.stream() {
            Deadlined::answered(stream);
        }
        let code = session
            .response_written()
            .map_or(ctx.code, |r| r.status.as_u16());
        ctx.audit_complete(code);
        ctx.trace_end(code);
        ctx.seat = None;
        ctx.running = None;
        let metrics = &self.gateway.metrics;
        metrics.in_flight.dec();
        ctx._in_flight = None;
        if !self.gateway.options.request_metrics {
            return;
        }
        let seconds = ctx.started.elapsed().as_secs_f64();
        metrics.observe(ctx.kind, code, seconds);
        if ctx.kind == RouteKind::Proxy {
            if let Some(m) = ctx.upstream.as_ref().and_then(|u| u.metrics.as_ref()) {
                m.observe(code, seconds);
            }
        }
        if !ctx.subresource.is_empty() {
            metrics.observe_apiserver(ctx.subresource, code, seconds);
        }
    }
}
