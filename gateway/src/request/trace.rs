//! The request's trace (`--tracing-config-file`): a server span from the start of `route`
//! (phases.rs) to `record` (serve.rs), with child spans for `authentication`, `flow-control` (when API Priority and
//! Fairness is on) and `authorization`, each `connect` to an endpoint (picked → connected or
//! reused) and the `backend`'s answer (request sent → response ended). The backend and the
//! delegate get the `backend` span as their `traceparent` (forward.rs stamps it). Off,
//! `ctx.trace` is `None` and each phase checks it once.
//!
//! Whose trace a request joins is decided once the caller is authorized, as kube-apiserver
//! decides it (kubernetes#127053): a caller in `system:masters` or `system:monitoring`
//! continues its `traceparent`; anyone else, and every request refused before, starts a new
//! trace sampled by apiagg's rate alone, linked to the caller's. Until then the steps are
//! noted with their times and become spans of the server span once it exists.

use std::sync::Arc;
use std::time::SystemTime;

use http::{HeaderName, HeaderValue};
use opentelemetry::trace::{Span as _, SpanContext, SpanKind, Status, TraceContextExt};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::Span;
use pingora_http::RequestHeader;

use crate::auth::User;
use crate::backends::Upstream;
use apiagg_observe::{Tracer, TRACEPARENT, TRACESTATE};

/// kube-apiserver's name for the span of a request.
const SERVER_SPAN: &str = "KubernetesAPI";

/// Callers whose trace context is continued (kube-apiserver's privileged groups).
const TRUSTED_GROUPS: [&str; 2] = ["system:masters", "system:monitoring"];

/// The spans of one traced request.
struct RequestTrace {
    tracer: Arc<Tracer>,
    /// The caller's valid trace context, if any.
    remote: Option<SpanContext>,
    started: SystemTime,
    /// The server span's attributes known from the head, until it starts.
    attributes: Vec<KeyValue>,
    /// The server span, once whose trace it joins is decided.
    server: Option<Context>,
    /// Steps that ran before that: name, start, end.
    early: Vec<(&'static str, SystemTime, Option<SystemTime>)>,
    /// The step running now (authentication, authorization, flow control).
    step: Option<Span>,
    connect: Option<Span>,
    backend: Option<Span>,
    /// `traceparent` / `tracestate` of the `backend` span, for the upstream request.
    headers: Vec<(HeaderName, HeaderValue)>,
}

/// The trace of one request: `None` inside while tracing is off (each step checks it once).
#[derive(Default)]
pub(super) struct Trace(Option<Box<RequestTrace>>);

impl Trace {
    /// The trace of the request whose head is `req`, when tracing is on.
    #[inline]
    pub(super) fn begin(tracer: Option<&Arc<Tracer>>, req: &RequestHeader) -> Trace {
        Trace(tracer.map(|tracer| begin(tracer, req)))
    }

    /// The caller (`user`, the impersonated one if any) was authorized: the server span
    /// starts, continuing the caller's trace only when the caller is privileged.
    #[inline]
    pub(super) fn authorized(&mut self, user: Option<&User>) {
        if let Some(trace) = self.0.as_deref_mut() {
            let trusted = user.is_some_and(|u| {
                u.groups
                    .iter()
                    .any(|g| TRUSTED_GROUPS.contains(&g.as_str()))
            });
            trace.start_server(trusted);
        }
    }

    /// Starts the step `name` of the request path (ended by [`Trace::step_end`]).
    #[inline]
    pub(super) fn step(&mut self, name: &'static str) {
        if let Some(trace) = self.0.as_deref_mut() {
            match &trace.server {
                Some(_) => {
                    let span = trace.child(name, SpanKind::Internal, Vec::new());
                    trace.step = Some(span);
                }
                None => trace.early.push((name, SystemTime::now(), None)),
            }
        }
    }

    /// Ends the running step.
    #[inline]
    pub(super) fn step_end(&mut self) {
        if let Some(trace) = self.0.as_deref_mut() {
            if let Some(mut span) = trace.step.take() {
                span.end();
            } else if let Some((_, _, end @ None)) = trace.early.last_mut() {
                *end = Some(SystemTime::now());
            }
        }
    }

    /// Endpoint `endpoint` of `upstream` was picked (proxy.rs): connecting starts.
    #[inline]
    pub(super) fn connect(&mut self, upstream: &Upstream, endpoint: usize) {
        if let Some(trace) = self.0.as_deref_mut() {
            let attributes = endpoint_attributes(Some(upstream), Some(endpoint));
            if let Some(mut failed) = trace.connect.take() {
                failed.end();
            }
            let span = trace.child("connect", SpanKind::Client, attributes);
            trace.connect = Some(span);
        }
    }

    /// Connecting failed.
    #[inline]
    pub(super) fn connect_failed(&mut self, e: &pingora_error::Error) {
        if let Some(mut span) = self.0.as_deref_mut().and_then(|t| t.connect.take()) {
            span.set_status(Status::error(e.to_string()));
            span.end();
        }
    }

    /// The request goes to `upstream` (proxied: the connection to `endpoint` is up; tunnelled
    /// or emulated: about to dial): the connect span ends, the backend's starts, and its trace
    /// context is what the upstream request carries.
    #[inline]
    pub(super) fn backend(&mut self, upstream: &Upstream, endpoint: Option<usize>) {
        if let Some(trace) = self.0.as_deref_mut() {
            trace.backend(endpoint_attributes(Some(upstream), endpoint));
        }
    }

