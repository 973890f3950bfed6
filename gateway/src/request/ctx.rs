//! The state of one request and what happens to it, shared by every step of the request path:
//! [`RequestCtx`] (its parts are small types in the files of their concerns, below this one),
//! [`Step`] and [`Dispatch`]. Nothing here imports a step, so every step can import this.
//! The one writer of the answers apiagg gives itself is here too ([`RequestCtx::answer`]).

use std::sync::Arc;
use std::time::Instant;

use pingora_error::Result;

use super::audit::AuditState;
use super::bounds::Bounds;
use super::flow::{self, FlowHold};
use super::refusal::Refusal;
use super::reply::Reply;
use super::trace::Trace;
use super::watch_position::WatchPosition;
use crate::auth::{Authenticated, User};
use crate::backends::Upstream;
use apiagg_audit::AUDIT_ID_HEADER;
use apiagg_observe::{GroupVersionMetrics, InFlight, RouteKind};

/// A client's request: an HTTP/1.1 request or an HTTP/2 stream.
pub(crate) use pingora_core::protocols::http::ServerSession as Session;

/// What happens to a request once the ordered checks ran (phases.rs).
pub(super) enum Step {
    /// apiagg answers it itself: a document, or the refusal of a check.
    Answer(RouteKind, Reply),
    /// It is forwarded (proxy.rs).
    Forward(Dispatch),
    /// It asks for an upgrade: tunnelled (upgrade.rs).
    Tunnel(Dispatch),
    /// It was served already (an emulated streaming list, the APIService API).
    Served,
}

impl Step {
    /// The answer to a request a check refused.
    pub(super) fn refused(refusal: Refusal) -> Step {
        Step::Answer(RouteKind::Refused, refusal.into())
    }
}

/// Where a request to a backend goes, decided once (dispatch.rs) and taken by value by what
/// sends it.
pub(super) struct Dispatch {
    /// The backend: a remote APIService's, or the delegate.
    pub(super) upstream: Arc<Upstream>,
    /// How the caller is stated to it.
    pub(super) to: To,
}

/// How a backend learns who the caller is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum To {
    /// A remote APIService's backend: the caller as `X-Remote-*`, over the front-proxy client
    /// certificate.
    Remote,
    /// The delegate, with the caller's own credentials (it authenticates them itself).
    DelegateAsCaller,
    /// The delegate, on apiagg's own connections: apiagg's credentials, the caller as
    /// `Impersonate-*`.
    DelegateImpersonating,
}

impl Dispatch {
    /// Whether the request goes on apiagg's own connections to the delegate.
    pub(super) fn own_connection(&self) -> bool {
        self.to == To::DelegateImpersonating
    }

    /// The route kind of the request (for its metrics).
    pub(super) fn kind(&self) -> RouteKind {
        match self.to {
            To::Remote => RouteKind::Proxy,
            To::DelegateAsCaller | To::DelegateImpersonating => RouteKind::Delegate,
        }
    }
}

/// Per-request state, grouped by concern: each group is a small type with its methods, in the
/// file of its concern.
pub struct RequestCtx {
    pub(super) started: Instant,
    /// Whether every route was installed when the request arrived (k8s.io/apiserver's
    /// `pkg/endpoints/filters/mux_discovery_complete.go`).
    pub(super) arrived_complete: bool,
    /// The caller, once authenticated.
    pub(super) caller: Option<Authenticated>,
    /// What the request came to, for its answer and its metrics.
    pub(super) outcome: Outcome,
    /// What bounds the request: its deadline, a watch's lifetime, its places in the backend's
    /// bound and in the open-file budget (bounds.rs).
    pub(super) bounds: Bounds,
    /// Flow control's hold on the request (flow.rs).
    pub(super) flow: FlowHold,
    /// The request's audit (audit.rs).
    pub(super) audit: AuditState,
    /// The request's spans, when tracing is on (trace.rs).
    pub(super) trace: Trace,
    /// A watch to a delegate with several endpoints: where it stands, to resume elsewhere
    /// when its API server dies (watch_position.rs; boxed: no other request pays for it).
    pub(super) resume: Option<Box<WatchPosition>>,
    pub(super) in_flight: Option<InFlight>,
}

