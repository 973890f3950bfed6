//! The request path as one ordered function, in kube-apiserver's order (the seeds'
//! `DefaultBuildHandlerChain`): canonical path and one parse → shutdown gate → health →
//! authenticate (the audit begins) → impersonation → API Priority and Fairness → authorize →
//! what apiagg answers itself | the APIService API | a remote APIService | the delegate.

use std::sync::Arc;

use apiagg_requestinfo::RequestInfo;
use pingora_error::Result;

use super::classify::{classify, exempt_from_shutdown, non_canonical, Route};
use super::openapi::OpenApiPath;
use super::reply::{self, Reply};
use super::{apiservice_api, ApiaggProxy, RequestCtx, Session, Step};
use crate::auth::ConnectionIdentity;
use crate::backends::{RouteTable, Upstream};
use apiagg_observe::{Milestone, RouteKind};

impl ApiaggProxy {
    /// One request, in kube-apiserver's order, up to what happens to it ([`Step`]): every
    /// check returns its value or the answer that refuses the request. `Err`: the client is
    /// gone or writing an answer failed.
    pub(super) async fn route(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<Step> {
        // A Uri clone shares its bytes: no allocation on the request path.
        let uri = session.req_header().uri.clone();
        self.trace_begin(session.req_header(), ctx);

        // 0. CONNECT is not an API request (and would frame no body): 405, and the connection
        // closes.
        if session.req_header().method == http::Method::CONNECT {
            session.set_keepalive(None);
            let message = "CONNECT is refused: apiagg proxies API requests, it tunnels nothing";
            let reply = reply::failure_reply(405, "MethodNotAllowed", message);
            return Ok(Step::Answer(RouteKind::Refused, reply));
        }
        // Only canonical paths are routed: what apiagg routes on is what the backend sees.
        if let Some(why) = non_canonical(uri.path()) {
            let message =
                format!("the request path is refused because {why}; send its canonical form");
            let reply = reply::failure_reply(400, "BadRequest", &message);
            return Ok(Step::Answer(RouteKind::Refused, reply));
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
                return Ok(Step::Answer(RouteKind::Refused, reply));
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
                return Ok(Step::Answer(RouteKind::Shutdown, reply));
            }
        }

        // 2. Health answers need no credentials (probes of kubelets and load balancers).
        if let Route::Health(..) = route {
            if let Some((kind, reply)) = self.served_here(session.req_header(), ctx, route) {
                return Ok(Step::Answer(kind, reply));
            }
        }

        // 3. Who the caller is: 401 Status when the credentials do not hold.
        let routes = self.gateway.routes.load();
        let connection = session
            .digest()
            .and_then(|d| d.ssl_digest.as_ref())
            .and_then(|tls| tls.extension.get::<ConnectionIdentity>());
        ctx.trace_step("authentication");
        let started = std::time::Instant::now();
        let authenticated = self
            .auth
            .authenticate(
                uri.path(),
                &session.req_header().headers,
                session.client_addr().and_then(|a| a.as_inet()).copied(),
                connection,
                routes.delegate.as_deref(),
                &self.gateway.clients,
            )
            .await;
        self.auth.count(&authenticated, started.elapsed());
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
                return Ok(Step::Answer(RouteKind::Refused, reply));
            }
        }

        // 4. Impersonation (authorization.mode: Webhook): the caller's `Impersonate-*` headers
        // are authorized and applied before flow control classifies the request, so flow
        // control sees only an identity apiagg has authorized.
        let impersonated = self.impersonate(session, ctx, &info).await;
        if let Err(reply) = impersonated {
            ctx.audit_authorized(Some(false), "");
            return Ok(Step::Answer(RouteKind::Refused, reply));
        }

        // 5. API Priority and Fairness: run now, wait in a fair queue, or 429. Before
        // authorization, as kube-apiserver's chain: a flood is throttled before it costs
        // reviews at the delegate.
        if let Some(flow) = &self.flow {
            ctx.trace_step("flow-control");
            let admitted = self.admit(flow, ctx, &info).await;
            ctx.trace_step_end();
            if let Err(reply) = admitted {
                return Ok(Step::Answer(RouteKind::Refused, reply));
            }
        }

        // 6. What the caller may do: 403 Status when refused, 500 when nobody could decide.
        ctx.trace_step("authorization");
        let authorized = self.authorize(session, ctx, &info).await;
        ctx.trace_step_end();
        if let Err(reply) = authorized {
            return Ok(Step::Answer(RouteKind::Refused, reply));
        }
        // Whose trace the request joins: the caller's only when it is privileged.
        ctx.trace_authorized();

        // `/openapi/v2` is merged on demand: the first client after a change waits for it.
        if route == Route::OpenApi(OpenApiPath::V2) {
            self.openapi_v2_merged().await;
        }

        // 7. Where the request goes, resolved once.
        match self.resolve(session.req_header(), ctx, route, &info, &routes) {
            Target::Own(kind, reply) => Ok(Step::Answer(kind, reply)),
            Target::ApiServiceApi => {
                ctx.outcome.kind = RouteKind::Own;
                // Boxed: the API's state (patches, applies, watches) stays out of every
                // request's future.
                let served = apiservice_api::serve(session, &self.gateway, &info, ctx);
                ctx.outcome.code = Box::pin(served).await?;
                Ok(Step::Served)
            }
            Target::Remote(upstream) => {
                // 8. A place in the backend's bound, taken only by a request about to be sent.
                if let Err(reply) = self.reserve_backend(ctx, &upstream, &info) {
                    // Counted as the APIService's answer (its 429s per group-version).
                    ctx.attempts.upstream = Some(upstream);
                    return Ok(Step::Answer(RouteKind::Proxy, reply));
                }
                // 9. Dispatch.
                self.to_upstream(session, ctx, RouteKind::Proxy, upstream, &info)
                    .await
            }
            Target::Unavailable(name) => {
                let method = session.req_header().method.as_str();
                let (group, version) = (info.group, info.version);
                self.gateway.metrics.terminated(method, group, version, 503);
                // The APIService's answer too: a dead backend's 503s show in its series (its
                // error ratio, its alert).
                ctx.outcome.unavailable = Some(self.gateway.metrics.group_version(group, version));
                Ok(Step::Answer(RouteKind::Proxy, self.unavailable(name)))
            }
            Target::Delegate(delegate) => {
                self.to_upstream(session, ctx, RouteKind::Delegate, delegate, &info)
                    .await
            }
            Target::Nowhere => {
                let reply = if ctx.arrived_complete {
                    reply::not_found()
                } else {
                    reply::mux_incomplete_reply()
                };
                Ok(Step::Answer(RouteKind::NotFound, reply))
            }
        }
    }

    /// Where an authorized request goes: what apiagg answers itself, the APIService API, a
    /// remote APIService's backend (503 while none of its endpoints is available), or the
    /// delegate (404 without one, 503 before the mux is complete).
    fn resolve<'r>(
        &self,
        req: &pingora_http::RequestHeader,
        ctx: &mut RequestCtx,
        route: Route<'_>,
        info: &RequestInfo<'_>,
        routes: &'r RouteTable,
    ) -> Target<'r> {
        if let Some((kind, reply)) = self.served_here(req, ctx, route) {
            return Target::Own(kind, reply);
        }
        // The APIService API is apiagg's own (never the delegate's).
        if info.group_version_key() == Some(crate::apiservices::GROUP_VERSION) {
            return Target::ApiServiceApi;
        }
        if let Route::GroupVersion(key) = route {
            if let Some(index) = routes.registry.index_of(key) {
                let entry = &routes.registry.entries()[index];
                if !entry.is_delegated() {
                    return match routes.upstreams.get(index).cloned().flatten() {
                        Some(upstream) if upstream.available() => Target::Remote(upstream),
                        _ => Target::Unavailable(&entry.name),
                    };
                }
            }
        }
        match routes.delegate.clone() {
            Some(delegate) => Target::Delegate(delegate),
            None => Target::Nowhere,
        }
    }
}

/// Where a request goes, resolved once after it was authorized.
enum Target<'r> {
    /// apiagg answers it itself (discovery, OpenAPI, status, metrics).
    Own(RouteKind, Reply),
    /// The APIService API (apiservice_api.rs).
    ApiServiceApi,
    /// A remote APIService's backend, some endpoint of it available.
    Remote(Arc<Upstream>),
    /// A remote APIService none of whose endpoints is available (named).
    Unavailable(&'r str),
    /// The delegate kube-apiserver.
    Delegate(Arc<Upstream>),
    /// Nobody: no delegate is configured.
    Nowhere,
}
