//! The pingora `ProxyHttp` service: answers local paths, routes `/apis/<g>/<v>/…` to the
//! APIService's backend, falls through to the delegate, and turns failures into Status JSON.

use std::sync::Arc;
use std::time::Instant;

use apiagg_discovery as discovery;
use async_trait::async_trait;
use bytes::Bytes;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, ErrorSource, ErrorType, Result};
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::{FailToProxy, ProxyHttp, Session};

use crate::health;
use crate::lifecycle::InFlight;
use crate::metrics::RouteKind;
use crate::openapi::{self, serve::OpenApiPath};
use crate::reply::Reply;
use crate::routes::{RouteTable, Upstream};
use crate::state::Gateway;
use crate::status;
use crate::upgrade;

/// Per-request state.
pub struct RequestCtx {
    started: Instant,
    /// Whether every route was installed when the request arrived (spec §3.4).
    arrived_complete: bool,
    kind: RouteKind,
    upstream: Option<Arc<Upstream>>,
    endpoint: usize,
    /// Status of a response apiagg wrote itself (for metrics).
    code: u16,
    /// Replacement body for an upstream response apiagg rewrites (`Some` until sent).
    replacement: Option<Bytes>,
    replacing: bool,
    /// `subresource` label of `apiserver_request_total` for documents apiagg serves itself.
    subresource: &'static str,
    _in_flight: Option<InFlight>,
}

/// The proxy service.
pub struct ApiaggProxy {
    gateway: Arc<Gateway>,
}

impl ApiaggProxy {
    /// A proxy reading `gateway`.
    pub fn new(gateway: Arc<Gateway>) -> ApiaggProxy {
        ApiaggProxy { gateway }
    }
}

/// Where a path goes, decided from the path alone.
enum PathRoute<'a> {
    Health(health::Endpoint, &'a str),
    Metrics,
    Status,
    Version,
    /// `/apis` (`slash` false) or `/apis/` (`slash` true).
    Apis {
        slash: bool,
    },
    /// `/apis/<g>` or `/apis/<g>/`.
    Group(&'a str),
    /// `/openapi/v2`, `/openapi/v3[/<key>]`.
    OpenApi(OpenApiPath<'a>),
    /// `/api[/…]` or `/apis/<g>/<v>[/…]`: route key `"<g>/<v>"`.
    GroupVersion(&'a str),
    Other,
}

fn classify(path: &str) -> PathRoute<'_> {
    let trimmed = path.strip_prefix('/').unwrap_or(path);
    let (first, rest) = trimmed.split_once('/').unwrap_or((trimmed, ""));
    if let Some(endpoint) = health::Endpoint::from_segment(first) {
        return PathRoute::Health(endpoint, rest);
    }
    match first {
        "metrics" if rest.is_empty() => PathRoute::Metrics,
        "debug" if rest == "apiagg/status" => PathRoute::Status,
        "version" if rest.is_empty() => PathRoute::Version,
        "api" => PathRoute::GroupVersion("/v1"),
        "openapi" => OpenApiPath::parse(rest).map_or(PathRoute::Other, PathRoute::OpenApi),
        "apis" => {
            if rest.is_empty() {
                return PathRoute::Apis {
                    slash: trimmed.len() > 4,
                };
            }
            let mut parts = rest.splitn(3, '/');
            match (parts.next(), parts.next()) {
                (Some(g), Some(v)) if !g.is_empty() && !v.is_empty() => {
                    PathRoute::GroupVersion(&rest[..g.len() + 1 + v.len()])
                }
                (Some(g), None | Some("")) if !g.is_empty() => PathRoute::Group(g),
                _ => PathRoute::Other,
            }
        }
        _ => PathRoute::Other,
    }
}

/// Paths served even while shutting down (spec §11.3).
fn exempt_from_shutdown(path: &str) -> bool {
    ["/readyz", "/livez", "/healthz", "/metrics"]
        .iter()
        .any(|p| path.starts_with(p))
}

fn version_document() -> Bytes {
    Bytes::from(
        serde_json::json!({
            "major": "1",
            "minor": "32",
            "gitVersion": concat!("v1.32.0-apiagg.", env!("CARGO_PKG_VERSION")),
            "gitCommit": "",
            "gitTreeState": "clean",
            "buildDate": "1970-01-01T00:00:00Z",
            "goVersion": "",
            "compiler": "rustc",
            "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
        })
        .to_string(),
    )
}

/// A precomputed document; aggregated ones carry ETag and `Cache-Control: public` and answer a
/// matching `If-None-Match` with 304 (spec §6.7).
fn serve_doc(req: &RequestHeader, doc: &discovery::RenderedDoc, cacheable: bool) -> Reply {
    if !cacheable {
        return Reply::new(200, doc.content_type, doc.bytes.clone());
    }
    let if_none_match = req
        .headers
        .get("if-none-match")
        .and_then(|v| v.to_str().ok());
    let reply = if doc.not_modified(if_none_match) {
        Reply::not_modified()
    } else {
        Reply::new(200, doc.content_type, doc.bytes.clone())
    };
    reply
        .header("ETag", doc.etag.clone())
        .header("Cache-Control", "public")
}

fn not_acceptable(e: &discovery::NotAcceptable) -> Reply {
    Reply::json(
        406,
        status::failure(406, "NotAcceptable", &e.message(), None),
    )
}

fn header_str<'a>(req: &'a RequestHeader, name: &str) -> &'a str {
    req.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Headers a client may not pass to a remote backend (credentials and identity).
fn is_identity_header(name: &str, strip_credentials: bool) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.starts_with("x-remote-")
        || (strip_credentials
            && (lower == "authorization"
                || lower == "proxy-authorization"
                || lower.starts_with("impersonate-")))
}

