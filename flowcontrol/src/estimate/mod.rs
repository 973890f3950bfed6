//! The work estimator (upstream `k8s.io/apiserver/pkg/util/flowcontrol/request`): how many
//! seats a request occupies while it executes (`initial_seats`), and how many it keeps for how
//! long after it ends (`final_seats` for `additional_latency`, the fan-out of a write's watch
//! events).
//!
//! - list, and watch with `sendInitialEvents=true` (its initial events are a list): the bytes the
//!   answer is expected to hold ÷ 100 KB, in `[1, 100]` (upstream's `SizeBasedListCostEstimate`,
//!   on by default since 1.34). kube-apiserver reads object counts and sizes from its storage;
//!   apiagg has none, so it learns them from the list answers it proxies
//!   ([`WorkEstimator::observe_list`]). A resource it has not seen a list of costs 1 seat, as
//!   upstream answers for a resource it has no statistics of (an aggregated one).
//! - create, update, patch, delete: 1 seat, plus, from 10 interested watches
//!   on, `ceil(watches / 10)` final seats (at most 10) for 5 ms per seat-equivalent
//!   ([`WorkEstimate::mutating`]); the watches are counted by [`WatchCounts`].
//! - everything else (get, deletecollection, a watch without initial events, non-resource
//!   requests): 1 seat, as upstream.
//!
//! A priority level narrows an estimate further when it admits it (at most 15% of its nominal
//! limit and `nominal / handSize` per request), see [`crate::FlowControl::admit_estimated`].

mod list;
mod table;
mod watch;

use std::time::Duration;

use apiagg_requestinfo::{decode_value, QueryParams, RequestInfo};

use self::list::ListStats;
use self::table::{Key, Table};
pub(crate) use self::watch::OpenWatches;
pub use self::watch::{WatchCounts, WatchGuard};

/// Fewest seats a request takes (upstream `minimumSeats`).
pub const MIN_SEATS: u32 = 1;
/// Most seats a list takes (upstream `MaximumListSeatsLimit` with `SizeBasedListCostEstimate`).
pub const MAX_LIST_SEATS: u32 = 100;
/// Most final seats of a write (upstream `MaximumMutatingSeatsLimit`).
pub const MAX_MUTATING_SEATS: u32 = 10;
/// Bytes of a list answer per seat (upstream `bytesPerSeat`).
pub const BYTES_PER_SEAT: u64 = 100_000;
/// Watches whose events cost one seat (upstream `watchesPerSeat`).
pub const WATCHES_PER_SEAT: u64 = 10;
/// What one watch event costs a seat (upstream `eventAdditionalDuration`).
pub const EVENT_DURATION: Duration = Duration::from_millis(5);

/// What a request asks for, as far as its cost goes; borrowed from its [`RequestInfo`], so
/// building one allocates nothing (unless the `limit` value is percent-encoded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestShape<'a> {
    /// What kind of work it is.
    pub kind: RequestKind,
    /// API group (empty for the core group).
    pub group: &'a str,
    /// Resource.
    pub resource: &'a str,
    /// Subresource.
    pub subresource: &'a str,
    /// Namespace (empty when cluster-wide).
    pub namespace: &'a str,
    /// It names one object (in the path, or a list's exact `metadata.name` field selector).
    pub single: bool,
    /// `limit`, when positive.
    pub limit: Option<u64>,
    /// A label or field selector is given (the answer is a subset).
    pub selector: bool,
    /// A `continue` token is given (the answer is a later page).
    pub continued: bool,
    /// `sendInitialEvents=true` (a watch that starts with a list).
    pub send_initial_events: bool,
    /// The list options do not parse (`limit` or `timeoutSeconds` not an integer); upstream
    /// charges such a list the most seats, as it will fail anyway.
    pub malformed: bool,
}

/// The kind of work a request does, for the estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// `list`
    List,
    /// `watch`
    Watch,
    /// `create`, `update`, `patch`, `delete`
    Mutating,
    /// Everything else: `get`, `proxy`, non-resource requests.
    Other,
}

