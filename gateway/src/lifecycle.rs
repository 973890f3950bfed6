//! Process lifecycle: mux completion, readiness, shutdown phases and in-flight accounting.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

/// Lifecycle flags, read lock-free on the request path.
#[derive(Default)]
pub struct Lifecycle {
    config_loaded: AtomicBool,
    delegate_registered: AtomicBool,
    discovery_synced: AtomicBool,
    mux_complete: AtomicBool,
    shutting_down: AtomicBool,
    rejecting: AtomicBool,
    in_flight: AtomicUsize,
    drained: Notify,
}

impl Lifecycle {
    /// A fresh lifecycle: nothing loaded, nothing complete.
    pub fn new() -> Arc<Lifecycle> {
        Arc::new(Lifecycle::default())
    }

    /// The first config has been loaded and its routes installed.
    pub fn set_config_loaded(&self) {
        self.config_loaded.store(true, Ordering::Release);
    }

    /// Whether a config is serving.
    pub fn config_loaded(&self) -> bool {
        self.config_loaded.load(Ordering::Acquire)
    }

    /// The delegate's group-versions have been registered (or there is no delegate).
    pub fn set_delegate_registered(&self) {
        self.delegate_registered.store(true, Ordering::Release);
    }

    /// Whether the delegate's group-versions are registered.
    pub fn delegate_registered(&self) -> bool {
        self.delegate_registered.load(Ordering::Acquire)
    }

    /// The first discovery round (with the delegate's groups registered) is done.
    pub fn set_discovery_synced(&self) {
        self.discovery_synced.store(true, Ordering::Release);
    }

    /// Whether the first discovery round is done.
    pub fn discovery_synced(&self) -> bool {
        self.discovery_synced.load(Ordering::Acquire)
    }

    /// Marks the mux complete once the config is loaded, the delegate's groups are registered
    /// and the first discovery round is done: from then on unknown paths are 404, not 503.
    pub fn try_complete(&self) {
        if self.config_loaded() && self.delegate_registered() && self.discovery_synced() {
            self.mux_complete.store(true, Ordering::Release);
        }
    }

    /// Whether every known route is installed.
    pub fn mux_complete(&self) -> bool {
        self.mux_complete.load(Ordering::Acquire)
    }

    /// SIGTERM arrived: readyz fails from now on.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    /// Whether shutdown has begun.
    pub fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// The shutdown delay is over: new requests are refused with 429.
    pub fn begin_rejecting(&self) {
        self.rejecting.store(true, Ordering::Release);
    }

    /// Whether new requests are refused.
    pub fn rejecting(&self) -> bool {
        self.rejecting.load(Ordering::Acquire)
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
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(guard);
        assert!(waiter.await.expect("join"));
        assert_eq!(lc.in_flight(), 0);
    }
}
