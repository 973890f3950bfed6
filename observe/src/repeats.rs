//! Logs for people: a failure that repeats (every request to a dead backend) is logged when it
//! first happens or changes, then at most once per interval, with how many were not logged.

use std::time::{Duration, Instant};

use dashmap::DashMap;

/// At most this many keys are remembered; past it the memory starts over (keys are backend
/// labels, so only an unusual churn of APIServices gets there).
const MAX_KEYS: usize = 10_000;

struct Seen {
    message: String,
    logged_at: Instant,
    suppressed: u64,
}

/// The last logged failure per key (a backend).
pub struct Repeats {
    seen: DashMap<String, Seen>,
    interval: Duration,
}

impl Repeats {
    /// Repeats logged at most once per `interval`.
    pub fn new(interval: Duration) -> Repeats {
        Repeats {
            seen: DashMap::new(),
            interval,
        }
    }

    /// Whether to log `message` for `key` now: `Some(n)` with the number of occurrences not
    /// logged since the last line, `None` to stay quiet (the occurrence is counted).
    pub fn admit(&self, key: &str, message: &str) -> Option<u64> {
        let now = Instant::now();
        if let Some(mut seen) = self.seen.get_mut(key) {
            let changed = seen.message != message;
            if !changed && now.duration_since(seen.logged_at) < self.interval {
                seen.suppressed += 1;
                return None;
            }
            let suppressed = std::mem::take(&mut seen.suppressed);
            seen.logged_at = now;
            if changed {
                seen.message = message.to_string();
            }
            return Some(suppressed);
        }
        if self.seen.len() >= MAX_KEYS {
            self.seen.clear();
        }
        self.seen.insert(
            key.to_string(),
            Seen {
                message: message.to_string(),
                logged_at: now,
                suppressed: 0,
            },
        );
        Some(0)
    }

    /// Logs `message` as a warning for `key` when [`Repeats::admit`] lets it through, with the
    /// number of repeats not logged.
    pub fn warn(&self, key: &str, message: &str) {
        if let Some(suppressed) = self.admit(key, message) {
            tracing::warn!(source = key, suppressed, "{message}");
        }
    }

    /// `key` works again: forgets its failure (the next one is logged at once) and logs the
    /// recovery when a failure had been logged.
    pub fn recovered(&self, key: &str, what: &str) {
        if self.seen.remove(key).is_some() {
            tracing::info!(source = key, "{what} works again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_counted_changes_are_logged() {
        let repeats = Repeats::new(Duration::from_secs(3600));
        assert_eq!(repeats.admit("a", "refused"), Some(0));
        assert_eq!(repeats.admit("a", "refused"), None);
        assert_eq!(repeats.admit("a", "refused"), None);
        assert_eq!(repeats.admit("b", "refused"), Some(0));
        assert_eq!(repeats.admit("a", "timed out"), Some(2));
        assert_eq!(repeats.admit("a", "timed out"), None);
        repeats.recovered("a", "a");
        assert_eq!(repeats.admit("a", "timed out"), Some(0));
        let quick = Repeats::new(Duration::ZERO);
        assert_eq!(quick.admit("a", "x"), Some(0));
        assert_eq!(quick.admit("a", "x"), Some(0));
    }
}