impl RequestKind {
    /// The kind of a parsed request: what the estimate looks at before building its shape
    /// (`Other` is always one seat).
    pub fn of(info: &RequestInfo<'_>) -> RequestKind {
        if !info.resource_request {
            return RequestKind::Other;
        }
        match &*info.verb {
            "list" => RequestKind::List,
            "watch" => RequestKind::Watch,
            // As upstream: `deletecollection` is not estimated as a write (one seat).
            "create" | "update" | "patch" | "delete" => RequestKind::Mutating,
            _ => RequestKind::Other,
        }
    }
}

impl<'a> RequestShape<'a> {
    /// The shape of a parsed request.
    pub fn from_info(info: &'a RequestInfo<'_>) -> RequestShape<'a> {
        let kind = RequestKind::of(info);
        let query = &info.query;
        let (limit, bad_limit) = integer(query.limit);
        let (_, bad_timeout) = integer(query.timeout_seconds);
        RequestShape {
            kind,
            group: info.group,
            resource: info.resource,
            subresource: info.subresource,
            namespace: info.namespace,
            single: !info.name.is_empty(),
            limit: limit.and_then(|l| u64::try_from(l).ok()).filter(|&l| l > 0),
            selector: query.label_selector.is_some_and(|s| !s.is_empty())
                || query.field_selector.is_some_and(|s| !s.is_empty()),
            continued: query.continue_token.is_some_and(|s| !s.is_empty()),
            send_initial_events: QueryParams::flag(query.send_initial_events) == Some(true),
            malformed: bad_limit || bad_timeout,
        }
    }

    /// The key of its list statistics: `(group, resource, "" | "*")`, `*` standing for "one
    /// namespace" (no namespace is called `*`).
    fn list_key(&self) -> Key<'a> {
        let scope = if self.namespace.is_empty() { "" } else { "*" };
        Key::new(self.group, self.resource, scope)
    }
}

/// An integer query value: `(value, malformed)`.
fn integer(raw: Option<&str>) -> (Option<i64>, bool) {
    match raw {
        None => (None, false),
        Some(raw) => match decode_value(raw).parse::<i64>() {
            Ok(value) => (Some(value), false),
            Err(_) => (None, true),
        },
    }
}

/// The work of one request (upstream `WorkEstimate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkEstimate {
    /// Seats occupied while it executes.
    pub initial_seats: u32,
    /// Seats occupied after it ends, for `additional_latency` (0: none).
    pub final_seats: u32,
    /// How long the final seats stay occupied after it ends; the client does not wait for it.
    pub additional_latency: Duration,
}

impl Default for WorkEstimate {
    fn default() -> Self {
        WorkEstimate::ONE
    }
}

impl WorkEstimate {
    /// One seat, nothing after.
    pub const ONE: WorkEstimate = WorkEstimate {
        initial_seats: MIN_SEATS,
        final_seats: 0,
        additional_latency: Duration::ZERO,
    };

    /// The most seats it occupies at once (what it takes from dispatch to its very end).
    pub fn max_seats(&self) -> u32 {
        self.initial_seats.max(self.final_seats)
    }

    /// A list expected to answer `bytes`: `ceil(bytes / 100 KB)` seats in `[1, 100]`.
    pub fn list(bytes: u64) -> WorkEstimate {
        let seats = bytes.div_ceil(BYTES_PER_SEAT);
        WorkEstimate {
            initial_seats: clamp(seats, MAX_LIST_SEATS),
            ..WorkEstimate::ONE
        }
    }

