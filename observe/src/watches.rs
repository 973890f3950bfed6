//! Watch lifetimes, as kube-apiserver bounds them:
//!
//! - A watch without `timeoutSeconds` lasts a random time between `--min-request-timeout` and
//!   twice it ([`Watches::lifetime`]), so that clients re-watch and spread again over replicas
//!   that came up later.
//! - On SIGTERM, open watches are ended at a bounded rate over
//!   `--shutdown-watch-termination-grace-period` instead of all at once: each watch gets a
//!   place in that period from its sequence number ([`Watches::drain_ends`]), spread evenly.
//!
//! Everything is atomics: a watch costs an increment when it opens and when it closes. A watch
//! waits for its turn with [`Watches::turn`], so an idle one ends on time too.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Open watches and, once the process is terminating, when each of them ends.
#[derive(Debug)]
pub struct Watches {
    min_request_timeout: Duration,
    open: AtomicUsize,
    next: AtomicU64,
    /// When draining started and over how long the watches are spread.
    draining: OnceLock<(Instant, Duration)>,
    /// Watches ended by the drain so far.
    ended: AtomicUsize,
    /// Woken when draining starts.
    begun: tokio::sync::Notify,
}

/// One open watch; closing it (drop) counts it out.
#[derive(Debug)]
pub struct OpenWatch {
    watches: Arc<Watches>,
    /// Its place among all watches ever opened.
    sequence: u64,
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.watches.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Watches {
    /// No watch open yet; watches without `timeoutSeconds` last between `min_request_timeout`
    /// and twice it (zero: they are not bounded).
    pub fn new(min_request_timeout: Duration) -> Arc<Watches> {
        Arc::new(Watches {
            min_request_timeout,
            open: AtomicUsize::new(0),
            next: AtomicU64::new(0),
            draining: OnceLock::new(),
            ended: AtomicUsize::new(0),
            begun: tokio::sync::Notify::new(),
        })
    }

    /// Counts a watch as open until the returned guard drops.
    pub fn open(self: &Arc<Self>) -> OpenWatch {
        self.open.fetch_add(1, Ordering::AcqRel);
        OpenWatch {
            watches: self.clone(),
            sequence: self.next.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Watches open now.
    pub fn open_now(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// How long a watch the client did not bound lasts: uniform in `[min, 2 × min)`, whole
    /// seconds (it is passed to backends as `timeoutSeconds`); `None` when unbounded.
    pub fn lifetime(&self) -> Option<Duration> {
        let min = self.min_request_timeout.as_secs();
        (min > 0).then(|| Duration::from_secs(min + fastrand::u64(0..min.max(1))))
    }

    /// Starts ending open watches, spread evenly over `grace` from now (only the first call
    /// counts).
    pub fn start_draining(&self, grace: Duration) {
        let _ = self.draining.set((Instant::now(), grace));
        self.begun.notify_waiters();
    }

    /// Completes when `watch` must end because the process is terminating (never while it is
    /// not).
    pub async fn turn(&self, watch: &OpenWatch) {
        loop {
            let begun = self.begun.notified();
            if let Some(&(start, grace)) = self.draining.get() {
                let at = start + grace.mul_f64(place(watch.sequence));
                tokio::time::sleep_until(at.into()).await;
                return;
            }
            begun.await;
        }
    }

    /// Whether `watch` must end now because the process is terminating; counts it the first
    /// time it answers `true` for a watch that then ends.
    pub fn drain_ends(&self, watch: &OpenWatch, now: Instant) -> bool {
        let Some(&(start, grace)) = self.draining.get() else {
            return false;
        };
        now >= start + grace.mul_f64(place(watch.sequence))
    }

    /// Counts a watch ended by the drain.
    pub fn ended_by_drain(&self) {
        self.ended.fetch_add(1, Ordering::Relaxed);
    }

    /// Watches ended by the drain so far.
    pub fn drained(&self) -> usize {
        self.ended.load(Ordering::Relaxed)
    }
}

/// A watch's place in the drain period, in `[0, 1)`: the fractional part of its sequence
/// number times the golden ratio, so consecutive watches land far apart and any run of
/// watches covers the period evenly.
fn place(sequence: u64) -> f64 {
    const GOLDEN: f64 = 0.618_033_988_749_895;
    (sequence as f64 * GOLDEN).fract()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_fall_between_the_minimum_and_twice_it() {
        let watches = Watches::new(Duration::from_secs(1800));
        for _ in 0..1000 {
            let t = watches.lifetime().expect("bounded").as_secs();
            assert!((1800..3600).contains(&t), "{t}");
        }
        assert_eq!(Watches::new(Duration::ZERO).lifetime(), None);
    }

    #[test]
    fn draining_spreads_watches_evenly_over_the_grace_period() {
        let watches = Watches::new(Duration::ZERO);
        let open: Vec<_> = (0..1000).map(|_| watches.open()).collect();
        assert_eq!(watches.open_now(), 1000);
        let now = Instant::now();
        assert!(!open.iter().any(|w| watches.drain_ends(w, now)));
        let grace = Duration::from_secs(100);
        watches.start_draining(grace);
        let start = watches.draining.get().expect("draining").0;
        // Every tenth of the period ends about a tenth of the watches.
        let mut before = 0;
        for tenth in 1..=10 {
            let at = start + grace.mul_f64(tenth as f64 / 10.0);
            let ended = open.iter().filter(|w| watches.drain_ends(w, at)).count();
            let step = ended - before;
            assert!((90..=110).contains(&step), "tenth {tenth}: {step} watches");
            before = ended;
        }
        assert_eq!(before, 1000);
        drop(open);
        assert_eq!(watches.open_now(), 0);
    }
}
