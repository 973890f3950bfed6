//! The request path as one ordered function, in kube-apiserver's order (the seeds'
//! `DefaultBuildHandlerChain`): 0. canonical path and one parse → 1. shutdown gate, and the
//! request's deadline (`?timeout=`) → 2. health → 3. authenticate (the audit begins) →
//! 4. impersonation → 5. API Priority and Fairness → 6. authorize → 7. where it goes
//! (resolve.rs) → 8. and 9. its places and its dispatch (dispatch.rs).

use apiagg_apis::Reason;
use apiagg_requestinfo::RequestInfo;
use pingora_error::Result;

use super::apiservice_api;
use super::classify::{classify, exempt_from_shutdown, non_canonical, Route};
use super::ctx::{RequestCtx, Session, Step};
use super::deadline;
use super::dispatch::impersonation_refused;
use super::forward::asks_impersonation;
use super::openapi::OpenApiPath;
use super::refusal::Refusal;
use super::reply::Reply;
use super::resolve::Target;
use super::service::ApiaggProxy;
use crate::auth::{AuthError, Authenticated, ConnectionIdentity};
use crate::backends::RouteTable;
use apiagg_observe::{Milestone, RouteKind};

impl ApiaggProxy {
    /// One request, in kube-apiserver's order, up to what happens to it ([`Step`]): every
    /// check returns its value or the refusal that answers the request. `Err`: the client is
    /// gone or writing an answer failed.
    pub(super) async fn route(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<Step> {
        // A Uri clone shares its bytes: no allocation on the request path.
        let uri = session.req_header().uri.clone();
        ctx.trace = super::trace::Trace::begin(self.tracer.as_ref(), session.req_header());

        // 0. CONNECT is not an API request (and would frame no body): 405, and the connection
        // closes.
        if session.req_header().method == http::Method::CONNECT {
            let message = "CONNECT is refused: apiagg proxies API requests, it tunnels nothing";
            let refusal = Refusal::new(Reason::MethodNotAllowed, message).closing();
            return Ok(Step::refused(refusal));
        }
        // Only canonical paths are routed: what apiagg routes on is what the backend sees.
        if let Some(why) = non_canonical(uri.path()) {
            let message =
                format!("the request path is refused because {why}; send its canonical form");
            return Ok(Step::refused(Refusal::bad_request(message)));
        }
        // One parse of the request: routing, authorization, deadlines, the APIService API and
        // metrics all read it; nothing below parses the path or the query again.
        let method = session.req_header().method.as_str();
        let info = match RequestInfo::new(method, uri.path(), uri.query()) {
            Ok(info) => info,
            Err(e) => return Ok(Step::refused(Refusal::bad_request(e.to_string()))),
        };
        let route = classify(&info);

        // 1. Shutdown gate: after the shutdown delay only health and metrics are served.
        if let Some(reply) = self.shutting_down(session, uri.path()) {
            return Ok(Step::Answer(RouteKind::Shutdown, reply));
        }
        // 1b. The request's deadline (kube-apiserver's `WithRequestDeadline`): a `?timeout=`
        // that does not parse is refused before anything costs a review (audited without a
        // user, as upstream audits it).
        match deadline::limit(&info, self.gateway.options.request_timeout) {
            Ok(limit) => ctx.bounds.limit_to(limit, ctx.started),
            Err(e) => {
                ctx.audit
                    .begin(&self.audit, session, ctx.started, &info, None);
                return Ok(Step::refused(Refusal::bad_request(e.to_string())));
            }
        }

        // 2. Health answers need no credentials (probes of kubelets and load balancers).
        if let Route::Health(..) = route {
            if let Some((kind, reply)) = self.served_here(session.req_header(), ctx, route) {
                return Ok(Step::Answer(kind, reply));
            }
        }

        // 3. Who the caller is: 401 Status when the credentials do not hold; the audit of the
        // request starts (3a).
        let routes = self.gateway.routes.load();
        if let Err(refusal) = self.authenticate(session, ctx, &info, &routes).await {
            return Ok(Step::refused(refusal));
        }

        // 4. Impersonation (authorization.mode: Webhook or RBAC): the caller's `Impersonate-*`
        // headers are authorized and applied before flow control classifies the request, so
        // flow control sees only an identity apiagg has authorized. Headers apiagg does not
        // honour are left for the delegate to decide, which it can only for callers whose
        // credentials it sees.
        if let Err(refusal) = self.impersonate(session, ctx, &info).await {
            ctx.audit_authorized(Some(false), "");
            return Ok(Step::refused(refusal));
        }
        let delegate_sees_caller = ctx
            .caller
            .as_ref()
            .is_none_or(Authenticated::delegate_authenticates);
        if !delegate_sees_caller && asks_impersonation(session.req_header()) {
            ctx.audit_authorized(Some(false), "");
            return Ok(Step::refused(impersonation_refused()));
        }

        // 5. API Priority and Fairness: run now, wait in a fair queue, or 429. Before
        // authorization, as kube-apiserver's chain: a flood is throttled before it costs
        // reviews at the delegate.
        if let Err(refusal) = self.admit(ctx, &info).await {
            return Ok(Step::refused(refusal));
        }

        // 6. What the caller may do: 403 Status when refused, 500 when nobody could decide.
        ctx.trace.step("authorization");
        let authorized = self.authorize(session, ctx, &info).await;
        ctx.trace.step_end();
        if let Err(refusal) = authorized {
            return Ok(Step::refused(refusal));
        }
        // Whose trace the request joins: the caller's only when it is privileged.
        ctx.trace.authorized(ctx.caller.as_ref().map(|c| &*c.user));

        // `/openapi/v2` is merged on demand: the first client after a change waits for it.
        if route == Route::OpenApi(OpenApiPath::V2) {
            self.openapi_v2_merged().await;
        }

        // 7. Where the request goes, resolved once (resolve.rs).
        match self.resolve(session.req_header(), ctx, route, &info, &routes) {
            Target::Own(kind, reply) => Ok(Step::Answer(kind, reply)),
            Target::ApiServiceApi => {
                ctx.outcome.kind = RouteKind::Own;
                // Boxed: the API's state (patches, applies, watches) stays out of every
                // request's future.
                let served = apiservice_api::serve(session, &self.gateway, &info, ctx);
                Box::pin(served).await?;
                Ok(Step::Served)
            }
            Target::Unavailable(name) => {
                let method = session.req_header().method.as_str();
                let (group, version) = (info.group, info.version);
                self.gateway.metrics.terminated(method, group, version, 503);
                // The APIService's answer too: a dead backend's 503s show in its series (its
                // error ratio, its alert).
                ctx.outcome.unavailable = Some(self.gateway.metrics.group_version(group, version));
                Ok(Step::Answer(
                    RouteKind::Proxy,
                    self.unavailable(name).into(),
                ))
            }
            // 8. and 9. (dispatch.rs)
            Target::Remote(upstream) | Target::Delegate(upstream) => {
                self.dispatch(session, ctx, upstream, &info).await
            }
            Target::Nowhere => {
                let refusal = if ctx.arrived_complete {
                    Refusal::not_found()
                } else {
                    Refusal::mux_incomplete()
                };
                Ok(Step::Answer(RouteKind::NotFound, refusal.into()))
            }
        }
    }

    /// Step 1, the one shutdown gate (k8s.io/apiserver's `WithRetryAfter` and `WithWaitGroup`):
    /// once the shutdown delay passed (upstream's `NotAcceptingNewRequest`), a request that is
    /// not exempt (health and metrics by path, kube-apiserver's own loopback by user agent) is
    /// refused and its connection closes. With `--shutdown-send-retry-after` it gets upstream's
    /// 429 (`Retry-After: 5`, `Connection: close`, its text); without, apiagg has stopped
    /// taking requests ([`Self::stopped_taking_requests`]) and one that still comes gets the
    /// 503 Status upstream's wait group answers (`Retry-After: 1`).
    fn shutting_down(&self, session: &Session, path: &str) -> Option<Reply> {
        let lifecycle = &self.gateway.lifecycle;
        if !lifecycle.reached(Milestone::Rejecting) || exempt_from_shutdown(path) {
            return None;
        }
        let agent = session.req_header().headers.get(http::header::USER_AGENT);
        let loopback = agent
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.starts_with("kube-apiserver/"));
        if loopback {
            return None;
        }
        if !self.gateway.options.send_retry_after {
            let refusal = Refusal::unavailable("apiserver is shutting down");
            return Some(refusal.retry_after_header(1).closing().into());
        }
        let message = "The apiserver is shutting down, please try again later.\n";
        let reply = Reply::text(429, message).header(http::header::RETRY_AFTER, "5");
        Some(reply.closing())
    }

