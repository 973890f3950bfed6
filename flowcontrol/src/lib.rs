//! API Priority and Fairness (`flowcontrol.apiserver.k8s.io/v1`) and per-APIService
//! concurrency caps: which FlowSchema and priority level a request belongs to, and whether it
//! runs now, waits in a fair queue, or is rejected.
//!
//! # Use
//! [`FlowControl::new`] starts with kube-apiserver's built-in configuration;
//! [`FlowControl::configure`] replaces it (file or cluster objects, plus the mandatory and
//! suggested ones); [`FlowControl::admit`] runs on every request after authorization:
//! - [`Admission::Exempt`]: run, no seat;
//! - [`Admission::Run`]: run, holding the [`Seat`] until the response ends (a watch: until its
//!   initial events are sent — drop the seat then);
//! - [`Admission::Wait`]: `Box::pin(waiter.wait())`, then run or reject;
//! - [`Admission::Rejected`]: 429 with `Retry-After`.
//!
//! Every outcome carries a [`Decision`] whose header values go out as
//! `X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID`.
//! [`FlowControl::spawn_maintenance`] runs the seat borrowing.
//!
//! # What is modelled (as kube-apiserver 1.32)
//! - The mandatory and suggested objects with their exact shares, lendable percents, queuing
//!   parameters, precedences and rules ([`defaults`]); mandatory objects always win (except the
//!   `exempt` level's `spec.exempt`, which users may change); suggested ones fill missing
//!   names; v1 defaulting and validation; dangling schemas are skipped and reported.
//! - Matching: precedence then name; User/Group/ServiceAccount subjects with `*`; resource
//!   rules (verbs, groups, `resource/subresource`, cluster scope, namespaces) and non-resource
//!   rules (`*`, exact, `/prefix/*`); `ByUser`/`ByNamespace` distinguishers; the flow hash and
//!   shuffle sharding produce the same queues as upstream for the same flow.
//! - Seats: `ceil(total × shares / Σ shares)` nominal limits; `Reject` levels reject at the
//!   limit; `Queue` levels queue (shortest queue of the hand, `queue-full`, the request wait
//!   limit → `time-out`, a dropped waiter → `cancelled`) and dispatch by virtual finish time.
//! - Borrowing every 10 s: each level gets between `nominal − lendable` and `nominal +
//!   borrowing limit`, at least its demand high-water mark up to nominal, the rest shared in
//!   proportion to its smoothed demand (avg + stddev, smoothing 0.977), summing to the total.
//! - Upstream's metric names, labels and wait buckets; the `dump_priority_levels` table.
//!
//! # What is simplified or not modelled
//! - Every request takes one seat: the work estimator (wider seats for big lists, the extra
//!   latency of writes' watch notifications) is not modelled.
//! - Only requests that waited are charged to a queue's virtual time; requests that found a
//!   free seat with nobody waiting take it with one atomic operation and belong to no queue.
//! - Demand is sampled every 100 ms (upstream integrates it on every change); the high-water
//!   mark is exact.
//! - Exempt levels count no seats (no executing gauges); their `nominal − lendable` seats are
//!   set aside in the borrowing, the lendable ones go to the others.
//! - `Retry-After` starts at 1 s and doubles (up to 32 s) or halves by the level's recent
//!   rejection rate, a simpler rule than upstream's dropped-requests tracker.
//! - Removed levels keep their last limit until they drain; queues beyond a lowered `queues`
//!   count go when idle and last.
//! - No FlowSchema status is written back (the cluster's own apiserver maintains it).

mod admission;
mod clock;
mod config;
mod control;
mod defaults;
mod error;
mod level;
mod maintenance;
mod matcher;
mod metrics;
mod objects;
mod queueset;
mod seats;
mod spec;

// What the gateway uses, and what the tests use.
pub use admission::{
    Admission, Decision, Rejection, Seat, Waiter, FLOW_SCHEMA_UID_HEADER, PRIORITY_LEVEL_UID_HEADER,
};
pub use config::{effective, Compiled, Report};
pub use control::{flow_hash, FlowControl, Settings};
pub use error::{ConfigError, Error};
pub use matcher::{Distinguisher, Request};
#[cfg(test)]
pub use objects::parse_objects;
pub use objects::{from_file, Object, API_VERSION};

#[cfg(test)]
mod tests;
