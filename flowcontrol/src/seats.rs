//! Seat arithmetic (pure): nominal limits from shares, lendable and borrowing limits, and the
//! periodic redistribution of seats by demand (KEP-1040 "borrowing", upstream
//! `apf_controller.go` `updateBorrowing` and `computeConcurrencyAllocation`).

/// Weight of the previous smoothed demand in each period's smoothing (upstream 0.977).
const SMOOTHING: f64 = 0.977;
/// Targets below this count as this, so a level with no demand still gets its lower bound and
/// the fair proportion stays finite (upstream does the same).
const MIN_TARGET: f64 = 0.001;

/// Nominal concurrency limits, `ceil(total × shares[i] / Σ shares)` as upstream (so their sum
/// can exceed `total` by the rounding). All zero when every share is zero.
pub fn nominal_limits(total: u32, shares: &[u32]) -> Vec<u32> {
    let sum: u64 = shares.iter().map(|&s| u64::from(s)).sum();
    shares
        .iter()
        .map(|&s| {
            if sum == 0 {
                return 0;
            }
            let limit = (u64::from(total) * u64::from(s)).div_ceil(sum);
            u32::try_from(limit).unwrap_or(u32::MAX)
        })
        .collect()
}

/// `round(nominal × percent / 100)`, halves away from zero (Go's `math.Round`).
pub fn percent_of(nominal: u32, percent: u32) -> u32 {
    let scaled = u64::from(nominal) * u64::from(percent);
    u32::try_from((scaled + 50) / 100).unwrap_or(u32::MAX)
}

/// One priority level in the allocation problem.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// Fewest seats it gets.
    pub lower: f64,
    /// Most seats it gets (`f64::INFINITY`: no borrowing limit).
    pub upper: f64,
    /// What it would like.
    pub target: f64,
}

impl Bounds {
    /// A level's bounds for the next period, as upstream: it keeps at least
    /// `nominal − lendable` seats, and at least its demand high-water mark up to its nominal
    /// limit; it may reach `nominal + borrowing` (`None`: unbounded); it aims at the larger of
    /// that lower bound and its smoothed demand.
    pub fn of(
        nominal: u32,
        lendable: u32,
        borrowing: Option<u32>,
        peak: u32,
        smoothed: f64,
    ) -> Bounds {
        let configured_min = f64::from(nominal.saturating_sub(lendable));
        let lower = configured_min.max(f64::from(nominal.min(peak)));
        let upper = borrowing.map_or(f64::INFINITY, |b| f64::from(nominal.saturating_add(b)));
        Bounds {
            lower,
            upper: upper.max(lower),
            target: lower.max(smoothed),
        }
    }
}

/// Splits `total` seats: every level gets `clamp(p × target, lower, upper)` for the one fair
/// proportion `p` that makes the sum `total` (when the bounds allow it; else every level gets
/// its lower, or its upper, bound).
pub fn allocate(total: f64, items: &[Bounds]) -> Vec<f64> {
    let at = |p: f64| -> Vec<f64> {
        items
            .iter()
            .map(|b| (p * b.target.max(MIN_TARGET)).clamp(b.lower, b.upper))
            .collect()
    };
    let sum = |p: f64| at(p).iter().sum::<f64>();
    if items.is_empty() || sum(0.0) >= total {
        return at(0.0);
    }
    let mut high = 1.0;
    while sum(high) < total {
        high *= 2.0;
        if high > 1e15 {
            return at(high);
        }
    }
    let mut low = 0.0;
    for _ in 0..100 {
        let mid = (low + high) / 2.0;
        if sum(mid) < total {
            low = mid;
        } else {
            high = mid;
        }
    }
    at(high)
}

/// A level's seat demand (seats in use plus seats waiting) over one adjustment period,
/// sampled by the maintenance loop (upstream integrates it exactly on every change).
#[derive(Debug, Clone, Default)]
pub struct Demand {
    samples: u32,
    sum: f64,
    sum_of_squares: f64,
    /// The smoothed demand envelope carried from period to period.
    pub smoothed: f64,
}

impl Demand {
    /// Adds one sample.
    pub fn sample(&mut self, seats: u32) {
        let seats = f64::from(seats);
        self.samples += 1;
        self.sum += seats;
        self.sum_of_squares += seats * seats;
    }

