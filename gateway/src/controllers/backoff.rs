//! The retry schedule of a failing source: a first delay, doubling, capped.

use std::time::Duration;

use tokio::time::Instant;

/// Retry schedule of one failing source.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    failures: u32,
    /// When the failing source is due again; `None` while it succeeds.
    pub retry_at: Option<Instant>,
}

impl Default for Backoff {
    /// 500 ms, doubling, at most a minute.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(500), Duration::from_secs(60))
    }
}

impl Backoff {
    /// A schedule starting at `first`, doubling on every failure, never above `cap`.
    pub fn new(first: Duration, cap: Duration) -> Backoff {
        Backoff {
            first,
            cap,
            failures: 0,
            retry_at: None,
        }
    }

    /// The source worked: no retry pending.
    pub fn succeeded(&mut self) {
        self.failures = 0;
        self.retry_at = None;
    }

    /// The source failed: schedules the next attempt and returns the delay.
    pub fn failed(&mut self) -> Duration {
        let delay = self
            .first
            .saturating_mul(1 << self.failures.min(16))
            .min(self.cap);
        self.failures = self.failures.saturating_add(1);
        self.retry_at = Some(Instant::now() + delay);
        delay
    }

    /// Whether a retry is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.retry_at.is_some_and(|at| at <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(500), Duration::from_secs(2));
        let delays: Vec<Duration> = (0..5).map(|_| b.failed()).collect();
        let ms: Vec<u128> = delays.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [500, 1000, 2000, 2000, 2000]);
        assert!(b.retry_at.is_some());
        b.succeeded();
        assert!(b.retry_at.is_none());
        assert_eq!(b.failed(), Duration::from_millis(500));
    }
}
