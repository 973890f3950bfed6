//! Bounds a request gets: its deadline (from the parse, step 1b), and on its way to a backend
//! (step 8) a watch's lifetime, a place in its backend's bound of requests in flight and a
//! descriptor of the open-file budget.

use std::sync::Arc;
use std::time::Instant;

use apiagg_requestinfo::RequestInfo;

use super::deadline;
use super::refusal::Refusal;
use crate::backends::{FileSlot, OpenFiles, Slot, Upstream};
use apiagg_observe::{OpenWatch, Watches};

/// What bounds a request on its way to a backend; each part is given back when the request
/// ends (dropped with it).
pub(super) struct Bounds {
    /// What bounds the request (long-running, discovery, the request timeout)…
    pub(super) limit: deadline::Limit,
    /// …and when it expires.
    pub(super) deadline: Option<Instant>,
    /// A proxied watch: counted open, and ended early when the process terminates.
    pub(super) watch: Option<OpenWatch>,
    /// `timeoutSeconds` apiagg adds to a watch the client did not bound.
    pub(super) watch_timeout: Option<u64>,
    /// The request's place in its backend's bound of requests in flight.
    pub(super) backend_slot: Option<Slot>,
    /// The descriptor of the request's backend connection in the open-file budget.
    pub(super) file: Option<FileSlot>,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            limit: deadline::Limit::LongRunning,
            deadline: None,
            watch: None,
            watch_timeout: None,
            backend_slot: None,
            file: None,
        }
    }
}

impl Bounds {
    /// The request is bounded by `limit`, counted from `started`.
    pub(super) fn limit_to(&mut self, limit: deadline::Limit, started: Instant) {
        self.limit = limit;
        self.deadline = match limit {
            deadline::Limit::LongRunning => None,
            deadline::Limit::Discovery(d) | deadline::Limit::Request(d) => Some(started + d),
        };
    }

    /// A watch ends, as kube-apiserver ends it, after the `timeoutSeconds` the client asked for
    /// or else after a random time between `--min-request-timeout` and twice it, passed to
    /// the backend as `timeoutSeconds` so that it ends the watch cleanly; apiagg cuts it a
    /// little later if the backend does not. Returns when its lifetime ends (`None`: never).
    pub(super) fn bound_watch(
        &mut self,
        watches: &Arc<Watches>,
        started: Instant,
        info: &RequestInfo<'_>,
    ) -> Option<Instant> {
        /// How long after its lifetime, at most, apiagg cuts a watch the backend did not end.
        const CUT_AFTER: std::time::Duration = std::time::Duration::from_secs(15);
        let asked = info
            .query
            .timeout_seconds
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|&t| t > 0);
        let lifetime = match asked {
            Some(seconds) => Some(std::time::Duration::from_secs(seconds)),
            None => {
                let lifetime = watches.lifetime();
                self.watch_timeout = lifetime.map(|l| l.as_secs());
                lifetime
            }
        };
        self.deadline = lifetime.and_then(|l| started.checked_add(l + l.min(CUT_AFTER)));
        self.watch = Some(watches.open());
        lifetime.and_then(|l| started.checked_add(l))
    }

    /// One slow backend holds at most its share of the gateway: a request to a remote
    /// APIService takes a place in its bound once it holds its flow-control seat and was
    /// authorized, just before it is sent (a request waiting in a queue holds no place, so one
    /// caller's queued requests never lock others out of the backend), at most `cap` of them.
    /// Long-running requests are bounded by the connection bound instead. `Err`: the 429.
    pub(super) fn reserve_backend(
        &mut self,
        cap: usize,
        upstream: &Upstream,
        info: &RequestInfo<'_>,
    ) -> Result<(), Refusal> {
        if info.is_long_running() {
            return Ok(());
        }
        let slot = upstream.slots.try_take(cap);
        let slot = slot.ok_or_else(|| Refusal::backend_full(&upstream.label, cap))?;
        self.backend_slot = Some(slot);
        Ok(())
    }

    /// Every request to a backend holds a descriptor: within the budget, or refused before it
    /// connects (apiagg never runs into `EMFILE` on the proxy path). `Err`: the 503.
    pub(super) fn take_file(&mut self, open_files: &Arc<OpenFiles>) -> Result<(), Refusal> {
        let file = open_files.try_upstream();
        let file = file.ok_or_else(|| Refusal::out_of_files(open_files.budget()))?;
        self.file = Some(file);
        Ok(())
    }
}