impl ApiaggProxy {
    async fn answer(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        kind: RouteKind,
        reply: Reply,
    ) -> Result<bool> {
        ctx.kind = kind;
        ctx.code = reply.code();
        reply.send(session).await?;
        Ok(true)
    }

    /// 404, or 503 with `Retry-After` when the request arrived before mux completion.
    async fn not_found(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let reply = if ctx.arrived_complete {
            Reply::json(404, status::not_found())
        } else {
            status::mux_incomplete_reply()
        };
        self.answer(session, ctx, RouteKind::NotFound, reply).await
    }

    /// Passive failure detection: the endpoint is ejected at once and the availability
    /// controller publishes it without waiting for its next probe.
    fn mark_failed(&self, upstream: &Upstream, index: usize, e: &Error) {
        let Some(endpoint) = upstream.endpoints.get(index) else {
            return;
        };
        if !upstream.health_checked {
            return;
        }
        let message = format!("failing or missing response from {}: {e}", endpoint.url);
        if endpoint.health.mark_failed(message) {
            tracing::warn!(backend = %upstream.label, endpoint = %endpoint.url, "endpoint ejected: {e}");
            self.gateway.health.changed.notify_one();
        }
    }

    /// 503 for an APIService that is not available, saying why.
    fn unavailable(&self, name: &str) -> Reply {
        let why = self.gateway.availability.get(name).map_or_else(
            || "no endpoint is available".to_string(),
            |s| format!("{}: {}", s.condition.reason, s.condition.message),
        );
        let message = format!("service unavailable: APIService {name}: {why}");
        Reply::json(
            503,
            status::failure(503, "ServiceUnavailable", &message, None),
        )
    }

    /// `/apis` (aggregated or legacy by Accept) and `/apis/` (legacy only).
    fn apis(&self, req: &RequestHeader, routes: &RouteTable, slash: bool) -> Reply {
        let endpoint = if slash {
            discovery::Endpoint::LegacyOnly
        } else {
            discovery::Endpoint::Root
        };
        let accept = req.headers.get("accept").and_then(|v| v.to_str().ok());
        let negotiated =
            match discovery::negotiate(accept, endpoint, &self.gateway.options.negotiate) {
                Ok(n) => n,
                Err(e) => return not_acceptable(&e),
            };
        let reply = match negotiated {
            discovery::Negotiated::Legacy => serve_doc(req, &routes.legacy.apis, false),
            discovery::Negotiated::Aggregated { version, .. } => {
                match self.gateway.aggregated.load().as_ref() {
                    Some(docs) => serve_doc(req, docs.get(version), true),
                    None => status::mux_incomplete_reply(),
                }
            }
        };
        if slash {
            reply
        } else {
            reply.header("Vary", "Accept")
        }
    }

