//! The periodic seat borrowing and the debug dump of [`FlowControl`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::control::FlowControl;
use super::seats::{self, Bounds};

/// How often the maintenance loop samples each level's seat demand.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Samples per borrowing adjustment (upstream adjusts every 10 s).
const SAMPLES_PER_ADJUSTMENT: u32 = 100;

impl FlowControl {
    /// Runs the seat-borrowing maintenance on the current tokio runtime until this
    /// `FlowControl` is dropped: demand sampled every 100 ms, seats redistributed every 10 s.
    pub fn spawn_maintenance(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let flow = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut samples = 0;
            loop {
                tick.tick().await;
                let Some(flow) = flow.upgrade() else {
                    return;
                };
                flow.sample_demand();
                samples += 1;
                if samples == SAMPLES_PER_ADJUSTMENT {
                    samples = 0;
                    flow.adjust_borrowing();
                }
            }
        })
    }

    /// Records every level's current seat demand (after giving back lingering seats that are
    /// due, also those of removed levels).
    pub fn sample_demand(&self) {
        let mut writer = self.writer();
        for level in writer.retired.iter().filter_map(Weak::upgrade) {
            level.expire();
        }
        for managed in writer.levels.values_mut() {
            managed.level.expire();
            managed.demand.sample(managed.level.demand());
            managed.level.sample_utilization();
        }
    }

    /// Redistributes the seats by demand: each level gets between `nominal − lendable` and
    /// `nominal + borrowing limit`, in proportion to its smoothed demand (see [`seats`]).
    pub fn adjust_borrowing(&self) {
        let mut writer = self.writer();
        let mut items = Vec::with_capacity(writer.levels.len());
        let mut total = 0.0;
        for m in writer.levels.values_mut() {
            let smoothed = m.demand.finish();
            let peak = m.level.take_peak();
            total += f64::from(m.nominal);
            items.push(Bounds::of(
                m.nominal,
                m.lendable,
                m.borrowing,
                peak,
                smoothed,
            ));
        }
        let allocation = seats::allocate(total, &items);
        for (m, seats) in writer.levels.values().zip(allocation) {
            let limit = seats.round().clamp(0.0, f64::from(u32::MAX)) as u32;
            if m.level.exempt {
                m.level.gauges.current.set(i64::from(limit));
            } else {
                m.level.set_limit(limit);
            }
        }
    }

    /// The priority levels as kube-apiserver's `/debug/api_priority_and_fairness/
    /// dump_priority_levels` prints them.
    pub fn dump_priority_levels(&self) -> String {
        let snapshot = self.snapshot.load();
        let writer = self.writer();
        let mut rows = vec![HEADERS.map(String::from).to_vec()];
        let retired = writer.retired.iter().filter_map(Weak::upgrade);
        let levels = writer
            .levels
            .values()
            .map(|m| m.level.clone())
            .chain(retired);
        for level in levels {
            let series = snapshot
                .schemas
                .iter()
                .filter(|s| Arc::ptr_eq(s.decision.level(), &level))
                .map(|s| s.decision.series());
            let (dispatched, executing) = series.fold((0, 0), |(d, e), s| {
                (d + s.dispatched.get(), e + s.executing.get().max(0))
            });
            let (seats, asked) = level.usage();
            let (active, waiting) = level.queue_usage();
            let counts = &level.counts;
            let load = |c: &AtomicU64| c.load(Relaxed);
            rows.push(vec![
                level.name.to_string(),
                active.to_string(),
                (seats == 0 && asked == 0).to_string(),
                level.quiescing.load(Relaxed).to_string(),
                waiting.to_string(),
                executing.to_string(),
                dispatched.to_string(),
                load(&counts.rejected).to_string(),
                load(&counts.timed_out).to_string(),
                load(&counts.cancelled).to_string(),
            ]);
        }
        table(&rows)
    }
}

const HEADERS: [&str; 10] = [
    "PriorityLevelName",
    "ActiveQueues",
    "IsIdle",
    "IsQuiescing",
    "WaitingRequests",
    "ExecutingRequests",
    "DispatchedRequests",
    "RejectedRequests",
    "TimedoutRequests",
    "CancelledRequests",
];

/// Cells as upstream's tabwriter lays them out (`"<cell>,"` padded to the column, at least 8
/// wide, one space of padding).
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            let widest = rows
                .iter()
                .map(|r| r.get(c).map_or(0, |s| s.len() + 1))
                .max();
            (widest.unwrap_or(0) + 1).max(8)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            let cell = format!("{cell},");
            line.push_str(&format!("{cell:<width$}"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
