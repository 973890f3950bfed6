//! The audit of one request, as kube-apiserver's `WithAudit` filter and `AuditContext` keep it:
//! created after authentication when the policy says the request is audited, annotated along the
//! way (authorization decision, anything else), fed the bodies the policy wants (bounded), and
//! finished once with the response code. Every stage hands an event to the backends' queues and
//! returns at once; nothing here serializes or waits.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use apiagg_requestinfo::RequestInfo;

use super::event::{Body, Common, Encoding, Event, Omitted, ResponseStatus};
use super::id::AuditId;
use super::policy::{Decision, Level, Stage};
use super::sink::Sink;

/// The annotation with the authorization decision (`allow` or `forbid`), as upstream.
pub const DECISION_ANNOTATION: &str = "authorization.k8s.io/decision";
/// The annotation with the authorizer's reason, as upstream.
pub const REASON_ANNOTATION: &str = "authorization.k8s.io/reason";

/// Who made a request, as the audit events record it (`authentication.k8s.io/v1` `UserInfo`).
/// The request path implements it for its user type and hands it over as an `Arc`, so an event
/// holds the user without copying it.
pub trait Identity: Send + Sync {
    /// User name.
    fn username(&self) -> &str;
    /// UID (empty when unknown).
    fn uid(&self) -> &str;
    /// Groups, in order.
    fn groups(&self) -> &[String];
    /// Extra attributes (written sorted by key, as Go writes a map).
    fn extra(&self) -> &[(String, Vec<String>)];
}

/// What [`Auditor::begin`](super::Auditor::begin) needs to know about a request.
pub struct Begin<'a> {
    /// The audit ID ([`AuditId::from_header`] or [`AuditId::new`]).
    pub id: AuditId,
    /// The authenticated user (the policy is evaluated for this user).
    pub user: Arc<dyn Identity>,
    /// The user the request acts as, when impersonating and already known.
    pub impersonated: Option<Arc<dyn Identity>>,
    /// The parsed request.
    pub info: &'a RequestInfo<'a>,
    /// Path and query as received (Go's `URL.RequestURI()`).
    pub request_uri: &'a str,
    /// The client's addresses: `X-Forwarded-For` entries, `X-Real-Ip`, then the peer (upstream's
    /// `utilnet.SourceIPs`).
    pub source_ips: &'a [IpAddr],
    /// The `User-Agent` header.
    pub user_agent: Option<&'a str>,
    /// When the request arrived.
    pub received: SystemTime,
}

/// The outcome of an answer apiagg wrote itself as a `metav1.Status` (401, 403, 429, 503…):
/// recorded in `responseStatus` beside the code, as upstream records its error answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSummary {
    /// `Success` or `Failure`.
    pub status: Cow<'static, str>,
    /// The human-readable message.
    pub message: String,
    /// The machine-readable reason (`Forbidden`, `TooManyRequests`…), may be empty.
    pub reason: Cow<'static, str>,
}

/// What was captured of a body so far.
enum Capture {
    /// Not wanted (level too low, long-running request) or already handed to an event.
    Off,
    /// The bytes so far.
    On(Vec<u8>),
    /// More than the limit arrived; nothing is kept.
    TooLarge,
}

impl Capture {
    fn push(&mut self, piece: &[u8], limit: usize) {
        if let Capture::On(buffer) = self {
            if buffer.len() + piece.len() > limit {
                *self = Capture::TooLarge;
            } else {
                buffer.extend_from_slice(piece);
            }
        }
    }

    /// The body for an event (`None` when nothing was sent or nothing is wanted).
    fn take(&mut self, sink: &Sink, omit: bool, encoding: Encoding) -> Option<Arc<Body>> {
        let body = match std::mem::replace(self, Capture::Off) {
            Capture::Off => return None,
            Capture::On(bytes) if bytes.is_empty() => return None,
            Capture::On(bytes) => match sink.budget.reserve(bytes.len()) {
                Some(reservation) => {
                    Body::captured(bytes, omit, encoding, sink.body_limit, reservation)
                }
                None => Body::omitted(Omitted::OverBudget),
            },
            Capture::TooLarge => Body::omitted(Omitted::TooLarge {
                limit: sink.body_limit,
            }),
        };
        Some(Arc::new(body))
    }
}