    /// Ends the period: the smoothed envelope becomes
    /// `max(avg + stddev, 0.977 × previous + 0.023 × (avg + stddev))`; the samples reset.
    pub fn finish(&mut self) -> f64 {
        if self.samples > 0 {
            let n = f64::from(self.samples);
            let average = self.sum / n;
            let variance = (self.sum_of_squares / n - average * average).max(0.0);
            let envelope = average + variance.sqrt();
            self.smoothed = envelope.max(SMOOTHING * self.smoothed + (1.0 - SMOOTHING) * envelope);
        }
        self.samples = 0;
        self.sum = 0.0;
        self.sum_of_squares = 0.0;
        self.smoothed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shares of the built-in levels in name order: catch-all, exempt, global-default,
    /// leader-election, node-high, system, workload-high, workload-low.
    const BUILTIN: [u32; 8] = [5, 0, 20, 10, 40, 30, 40, 100];

    #[test]
    fn nominal_limits_of_the_builtin_levels_with_600_seats() {
        // ceil(600 × shares / 245), as kube-apiserver reports with 400 + 200 in flight.
        let limits = nominal_limits(600, &BUILTIN);
        assert_eq!(limits, [13, 0, 49, 25, 98, 74, 98, 245]);
    }

    #[test]
    fn lendable_seats_round_half_away_from_zero() {
        assert_eq!(percent_of(245, 90), 221); // 220.5
        assert_eq!(percent_of(74, 33), 24); // 24.42
        assert_eq!(percent_of(98, 50), 49);
        assert_eq!(percent_of(13, 0), 0);
        assert_eq!(nominal_limits(10, &[0, 0]), [0, 0]);
    }

    #[test]
    fn idle_levels_lend_to_a_busy_one() {
        // workload-low busy (demand 600), the others idle.
        let nominal = nominal_limits(600, &BUILTIN);
        let lendable = [0, 0, 50, 0, 25, 33, 50, 90];
        let items: Vec<Bounds> = (0..8)
            .map(|i| {
                let n = nominal[i];
                let l = percent_of(n, lendable[i]);
                let demand = if i == 7 { 600.0 } else { 0.0 };
                let borrowing = (i == 1).then_some(0);
                Bounds::of(n, l, borrowing, 0, demand)
            })
            .collect();
        let total: u32 = nominal.iter().sum();
        let alloc = allocate(f64::from(total), &items);
        let rounded: Vec<u32> = alloc.iter().map(|a| a.round() as u32).collect();
        // Everyone else keeps nominal − lendable; workload-low gets the rest.
        assert_eq!(&rounded[..7], [13, 0, 24, 25, 73, 50, 49]);
        assert_eq!(
            rounded[7],
            total - [13, 0, 24, 25, 73, 50, 49].iter().sum::<u32>()
        );
    }

    #[test]
    fn demand_within_nominal_keeps_nominal_shape() {
        let items = [
            Bounds::of(10, 5, None, 10, 10.0),
            Bounds::of(10, 5, None, 10, 10.0),
        ];
        let alloc = allocate(20.0, &items);
        assert!((alloc[0] - 10.0).abs() < 1e-6 && (alloc[1] - 10.0).abs() < 1e-6);
    }

    #[test]
    fn borrowing_stops_at_the_borrowing_limit() {
        let items = [
            Bounds::of(10, 0, Some(5), 0, 100.0),
            Bounds::of(10, 10, None, 0, 0.0),
        ];
        let alloc = allocate(20.0, &items);
        assert!((alloc[0] - 15.0).abs() < 1e-6, "{alloc:?}");
        assert!((alloc[1] - 5.0).abs() < 1e-6, "{alloc:?}");
    }

    #[test]
    fn demand_smooths_down_slowly_and_up_at_once() {
        let mut d = Demand::default();
        for _ in 0..10 {
            d.sample(100);
        }
        assert!((d.finish() - 100.0).abs() < 1e-9);
        d.sample(0);
        let after = d.finish();
        assert!(after > 97.0 && after < 98.0, "{after}");
        for v in [0, 200] {
            d.sample(v);
        }
        // avg 100 + stddev 100 = 200 > smoothed
        assert!((d.finish() - 200.0).abs() < 1e-9);
    }
}
