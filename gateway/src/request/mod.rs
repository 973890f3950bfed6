//! Layer 3: the request path on pingora-core. serve.rs is the server side (pingora's
//! `HttpServerApp`); `route` (phases.rs) reads as one ordered sequence: canonical path → one
//! parse (`RequestInfo`) → shutdown gate → health → authenticate (and the audit begins) →
//! impersonation → API Priority and Fairness → authorize → what apiagg answers itself
//! (answers.rs, openapi.rs) | the APIService API (apiservice_api.rs) | a remote APIService's
//! backend (deadlines, upgrades) | the delegate; proxy.rs forwards, response.rs relays the
//! answer back or turns a failure into its Status. Everything here reads published snapshots
//! only, and builds no document per request; the one lock is an endpoint's `connecting`,
//! taken only to open a new backend connection (proxy.rs), never on a pooled one.

mod answers;
mod apiservice_api;
mod attempts;
mod audit;
mod authorize;
mod backend;
mod bounds;
mod classify;
mod deadline;
mod deadlines;
mod errors;
mod flow;
mod forward;
mod framing;
mod head;
mod openapi;
mod phases;
mod proxy;
mod reply;
mod response;
mod serve;
mod trace;
mod upgrade;
mod watch_list;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use apiagg_requestinfo::RequestInfo;
use bytes::Bytes;
use pingora_core::apps::HttpServerOptions;
use pingora_core::connectors::http::v2::Connector as Http2Connector;
use pingora_core::connectors::ConnectorOptions;
use pingora_core::server::configuration::ServerConf;
use pingora_error::Result;
use pingora_http::RequestHeader;
use tokio::sync::Notify;

/// A client's request: an HTTP/1.1 request or an HTTP/2 stream.
pub(crate) use pingora_core::protocols::http::ServerSession as Session;

/// For the fuzz targets only (the `fuzzing` module of lib.rs).
#[cfg(feature = "fuzzing")]
pub use self::classify::{classify, non_canonical, Route as FuzzRoute};
pub use self::deadlines::{ConnectionTimeouts, Deadlined, TimedOut};

use self::classify::Route;
use self::forward::{Forwarding, Identity};
use self::openapi::OpenApiPath;
use self::reply::Reply;
use crate::auth::{Authenticated, Authenticator, User};
use crate::backends::{OpenFiles, Upstream};
use crate::state::{Gateway, OpenApiV2};
use apiagg_audit::Auditor;
use apiagg_flowcontrol::FlowControl;
use apiagg_observe::{GroupVersionMetrics, InFlight, Repeats, RouteKind, Tracer};

/// What happens to a request once the ordered checks ran (phases.rs).
pub(super) enum Step {
    /// apiagg answers it itself: a document, or the refusal of a check.
    Answer(RouteKind, Reply),
    /// It goes to `ctx.attempts.upstream` (proxy.rs).
    Forward,
    /// It was served already (an upgrade tunnel, an emulated streaming list, the APIService
    /// API).
    Served,
}

/// Per-request state, grouped by concern: each group is a small type with its methods, in the
/// file of its concern.
pub struct RequestCtx {
    started: Instant,
    /// Whether every route was installed when the request arrived (k8s.io/apiserver's
    /// `pkg/endpoints/filters/mux_discovery_complete.go`).
    arrived_complete: bool,
    /// The caller, once authenticated.
    caller: Option<Authenticated>,
    /// What the request came to, for its answer and its metrics.
    outcome: Outcome,
    /// The backend a forwarded request goes to, and its attempts there (attempts.rs).
    attempts: attempts::Attempts,
    /// What bounds the request: its deadline, a watch's lifetime, its places in the backend's
    /// bound and in the open-file budget (bounds.rs).
    bounds: bounds::Bounds,
    /// Flow control's hold on the request (flow.rs).
    flow: flow::FlowHold,
    /// The request's audit (audit.rs).
    audit: audit::AuditState,
    /// The request's spans, when tracing is on (trace.rs).
    trace: Option<Box<trace::RequestTrace>>,
    _in_flight: Option<InFlight>,
}