    /// `/apis/<group>`: the legacy `APIGroup` built from the group's APIServices.
    fn group(&self, req: &RequestHeader, routes: &RouteTable, group: &str) -> Reply {
        let accept = req.headers.get("accept").and_then(|v| v.to_str().ok());
        let options = &self.gateway.options.negotiate;
        if let Err(e) = discovery::negotiate(accept, discovery::Endpoint::LegacyOnly, options) {
            return not_acceptable(&e);
        }
        match routes.legacy.groups.get(group) {
            Some(doc) => serve_doc(req, doc, false),
            None => Reply::json(404, status::not_found()),
        }
    }

    async fn to_upstream(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        kind: RouteKind,
        upstream: Arc<Upstream>,
    ) -> Result<bool> {
        if upgrade::is_upgrade(session.req_header()) {
            ctx.kind = RouteKind::Upgrade;
            ctx.code = upgrade::tunnel(session, &upstream).await;
            return Ok(true);
        }
        ctx.kind = kind;
        ctx.upstream = Some(upstream);
        Ok(false)
    }
}

#[async_trait]
impl ProxyHttp for ApiaggProxy {
    type CTX = RequestCtx;

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
            _in_flight: Some(self.gateway.lifecycle.track()),
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let lifecycle = &self.gateway.lifecycle;
        // A Uri clone shares its bytes: no allocation on the request path.
        let uri = session.req_header().uri.clone();
        let path = uri.path();
        if lifecycle.rejecting() && !exempt_from_shutdown(path) {
            let agent = header_str(session.req_header(), "user-agent");
            if !agent.starts_with("kube-apiserver/") {
                let reply = Reply::text(
                    429,
                    "The apiserver is shutting down, please try again later.\n",
                )
                .header("Retry-After", "5")
                .header("Connection", "close");
                return self.answer(session, ctx, RouteKind::Shutdown, reply).await;
            }
        }

        let routes = self.gateway.routes.load_full();
        match classify(path) {
            PathRoute::Health(endpoint, check) => {
                let query = session.req_header().uri.query();
                let answer = health::answer(endpoint, check, query, lifecycle);
                ctx.subresource = endpoint.path();
                let reply = Reply::text(answer.code, answer.body);
                return self.answer(session, ctx, RouteKind::Health, reply).await;
            }
            PathRoute::Metrics => {
                let body = Bytes::from(self.gateway.metrics.render());
                let reply = Reply::new(200, "text/plain; version=0.0.4; charset=utf-8", body);
                return self.answer(session, ctx, RouteKind::Metrics, reply).await;
            }
            PathRoute::Status => {
                let body = crate::availability::status_document(&self.gateway.availability);
                let reply = Reply::json(200, body);
                return self.answer(session, ctx, RouteKind::Local, reply).await;
            }
            PathRoute::Version if routes.delegate.is_none() => {
                let reply = Reply::json(200, version_document());
                return self.answer(session, ctx, RouteKind::Local, reply).await;
            }
            PathRoute::Apis { slash } => {
                let reply = self.apis(session.req_header(), &routes, slash);
                if !slash {
                    ctx.subresource = "apis";
                }
                return self.answer(session, ctx, RouteKind::Local, reply).await;
            }
            PathRoute::OpenApi(which) => {
                // kube-apiserver instruments only the v3 paths.
                ctx.subresource = match which {
                    OpenApiPath::V2 => "",
                    OpenApiPath::V3Index => "openapi/v3",
                    OpenApiPath::V3Document(_) => "openapi/v3/",
                };
                let docs = self.gateway.openapi.load();
                let reply = openapi::serve::answer(session.req_header(), which, docs.as_deref());
                return self.answer(session, ctx, RouteKind::Local, reply).await;
            }
            PathRoute::Group(group) if routes.legacy.groups.contains_key(group) => {
                let reply = self.group(session.req_header(), &routes, group);
                return self.answer(session, ctx, RouteKind::Local, reply).await;
            }
            PathRoute::GroupVersion(key) => {
                if let Some(index) = routes.registry.index_of(key) {
                    let entry = &routes.registry.entries()[index];
                    if !entry.is_local() {
                        return match routes.upstreams.get(index).cloned().flatten() {
                            Some(upstream) if upstream.available() => {
                                self.to_upstream(session, ctx, RouteKind::Proxy, upstream)
                                    .await
                            }
                            _ => {
                                let method = session.req_header().method.as_str().to_string();
                                self.gateway.metrics.terminated(
                                    &method,
                                    &entry.group,
                                    &entry.version,
                                    503,
                                );
                                let reply = self.unavailable(&entry.name);
                                self.answer(session, ctx, RouteKind::Proxy, reply).await
                            }
                        };
                    }
                }
            }
            PathRoute::Version | PathRoute::Group(_) | PathRoute::Other => {}
        }

