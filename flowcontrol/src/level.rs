//! The run-time state of one priority level: seats as atomics (the fast path takes a seat with
//! one compare-and-swap when nobody waits), the fair queue set behind a mutex (the slow path:
//! queueing, dispatch, release of a seat that came from a queue).
//!
//! Lost wake-ups are impossible: a waiter is counted in `waiting` before its enqueuer looks at
//! `executing` again, and a release lowers `executing` before it looks at `waiting` (and a
//! limit is raised before `waiting` is looked at), all sequentially consistent, so one of the
//! two always dispatches.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::oneshot;

use super::admission::Decision;
use super::clock::{Clock, RetryAfter};
use super::config::Mode;
use super::metrics::{LevelGauges, Reason};
use super::queueset::{Entry, Grant, QueueSet};

/// What the slow path decided.
pub enum Slow {
    /// A seat is taken: run.
    Run,
    /// Queued: wait for the grant.
    Wait {
        /// The queue it waits in.
        queue: usize,
        /// Its id there.
        id: u64,
        /// When it was queued.
        arrived: Instant,
        /// Where its seat will come from.
        grant: oneshot::Receiver<Grant>,
    },
    /// Rejected.
    Reject(Reason),
}

/// Counters for the debug dump.
#[derive(Default)]
pub struct Counts {
    /// Rejected on arrival (queue full, concurrency limit).
    pub rejected: AtomicU64,
    /// Timed out in a queue.
    pub timed_out: AtomicU64,
    /// Left a queue because the client went away.
    pub cancelled: AtomicU64,
}

struct State {
    /// The queues; kept when the level turns to `Reject`, so its waiters still run.
    queues: Option<QueueSet>,
    reject: bool,
    retry: RetryAfter,
}

/// One priority level.
pub struct Level {
    /// Its name.
    pub name: Box<str>,
    /// Exempt levels have no seats (and never turn limited: a new level replaces them).
    pub exempt: bool,
    executing: AtomicU32,
    waiting: AtomicU32,
    limit: AtomicU32,
    /// Highest seat demand since the last borrowing adjustment.
    peak: AtomicU32,
    /// No longer configured: serves what it holds, gets no new requests.
    pub quiescing: AtomicBool,
    state: Mutex<State>,
    /// Its limit gauges.
    pub gauges: LevelGauges,
    /// Counters for the dump.
    pub counts: Counts,
    clock: Clock,
}

