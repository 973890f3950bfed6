//! Time for the level state: the clock (tests drive a manual one) and the `Retry-After`
//! of rejections.

use std::time::{Duration, Instant};

/// Where the time comes from (tests drive a manual clock).
#[derive(Clone)]
pub enum Clock {
    /// `Instant::now()`.
    System,
    /// A clock that moves only when told (tests).
    #[cfg(test)]
    Manual(std::sync::Arc<ManualClock>),
}

impl Clock {
    /// The current time.
    pub fn now(&self) -> Instant {
        match self {
            Clock::System => Instant::now(),
            #[cfg(test)]
            Clock::Manual(clock) => clock.now(),
        }
    }
}

/// A clock for tests.
#[cfg(test)]
pub struct ManualClock {
    base: Instant,
    nanos: std::sync::atomic::AtomicU64,
}

#[cfg(test)]
impl ManualClock {
    /// A clock standing at the current instant.
    pub fn new() -> ManualClock {
        ManualClock {
            base: Instant::now(),
            nanos: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Moves the clock on.
    pub fn advance(&self, by: Duration) {
        self.nanos
            .fetch_add(by.as_nanos() as u64, std::sync::atomic::Ordering::SeqCst);
    }

    fn now(&self) -> Instant {
        self.base + Duration::from_nanos(self.nanos.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// The `Retry-After` of a level's rejections (a simplification of upstream's
/// `droppedRequestsTracker`): it starts at 1 s; once a period of `retry_after` seconds has
/// passed, it doubles (at most 32 s) if the level rejected at least one request per second
/// of that period, and halves (at least 1 s) otherwise.
pub struct RetryAfter {
    seconds: u32,
    since: Instant,
    drops: u64,
}

const MAX_RETRY_AFTER: u32 = 32;

impl RetryAfter {
    /// Starts at 1 s.
    pub fn new(now: Instant) -> RetryAfter {
        RetryAfter {
            seconds: 1,
            since: now,
            drops: 0,
        }
    }

    /// Notes a rejection at `now`; returns the seconds to send.
    pub fn dropped(&mut self, now: Instant) -> u32 {
        self.drops += 1;
        let period = Duration::from_secs(u64::from(self.seconds));
        let elapsed = now.saturating_duration_since(self.since);
        if elapsed >= period {
            let rate_high = self.drops >= elapsed.as_secs().max(1);
            self.seconds = if rate_high {
                (self.seconds * 2).min(MAX_RETRY_AFTER)
            } else {
                (self.seconds / 2).max(1)
            };
            self.since = now;
            self.drops = 0;
        }
        self.seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_doubles_under_steady_rejection_and_halves_after() {
        let start = Instant::now();
        let mut r = RetryAfter::new(start);
        let mut at = start;
        let mut seen = Vec::new();
        for _ in 0..60 {
            at += Duration::from_millis(250);
            seen.push(r.dropped(at));
        }
        assert_eq!(seen[0], 1);
        assert!(
            seen.contains(&2) && seen.contains(&4) && seen.contains(&8),
            "{seen:?}"
        );
        assert!(seen.iter().all(|&s| s <= MAX_RETRY_AFTER));
        let high = r.seconds;
        // A lone rejection long after: the rate was low.
        assert_eq!(r.dropped(at + Duration::from_secs(100)), (high / 2).max(1));
    }
}
