//! Bounds on the requests in flight to one backend, so that a slow backend holds at most its
//! share of the gateway: per APIService (all of its endpoints together) and per endpoint. The
//! counts live as long as the APIService or the endpoint does (across route-table rebuilds),
//! so a reload never resets them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Requests in flight to one backend.
#[derive(Debug, Default)]
pub struct Slots {
    in_flight: AtomicUsize,
}

/// One request in flight; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot(Arc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Slots {
    /// Takes a slot unless `cap` requests are in flight already.
    pub fn try_take(self: &Arc<Self>, cap: usize) -> Option<Slot> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if before >= cap {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot(self.clone()))
    }

    /// Whether a slot is free now under `cap`.
    pub fn has_room(&self, cap: usize) -> bool {
        self.in_flight.load(Ordering::Acquire) < cap
    }

    /// Requests in flight now.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_more_than_the_cap_even_when_taken_concurrently() {
        let slots = Arc::new(Slots::default());
        let held: Vec<_> = std::thread::scope(|s| {
            let takers: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        (0..100)
                            .filter_map(|_| slots.try_take(50))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            takers
                .into_iter()
                .flat_map(|t| t.join().expect("taker"))
                .collect()
        });
        assert_eq!(held.len(), 50);
        assert_eq!(slots.in_flight(), 50);
        assert!(!slots.has_room(50));
        drop(held);
        assert_eq!(slots.in_flight(), 0);
        assert!(slots.try_take(50).is_some());
    }
}