/// What a request came to: the route it took and what apiagg answered or changed of it.
pub(super) struct Outcome {
    pub(super) kind: RouteKind,
    /// Status of a response apiagg wrote itself (for metrics).
    pub(super) code: u16,
    /// `subresource` label of `apiserver_request_total` for documents apiagg serves itself.
    pub(super) subresource: &'static str,
    /// Replacement body for an upstream response apiagg rewrites (`Some` until sent).
    pub(super) replacement: Option<bytes::Bytes>,
    /// apiagg ended the answer itself (a watch at shutdown): not a failure to log.
    pub(super) ended_by_us: bool,
    /// A streaming list passed through to a backend believed to honour them.
    pub(super) streaming_list: bool,
    /// The backend the request went to, and the endpoint of its last attempt: its answers
    /// count in its series, its failures are logged under its name.
    pub(super) backend: Option<(Arc<Upstream>, usize)>,
    /// The series of the unavailable APIService answered for (its 503s count as its answers,
    /// as a forwarded request counts in its upstream's).
    pub(super) unavailable: Option<Arc<GroupVersionMetrics>>,
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
            backend: None,
            unavailable: None,
        }
    }
}

impl Outcome {
    /// The request goes to `upstream`.
    pub(super) fn sent_to(&mut self, upstream: &Arc<Upstream>) {
        self.backend = Some((upstream.clone(), 0));
    }

    /// The backend the request went to.
    pub(super) fn upstream(&self) -> Option<&Arc<Upstream>> {
        self.backend.as_ref().map(|(upstream, _)| upstream)
    }

    /// The name of the backend, for logs.
    pub(super) fn backend_label(&self) -> &str {
        self.upstream().map_or("no backend", |u| u.label.as_str())
    }

    /// The backend and the endpoint of the last attempt, as a failure's message names them.
    pub(super) fn target(&self) -> String {
        match &self.backend {
            None => "no backend".to_string(),
            Some((upstream, index)) => {
                let endpoint = upstream.endpoints.get(*index);
                let authority = endpoint.map_or("", |e| e.authority.as_str());
                format!("{} at {authority}", upstream.label)
            }
        }
    }

    /// The series of the APIService the request was answered for, if any.
    pub(super) fn series(&self) -> Option<&GroupVersionMetrics> {
        let served = self.upstream().and_then(|u| u.metrics.as_deref());
        served.or(self.unavailable.as_deref())
    }
}

impl RequestCtx {
    /// The caller, or anonymous before authentication (every request routed is authenticated
    /// first; anonymous is only a safe default).
    pub(super) fn user(&self) -> &User {
        self.caller
            .as_ref()
            .map_or_else(|| &**User::anonymous(), |c| &*c.user)
    }

    /// Notes the authorization decision (none: an error) and its reason, and the impersonated
    /// user, in the request's audit, as kube-apiserver's `WithAuthorization` annotates it.
    pub(super) fn audit_authorized(&mut self, allowed: Option<bool>, reason: &str) {
        let impersonated = self
            .caller
            .as_ref()
            .filter(|c| c.method == crate::auth::Method::Impersonation)
            .map(|c| c.user.clone());
        self.audit.authorized(allowed, reason, impersonated);
    }

    /// The headers every answer apiagg writes itself carries: the audit ID and flow control's
    /// classification.
    pub(super) fn answer_headers(&self) -> Vec<(http::HeaderName, http::HeaderValue)> {
        let mut headers = Vec::new();
        if let Some(decision) = self.flow.classified() {
            for (name, value) in flow::reply_headers(decision) {
                headers.push((name, value.clone()));
            }
        }
        if let Some(id) = self.audit.id_header() {
            headers.push((AUDIT_ID_HEADER, id));
        }
        headers
    }

    /// Writes an answer apiagg gives itself (a document, a refusal, the Status of a request
    /// that could not be proxied, an answer of the APIService API), the one writer of them:
    /// it carries the audit ID and flow control's classification, is noted in the audit, and
    /// its code goes to the metrics and the span when the request ends (`record`, serve.rs).
    pub(super) async fn answer(&mut self, session: &mut Session, reply: Reply) -> Result<()> {
        self.outcome.code = reply.code();
        self.audit.own_answer(&reply);
        let reply = self
            .answer_headers()
            .into_iter()
            .fold(reply, |r, (name, value)| r.header(name, value));
        reply.send(session).await
    }
}