/// The audit of one request (boxed: the request path keeps one pointer per request).
pub struct RequestAudit {
    sink: Arc<Sink>,
    common: Arc<Common>,
    decision: Decision,
    long_running: bool,
    impersonated: Option<Arc<dyn Identity>>,
    annotations: Vec<(&'static str, String)>,
    request: Capture,
    /// How the request body is encoded (its `Content-Type`).
    request_encoding: Encoding,
    response: Capture,
    /// The request body once an event has carried it (shared by later events).
    request_object: Option<Arc<Body>>,
    code: Option<u16>,
    started: bool,
    finished: bool,
}

impl RequestAudit {
    /// Records a request the policy audits at `decision` and writes `RequestReceived`.
    pub(super) fn start(sink: Arc<Sink>, mut begin: Begin<'_>, decision: Decision) -> RequestAudit {
        let long_running = begin.info.is_long_running();
        let impersonated = begin.impersonated.take();
        // Bodies go into `ResponseComplete` (or `Panic`); a watch or exec never ends in one body.
        let completes = !decision.omit_stages.contains(Stage::ResponseComplete)
            || !decision.omit_stages.contains(Stage::Panic);
        let wants = |level| {
            if decision.level >= level && !long_running && completes {
                Capture::On(Vec::new())
            } else {
                Capture::Off
            }
        };
        let mut audit = RequestAudit {
            common: Arc::new(Common::new(begin)),
            request: wants(Level::Request),
            request_encoding: Encoding::Json,
            response: wants(Level::RequestResponse),
            sink,
            decision,
            long_running,
            impersonated,
            annotations: Vec::new(),
            request_object: None,
            code: None,
            started: false,
            finished: false,
        };
        audit.emit(Stage::RequestReceived, None, None);
        audit
    }

    /// The level the policy chose (never `None`: such requests get no `RequestAudit`).
    #[cfg(test)]
    pub fn level(&self) -> Level {
        self.decision.level
    }

    /// Whether the request body should be passed to [`request_body`](Self::request_body):
    /// level `Request` or more, and not a long-running request.
    pub fn wants_request_body(&self) -> bool {
        matches!(self.request, Capture::On(_))
    }

    /// Whether the response body should be passed to [`response_body`](Self::response_body):
    /// level `RequestResponse`, and not a long-running request (a watch never ends).
    pub fn wants_response_body(&self) -> bool {
        matches!(self.response, Capture::On(_))
    }

    /// Records the authorization decision (`allow` or `forbid`) and the authorizer's reason as
    /// the annotations kube-apiserver writes.
    pub fn authorized(&mut self, decision: &'static str, reason: &str) {
        self.annotate(DECISION_ANNOTATION, decision.to_string());
        self.annotate(REASON_ANNOTATION, reason.to_string());
    }

    /// Records that no authorizer could decide (an error): only the reason `internal error`,
    /// no decision, as kube-apiserver's `WithAuthorization`.
    pub fn authorization_failed(&mut self) {
        self.annotate(REASON_ANNOTATION, "internal error".to_string());
    }

    /// Records the user the request acts as (impersonation), for the events still to come.
    pub fn impersonating(&mut self, user: Arc<dyn Identity>) {
        self.impersonated = Some(user);
    }

    /// Adds an annotation to the events still to come. As upstream, the first value set for a
    /// key stays; a different later value is ignored.
    pub fn annotate(&mut self, key: &'static str, value: String) {
        match self.annotations.iter().find(|(k, _)| *k == key) {
            Some((_, old)) if *old != value => {
                tracing::debug!(audit_id = %self.common.id, key, "audit annotation already set");
            }
            Some(_) => {}
            None => self.annotations.push((key, value)),
        }
    }

    /// The request body's `Content-Type`, when [`wants_request_body`](Self::wants_request_body):
    /// CBOR (`application/cbor`, `application/apply-patch+cbor`) and YAML (`application/yaml`,
    /// `application/apply-patch+yaml`) bodies are transcoded to JSON when the event is written
    /// (kubernetes#139419); anything else is recorded only when it is JSON.
    pub fn request_content_type(&mut self, content_type: &str) {
        self.request_encoding = Encoding::of_content_type(content_type);
    }

    /// A piece of the request body, in order. Kept up to the body limit; past it the body is
    /// dropped and the event says why.
    pub fn request_body(&mut self, piece: &[u8]) {
        self.request.push(piece, self.sink.body_limit);
    }

    /// A piece of the response body, in order, bounded as the request body.
    pub fn response_body(&mut self, piece: &[u8]) {
        self.response.push(piece, self.sink.body_limit);
    }