    /// A write that `watchers` watches are interested in. Below 10 watches the events are
    /// deemed free (upstream drops the small final work); from 10 on, `ceil(watchers / 10)`
    /// final seats for 5 ms each. Beyond 10 final seats the same work is reshaped: 10 seats
    /// for proportionally longer.
    pub fn mutating(watchers: u64) -> WorkEstimate {
        if watchers < WATCHES_PER_SEAT {
            return WorkEstimate::ONE;
        }
        let wanted = watchers.div_ceil(WATCHES_PER_SEAT);
        let seats = clamp(wanted, MAX_MUTATING_SEATS);
        WorkEstimate {
            initial_seats: MIN_SEATS,
            final_seats: seats,
            additional_latency: stretch(EVENT_DURATION, wanted, seats),
        }
    }
}

/// `seats` clamped to `[1, max]`.
fn clamp(seats: u64, max: u32) -> u32 {
    u32::try_from(seats)
        .unwrap_or(u32::MAX)
        .clamp(MIN_SEATS, max)
}

/// The duration that keeps the work of `from` seats for `latency` on `to` seats.
pub(crate) fn stretch(latency: Duration, from: u64, to: u32) -> Duration {
    if to == 0 {
        return latency;
    }
    let nanos = latency.as_nanos().saturating_mul(u128::from(from)) / u128::from(to);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Estimates the work of requests from what it learns of list answers and open watches.
/// `Send + Sync`; owned by [`crate::FlowControl`] ([`crate::FlowControl::estimator`]).
pub struct WorkEstimator {
    lists: Table<ListStats>,
    watches: WatchCounts,
}

impl Default for WorkEstimator {
    fn default() -> Self {
        WorkEstimator::new()
    }
}

impl WorkEstimator {
    /// Most (group, resource, scope) keys of list statistics kept.
    pub const MAX_LIST_KEYS: usize = 4096;

    /// An estimator that knows nothing yet.
    pub fn new() -> WorkEstimator {
        WorkEstimator {
            lists: Table::new(Self::MAX_LIST_KEYS),
            watches: WatchCounts::new(),
        }
    }

    /// The work of `shape` (before its priority level's per-request limit).
    pub fn estimate(&self, shape: &RequestShape<'_>) -> WorkEstimate {
        match shape.kind {
            RequestKind::List => self.list(shape),
            RequestKind::Watch if shape.send_initial_events => self.list(shape),
            RequestKind::Mutating if exempt_from_watch_events(shape) => WorkEstimate::ONE,
            RequestKind::Mutating => WorkEstimate::mutating(self.watches.interested(shape)),
            RequestKind::Watch | RequestKind::Other => WorkEstimate::ONE,
        }
    }

    fn list(&self, shape: &RequestShape<'_>) -> WorkEstimate {
        if shape.malformed {
            return WorkEstimate {
                initial_seats: MAX_LIST_SEATS,
                ..WorkEstimate::ONE
            };
        }
        match self.lists.get(&shape.list_key()) {
            Some(stats) => WorkEstimate::list(stats.expected_bytes(shape)),
            None => WorkEstimate::ONE,
        }
    }

    /// Learns from a list answer that ended with a 2xx status: `bytes` of body, holding
    /// `items` objects when the caller counted them.
    pub fn observe_list(&self, shape: &RequestShape<'_>, bytes: u64, items: Option<u64>) {
        if shape.kind != RequestKind::List
            && !(shape.kind == RequestKind::Watch && shape.send_initial_events)
        {
            return;
        }
        let whole = list::is_whole(shape, items);
        self.lists.update(
            &shape.list_key(),
            |old| Some(ListStats::observe(old, bytes, items, whole)),
            ListStats::keep_score,
        );
    }

    /// The open watches, by resource and namespace.
    pub fn watches(&self) -> &WatchCounts {
        &self.watches
    }

    /// Keys of list statistics held (tests).
    #[cfg(test)]
    pub(crate) fn list_keys(&self) -> usize {
        self.lists.len()
    }
}

/// Writes that produce no watch event (upstream: creating a service account token).
fn exempt_from_watch_events(shape: &RequestShape<'_>) -> bool {
    shape.resource == "serviceaccounts" && shape.subresource == "token"
}