/// What a request came to: the route it took and what apiagg answered or changed of it.
struct Outcome {
    kind: RouteKind,
    /// Status of a response apiagg wrote itself (for metrics).
    code: u16,
    /// `subresource` label of `apiserver_request_total` for documents apiagg serves itself.
    subresource: &'static str,
    /// Replacement body for an upstream response apiagg rewrites (`Some` until sent).
    replacement: Option<Bytes>,
    /// apiagg ended the answer itself (a watch at shutdown): not a failure to log.
    ended_by_us: bool,
    /// A streaming list passed through to a backend believed to honour them.
    streaming_list: bool,
    /// The series of the unavailable APIService answered for (its 503s count as its answers,
    /// as a forwarded request counts in its upstream's).
    unavailable: Option<Arc<GroupVersionMetrics>>,
}

impl Default for Outcome {
    fn default() -> Self {
        Outcome {
            kind: RouteKind::NotFound,
            code: 0,
            subresource: "",
            replacement: None,
            ended_by_us: false,
            streaming_list: false,
            unavailable: None,
        }
    }
}

/// The front-door controls around the request path, as kube-apiserver's handler chain wraps
/// the aggregator.
pub struct Controls {
    /// API Priority and Fairness, when on.
    pub flow: Option<Arc<FlowControl>>,
    /// Auditing ([`Auditor::disabled`] when off).
    pub audit: Auditor,
    /// Tracing (`--tracing-config-file`), when on.
    pub tracer: Option<Arc<Tracer>>,
    /// The open-file budget client and backend connections share.
    pub open_files: Arc<OpenFiles>,
}

/// The proxy service.
pub struct ApiaggProxy {
    gateway: Arc<Gateway>,
    auth: Arc<Authenticator>,
    /// API Priority and Fairness (`--enable-priority-and-fairness`).
    flow: Option<Arc<FlowControl>>,
    /// Auditing (`--audit-policy-file`).
    audit: Auditor,
    /// Tracing (`--tracing-config-file`).
    tracer: Option<Arc<Tracer>>,
    /// The open-file budget: every request to a backend takes a descriptor of it.
    open_files: Arc<OpenFiles>,
    /// Backend failures logged so far, to log repeats on change and then rate-limited.
    repeats: Repeats,
    /// New connections to backends and the delegate, and the pool of multiplexed HTTP/2 ones
    /// (idle HTTP/1.1 connections wait in their endpoint's own pool, backends/pool.rs).
    connector: Http2Connector,
    /// How pingora serves client connections (HTTP/2's idle timeout).
    server_options: HttpServerOptions,
    /// Set, and waiters woken, once the server stopped listening: connections waiting for a
    /// request close.
    closed: AtomicBool,
    closing: Notify,
}

impl ApiaggProxy {
    /// A proxy reading `gateway`'s snapshots, authenticating callers with `auth`, and wrapped
    /// in the front-door `controls`; `conf` sizes its backend connection pool, `server` says
    /// how client connections are served.
    pub fn new(
        gateway: Arc<Gateway>,
        auth: Arc<Authenticator>,
        controls: Controls,
        conf: &ServerConf,
        server: HttpServerOptions,
    ) -> ApiaggProxy {
        ApiaggProxy {
            connector: Http2Connector::new(Some(ConnectorOptions::from_server_conf(conf))),
            server_options: server,
            closed: AtomicBool::new(false),
            closing: Notify::new(),
            gateway,
            auth,
            flow: controls.flow,
            audit: controls.audit,
            tracer: controls.tracer,
            open_files: controls.open_files,
            repeats: Repeats::new(std::time::Duration::from_secs(10)),
        }
    }

    /// Logs a failure to proxy, unless it repeats the last one of its backend within ten
    /// seconds (then it is counted, and the count goes into the next line).
    fn log_failure(&self, ctx: &RequestCtx, e: &pingora_error::Error) {
        let label = ctx
            .attempts
            .upstream
            .as_ref()
            .map_or("no backend", |u| u.label.as_str());
        let kind = format!("{:?} {:?}", e.esource(), e.etype());
        if let Some(suppressed) = self.repeats.admit(label, &kind) {
            tracing::warn!(backend = label, suppressed, "request failed: {e}");
        }
    }

    /// Writes a reply apiagg answers itself and ends the request: the one place an answer of
    /// apiagg's own (a refusal included) gets its audit, metrics label and headers.
    async fn answer(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        kind: RouteKind,
        reply: Reply,
    ) -> Result<()> {
        ctx.outcome.kind = kind;
        ctx.outcome.code = reply.code();
        let reply = ctx.own_answer(reply);
        reply.send(session).await
    }