    /// The response headers are being sent with `code`. For long-running requests this writes
    /// the `ResponseStarted` event (once).
    pub fn response_started(&mut self, code: u16) {
        if self.code.is_none() {
            self.code = Some(code);
        }
        if self.long_running && !self.started {
            self.started = true;
            let status = ResponseStatus {
                code,
                summary: None,
            };
            self.emit(Stage::ResponseStarted, Some(status), None);
        }
    }

    /// The request is done: writes `ResponseComplete` with `code` (0 when no answer was sent:
    /// recorded as upstream records a connection closed early) and, for apiagg's own `Status`
    /// answers, their status, message and reason.
    // Boxed: the request path keeps the audit boxed and hands the box back.
    #[allow(clippy::boxed_local)]
    pub fn complete(mut self: Box<Self>, code: u16, status: Option<StatusSummary>) {
        self.finish(code, status);
    }

    /// Handling the request failed unexpectedly: writes the `Panic` event (code 500) instead of
    /// `ResponseComplete`.
    #[allow(clippy::boxed_local)]
    #[cfg(test)]
    pub fn panicked(mut self: Box<Self>, message: &str) {
        self.finished = true;
        let status = ResponseStatus {
            code: 500,
            summary: Some(StatusSummary {
                status: "Failure".into(),
                message: format!("APIServer panic'd: {message}"),
                reason: "InternalError".into(),
            }),
        };
        let annotations = std::mem::take(&mut self.annotations);
        self.emit(Stage::Panic, Some(status), Some(annotations));
    }

    fn finish(&mut self, code: u16, summary: Option<StatusSummary>) {
        if self.finished {
            return;
        }
        self.finished = true;
        let code = if code != 0 { Some(code) } else { self.code };
        let status = match code {
            Some(code) => ResponseStatus { code, summary },
            // Neither a code nor a body was sent (upstream's faked status).
            None => ResponseStatus {
                code: 200,
                summary: Some(StatusSummary {
                    status: "Success".into(),
                    message: "Connection closed early".into(),
                    reason: "".into(),
                }),
            },
        };
        if self.long_running && !self.started {
            self.started = true;
            let started = ResponseStatus {
                code: status.code,
                summary: None,
            };
            self.emit(Stage::ResponseStarted, Some(started), None);
        }
        let annotations = std::mem::take(&mut self.annotations);
        self.emit(Stage::ResponseComplete, Some(status), Some(annotations));
    }

    /// Hands the event of `stage` to the backends, unless the policy omits the stage.
    /// `annotations` moves the final set into the event; `None` copies the current one.
    fn emit(
        &mut self,
        stage: Stage,
        status: Option<ResponseStatus>,
        annotations: Option<Vec<(&'static str, String)>>,
    ) {
        if self.decision.omit_stages.contains(stage) {
            return;
        }
        let omit = self.decision.omit_managed_fields;
        let (request_object, response_object) = match stage {
            Stage::RequestReceived => (None, None),
            Stage::ResponseStarted => (self.request_object(), None),
            Stage::ResponseComplete | Stage::Panic => {
                let response = self.response.take(&self.sink, omit, Encoding::Json);
                (self.request_object(), response)
            }
        };
        let event = Event {
            common: self.common.clone(),
            level: self.decision.level,
            stage,
            stage_time: match stage {
                Stage::RequestReceived => self.common.received,
                _ => SystemTime::now(),
            },
            impersonated: self.impersonated.clone(),
            status,
            annotations: annotations.unwrap_or_else(|| self.annotations.clone()),
            request_object,
            response_object,
        };
        self.sink.emit(event);
    }

    fn request_object(&mut self) -> Option<Arc<Body>> {
        let omit = self.decision.omit_managed_fields;
        if let Some(body) = self.request.take(&self.sink, omit, self.request_encoding) {
            self.request_object = Some(body);
        }
        self.request_object.clone()
    }
}

impl Drop for RequestAudit {
    /// A request dropped without [`complete`](RequestAudit::complete) (its future was cancelled)
    /// still gets its `ResponseComplete`, as upstream's deferred write; one dropped while its
    /// task unwinds from a panic gets the `Panic` stage.
    fn drop(&mut self) {
        if std::thread::panicking() && !self.finished {
            self.finished = true;
            let status = ResponseStatus {
                code: 500,
                summary: Some(StatusSummary {
                    status: "Failure".into(),
                    message: "APIServer panic'd while serving the request".to_string(),
                    reason: "InternalError".into(),
                }),
            };
            let annotations = std::mem::take(&mut self.annotations);
            self.emit(Stage::Panic, Some(status), Some(annotations));
            return;
        }
        self.finish(0, None);
    }
}

#[cfg(test)]
mod tests;
