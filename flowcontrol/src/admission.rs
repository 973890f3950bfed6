//! What `admit` answers: the classification ([`Decision`]), a seat held until dropped
//! ([`Seat`]), a place in a queue ([`Waiter`]) or a refusal ([`Rejection`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use tokio::sync::oneshot;

use super::level::{Level, Work};
use super::metrics::{Reason, Series};
use super::queueset::Grant;

/// Response header naming the FlowSchema's uid.
pub const FLOW_SCHEMA_UID_HEADER: http::HeaderName =
    http::HeaderName::from_static("x-kubernetes-pf-flowschema-uid");
/// Response header naming the priority level's uid.
pub const PRIORITY_LEVEL_UID_HEADER: http::HeaderName =
    http::HeaderName::from_static("x-kubernetes-pf-prioritylevel-uid");

/// Where a request was classified: its FlowSchema and priority level, with the response
/// headers ready. Cheap to clone (one reference count).
#[derive(Clone)]
pub struct Decision(Arc<Binding>);

/// A FlowSchema bound to its priority level, built at configure time.
pub(super) struct Binding {
    /// FlowSchema name.
    pub schema: Box<str>,
    /// FlowSchema uid.
    #[cfg_attr(not(test), allow(dead_code))]
    pub schema_uid: Box<str>,
    /// Priority level uid.
    #[cfg_attr(not(test), allow(dead_code))]
    pub level_uid: Box<str>,
    /// `X-Kubernetes-PF-FlowSchema-UID` value.
    pub schema_header: HeaderValue,
    /// `X-Kubernetes-PF-PriorityLevel-UID` value.
    pub level_header: HeaderValue,
    /// The level's state.
    pub level: Arc<Level>,
    /// The (schema, level) metric series.
    pub series: Series,
}

impl Decision {
    /// Wraps a binding.
    pub(super) fn new(binding: Binding) -> Decision {
        Decision(Arc::new(binding))
    }

    /// The FlowSchema's name.
    pub fn flow_schema(&self) -> &str {
        &self.0.schema
    }

    /// The FlowSchema's uid.
    #[cfg(test)]
    pub fn flow_schema_uid(&self) -> &str {
        &self.0.schema_uid
    }

    /// The priority level's name.
    pub fn priority_level(&self) -> &str {
        &self.0.level.name
    }

    /// The priority level's uid.
    #[cfg(test)]
    pub fn priority_level_uid(&self) -> &str {
        &self.0.level_uid
    }

    /// The value of [`FLOW_SCHEMA_UID_HEADER`].
    pub fn flow_schema_header(&self) -> &HeaderValue {
        &self.0.schema_header
    }

    /// The value of [`PRIORITY_LEVEL_UID_HEADER`].
    pub fn priority_level_header(&self) -> &HeaderValue {
        &self.0.level_header
    }

    pub(super) fn series(&self) -> &Series {
        &self.0.series
    }

    pub(super) fn level(&self) -> &Arc<Level> {
        &self.0.level
    }
}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("flow_schema", &self.flow_schema())
            .field("priority_level", &self.priority_level())
            .finish()
    }
}

/// What to do with a request.
#[derive(Debug)]
pub enum Admission {
    /// Its level is exempt: run it, no seat.
    Exempt(Decision),
    /// Run it; the seat is held until dropped.
    Run(Seat),
    /// It is queued: await [`Waiter::wait`].
    Wait(Waiter),
    /// Answer 429 with `Retry-After`.
    Rejected(Rejection),
}

/// A refused request.
#[derive(Debug, Clone)]
pub struct Rejection {
    /// `queue-full`, `concurrency-limit`, `time-out` or `cancelled` (the metric's label).
    pub reason: &'static str,
    /// Where it was classified.
    pub decision: Decision,
    /// Seconds for the `Retry-After` header (0 for `cancelled`: there is nobody to tell).
    pub retry_after: u32,
}

/// The execution seats of one request at a priority level, released when dropped (which may
/// let a waiter run). Drop it when the response ends; for a watch, when its initial events are
/// sent. A write's final seats stay taken for their additional latency after the drop (the
/// client does not wait for it). It gives back exactly what it took, whatever the level's
/// configuration has become meanwhile.
#[derive(Debug)]
pub struct Seat {
    decision: Decision,
    /// Set when the seats came from a queue.
    grant: Option<Grant>,
    work: Work,
}

impl Seat {
    pub(super) fn new(decision: Decision, grant: Option<Grant>, work: Work) -> Seat {
        Seat {
            decision,
            grant,
            work,
        }
    }

    /// Where the request was classified.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The seats it holds (the larger of its initial and final seats).
    pub fn seats(&self) -> u32 {
        self.work.seats
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.decision.series().executing.dec();
        let grant = self.grant.take();
        self.decision
            .level()
            .finish(grant, self.work, &self.decision);
    }
}

/// A request waiting in a queue. Dropped before it has its seat (the client went away), it
/// leaves the queue and frees nothing else.
#[derive(Debug)]
pub struct Waiter {
    decision: Decision,
    queue: usize,
    id: u64,
    arrived: std::time::Instant,
    deadline: tokio::time::Instant,
    /// `None` once it has its answer.
    grant: Option<oneshot::Receiver<Grant>>,
    work: Work,
}

impl Waiter {
    pub(super) fn new(
        decision: Decision,
        (queue, id): (usize, u64),
        arrived: std::time::Instant,
        wait_limit: Duration,
        (grant, work): (oneshot::Receiver<Grant>, Work),
    ) -> Waiter {
        Waiter {
            decision,
            queue,
            id,
            arrived,
            deadline: tokio::time::Instant::now() + wait_limit,
            grant: Some(grant),
            work,
        }
    }

    /// Where the request was classified.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Waits for a seat, at most the request wait limit (then `time-out`).
    pub async fn wait(mut self) -> Result<Seat, Rejection> {
        let outcome = match self.grant.as_mut() {
            Some(grant) => tokio::time::timeout_at(self.deadline, grant).await,
            None => return Err(self.rejection(Reason::Cancelled, 0)),
        };
        match outcome {
            Ok(Ok(grant)) => {
                self.grant = None;
                Ok(Seat::new(self.decision.clone(), Some(grant), self.work))
            }
            Ok(Err(_)) | Err(_) => self.leave(Reason::TimeOut),
        }
    }

    /// Leaves the queue for `reason`; if the seat came meanwhile, it is returned instead.
    fn leave(&mut self, reason: Reason) -> Result<Seat, Rejection> {
        let Some(mut grant) = self.grant.take() else {
            return Err(self.rejection(Reason::Cancelled, 0));
        };
        let level = self.decision.level().clone();
        match level.cancel(self.queue, self.id) {
            Some(_left) => {
                let series = self.decision.series();
                series.unqueued(self.work.seats);
                series.rejected(reason).inc();
                let waited = level.now().saturating_duration_since(self.arrived);
                series.waited_in_vain.observe(waited.as_secs_f64());
                let retry_after = level.rejected(reason);
                Err(self.rejection(reason, retry_after))
            }
            None => match grant.try_recv() {
                Ok(grant) => Ok(Seat::new(self.decision.clone(), Some(grant), self.work)),
                Err(_) => Err(self.rejection(Reason::Cancelled, 0)),
            },
        }
    }

    fn rejection(&self, reason: Reason, retry_after: u32) -> Rejection {
        Rejection {
            reason: reason.as_str(),
            decision: self.decision.clone(),
            retry_after,
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.grant.is_some() {
            // A seat that arrived meanwhile is dropped here, outside the level's lock.
            let _ = self.leave(Reason::Cancelled);
        }
    }
}