        match routes.delegate.clone() {
            Some(delegate) => {
                self.to_upstream(session, ctx, RouteKind::Delegate, delegate)
                    .await
            }
            None => self.not_found(session, ctx).await,
        }
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        let Some(upstream) = &ctx.upstream else {
            return Error::e_explain(ErrorType::InternalError, "no upstream selected");
        };
        let Some(index) = upstream.pick() else {
            return Error::e_explain(ErrorType::ConnectNoRoute, "upstream has no endpoints");
        };
        ctx.endpoint = index;
        Ok(Box::new(upstream.endpoints[index].peer.clone()))
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut RequestCtx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        if let Some(upstream) = &ctx.upstream {
            self.mark_failed(upstream, ctx.endpoint, &e);
            // Another healthy endpoint can take the request: it never reached this one.
            e.set_retry(upstream.available());
        }
        e
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        session: &mut Session,
        e: Box<Error>,
        ctx: &mut RequestCtx,
        client_reused: bool,
    ) -> Box<Error> {
        let broken = e.esource() == &ErrorSource::Upstream
            && matches!(
                e.etype(),
                ErrorType::ConnectionClosed | ErrorType::ReadError | ErrorType::WriteError
            );
        if let (true, Some(upstream)) = (broken && !client_reused, &ctx.upstream) {
            self.mark_failed(upstream, ctx.endpoint, &e);
        }
        let mut e = e.more_context(format!("Peer: {peer}"));
        if !session.req_header().method.is_idempotent() || session.as_ref().retry_buffer_truncated()
        {
            e.set_retry(false);
        } else {
            e.retry.decide_reuse(client_reused);
        }
        e
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        request: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let Some(upstream) = &ctx.upstream else {
            return Ok(());
        };
        let strip = upstream.strip_credentials;
        let doomed: Vec<http::HeaderName> = request
            .headers
            .keys()
            .filter(|name| is_identity_header(name.as_str(), strip))
            .cloned()
            .collect();
        for name in doomed {
            request.remove_header(&name);
        }
        let endpoint = &upstream.endpoints[ctx.endpoint];
        request.insert_header("Host", endpoint.authority.as_str())?;
        if let Some(addr) = session.client_addr().and_then(|a| a.as_inet()) {
            let ip = addr.ip().to_string();
            let forwarded = match request
                .headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
            {
                Some(prior) if !prior.is_empty() => format!("{prior}, {ip}"),
                _ => ip,
            };
            request.insert_header("X-Forwarded-For", forwarded)?;
        }
        let proto = if self.gateway.options.serving_tls {
            "https"
        } else {
            "http"
        };
        request.insert_header("X-Forwarded-Proto", proto)?;
        request.insert_header("X-Forwarded-Host", endpoint.authority.as_str())?;
        let uri = request.uri.path().to_string();
        request.insert_header("X-Forwarded-Uri", uri)?;
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let code = response.status.as_u16();
        let replacement = if ctx.kind == RouteKind::Proxy {
            for name in [
                "access-control-allow-origin",
                "access-control-allow-credentials",
                "access-control-allow-headers",
                "access-control-allow-methods",
            ] {
                response.remove_header(name);
            }
            if (300..400).contains(&code) && response.headers.contains_key("location") {
                Some((
                    502,
                    status::failure(
                        502,
                        "BadGateway",
                        "the backend attempted to redirect this request, which is not permitted",
                        None,
                    ),
                ))
            } else {
                None
            }
        } else if code == 404 && !ctx.arrived_complete {
            Some((503, status::mux_incomplete()))
        } else {
            None
        };
        if let Some((code, body)) = replacement {
            response.set_status(code)?;
            for name in ["location", "transfer-encoding", "content-encoding", "etag"] {
                response.remove_header(name);
            }
            response.insert_header("Content-Type", crate::reply::JSON)?;
            response.insert_header("Content-Length", body.len().to_string())?;
            if code == 503 {
                response
                    .insert_header("Retry-After", status::MUX_RETRY_AFTER_SECONDS.to_string())?;
            }
            ctx.replacement = Some(body);
            ctx.replacing = true;
        }
        Ok(())
    }

    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<Option<std::time::Duration>> {
        if ctx.replacing {
            *body = ctx.replacement.take();
        }
        Ok(None)
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        let downstream_gone = e.esource() == &ErrorSource::Downstream;
        if downstream_gone || session.response_written().is_some() {
            ctx.code = 0;
            return FailToProxy {
                error_code: 0,
                can_reuse_downstream: false,
            };
        }
        let target = ctx.upstream.as_ref().map_or_else(
            || "no backend".to_string(),
            |u| {
                let authority = u
                    .endpoints
                    .get(ctx.endpoint)
                    .map_or("", |e| e.authority.as_str());
                format!("{} at {authority}", u.label)
            },
        );
        let message = format!("error trying to reach service {target}: {e}");
        tracing::warn!("{message}");
        // Before mux completion the delegate may simply not be there yet: say so, with
        // Retry-After, exactly like an unknown path at that time.
        let mut reply = if ctx.kind == RouteKind::Delegate && !ctx.arrived_complete {
            status::mux_incomplete_reply()
        } else {
            Reply::json(
                503,
                status::failure(503, "ServiceUnavailable", &message, None),
            )
        };
        // The connection can carry the next request only if this one's body was fully read.
        let reusable = session.is_body_done();
        if !reusable {
            reply = reply.header("Connection", "close");
        }
        let code = match reply.send(session).await {
            Ok(()) => 503,
            Err(_) => 0,
        };
        if ctx.kind == RouteKind::Proxy {
            let (group, version) = ctx
                .upstream
                .as_ref()
                .and_then(|u| u.metrics.as_ref())
                .map_or(("", ""), |m| (m.group(), m.version()));
            let method = session.req_header().method.as_str().to_string();
            self.gateway
                .metrics
                .terminated(&method, group, version, 503);
        }
        ctx.code = code;
        FailToProxy {
            error_code: code,
            can_reuse_downstream: code != 0 && reusable,
        }
    }

    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut RequestCtx) {
        let code = session
            .response_written()
            .map_or(ctx.code, |r| r.status.as_u16());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_paths() {
        assert!(matches!(
            classify("/apis/a.io/v1"),
            PathRoute::GroupVersion("a.io/v1")
        ));
        assert!(matches!(
            classify("/apis/a.io/v1/namespaces/x/foos"),
            PathRoute::GroupVersion("a.io/v1")
        ));
        assert!(matches!(
            classify("/apis/a.io/v1/"),
            PathRoute::GroupVersion("a.io/v1")
        ));
        assert!(matches!(classify("/apis/a.io"), PathRoute::Group("a.io")));
        assert!(matches!(classify("/apis/a.io/"), PathRoute::Group("a.io")));
        assert!(matches!(
            classify("/apis"),
            PathRoute::Apis { slash: false }
        ));
        assert!(matches!(
            classify("/apis/"),
            PathRoute::Apis { slash: true }
        ));
        assert!(matches!(classify("/api"), PathRoute::GroupVersion("/v1")));
        assert!(matches!(
            classify("/api/v1/pods"),
            PathRoute::GroupVersion("/v1")
        ));
        assert!(matches!(
            classify("/readyz/shutdown"),
            PathRoute::Health(health::Endpoint::Readyz, "shutdown")
        ));
        assert!(matches!(classify("/metrics"), PathRoute::Metrics));
        assert!(matches!(classify("/version"), PathRoute::Version));
        assert!(matches!(
            classify("/openapi/v2"),
            PathRoute::OpenApi(OpenApiPath::V2)
        ));
        assert!(matches!(
            classify("/openapi/v3/api/v1"),
            PathRoute::OpenApi(OpenApiPath::V3Document("api/v1"))
        ));
        assert!(matches!(classify("/openapi/v1"), PathRoute::Other));
    }

    #[test]
    fn identity_headers() {
        assert!(is_identity_header("X-Remote-User", false));
        assert!(is_identity_header("Authorization", true));
        assert!(!is_identity_header("Authorization", false));
        assert!(is_identity_header("Impersonate-Extra-Scopes", true));
        assert!(!is_identity_header("Accept", true));
    }
}