    /// The header policy of this request.
    fn forwarding<'a>(
        &'a self,
        session: &Session,
        ctx: &'a RequestCtx,
        upstream: &'a Upstream,
    ) -> Forwarding<'a> {
        let identity = Self::identity(ctx, upstream);
        Forwarding {
            client_ip: session
                .client_addr()
                .and_then(|a| a.as_inet())
                .map(|a| a.ip()),
            proto: if self.gateway.options.serving_tls {
                "https"
            } else {
                "http"
            },
            identity,
            auth: &self.auth,
            trace: ctx.trace_headers(),
        }
    }

    /// How the caller is stated to `upstream`.
    fn identity<'a>(ctx: &'a RequestCtx, upstream: &'a Upstream) -> Identity<'a> {
        let caller = ctx.caller.as_ref();
        // Every request is authenticated before it is routed; anonymous is only a safe default.
        let user = caller.map_or_else(|| &**User::anonymous(), |c| &*c.user);
        if upstream.remote {
            Identity::Remote(user)
        } else if !ctx.attempts.own_connection {
            Identity::CallerCredentials
        } else {
            Identity::Impersonate {
                user,
                token: upstream.token.as_ref().and_then(|t| t.header()),
            }
        }
    }

    /// Hands the request to `upstream`: tunnelled here when it asks for an upgrade, else
    /// forwarded (proxy.rs).
    async fn to_upstream(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        kind: RouteKind,
        upstream: Arc<Upstream>,
        info: &RequestInfo<'_>,
    ) -> Result<Step> {
        let delegate_authenticates = ctx
            .caller
            .as_ref()
            .is_none_or(Authenticated::delegate_authenticates);
        ctx.attempts.own_connection = !upstream.remote && !delegate_authenticates;
        if (upstream.remote || ctx.attempts.own_connection)
            && forward::asks_impersonation(session.req_header())
        {
            let reply = reply::failure_reply(
                403,
                "Forbidden",
                "impersonation is honoured by apiagg only when an authorizer that decides it (a \
                 webhook or RBAC) allows it, and otherwise only by the delegate, for callers it \
                 authenticates itself (bearer tokens); send the request without Impersonate-* headers",
            );
            return Ok(Step::Answer(RouteKind::Refused, reply));
        }
        // Nothing is sent that kube-apiserver would refuse for its size: a caller in too many
        // groups gets 431 naming the limit (forward/size.rs).
        let (identity, token) = Self::identity(ctx, &upstream).size();
        if let Err(too_large) = forward::check_size(session, identity, token) {
            let message = too_large.to_string();
            let reply = reply::failure_reply(431, "RequestHeaderFieldsTooLarge", &message);
            return Ok(Step::Answer(RouteKind::Refused, reply));
        }
        if let Some(audit) = ctx.audit.ongoing() {
            // `Impersonate-*` apiagg did not honour goes to the delegate, which acts as that
            // user once it allowed it: the audit names whom the request asks to be.
            if let Some(user) = crate::auth::requested_impersonation(&session.req_header().headers)
            {
                audit.impersonating(Arc::new(user));
            }
        }
        // Every request to a backend holds a descriptor: within the budget, or refused before
        // it connects (apiagg never runs into `EMFILE` on the proxy path).
        match self.open_files.try_upstream() {
            Some(file) => ctx.bounds.file = Some(file),
            None => {
                let reply = reply::out_of_files(self.open_files.budget());
                return Ok(Step::Answer(RouteKind::Refused, reply));
            }
        }
        // Only WebSocket and SPDY/3.1 upgrades are tunnelled; any other mention of an upgrade
        // is refused, so no forwarded request carries an `Upgrade` header.
        let upgrade = match upgrade::is_upgrade(session.req_header()) {
            Ok(upgrade) => upgrade,
            Err(refused) => {
                // The client may follow up in the protocol it asked for: close after the 400.
                session.set_keepalive(None);
                let reply = reply::failure_reply(400, "BadRequest", &refused.to_string());
                return Ok(Step::Answer(RouteKind::Refused, reply));
            }
        };
        if upgrade {
            ctx.outcome.kind = RouteKind::Upgrade;
            ctx.trace_backend(Some(&upstream));
            let code = {
                let forwarding = self.forwarding(session, ctx, &upstream);
                // Boxed: the tunnel's state stays out of every request's future.
                let connect = self.gateway.options.connect_timeout;
                Box::pin(upgrade::tunnel(session, &upstream, &forwarding, connect)).await
            };
            ctx.outcome.code = code;
            return Ok(Step::Served);
        }
        match deadline::limit(info, self.gateway.options.request_timeout) {
            Ok(limit) => ctx.bounds.limit_to(limit, ctx.started),
            Err(e) => {
                let reply = reply::failure_reply(400, "BadRequest", &e.to_string());
                return Ok(Step::Answer(RouteKind::Refused, reply));
            }
        }
        if info.verb == "watch" {
            self.bound_watch(ctx, info);
            if upstream.remote && watch_list::asked(info) {
                // Boxed: the emulation's state stays out of every request's future.
                let served = Box::pin(self.watch_list(session, ctx, &upstream, info)).await?;
                if let Some(code) = served {
                    ctx.outcome.code = code;
                    ctx.attempts.upstream = Some(upstream);
                    return Ok(Step::Served);
                }
                ctx.outcome.streaming_list = true;
            }
            // Handed to the backend or the delegate, which holds the watch's initial phase:
            // the seat goes back now, not when (or if) the backend sends the head.
            ctx.flow.delegated();
        }
        ctx.outcome.kind = kind;
        ctx.attempts.upstream = Some(upstream);
        Ok(Step::Forward)
    }

    /// 503 for an APIService that is not available, saying why.
    fn unavailable(&self, name: &str) -> Reply {
        let why = self.gateway.availability.guard().get(name).map_or_else(
            || "no endpoint is available".to_string(),
            |s| format!("{}: {}", s.condition.reason, s.condition.message),
        );
        let message = format!("service unavailable: APIService {name}: {why}");
        reply::failure_reply(503, "ServiceUnavailable", &message)
    }

    /// Waits, at most `--openapi-timeout`, for the merged `/openapi/v2` when it is merged on
    /// demand and not merged now.
    async fn openapi_v2_merged(&self) {
        let gateway = &self.gateway;
        let merged = || {
            gateway
                .openapi
                .guard()
                .as_ref()
                .is_some_and(|docs| docs.v2.is_some())
        };
        if gateway.options.openapi_v2 == OpenApiV2::OnDemand && !merged() {
            let bound = gateway.options.openapi_timeout;
            Box::pin(gateway.openapi_v2.ask_and_wait(bound, merged)).await;
        }
    }

    /// What apiagg serves itself for `route`; `None` when another server answers it.
    fn served_here(
        &self,
        req: &RequestHeader,
        ctx: &mut RequestCtx,
        route: Route<'_>,
    ) -> Option<(RouteKind, Reply)> {
        let gateway = &self.gateway;
        let answer = match route {
            Route::Health(endpoint, check) => {
                ctx.outcome.subresource = endpoint.path();
                let reply = answers::health(req, endpoint, check, &gateway.lifecycle);
                return Some((RouteKind::Health, reply));
            }
            Route::Metrics => {
                return Some((RouteKind::Metrics, answers::metrics(&gateway.metrics)))
            }
            Route::Status => answers::status(&gateway.availability.load(), &gateway.routes.load()),
            // apiagg's own flow control; without it, the delegate's answers.
            Route::FlowDump => {
                let dump = self.flow.as_ref()?.dump_priority_levels();
                Reply::text(200, dump)
            }
            Route::Version if gateway.routes.load().delegate.is_none() => answers::version(),
            Route::Apis { slash } => {
                if !slash {
                    ctx.outcome.subresource = "apis";
                }
                let options = &gateway.options.negotiate;
                answers::apis(
                    req,
                    &gateway.routes.load(),
                    &gateway.discovery,
                    options,
                    slash,
                )
            }
            Route::OpenApi(OpenApiPath::V2) if gateway.options.openapi_v2 == OpenApiV2::Off => {
                reply::not_found()
            }
            Route::OpenApi(which) => {
                // kube-apiserver instruments only the v3 paths.
                ctx.outcome.subresource = match which {
                    OpenApiPath::V2 => "",
                    OpenApiPath::V3Index => "openapi/v3",
                    OpenApiPath::V3Document(..) => "openapi/v3/",
                };
                openapi::answer(req, which, gateway.openapi.guard().as_deref())
            }
            Route::Group(group) => {
                let routes = gateway.routes.load();
                answers::group(req, &routes, &gateway.options.negotiate, group)?
            }
            Route::Version | Route::GroupVersion(_) | Route::Other => return None,
        };
        Some((RouteKind::Own, answer))
    }
}