    /// Whether apiagg has stopped taking requests, as kube-apiserver's HTTP server stops
    /// (`Server.Shutdown`) once the shutdown delay passed unless `--shutdown-send-retry-after`
    /// keeps it up until the drain: connections waiting for their next request close.
    pub(super) fn stopped_taking_requests(&self) -> bool {
        !self.gateway.options.send_retry_after
            && self.gateway.lifecycle.reached(Milestone::Rejecting)
    }

    /// Wakes the connections waiting for their next request once apiagg stops taking
    /// requests (never with `--shutdown-send-retry-after`): a task started by the first
    /// request, so a waiting connection has one wait, not two.
    pub(super) fn watch_stop(self: &std::sync::Arc<Self>) {
        use std::sync::atomic::Ordering::{AcqRel, Relaxed};
        if self.gateway.options.send_retry_after
            || self.stop_watched.load(Relaxed)
            || self.stop_watched.swap(true, AcqRel)
        {
            return;
        }
        let proxy = self.clone();
        tokio::spawn(async move {
            proxy.gateway.lifecycle.until(Milestone::Rejecting).await;
            proxy.closing.notify_waiters();
        });
    }

    /// Step 3: who the caller is (`ctx.caller`), and 3a: the audit of the request starts (the
    /// policy decides its level; a refused caller is audited without a user).
    async fn authenticate(
        &self,
        session: &Session,
        ctx: &mut RequestCtx,
        info: &RequestInfo<'_>,
        routes: &RouteTable,
    ) -> Result<(), Refusal> {
        let connection = session
            .digest()
            .and_then(|d| d.ssl_digest.as_ref())
            .and_then(|tls| tls.extension.get::<ConnectionIdentity>());
        ctx.trace.step("authentication");
        let started = std::time::Instant::now();
        let header = session.req_header();
        let authenticated = self
            .auth
            .authenticate(
                header.uri.path(),
                &header.headers,
                session.client_addr().and_then(|a| a.as_inet()).copied(),
                connection,
                routes.delegate.as_deref(),
                &self.gateway.clients,
            )
            .await;
        self.auth.count(&authenticated, started.elapsed());
        ctx.trace.step_end();
        match authenticated {
            Ok(caller) => {
                let user = Some(caller.user.clone());
                ctx.audit
                    .begin(&self.audit, session, ctx.started, info, user);
                ctx.caller = Some(caller);
                Ok(())
            }
            Err(why) => {
                tracing::debug!(path = header.uri.path(), "unauthenticated: {why}");
                ctx.audit
                    .begin(&self.audit, session, ctx.started, info, None);
                Err(unauthenticated(&why))
            }
        }
    }

