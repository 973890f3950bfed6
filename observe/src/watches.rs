//! Watch lifetimes, as kube-apiserver bounds them:
//!
//! - A watch without `timeoutSeconds` lasts a random time between `--min-request-timeout` and
//!   twice it ([`Watches::lifetime`]), so that clients re-watch and spread again over replicas
//!   that came up later.
//! - On SIGTERM, open watches are ended at a bounded rate over
//!   `--shutdown-watch-termination-grace-period` instead of all at once, as k8s.io/apiserver's
//!   `pkg/server/genericapiserver.go` drains its `WatchRequestWaitGroup`: the rate is the
//!   watches open when the drain starts divided by the grace period, never below 200 a second
//!   ([`drain_rate`]), one at a time (a limiter with a burst of 1); whatever is left when the
//!   grace period ends goes at once.
//!
//! Everything is atomics: a watch costs an increment when it opens and when it closes, and one
//! more for its place in the drain. A watch waits for its turn with [`Watches::turn`], so an
//! idle one ends on time too.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// kube-apiserver's floor on the watch drain rate, in watches a second ("we want the server to
/// drain the active watch requests as soon as possible": genericapiserver.go).
pub const MIN_DRAIN_RATE: f64 = 200.0;

/// Open watches and, once the process is terminating, when each of them ends.
#[derive(Debug)]
pub struct Watches {
    min_request_timeout: Duration,
    open: AtomicUsize,
    /// The drain, once the process is terminating.
    draining: OnceLock<Drain>,
    /// Places in the drain handed out so far.
    places: AtomicU64,
    /// Watches ended by the drain so far.
    ended: AtomicUsize,
    /// Woken when draining starts.
    begun: tokio::sync::Notify,
}

/// When draining started, over how long, and how fast.
#[derive(Debug, Clone, Copy)]
struct Drain {
    start: Instant,
    grace: Duration,
    /// Watches ended a second (infinite: all at once).
    rate: f64,
}

/// One open watch; closing it (drop) counts it out.
#[derive(Debug)]
pub struct OpenWatch {
    watches: Arc<Watches>,
    /// When it ends in the drain, fixed the first time it is asked after draining started.
    turn: OnceLock<Instant>,
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.watches.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How many watches a second the drain ends, `open` of them being open when it starts:
/// `open / grace`, at least [`MIN_DRAIN_RATE`] (genericapiserver.go's computation); infinite
/// (all at once) for a zero grace period.
pub fn drain_rate(open: usize, grace: Duration) -> f64 {
    if grace.is_zero() {
        return f64::INFINITY;
    }
    (open as f64 / grace.as_secs_f64()).max(MIN_DRAIN_RATE)
}

impl Watches {
    /// No watch open yet; watches without `timeoutSeconds` last between `min_request_timeout`
    /// and twice it (zero: they are not bounded).
    pub fn new(min_request_timeout: Duration) -> Arc<Watches> {
        Arc::new(Watches {
            min_request_timeout,
            open: AtomicUsize::new(0),
            draining: OnceLock::new(),
            places: AtomicU64::new(0),
            ended: AtomicUsize::new(0),
            begun: tokio::sync::Notify::new(),
        })
    }

