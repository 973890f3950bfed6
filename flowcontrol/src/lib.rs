//! API Priority and Fairness (`flowcontrol.apiserver.k8s.io/v1`) and per-APIService
//! concurrency caps: which FlowSchema and priority level a request belongs to, and whether it
//! runs now, waits in a fair queue, or is rejected.
//!
//! # Use
//! [`FlowControl::new`] starts with kube-apiserver's built-in configuration;
//! [`FlowControl::configure`] replaces it (file or cluster objects, plus the mandatory and
//! suggested ones); on every request after authorization, [`RequestShape::from_info`] and
//! [`WorkEstimator::estimate`] (via [`FlowControl::estimator`]) give its work, and
//! [`FlowControl::admit_estimated`] decides ([`FlowControl::admit`]: one seat):
//! - [`Admission::Exempt`]: run, no seat;
//! - [`Admission::Run`]: run, holding the [`Seat`] until the response ends (a watch: until its
//!   initial events are sent — drop the seat then);
//! - [`Admission::Wait`]: `Box::pin(waiter.wait())`, then run or reject;
//! - [`Admission::Rejected`]: 429 with `Retry-After`.
//!
//! Every outcome carries a [`Decision`] whose header values go out as
//! `X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID`.
//! [`FlowControl::spawn_maintenance`] runs the seat borrowing. The estimator learns from the
//! gateway: [`WorkEstimator::observe_list`] when a list (or a watch's initial list) answers
//! 2xx, [`WatchCounts::opened`] (via [`WorkEstimator::watches`]) for as long as a watch is
//! open.
//!
//! # What is modelled (as kube-apiserver 1.34)
//! - The mandatory and suggested objects with their exact shares, lendable percents, queuing
//!   parameters, precedences and rules ([`defaults`]); mandatory objects always win (except the
//!   `exempt` level's `spec.exempt`, which users may change); suggested ones fill missing
//!   names; v1 defaulting and validation; dangling schemas are skipped and reported.
//! - Matching: precedence then name; User/Group/ServiceAccount subjects with `*`; resource
//!   rules (verbs, groups, `resource/subresource`, cluster scope, namespaces) and non-resource
//!   rules (`*`, exact, `/prefix/*`); `ByUser`/`ByNamespace` distinguishers; the flow hash and
//!   shuffle sharding produce the same queues as upstream for the same flow.
//! - Seats: `ceil(total × shares / Σ shares)` nominal limits; `Reject` levels reject at the
//!   limit; `Queue` levels queue (the queue of the hand with the least work waiting,
//!   `queue-full`, the request wait limit → `time-out`, a dropped waiter → `cancelled`) and
//!   dispatch by virtual finish time.
//! - Borrowing every 10 s: each level gets between `nominal − lendable` and `nominal +
//!   borrowing limit`, at least its demand high-water mark up to nominal, the rest shared in
//!   proportion to its smoothed demand (avg + stddev, smoothing 0.977), summing to the total.
//! - Work estimation ([`WorkEstimator`]): a list, or a watch with
//!   `sendInitialEvents=true`, takes `ceil(expected bytes / 100 KB)` seats in `[1, 100]`
//!   (`limit` × object size caps the bytes, a selector reads at least half the list, one name
//!   one object); a write takes one seat plus, from 10 interested watches on, `ceil(watches /
//!   10)` final seats (at most 10, else longer) held 5 ms after it ends; anything else one
//!   seat. A queuing level caps a request at `max(1, min(ceil(15% × nominal), nominal /
//!   handSize))` seats.
//! - Wide requests: a request takes all its seats at once (one compare-and-swap on the fast
//!   path); the queue set dispatches the head with the smallest virtual finish time only when
//!   its seats fit, else nobody (`request_dispatch_no_accommodation_total`); a request wider
//!   than the limit runs when no seat is taken; virtual time charges seat-seconds and
//!   advances with the seats asked for; final seats linger (a timer per level gives them
//!   back, never blocking). Demand and borrowing count seats.
//! - Upstream's metric names, labels and buckets (`current_executing_seats` and the
//!   deprecated `request_concurrency_in_use`, `current_inqueue_seats`,
//!   `work_estimated_seats`); the `dump_priority_levels` table.
//!
//! # What is simplified or not modelled
//! - kube-apiserver reads object counts and sizes from its storage; apiagg, which has none,
//!   learns each resource's list size (per cluster-wide or one-namespace scope, growth taken
//!   at once, shrinking by halves) and object size from the list answers it proxies; one it
//!   has not seen a list of costs 1 seat. It does not cap lists at the 1 MB (10 seats)
//!   upstream assumes for lists served from its watch cache. Watches of one object by name are
//!   not counted.
//! - Only requests that waited are charged to a queue's virtual time; requests that found
//!   free seats with nobody waiting take them with one atomic operation and belong to no
//!   queue.
//! - A request wider than the limit waits for no seat to be taken (lingering ones included);
//!   upstream waits for no request to execute.
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
mod estimate;
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
pub use estimate::{
    RequestKind, RequestShape, WatchCounts, WatchGuard, WorkEstimate, WorkEstimator,
    BYTES_PER_SEAT, EVENT_DURATION, MAX_LIST_SEATS, MAX_MUTATING_SEATS, MIN_SEATS,
    WATCHES_PER_SEAT,
};
pub use matcher::{Distinguisher, Request};
#[cfg(test)]
pub use objects::parse_objects;
pub use objects::{from_file, Object, API_VERSION};

#[cfg(test)]
mod tests;