    /// Step 5, when flow control is on: the request runs now, waits in a fair queue, or is
    /// refused (429).
    async fn admit(&self, ctx: &mut RequestCtx, info: &RequestInfo<'_>) -> Result<(), Refusal> {
        let Some(flow) = &self.flow else {
            return Ok(());
        };
        ctx.trace.step("flow-control");
        let metrics = &self.gateway.metrics;
        let running = || metrics.running(info.is_write());
        let anonymous = crate::auth::User::anonymous();
        let user = ctx.caller.as_ref().map_or(&**anonymous, |c| &*c.user);
        let admitted = (ctx.flow)
            .admit(flow, user, &mut ctx.audit, info, running)
            .await;
        ctx.trace.step_end();
        admitted
    }
}

/// The answer to a caller authentication refused: 401 saying nothing about why (as
/// kube-apiserver), or 429 with `Retry-After` when TokenReviews are rate-limited.
fn unauthenticated(why: &AuthError) -> Refusal {
    let message = if why.status() == 429 {
        why.to_string()
    } else {
        "Unauthorized".to_string()
    };
    let refusal = Refusal::with_code(why.status(), why.reason(), message);
    match why.retry_after() {
        Some(seconds) => refusal.retry_after_header(u64::from(seconds)),
        None => refusal,
    }
}
