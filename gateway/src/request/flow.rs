//! Step 5 of the request path (phases.rs): API Priority and Fairness, as kube-apiserver wraps the
//! aggregator (`WithPriorityAndFairness`). The request is classified (FlowSchema → priority
//! level → flow), then runs at once, waits in its flow's fair queue, or is refused with 429 and
//! `Retry-After`. The seat is held until the answer ends; a watch gives it back when it is
//! handed to its backend or the delegate (kube-aggregator's `RequestDelegated`), an emulated
//! streaming list once its initial events are sent. Long-running requests other than watches (exec,
//! attach, port-forward, proxy, logs) are not held, as upstream. Every answer says where the
//! request was classified (`X-Kubernetes-PF-FlowSchema-UID`, `-PriorityLevel-UID`).
//!
//! A request takes the seats its work is estimated at (upstream's work estimator): a list as
//! many as the bytes its resource's lists have been answering (learned here, from the 2xx
//! lists relayed: [`FlowHold::count_list_bytes`]), a write more for the watches it will wake
//! (counted here while they are open), anything else one.

use apiagg_apis::Reason;
use apiagg_requestinfo::RequestInfo;

use super::audit::AuditState;
use super::refusal::Refusal;
use crate::auth::User;
use apiagg_flowcontrol::{
    Admission, Decision, FlowControl, Rejection, Request, RequestKind, RequestShape, Seat,
    WatchGuard, WorkEstimate, FLOW_SCHEMA_UID_HEADER, PRIORITY_LEVEL_UID_HEADER,
};
use apiagg_observe::Running;

/// The work of a list, watch or write; a list's answer is to be learned from, a watch is
/// counted open (in `hold`).
fn estimate(flow: &FlowControl, hold: &mut FlowHold, info: &RequestInfo<'_>) -> WorkEstimate {
    let shape = RequestShape::from_info(info);
    let estimator = flow.estimator();
    match shape.kind {
        RequestKind::Watch => hold.watch = Some(estimator.watches().opened(&shape)),
        RequestKind::List => hold.list = Some(Box::new(ListSeen::of(&shape))),
        _ => {}
    }
    estimator.estimate(&shape)
}

/// Flow control's hold on a request: its seat (until its answer ends, or until it is handed to
/// a backend), where it was classified, and its count in `apiserver_current_inflight_requests`.
#[derive(Default)]
pub(super) struct FlowHold {
    seat: Option<Seat>,
    /// Where flow control classified a request that holds no seat (exempt, refused, handed
    /// on).
    classified: Option<Decision>,
    running: Option<Running>,
    /// An open watch, counted for the estimates of the writes it will see.
    watch: Option<WatchGuard>,
    /// A list whose answer's size is learned when it ends well.
    list: Option<Box<ListSeen>>,
}

/// What is learned of a list when its answer ends with a 2xx status: its shape (its names
/// owned: the request's parse does not live that long) and the bytes of its body.
pub(super) struct ListSeen {
    group: Box<str>,
    resource: Box<str>,
    namespace: Box<str>,
    /// The shape without its names.
    shape: RequestShape<'static>,
    bytes: u64,
}

impl ListSeen {
    fn of(shape: &RequestShape<'_>) -> ListSeen {
        ListSeen {
            group: shape.group.into(),
            resource: shape.resource.into(),
            namespace: shape.namespace.into(),
            shape: RequestShape {
                kind: shape.kind,
                group: "",
                resource: "",
                subresource: "",
                namespace: "",
                single: shape.single,
                limit: shape.limit,
                selector: shape.selector,
                continued: shape.continued,
                send_initial_events: shape.send_initial_events,
                malformed: shape.malformed,
            },
            bytes: 0,
        }
    }
}

