//! Process lifecycle: start-up milestones, mux completion, shutdown phases and in-flight
//! accounting, read lock-free on the request path.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// Something the process reaches once and never leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Milestone {
    /// The first config is loaded and its routes installed.
    ConfigLoaded,
    /// The delegate's group-versions are registered (or there is no delegate).
    DelegateRegistered,
    /// The first discovery round (with the delegate's groups) is done.
    DiscoverySynced,
    /// The delegate's OpenAPI documents are merged and published, or the start-up bound passed.
    OpenApiSynced,
    /// The cluster objects the authorizers decide from (RBAC) are listed, or none are needed.
    AuthorizerSynced,
    /// The cluster's flow-control objects are listed and applied once, or apiagg does not
    /// follow a cluster's.
    FlowControlSynced,
    /// SIGTERM arrived: readyz fails from now on.
    ShuttingDown,
    /// The shutdown delay is over: new requests are refused with 429.
    Rejecting,
}

const MILESTONES: usize = 8;

/// Lifecycle flags, read lock-free on the request path.
#[derive(Default)]
pub struct Lifecycle {
    reached: [AtomicBool; MILESTONES],
    mux_complete: AtomicBool,
    in_flight: AtomicUsize,
    drained: Notify,
    /// Woken on every milestone.
    milestones: Notify,
}

impl Lifecycle {
    /// A fresh lifecycle: nothing reached, nothing complete.
    pub fn new() -> Arc<Lifecycle> {
        Arc::new(Lifecycle::default())
    }

    /// Records a milestone; the mux completes once the config is loaded, the delegate's groups
    /// are registered and the first discovery round is done (unknown paths are 404, not 503).
    pub fn reach(&self, milestone: Milestone) {
        self.reached[milestone as usize].store(true, Ordering::Release);
        let complete = [
            Milestone::ConfigLoaded,
            Milestone::DelegateRegistered,
            Milestone::DiscoverySynced,
        ]
        .into_iter()
        .all(|m| self.reached(m));
        if complete {
            self.mux_complete.store(true, Ordering::Release);
        }
        self.milestones.notify_waiters();
    }

    /// Waits until `milestone` is reached (at once if it already is).
    pub async fn until(&self, milestone: Milestone) {
        loop {
            let notified = self.milestones.notified();
            if self.reached(milestone) {
                return;
            }
            notified.await;
        }
    }

    /// Whether a milestone was reached.
    pub fn reached(&self, milestone: Milestone) -> bool {
        self.reached[milestone as usize].load(Ordering::Acquire)
    }

    /// Whether every known route is installed.
    pub fn mux_complete(&self) -> bool {
        self.mux_complete.load(Ordering::Acquire)
    }

    /// Counts a request as in flight until the guard drops.
    pub fn track(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Waits until no request is in flight or `limit` passes; returns whether it drained.
    pub async fn drain(&self, limit: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.drained.notified();
                if self.in_flight() == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(limit, wait).await.is_ok()
    }
}

/// Guard of one in-flight request.
pub struct InFlight(Arc<Lifecycle>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_waits_for_guards() {
        let lc = Lifecycle::new();
        let guard = lc.track();
        assert!(!lc.drain(Duration::from_millis(20)).await);
        let lc2 = lc.clone();
        let waiter = tokio::spawn(async move { lc2.drain(Duration::from_secs(5)).await });
        // On this single-threaded runtime the waiter runs until it blocks on the guard.
        tokio::task::yield_now().await;
        assert!(
            !waiter.is_finished(),
            "drain returned while a request was in flight"
        );
        drop(guard);
        assert!(waiter.await.expect("join"));
        assert_eq!(lc.in_flight(), 0);
    }

    #[test]
    fn mux_completes_on_the_three_start_up_milestones() {
        let lc = Lifecycle::new();
        lc.reach(Milestone::ConfigLoaded);
        lc.reach(Milestone::DelegateRegistered);
        assert!(!lc.mux_complete());
        lc.reach(Milestone::DiscoverySynced);
        assert!(lc.mux_complete());
        assert!(!lc.reached(Milestone::ShuttingDown));
    }
}
