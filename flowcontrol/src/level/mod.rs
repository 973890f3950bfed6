//! The run-time state of one priority level: seats as atomics (the fast path takes a request's
//! seats with one compare-and-swap when nobody waits), the fair queue set behind a mutex (the
//! slow path: queueing, dispatch, release of seats that came from a queue, seats lingering
//! after a request's end).
//!
//! `executing` counts seats taken (running or lingering), `waiting` the seats queued requests
//! ask for. Lost wake-ups are impossible: a waiter is counted in `waiting` before its enqueuer
//! looks at `executing` again, and a release lowers `executing` before it looks at `waiting`
//! (and a limit is raised before `waiting` is looked at), all sequentially consistent, so one
//! of the two always dispatches.

mod linger;
mod work;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::oneshot;

pub use self::work::{max_seats, Work, ESTIMATED_SERVICE};
use super::admission::Decision;
use super::clock::{Clock, RetryAfter};
use super::config::Mode;
use super::estimate::WorkEstimate;
use super::metrics::{LevelGauges, Reason};
use super::queueset::{Entry, Grant, QueueSet};

/// What the slow path decided.
pub enum Slow {
    /// The seats are taken: run.
    Run,
    /// Queued: wait for the grant.
    Wait {
        /// The queue it waits in.
        queue: usize,
        /// Its id there.
        id: u64,
        /// When it was queued.
        arrived: Instant,
        /// Where its seats will come from.
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
    /// Seats held after their requests ended.
    lingering: linger::Lingering,
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
    /// Most seats one request may take (0: no cap of the level's own).
    max_seats: AtomicU32,
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
            max_seats: AtomicU32::new(0),
            peak: AtomicU32::new(0),
            quiescing: AtomicBool::new(false),
            state: Mutex::new(State {
                queues: None,
                reject: true,
                retry: RetryAfter::new(now),
                lingering: linger::Lingering::default(),
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

    /// The seats `estimate` takes here: at most the level's per-request cap, final seats
    /// reshaped to fit the cap and the current limit.
    #[inline]
    pub fn work(&self, estimate: &WorkEstimate) -> Work {
        if *estimate == WorkEstimate::ONE {
            return Work::ONE;
        }
        let cap = self.max_seats.load(Relaxed);
        Work::of(estimate, cap, self.limit.load(Relaxed))
    }

    /// The fast path: `seats` seats when nobody waits and they are free.
    #[inline]
    pub fn try_acquire(&self, seats: u32) -> bool {
        self.waiting.load(SeqCst) == 0 && self.reserve(seats)
    }

    /// Takes `seats` seats when they are free (waiters or not). A request wider than the
    /// whole limit takes them when no seat is taken, rather than never (upstream does the
    /// same until borrowing can serve it).
    #[inline]
    fn reserve(&self, seats: u32) -> bool {
        // Sequentially consistent loads: see the module documentation.
        let limit = self.limit.load(SeqCst);
        let mut current = self.executing.load(SeqCst);
        loop {
            let fits = current.checked_add(seats).is_some_and(|n| n <= limit);
            let alone = current == 0 && limit > 0;
            if !fits && !alone {
                return false;
            }
            match self
                .executing
                .compare_exchange_weak(current, current + seats, SeqCst, SeqCst)
            {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        let demand = current + seats + self.waiting.load(Relaxed);
        if demand > self.peak.load(Relaxed) {
            self.peak.fetch_max(demand, Relaxed);
        }
        true
    }

    /// Applies a (new) limit response and nominal limit.
    pub fn configure(&self, mode: Mode, nominal: u32) {
        self.max_seats.store(max_seats(nominal, mode), Relaxed);
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
            let now = self.clock.now();
            let mut state = self.lock();
            self.dispatch(&mut state, now);
        }
    }

    /// Samples the executing seats over the current limit into the utilization histogram
    /// (exempt levels, and levels without seats, have no utilization).
    pub fn sample_utilization(&self) {
        let limit = self.limit.load(Relaxed);
        if self.exempt || limit == 0 {
            return;
        }
        let executing = self.executing.load(Relaxed);
        let ratio = f64::from(executing) / f64::from(limit);
        self.gauges.utilization.observe(ratio);
    }

    /// Seats taken plus seats asked for by waiters.
    pub fn demand(&self) -> u32 {
        self.executing.load(Relaxed) + self.waiting.load(Relaxed)
    }

    /// `(seats taken, seats asked for by waiters)`
    pub fn usage(&self) -> (u32, u32) {
        (self.executing.load(Relaxed), self.waiting.load(Relaxed))
    }

    /// The demand high-water mark since the last call; the next period starts at the current
    /// demand.
    pub fn take_peak(&self) -> u32 {
        self.peak.swap(self.demand(), Relaxed)
    }

    /// `(queues with work, requests waiting)` (for the dump).
    pub fn queue_usage(&self) -> (usize, usize) {
        let state = self.lock();
        state
            .queues
            .as_ref()
            .map_or((0, 0), |q| (q.active(), q.waiting()))
    }

    /// The slow path: take free seats (fairly: only when nobody waits), reject, or queue.
    pub fn admit_slow(&self, hash: impl FnOnce() -> u64, decision: &Decision, work: Work) -> Slow {
        let now = self.clock.now();
        let mut state = self.lock();
        if self.expire_locked(&mut state, now) {
            self.dispatch(&mut state, now);
        }
        if self.try_acquire(work.seats) {
            return Slow::Run;
        }
        if state.reject {
            return Slow::Reject(Reason::ConcurrencyLimit);
        }
        let limit = self.limit.load(Relaxed);
        let Some(queues) = state.queues.as_mut() else {
            return Slow::Reject(Reason::ConcurrencyLimit);
        };
        let (sender, receiver) = oneshot::channel();
        let queued = queues.enqueue(hash(), (decision.clone(), sender), work, limit, now);
        let Some((queue, id)) = queued else {
            return Slow::Reject(Reason::QueueFull);
        };
        let waiting = self.waiting.fetch_add(work.seats, SeqCst) + work.seats;
        decision.series().queued(work.seats);
        self.peak
            .fetch_max(self.executing.load(Relaxed) + waiting, Relaxed);
        self.dispatch(&mut state, now);
        Slow::Wait {
            queue,
            id,
            arrived: now,
            grant: receiver,
        }
    }

    /// Lets waiters run, fairest first, while the fairest one's seats are free; when they are
    /// not, nobody else runs before it (and the miss is counted).
    fn dispatch(&self, state: &mut State, now: Instant) {
        let Some(queues) = state.queues.as_mut() else {
            return;
        };
        while queues.waiting() > 0 {
            let limit = self.limit.load(SeqCst);
            if self.executing.load(SeqCst) >= limit {
                break;
            }
            let Some((queue, seats)) = queues.peek(limit, now) else {
                break;
            };
            if !self.reserve(seats) {
                if let Some(head) = queues.head(queue) {
                    head.decision.series().no_accommodation.inc();
                }
                break;
            }
            let Some(entry) = queues.pop(queue) else {
                self.executing.fetch_sub(seats, SeqCst);
                break;
            };
            self.waiting.fetch_sub(seats, SeqCst);
            let Entry {
                arrived,
                decision,
                grant,
                work,
                ..
            } = entry;
            let series = decision.series();
            series.unqueued(work.seats);
            series.started(work.seats);
            let waited = now.saturating_duration_since(arrived);
            series.waited_and_ran.observe(waited.as_secs_f64());
            let granted = Grant {
                queue,
                started: now,
            };
            if grant.send(granted).is_err() {
                // Cannot happen (a waiter leaves its queue before it goes): give the seats back.
                series.executing.dec();
                series.occupy(-i64::from(work.seats));
                queues.finish(granted, work.initial, limit, now);
                queues.release(queue, work.seats, limit, now);
                self.executing.fetch_sub(work.seats, SeqCst);
            }
        }
    }

    /// A request that held `work` ended: its seats go back now, or after `work.linger`.
    pub fn finish(self: &Arc<Self>, grant: Option<Grant>, work: Work, decision: &Decision) {
        if !work.linger.is_zero() && self.linger(grant, work, decision) {
            return;
        }
        decision.series().occupy(-i64::from(work.seats));
        self.release(grant, work);
    }

    /// Gives `work.seats` back; seats that came from a queue charge it the time they ran.
    fn release(&self, grant: Option<Grant>, work: Work) {
        self.executing.fetch_sub(work.seats, SeqCst);
        if grant.is_none() && self.waiting.load(SeqCst) == 0 {
            return;
        }
        let now = self.clock.now();
        let mut state = self.lock();
        let limit = self.limit.load(Relaxed);
        if let (Some(grant), Some(queues)) = (grant, state.queues.as_mut()) {
            queues.finish(grant, work.initial, limit, now);
            queues.release(grant.queue, work.seats, limit, now);
        }
        self.dispatch(&mut state, now);
    }

    /// Takes waiter `id` out of queue `queue`; `None` when it was dispatched already.
    pub fn cancel(&self, queue: usize, id: u64) -> Option<Entry> {
        let now = self.clock.now();
        let mut state = self.lock();
        let limit = self.limit.load(Relaxed);
        let entry = state.queues.as_mut()?.remove(queue, id, limit, now)?;
        self.waiting.fetch_sub(entry.work.seats, SeqCst);
        // The head may have changed to one that fits.
        self.dispatch(&mut state, now);
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