impl FlowHold {
    /// Admits the request of `user` under flow control: `Ok` once it may run (its seat, if
    /// any, held here; `running` counts it), `Err` when it is refused. The classification is
    /// noted in `audit`.
    pub(super) async fn admit(
        &mut self,
        flow: &FlowControl,
        user: &User,
        audit: &mut AuditState,
        info: &RequestInfo<'_>,
        running: impl Fn() -> Running,
    ) -> Result<(), Refusal> {
        if info.is_long_running() && info.verb != "watch" {
            return Ok(());
        }
        // Only lists, watches and writes are estimated: anything else (a GET above all) takes
        // one seat without its shape being built.
        let estimate = match RequestKind::of(info) {
            RequestKind::Other => WorkEstimate::ONE,
            _ => estimate(flow, self, info),
        };
        let request = Request {
            user: &user.name,
            groups: &user.groups,
            info,
        };
        let admission = flow.admit_estimated(&request, &estimate);
        if let Some(audit) = audit.ongoing() {
            // kube-apiserver's audit annotations of the classification.
            let decision = match &admission {
                Admission::Run(seat) => seat.decision(),
                Admission::Exempt(decision) => decision,
                Admission::Wait(waiter) => waiter.decision(),
                Admission::Rejected(rejection) => &rejection.decision,
            };
            audit.annotate("apf_pl", decision.priority_level().to_string());
            audit.annotate("apf_fs", decision.flow_schema().to_string());
        }
        match admission {
            Admission::Run(seat) => {
                self.seat = Some(seat);
                self.running = Some(running());
                Ok(())
            }
            Admission::Exempt(decision) => {
                self.classified = Some(decision);
                self.running = Some(running());
                Ok(())
            }
            Admission::Rejected(rejection) => Err(self.rejected(rejection)),
            Admission::Wait(waiter) => {
                self.classified = Some(waiter.decision().clone());
                // Boxed: waiting is the rare path; its state stays out of every request's
                // future.
                match Box::pin(waiter.wait()).await {
                    Ok(seat) => {
                        self.seat = Some(seat);
                        self.running = Some(running());
                        Ok(())
                    }
                    Err(rejection) => Err(self.rejected(rejection)),
                }
            }
        }
    }

    /// kube-apiserver's answer to a request flow control refused (classified, holding no
    /// seat).
    fn rejected(&mut self, rejection: Rejection) -> Refusal {
        let retry = rejection.retry_after.max(1);
        tracing::debug!(
            flow_schema = rejection.decision.flow_schema(),
            priority_level = rejection.decision.priority_level(),
            reason = rejection.reason,
            "flow control refused a request"
        );
        self.classified = Some(rejection.decision);
        let message = "Too many requests, please try again later.";
        Refusal::new(Reason::TooManyRequests, message).retry_after(u64::from(retry))
    }

    /// A piece of the answer's body was relayed: counted when the request is a list.
    #[inline]
    pub(super) fn count_list_bytes(&mut self, bytes: usize) {
        if let Some(list) = &mut self.list {
            list.bytes += bytes as u64;
        }
    }

    /// The answer of a list ended with a 2xx status: its size is learned.
    pub(super) fn list_answered(&mut self, flow: &FlowControl) {
        if let Some(list) = self.list.take() {
            let shape = RequestShape {
                group: &list.group,
                resource: &list.resource,
                namespace: &list.namespace,
                ..list.shape
            };
            flow.estimator().observe_list(&shape, list.bytes, None);
        }
    }

    /// The request is handed to a backend or the delegate, which run their own flow control:
    /// its seat goes back now, as kube-aggregator's `RequestDelegated` gives back a watch's
    /// (what a slow backend may hold is bounded by its per-APIService bound instead). The
    /// classification stays for the answer's headers.
    pub(super) fn delegated(&mut self) {
        if let Some(seat) = self.seat.take() {
            self.classified = Some(seat.decision().clone());
        }
        self.running = None;
    }

    /// Where flow control classified the request, if it did.
    pub(super) fn classified(&self) -> Option<&Decision> {
        self.seat
            .as_ref()
            .map(|seat| seat.decision())
            .or(self.classified.as_ref())
    }

    /// The request ended: its seat goes back, it no longer counts as running, and a watch no
    /// longer counts as open.
    pub(super) fn end(&mut self) {
        self.seat = None;
        self.running = None;
        self.watch = None;
        self.list = None;
    }
}

/// The two classification headers of a decision, for every answer.
pub fn reply_headers(decision: &Decision) -> [(http::HeaderName, &http::HeaderValue); 2] {
    [
        (FLOW_SCHEMA_UID_HEADER, decision.flow_schema_header()),
        (PRIORITY_LEVEL_UID_HEADER, decision.priority_level_header()),
    ]
}