    /// Proxying failed after connecting (the backend's span says so; a retry starts anew).
    #[inline]
    pub(super) fn backend_failed(&mut self, e: &pingora_error::Error) {
        if let Some(span) = self.0.as_deref_mut().and_then(|t| t.backend.as_mut()) {
            span.set_status(Status::error(e.to_string()));
        }
    }

    /// The request ended with `code` on `route`, answered by `backend`: every open span ends.
    #[inline]
    pub(super) fn end(
        &mut self,
        code: u16,
        route: &'static str,
        backend: Option<&Upstream>,
        audit_id: Option<HeaderValue>,
    ) {
        if let Some(trace) = self.0.take() {
            end(
                trace,
                code,
                route,
                backend.map(|u| u.label.clone()),
                audit_id,
            );
        }
    }

    /// The trace-context headers the upstream request carries (none when tracing is off).
    #[inline]
    pub(super) fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        self.0.as_deref().map_or(&[], |t| t.headers.as_slice())
    }
}

/// The trace of `req`, its server span's attributes those known from the head.
#[inline(never)]
fn begin(tracer: &Arc<Tracer>, req: &RequestHeader) -> Box<RequestTrace> {
    let mut attributes = vec![
        KeyValue::new("http.request.method", req.method.to_string()),
        KeyValue::new("url.path", req.uri.path().to_string()),
    ];
    if let Some(agent) = req.headers.get(http::header::USER_AGENT) {
        let agent = String::from_utf8_lossy(agent.as_bytes()).into_owned();
        attributes.push(KeyValue::new("user_agent.original", agent));
    }
    Box::new(RequestTrace {
        tracer: tracer.clone(),
        remote: tracer.extract(&req.headers),
        started: SystemTime::now(),
        attributes,
        server: None,
        early: Vec::new(),
        step: None,
        connect: None,
        backend: None,
        headers: Vec::new(),
    })
}

impl RequestTrace {
    /// Starts the server span (once): the caller's trace continued when `trusted`, else a new
    /// root linked to it; the steps noted so far become its children.
    fn start_server(&mut self, trusted: bool) -> &Context {
        if self.server.is_none() {
            let attributes = std::mem::take(&mut self.attributes);
            let server = self.tracer.server(
                SERVER_SPAN,
                self.remote.as_ref(),
                trusted,
                self.started,
                attributes,
            );
            let now = SystemTime::now();
            for (name, start, end) in self.early.drain(..) {
                self.tracer
                    .finished_child(&server, name, start, end.unwrap_or(now));
            }
            self.server = Some(server);
        }
        self.server.get_or_insert_with(Context::new)
    }

    fn child(&mut self, name: &'static str, kind: SpanKind, attributes: Vec<KeyValue>) -> Span {
        let tracer = self.tracer.clone();
        let server = self.start_server(false);
        tracer.child(server, name, kind, attributes)
    }

    #[inline(never)]
    fn backend(&mut self, attributes: Vec<KeyValue>) {
        if let Some(mut connect) = self.connect.take() {
            connect.end();
        }
        if let Some(mut earlier) = self.backend.take() {
            earlier.end();
        }
        let span = self.child("backend", SpanKind::Client, attributes);
        self.headers = self.tracer.headers_of(&span);
        self.backend = Some(span);
    }
}

/// Ends the spans of `trace`, the server span with what the request came to.
#[inline(never)]
fn end(
    mut trace: Box<RequestTrace>,
    code: u16,
    route: &'static str,
    backend: Option<String>,
    audit_id: Option<HeaderValue>,
) {
    for span in [trace.step.take(), trace.connect.take()]
        .into_iter()
        .flatten()
    {
        let mut span = span;
        span.end();
    }
    let status = KeyValue::new("http.response.status_code", i64::from(code));
    if let Some(mut span) = trace.backend.take() {
        span.set_attribute(status.clone());
        span.end();
    }
    let server = trace.start_server(false).span();
    server.set_attribute(status);
    server.set_attribute(KeyValue::new("apiagg.route", route));
    if let Some(backend) = backend {
        server.set_attribute(KeyValue::new("apiagg.backend", backend));
    }
    if let Some(id) = audit_id {
        let id = String::from_utf8_lossy(id.as_bytes()).into_owned();
        server.set_attribute(KeyValue::new("audit-id", id));
    }
    if code >= 500 || code == 0 {
        server.set_status(Status::error(format!("status {code}")));
    }
    server.end();
}

/// The trace context of apiagg's span instead of the caller's (forward.rs's policy, when
/// tracing is on).
#[inline(never)]
pub fn stamp(headers: &mut http::HeaderMap, trace: &[(HeaderName, HeaderValue)]) {
    headers.remove(TRACEPARENT);
    headers.remove(TRACESTATE);
    for (name, value) in trace {
        headers.insert(name.clone(), value.clone());
    }
}

/// The backend and endpoint a span is about.
fn endpoint_attributes(upstream: Option<&Upstream>, endpoint: Option<usize>) -> Vec<KeyValue> {
    let Some(upstream) = upstream else {
        return Vec::new();
    };
    let mut attributes = vec![KeyValue::new("apiagg.backend", upstream.label.clone())];
    if let Some(e) = endpoint.and_then(|i| upstream.endpoints.get(i)) {
        let authority = String::from_utf8_lossy(e.authority_header.as_bytes()).into_owned();
        attributes.push(KeyValue::new("server.address", authority));
    }
    attributes
}
