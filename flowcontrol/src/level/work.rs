//! What a request holds of a level, fixed when it is admitted: its seats, how long they
//! linger after it ends, and what it costs its queue in virtual time.

use std::time::Duration;

use crate::config::Mode;
use crate::estimate::{self, WorkEstimate, MAX_LIST_SEATS};

/// Upstream's estimated service time of one seat (`G`), in seconds.
pub const ESTIMATED_SERVICE: f64 = 0.003;
/// The share of a level's nominal limit one request may take (upstream 15%).
const MAX_SEATS_PERCENT: u32 = 15;

/// The seats of one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Work {
    /// Seats taken from dispatch to the very end (the larger of initial and final seats).
    pub seats: u32,
    /// Seats of the execution phase (its queue is charged their actual service time).
    pub initial: u32,
    /// How long `seats` stay taken after the request ends.
    pub linger: Duration,
    /// The estimated work in seat-seconds: initial seats × `G` + final seats × linger.
    pub total: f64,
}

impl Work {
    /// One seat.
    pub const ONE: Work = Work {
        seats: 1,
        initial: 1,
        linger: Duration::ZERO,
        total: ESTIMATED_SERVICE,
    };

    /// The work of `estimate` on a level whose requests may take `cap` seats each (0: no cap
    /// of its own) and whose current limit is `limit`. Initial seats are cut to the cap; final
    /// seats beyond the cap, or beyond the limit, are reshaped into fewer seats for longer
    /// (the same seat-seconds), as upstream.
    pub fn of(estimate: &WorkEstimate, cap: u32, limit: u32) -> Work {
        let cap = if cap == 0 { MAX_LIST_SEATS } else { cap };
        let initial = estimate.initial_seats.clamp(estimate::MIN_SEATS, cap);
        let mut final_seats = estimate.final_seats;
        let mut linger = estimate.additional_latency;
        for bound in [cap, limit] {
            if bound > 0 && final_seats > bound {
                linger = estimate::stretch(linger, u64::from(final_seats), bound);
                final_seats = bound;
            }
        }
        if final_seats == 0 {
            linger = Duration::ZERO;
        }
        Work {
            seats: initial.max(final_seats),
            initial,
            linger,
            total: f64::from(initial) * ESTIMATED_SERVICE
                + f64::from(final_seats) * linger.as_secs_f64(),
        }
    }
}

/// The most seats one request may take on a level of `nominal` seats (upstream: for queuing
/// levels `max(1, min(ceil(15% × nominal), nominal / handSize))`; 0, no cap of its own, for the
/// others).
pub fn max_seats(nominal: u32, mode: Mode) -> u32 {
    match mode {
        Mode::Queue { hand_size, .. } => {
            let percent = (u64::from(nominal) * u64::from(MAX_SEATS_PERCENT)).div_ceil(100);
            let per_hand = nominal / hand_size.max(1);
            u32::try_from(percent)
                .unwrap_or(u32::MAX)
                .min(per_hand)
                .max(1)
        }
        Mode::Reject | Mode::Exempt => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_levels_cap_requests_as_upstream() {
        let queue = |hand_size| Mode::Queue {
            queues: 64,
            hand_size,
            queue_length_limit: 50,
        };
        // workload-low 245, global-default 49, catch-all 13 with 600 seats; 10 when 67.
        assert_eq!(max_seats(245, queue(6)), 37);
        assert_eq!(max_seats(49, queue(6)), 8);
        assert_eq!(max_seats(13, queue(6)), 2);
        assert_eq!(max_seats(67, queue(6)), 11);
        assert_eq!(max_seats(1, queue(6)), 1);
        assert_eq!(max_seats(40, Mode::Reject), 0);
    }

    #[test]
    fn final_seats_beyond_the_cap_or_limit_last_longer() {
        let write = WorkEstimate::mutating(1000); // 10 seats × 50 ms
        let work = Work::of(&write, 5, 100);
        assert_eq!((work.seats, work.initial), (5, 1));
        assert_eq!(work.linger, Duration::from_millis(100));
        let work = Work::of(&write, 0, 4);
        assert_eq!((work.seats, work.linger), (4, Duration::from_millis(125)));
        let list = WorkEstimate::list(50_000_000);
        assert_eq!(Work::of(&list, 6, 40).seats, 6);
        assert_eq!(Work::of(&list, 0, 40).seats, 100);
        let zero = WorkEstimate {
            initial_seats: 0,
            final_seats: 0,
            additional_latency: Duration::from_secs(1),
        };
        assert_eq!(Work::of(&zero, 0, 1), Work::ONE);
    }
}
