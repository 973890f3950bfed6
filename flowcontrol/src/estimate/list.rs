//! What apiagg learns of a resource's lists from their answers, and the bytes it expects the
//! next list to answer (upstream `seatsBasedOnObjectSize`, with learned instead of stored
//! object counts and sizes).

use super::{RequestKind, RequestShape};

/// Learned list statistics of one (group, resource, scope) key.
///
/// Both sizes are smoothed the same way: a larger sample is taken at once, a smaller one
/// halves the distance (an exponentially weighted average with weight ½ on the way down).
/// Growth matters at once — an underestimate lets a burst of large lists run together and
/// exhaust memory — while an overestimate only holds back some concurrency until a few
/// smaller answers pull it down. One key serves every namespace of a namespaced resource, so
/// the estimate leans to the larger namespaces seen lately.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListStats {
    /// Bytes of a whole list (every object of the scope).
    total: u64,
    /// Bytes per object (0: never counted).
    object: u64,
    /// Answers observed (saturating): keys seen often are evicted last.
    seen: u32,
}

/// Whether an answer to `shape` holds the whole collection (so it may lower the learned total):
/// no selector, no single name, no continuation, and a limit (if any) larger than what came.
pub fn is_whole(shape: &RequestShape<'_>, items: Option<u64>) -> bool {
    let complete = match shape.limit {
        None => true,
        Some(limit) => items.is_some_and(|n| n < limit),
    };
    shape.kind == RequestKind::List
        && complete
        && !shape.selector
        && !shape.single
        && !shape.continued
}

/// `sample` folded into `old` (see [`ListStats`]).
fn follow(old: u64, sample: u64) -> u64 {
    if sample >= old {
        sample
    } else {
        old - (old - sample) / 2
    }
}

impl ListStats {
    /// `old` after an answer of `bytes` holding `items` objects; `whole` when it was the whole
    /// collection, else it only shows the collection is at least that large.
    pub fn observe(old: Option<ListStats>, bytes: u64, items: Option<u64>, whole: bool) -> Self {
        let mut stats = old.unwrap_or(ListStats {
            total: 0,
            object: 0,
            seen: 0,
        });
        stats.total = match (old.is_some(), whole) {
            (true, true) => follow(stats.total, bytes),
            _ => stats.total.max(bytes),
        };
        if let Some(items) = items.filter(|&n| n > 0) {
            let object = bytes / items;
            stats.object = if stats.object == 0 {
                object
            } else {
                follow(stats.object, object)
            };
        }
        stats.seen = stats.seen.saturating_add(1);
        stats
    }

    /// The eviction score: keys seen less often go first.
    pub fn keep_score(&self) -> u64 {
        u64::from(self.seen)
    }

    /// The bytes a list of `shape` is expected to answer: one object for a single name; else
    /// the whole list, cut to `limit` objects when the object size is known; with a selector
    /// at least half the list (upstream: the server reads that much to filter).
    pub fn expected_bytes(&self, shape: &RequestShape<'_>) -> u64 {
        if shape.single {
            return self.object;
        }
        let limited = match (shape.limit, self.object) {
            (Some(limit), object) if object > 0 => self.total.min(limit.saturating_mul(object)),
            _ => self.total,
        };
        if shape.selector {
            limited.max(self.total / 2)
        } else {
            limited
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_taken_at_once_and_shrinking_halves_the_gap() {
        let s = ListStats::observe(None, 1_000, Some(10), true);
        assert_eq!((s.total, s.object), (1_000, 100));
        let s = ListStats::observe(Some(s), 5_000, Some(10), true);
        assert_eq!((s.total, s.object), (5_000, 500));
        let s = ListStats::observe(Some(s), 1_000, Some(10), true);
        assert_eq!((s.total, s.object), (3_000, 300));
        // A partial answer only raises the total.
        let s = ListStats::observe(Some(s), 100, None, false);
        assert_eq!(s.total, 3_000);
        let s = ListStats::observe(Some(s), 4_000, None, false);
        assert_eq!((s.total, s.seen), (4_000, 5));
    }
}