    /// Counts a watch as open until the returned guard drops.
    pub fn open(self: &Arc<Self>) -> OpenWatch {
        self.open.fetch_add(1, Ordering::AcqRel);
        OpenWatch {
            watches: self.clone(),
            turn: OnceLock::new(),
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

    /// Starts ending open watches, one at a time at [`drain_rate`] for those open now, within
    /// `grace` from now (only the first call counts); returns the rate.
    pub fn start_draining(&self, grace: Duration) -> f64 {
        let drain = *self.draining.get_or_init(|| Drain {
            start: Instant::now(),
            grace,
            rate: drain_rate(self.open_now(), grace),
        });
        self.begun.notify_waiters();
        drain.rate
    }

    /// Completes when `watch` must end because the process is terminating (never while it is
    /// not).
    pub async fn turn(&self, watch: &OpenWatch) {
        loop {
            let begun = self.begun.notified();
            if let Some(at) = self.turn_of(watch) {
                tokio::time::sleep_until(at.into()).await;
                return;
            }
            begun.await;
        }
    }

    /// When `watch` ends in the drain (`None` while the process is not terminating): the next
    /// free place, `1 / rate` after the one before (as `rate.Limiter` with a burst of 1 hands
    /// out its tokens), and at the end of the grace period at the latest.
    fn turn_of(&self, watch: &OpenWatch) -> Option<Instant> {
        let drain = self.draining.get()?;
        let at = watch.turn.get_or_init(|| {
            let place = self.places.fetch_add(1, Ordering::AcqRel);
            let after = (place as f64 / drain.rate).min(drain.grace.as_secs_f64());
            drain.start + Duration::from_secs_f64(after)
        });
        Some(*at)
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
    fn the_rate_is_upstreams() {
        // 10,000 watches over 10 s: 1,000 a second; over 60 s it would be 167: the floor.
        assert_eq!(drain_rate(10_000, Duration::from_secs(10)), 1000.0);
        assert_eq!(drain_rate(10_000, Duration::from_secs(60)), MIN_DRAIN_RATE);
        assert_eq!(drain_rate(0, Duration::from_secs(1)), MIN_DRAIN_RATE);
        assert_eq!(drain_rate(5, Duration::ZERO), f64::INFINITY);
    }

    /// The turns of `open` watches, after `start`.
    fn turns(watches: &Watches, open: &[OpenWatch], start: Instant) -> Vec<Duration> {
        open.iter()
            .map(|w| watches.turn_of(w).expect("draining") - start)
            .collect()
    }

    #[test]
    fn draining_ends_one_watch_at_a_time_at_the_rate() {
        let watches = Watches::new(Duration::ZERO);
        let open: Vec<_> = (0..1000).map(|_| watches.open()).collect();
        assert_eq!(watches.open_now(), 1000);
        assert!(open.iter().all(|w| watches.turn_of(w).is_none()));
        // 1,000 over 2 s: 500 a second, 2 ms apart.
        let rate = watches.start_draining(Duration::from_secs(2));
        assert_eq!(rate, 500.0);
        let start = watches.draining.get().expect("draining").start;
        let ends = turns(&watches, &open, start);
        for pair in ends.windows(2) {
            assert_eq!(pair[1] - pair[0], Duration::from_millis(2), "{pair:?}");
        }
        // No second of the drain ends more than the rate (the first watch goes at once).
        assert_eq!(ends.iter().filter(|e| e.as_secs() == 0).count(), 500);
        assert_eq!(ends.iter().filter(|e| e.as_secs() == 1).count(), 500);
        // A place is asked once per watch: asking again gives the same.
        assert_eq!(turns(&watches, &open, start), ends);
        drop(open);
        assert_eq!(watches.open_now(), 0);
    }

    #[test]
    fn the_floor_ends_a_few_watches_before_the_grace_period_and_the_rest_at_its_end() {
        // 100 watches over 10 s: at 200 a second (the floor), over half a second.
        let watches = Watches::new(Duration::ZERO);
        let open: Vec<_> = (0..100).map(|_| watches.open()).collect();
        watches.start_draining(Duration::from_secs(10));
        let start = watches.draining.get().expect("draining").start;
        let last = *turns(&watches, &open, start).last().expect("ends");
        assert_eq!(last, Duration::from_millis(495));
        // Watches opened after the drain started (exempt loopback ones) end at the latest
        // when the grace period does.
        let late: Vec<_> = (0..3000).map(|_| watches.open()).collect();
        let ends = turns(&watches, &late, start);
        assert_eq!(ends.last(), Some(&Duration::from_secs(10)));
    }
}
