//! Seats that stay taken after their request ended (a write's watch-event fan-out, upstream's
//! `AdditionalLatency`). They are given back when due by a timer task per level (on the tokio
//! runtime the seat was dropped on), and by any slow-path event or maintenance tick that comes
//! first; nothing blocks.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Instant;

use super::{Level, State, Work};
use crate::admission::Decision;
use crate::clock::Clock;
use crate::queueset::Grant;

/// One request's lingering seats.
struct Held {
    until: Instant,
    order: u64,
    seats: u32,
    /// The queue it was dispatched from.
    queue: Option<usize>,
    decision: Decision,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.until, self.order).cmp(&(other.until, other.order))
    }
}

/// The lingering seats of a level, soonest due first, and its timer.
#[derive(Default)]
pub(super) struct Lingering {
    held: BinaryHeap<Reverse<Held>>,
    order: u64,
    /// The running timer: its generation and when it wakes.
    timer: Option<(u64, Instant)>,
    generations: u64,
}

impl Lingering {
    /// Whether a timer must start for `until`; returns its generation.
    fn arm(&mut self, until: Instant) -> Option<u64> {
        if self.timer.is_some_and(|(_, at)| at <= until) {
            return None;
        }
        self.generations += 1;
        self.timer = Some((self.generations, until));
        Some(self.generations)
    }

    /// What timer `generation` does next: sleep until the returned instant, or end.
    fn rearm(&mut self, generation: u64) -> Option<Instant> {
        if self.timer.is_none_or(|(g, _)| g != generation) {
            return None;
        }
        let next = self.held.peek().map(|Reverse(h)| h.until);
        self.timer = next.map(|at| (generation, at));
        next
    }

    fn pop_due(&mut self, now: Instant) -> Option<Held> {
        if self.held.peek().is_some_and(|Reverse(h)| h.until <= now) {
            return self.held.pop().map(|Reverse(h)| h);
        }
        None
    }

    /// Seats lingering.
    #[cfg(test)]
    fn seats(&self) -> u32 {
        self.held.iter().map(|Reverse(h)| h.seats).sum()
    }
}

impl Level {
    /// Keeps `work.seats` taken for `work.linger` after the request ended. `false` when there
    /// is no runtime to give them back later: the caller gives them back now.
    pub(super) fn linger(
        self: &Arc<Self>,
        grant: Option<Grant>,
        work: Work,
        decision: &Decision,
    ) -> bool {
        let runtime = match self.clock {
            Clock::System => match tokio::runtime::Handle::try_current() {
                Ok(handle) => Some(handle),
                Err(_) => return false,
            },
            // Tests move the clock and let the next event give the seats back.
            #[cfg(test)]
            Clock::Manual(_) => None,
        };
        let now = self.clock.now();
        let until = now + work.linger;
        let mut state = self.lock();
        let limit = self.limit.load(SeqCst);
        if let (Some(grant), Some(queues)) = (grant, state.queues.as_mut()) {
            queues.finish(grant, work.initial, limit, now);
        }
        let lingering = &mut state.lingering;
        lingering.order += 1;
        lingering.held.push(Reverse(Held {
            until,
            order: lingering.order,
            seats: work.seats,
            queue: grant.map(|g| g.queue),
            decision: decision.clone(),
        }));
        if let (Some(runtime), Some(generation)) = (runtime, lingering.arm(until)) {
            runtime.spawn(timer(self.clone(), generation, until));
        }
        true
    }

    /// Gives back the lingering seats due at `now`; whether any were.
    pub(super) fn expire_locked(&self, state: &mut State, now: Instant) -> bool {
        let limit = self.limit.load(SeqCst);
        let mut released = false;
        while let Some(held) = state.lingering.pop_due(now) {
            self.executing.fetch_sub(held.seats, SeqCst);
            held.decision.series().occupy(-i64::from(held.seats));
            if let (Some(queue), Some(queues)) = (held.queue, state.queues.as_mut()) {
                queues.release(queue, held.seats, limit, now);
            }
            released = true;
        }
        released
    }

    /// Gives back the lingering seats that are due and lets waiters run (the maintenance
    /// loop calls it; so does every slow-path admission).
    pub fn expire(&self) {
        let now = self.clock.now();
        let mut state = self.lock();
        if self.expire_locked(&mut state, now) {
            self.dispatch(&mut state, now);
        }
    }

    /// Seats lingering (tests).
    #[cfg(test)]
    pub fn lingering(&self) -> u32 {
        self.lock().lingering.seats()
    }
}

/// The timer of a level's lingering seats: wakes when the soonest are due, gives back what is
/// due, and sleeps again while any linger (unless a sooner timer replaced it).
async fn timer(level: Arc<Level>, generation: u64, mut until: Instant) {
    loop {
        tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
        let now = level.clock.now();
        let mut state = level.lock();
        if level.expire_locked(&mut state, now) {
            level.dispatch(&mut state, now);
        }
        match state.lingering.rearm(generation) {
            Some(next) => until = next,
            None => return,
        }
    }
}