impl Level {
    /// A level with no seats yet (see [`Level::configure`] and [`Level::set_limit`]).
    pub fn new(name: &str, exempt: bool, gauges: LevelGauges, clock: Clock) -> Level {
        let now = clock.now();
        Level {
            name: name.into(),
            exempt,
            executing: AtomicU32::new(0),
            waiting: AtomicU32::new(0),
            limit: AtomicU32::new(0),
            peak: AtomicU32::new(0),
            quiescing: AtomicBool::new(false),
            state: Mutex::new(State {
                queues: None,
                reject: true,
                retry: RetryAfter::new(now),
            }),
            gauges,
            counts: Counts::default(),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The time on this level's clock.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The fast path: a seat when nobody waits and one is free.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        self.waiting.load(SeqCst) == 0 && self.reserve()
    }

    /// Takes a seat when one is free (waiters or not).
    #[inline]
    fn reserve(&self) -> bool {
        // Sequentially consistent loads: see the module documentation.
        let limit = self.limit.load(SeqCst);
        let mut current = self.executing.load(SeqCst);
        loop {
            if current >= limit {
                return false;
            }
            match self
                .executing
                .compare_exchange_weak(current, current + 1, SeqCst, SeqCst)
            {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        let demand = current + 1 + self.waiting.load(Relaxed);
        if demand > self.peak.load(Relaxed) {
            self.peak.fetch_max(demand, Relaxed);
        }
        true
    }

    /// Applies a (new) limit response.
    pub fn configure(&self, mode: Mode) {
        let now = self.clock.now();
        let mut state = self.lock();
        match mode {
            Mode::Queue {
                queues,
                hand_size,
                queue_length_limit,
            } => {
                state.reject = false;
                match state.queues.as_mut() {
                    Some(set) => set.configure(queues, hand_size, queue_length_limit),
                    None => {
                        state.queues =
                            Some(QueueSet::new(queues, hand_size, queue_length_limit, now))
                    }
                }
            }
            Mode::Reject | Mode::Exempt => state.reject = true,
        }
    }

    /// The current limit.
    #[cfg(test)]
    pub fn limit(&self) -> u32 {
        self.limit.load(Relaxed)
    }

    /// Sets the current limit and lets waiters run if it grew.
    pub fn set_limit(&self, limit: u32) {
        self.limit.store(limit, SeqCst);
        if !self.exempt {
            self.gauges.current.set(i64::from(limit));
        }
        if self.waiting.load(SeqCst) > 0 {
            let mut state = self.lock();
            self.dispatch(&mut state);
        }
    }

    /// Seats in use plus requests waiting.
    pub fn demand(&self) -> u32 {
        self.executing.load(Relaxed) + self.waiting.load(Relaxed)
    }

    /// `(executing, waiting)`
    pub fn usage(&self) -> (u32, u32) {
        (self.executing.load(Relaxed), self.waiting.load(Relaxed))
    }

    /// The demand high-water mark since the last call; the next period starts at the current
    /// demand.
    pub fn take_peak(&self) -> u32 {
        self.peak.swap(self.demand(), Relaxed)
    }

    /// Queues with work (for the dump).
    pub fn active_queues(&self) -> usize {
        self.lock().queues.as_ref().map_or(0, QueueSet::active)
    }

    /// The slow path: take a free seat (fairly: only when nobody waits), reject, or queue.
    pub fn admit_slow(&self, hash: impl FnOnce() -> u64, decision: &Decision) -> Slow {
        let mut state = self.lock();
        if self.try_acquire() {
            return Slow::Run;
        }
        if state.reject {
            return Slow::Reject(Reason::ConcurrencyLimit);
        }
        let Some(queues) = state.queues.as_mut() else {
            return Slow::Reject(Reason::ConcurrencyLimit);
        };
        let (sender, receiver) = oneshot::channel();
        let now = self.clock.now();
        let limit = self.limit.load(Relaxed);
        let Some((queue, id)) = queues.enqueue(hash(), (decision.clone(), sender), limit, now)
        else {
            return Slow::Reject(Reason::QueueFull);
        };
        let waiting = self.waiting.fetch_add(1, SeqCst) + 1;
        decision.series().inqueue.inc();
        self.peak
            .fetch_max(self.executing.load(Relaxed) + waiting, Relaxed);
        self.dispatch(&mut state);
        Slow::Wait {
            queue,
            id,
            arrived: now,
            grant: receiver,
        }
    }

    /// Lets as many waiters run as there are free seats, fairest first.
    fn dispatch(&self, state: &mut State) {
        let Some(queues) = state.queues.as_mut() else {
            return;
        };
        let now = self.clock.now();
        while queues.waiting() > 0 && self.reserve() {
            let limit = self.limit.load(Relaxed);
            let Some((queue, entry)) = queues.pop(limit, now) else {
                self.executing.fetch_sub(1, SeqCst);
                break;
            };
            self.waiting.fetch_sub(1, SeqCst);
            let Entry {
                arrived,
                decision,
                grant,
                ..
            } = entry;
            let series = decision.series();
            series.inqueue.dec();
            series.dispatched.inc();
            series.executing.inc();
            series.seats.inc();
            let waited = now.saturating_duration_since(arrived);
            series.waited_and_ran.observe(waited.as_secs_f64());
            let granted = Grant {
                queue,
                started: now,
            };
            if grant.send(granted).is_err() {
                // Cannot happen (a waiter leaves its queue before it goes): give the seat back.
                series.executing.dec();
                series.seats.dec();
                queues.finish(granted, limit, now);
                self.executing.fetch_sub(1, SeqCst);
            }
        }
    }

    /// Gives a seat back; one that came from a queue charges its queue the time it ran.
    pub fn release(&self, grant: Option<Grant>) {
        self.executing.fetch_sub(1, SeqCst);
        if grant.is_none() && self.waiting.load(SeqCst) == 0 {
            return;
        }
        let now = self.clock.now();
        let mut state = self.lock();
        if let (Some(grant), Some(queues)) = (grant, state.queues.as_mut()) {
            queues.finish(grant, self.limit.load(Relaxed), now);
        }
        self.dispatch(&mut state);
    }

    /// Takes waiter `id` out of queue `queue`; `None` when it was dispatched already.
    pub fn cancel(&self, queue: usize, id: u64) -> Option<Entry> {
        let now = self.clock.now();
        let mut state = self.lock();
        let limit = self.limit.load(Relaxed);
        let entry = state.queues.as_mut()?.remove(queue, id, limit, now)?;
        self.waiting.fetch_sub(1, SeqCst);
        Some(entry)
    }

    /// Notes a rejection for `reason` and returns the `Retry-After` seconds to send.
    pub fn rejected(&self, reason: Reason) -> u32 {
        let counter = match reason {
            Reason::QueueFull | Reason::ConcurrencyLimit => &self.counts.rejected,
            Reason::TimeOut => &self.counts.timed_out,
            Reason::Cancelled => &self.counts.cancelled,
        };
        counter.fetch_add(1, Relaxed);
        if reason == Reason::Cancelled {
            return 0;
        }
        let now = self.clock.now();
        self.lock().retry.dropped(now)
    }
}
