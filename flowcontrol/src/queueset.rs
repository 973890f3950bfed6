//! The fair queue set of one `Queue` priority level (upstream `fairqueuing/queueset`), guarded
//! by the level's mutex: a request is shuffle-sharded into the queue of its flow's hand with
//! the least work waiting, and the next request to run is the head with the smallest virtual
//! finish time (`nextDispatchR` + its estimated work; ties: round robin). Work is counted in
//! seat-seconds: a dispatch adds `initial seats × 3 ms + final seats × their latency` to its
//! queue's `nextDispatchR`; the finish corrects it by `initial seats × (actual − 3 ms)`, so
//! flows share the seats by seat-time used, not by count. The virtual clock `R` advances with
//! real time × min(seats asked, limit) / active queues; a queue that goes active starts at
//! `R`, and `nextDispatchR` never precedes its head's arrival `R` (upstream's anti-windup).

use std::collections::VecDeque;
use std::time::Instant;

use tokio::sync::oneshot;

use super::admission::Decision;
use super::level::{Work, ESTIMATED_SERVICE};

/// Upper bound of `handSize` (60 bits of hash, at least 4 per card).
pub const MAX_HAND: usize = 15;

/// What a dispatched waiter receives: where its seats came from, for the finish.
#[derive(Debug, Clone, Copy)]
pub struct Grant {
    /// The queue it waited in.
    pub queue: usize,
    /// When it was dispatched.
    pub started: Instant,
}

/// A waiting request.
pub struct Entry {
    id: u64,
    arrival_r: f64,
    /// When it was queued.
    pub arrived: Instant,
    /// Its classification (for the metrics of its dispatch).
    pub decision: Decision,
    /// Where its grant goes.
    pub grant: oneshot::Sender<Grant>,
    /// The seats it asks for.
    pub work: Work,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Entry>,
    /// Estimated seat-seconds of the waiting requests.
    waiting_work: f64,
    /// Requests dispatched from it still executing.
    executing: u32,
    /// Seats they hold (including seats lingering after their end).
    seats: u32,
    next_dispatch_r: f64,
}

impl Queue {
    /// Nothing waits or executes (lingering seats aside).
    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.executing == 0
    }

    /// Idle and no seat held: it may go.
    fn unused(&self) -> bool {
        self.idle() && self.seats == 0
    }

    /// Anti-windup: dispatch in the virtual world never precedes arrival.
    fn bound(&mut self) {
        if let Some(head) = self.waiting.front() {
            self.next_dispatch_r = self.next_dispatch_r.max(head.arrival_r);
        }
    }

    fn take(&mut self, at: usize) -> Option<Entry> {
        let entry = self.waiting.remove(at)?;
        self.waiting_work = if self.waiting.is_empty() {
            0.0
        } else {
            (self.waiting_work - entry.work.total).max(0.0)
        };
        Some(entry)
    }
}

/// The queues of one level.
pub struct QueueSet {
    queues: Vec<Queue>,
    /// Queues new requests are dealt over (more may linger until they go idle).
    desired: usize,
    hand_size: usize,
    queue_length_limit: usize,
    /// Requests waiting.
    waiting: usize,
    /// Seats they ask for.
    waiting_seats: u64,
    /// Seats held by requests dispatched from a queue (including lingering ones).
    executing_seats: u64,
    /// Queues with waiting or executing requests.
    active: usize,
    current_r: f64,
    last: Instant,
    robin: usize,
    next_id: u64,
    /// Requests ever queued (rotates where a hand is looked at first, as upstream).
    enqueues: usize,
}

impl QueueSet {
    /// An empty set of `queues` queues.
    pub fn new(queues: u32, hand_size: u32, queue_length_limit: u32, now: Instant) -> QueueSet {
        let mut set = QueueSet {
            queues: Vec::new(),
            desired: 0,
            hand_size: 1,
            queue_length_limit: 0,
            waiting: 0,
            waiting_seats: 0,
            executing_seats: 0,
            active: 0,
            current_r: 0.0,
            last: now,
            robin: 0,
            next_id: 0,
            enqueues: 0,
        };
        set.configure(queues, hand_size, queue_length_limit);
        set
    }

    /// New parameters; added queues exist at once, removed ones go when unused.
    pub fn configure(&mut self, queues: u32, hand_size: u32, queue_length_limit: u32) {
        self.desired = (queues as usize).max(1);
        self.hand_size = (hand_size as usize).clamp(1, MAX_HAND.min(self.desired));
        self.queue_length_limit = queue_length_limit as usize;
        while self.queues.len() < self.desired {
            self.queues.push(Queue {
                next_dispatch_r: self.current_r,
                ..Queue::default()
            });
        }
        self.trim();
    }

    /// Requests waiting.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Queues with waiting or executing requests.
    pub fn active(&self) -> usize {
        self.active
    }

    /// Advances the virtual clock to `now`.
    fn sync(&mut self, limit: u32, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        if self.active > 0 {
            let asked = (self.waiting_seats + self.executing_seats) as f64;
            self.current_r += elapsed * asked.min(f64::from(limit)) / self.active as f64;
        }
    }

    /// Runs `change` on queue `index`, keeping the active count.
    fn with_queue<T>(&mut self, index: usize, change: impl FnOnce(&mut Queue) -> T) -> Option<T> {
        let queue = self.queues.get_mut(index)?;
        let was_idle = queue.idle();
        let out = change(queue);
        match (was_idle, queue.idle()) {
            (true, false) => self.active += 1,
            (false, true) => self.active -= 1,
            _ => {}
        }
        Some(out)
    }

    /// Queues a request of the flow with hash `hash` in the queue of its hand with the least
    /// work waiting; returns its queue and id, or `None` when that queue is full.
    pub fn enqueue(
        &mut self,
        hash: u64,
        (decision, grant): (Decision, oneshot::Sender<Grant>),
        work: Work,
        limit: u32,
        now: Instant,
    ) -> Option<(usize, u64)> {
        self.sync(limit, now);
        let mut hand = [0usize; MAX_HAND];
        let mut dealt = 0;
        deal(hash, self.desired, self.hand_size, |index| {
            hand[dealt] = index;
            dealt += 1;
        });
        let offset = self.enqueues % dealt.max(1);
        self.enqueues = self.enqueues.wrapping_add(1);
        let mut best: Option<(usize, f64)> = None;
        for i in 0..dealt {
            let index = hand[(offset + i) % dealt];
            let queued = self.queues[index].waiting_work;
            if best.is_none_or(|(_, least)| queued < least) {
                best = Some((index, queued));
            }
        }
        let (index, _) = best?;
        if self.queues[index].waiting.len() >= self.queue_length_limit {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        let current_r = self.current_r;
        self.with_queue(index, |queue| {
            if queue.idle() {
                queue.next_dispatch_r = current_r;
            }
            queue.waiting_work += work.total;
            queue.waiting.push_back(Entry {
                id,
                arrival_r: current_r,
                arrived: now,
                decision,
                grant,
                work,
            });
        })?;
        self.waiting += 1;
        self.waiting_seats += u64::from(work.seats);
        Some((index, id))
    }

    /// The queue whose head would finish first in virtual time, and the seats that head asks
    /// for (the caller dispatches it with [`QueueSet::pop`] once they are free).
    pub fn peek(&mut self, limit: u32, now: Instant) -> Option<(usize, u32)> {
        if self.waiting == 0 {
            return None;
        }
        self.sync(limit, now);
        let count = self.queues.len();
        let mut best: Option<(usize, f64, u32)> = None;
        for step in 1..=count {
            let index = (self.robin + step) % count;
            let queue = &self.queues[index];
            let Some(head) = queue.waiting.front() else {
                continue;
            };
            let finish = queue.next_dispatch_r + head.work.total;
            if best.is_none_or(|(_, least, _)| finish < least) {
                best = Some((index, finish, head.work.seats));
            }
        }
        best.map(|(index, _, seats)| (index, seats))
    }

    /// The head of queue `index`.
    pub fn head(&self, index: usize) -> Option<&Entry> {
        self.queues.get(index)?.waiting.front()
    }

    /// Takes the head of queue `index` to run (the caller holds its seats).
    pub fn pop(&mut self, index: usize) -> Option<Entry> {
        let entry = self.with_queue(index, |queue| {
            let entry = queue.take(0)?;
            queue.executing += 1;
            queue.seats += entry.work.seats;
            queue.next_dispatch_r += entry.work.total;
            queue.bound();
            Some(entry)
        })??;
        self.robin = index;
        self.waiting -= 1;
        self.waiting_seats -= u64::from(entry.work.seats);
        self.executing_seats += u64::from(entry.work.seats);
        Some(entry)
    }

    /// Removes request `id` from queue `index` (its client went away or its time is up);
    /// `None` when it is no longer there (it was dispatched).
    pub fn remove(&mut self, index: usize, id: u64, limit: u32, now: Instant) -> Option<Entry> {
        self.sync(limit, now);
        let entry = self.with_queue(index, |queue| {
            let at = queue.waiting.iter().position(|e| e.id == id)?;
            let entry = queue.take(at);
            queue.bound();
            entry
        })??;
        self.waiting -= 1;
        self.waiting_seats -= u64::from(entry.work.seats);
        self.trim();
        Some(entry)
    }

    /// A request dispatched from `grant.queue` with `initial` execution seats finished: its
    /// queue is charged the actual service time instead of the estimate. Its seats stay
    /// counted until [`QueueSet::release`].
    pub fn finish(&mut self, grant: Grant, initial: u32, limit: u32, now: Instant) {
        self.sync(limit, now);
        let served = now.saturating_duration_since(grant.started).as_secs_f64();
        self.with_queue(grant.queue, |queue| {
            if queue.executing > 0 {
                queue.executing -= 1;
                queue.next_dispatch_r -= f64::from(initial) * (ESTIMATED_SERVICE - served);
                queue.bound();
            }
        });
    }

    /// `seats` of a request dispatched from queue `index` are free again.
    pub fn release(&mut self, index: usize, seats: u32, limit: u32, now: Instant) {
        self.sync(limit, now);
        if let Some(queue) = self.queues.get_mut(index) {
            let seats = seats.min(queue.seats);
            queue.seats -= seats;
            self.executing_seats = self.executing_seats.saturating_sub(u64::from(seats));
        }
        self.trim();
    }

    /// Drops unused queues beyond the desired number from the end (seats and waiters name
    /// queues by index, so only the tail can go).
    fn trim(&mut self) {
        while self.queues.len() > self.desired && self.queues.last().is_some_and(Queue::unused) {
            self.queues.pop();
        }
        self.robin %= self.queues.len().max(1);
    }
}

/// Deals a hand of `hand` distinct cards from a deck of `deck` by `hash` (upstream
/// `shufflesharding.Dealer.Deal`: the same hash gives the same queues).
pub fn deal(mut hash: u64, deck: usize, hand: usize, mut pick: impl FnMut(usize)) {
    let hand = hand.min(deck).min(MAX_HAND);
    let mut remainders = [0usize; MAX_HAND];
    for (i, slot) in remainders.iter_mut().enumerate().take(hand) {
        let size = (deck - i) as u64;
        *slot = (hash % size) as usize;
        hash /= size;
    }
    for i in 0..hand {
        let mut card = remainders[i];
        for j in (1..=i).rev() {
            if card >= remainders[j - 1] {
                card += 1;
            }
        }
        pick(card);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_has_distinct_cards_within_the_deck() {
        for (deck, hand) in [(8, 3), (16, 4), (6, 6), (1, 1), (64, 6)] {
            for hash in 0..5000u64 {
                let mut cards = Vec::new();
                deal(hash.wrapping_mul(0x9e37_79b9_7f4a_7c15), deck, hand, |c| {
                    cards.push(c)
                });
                assert_eq!(cards.len(), hand);
                assert!(cards.iter().all(|&c| c < deck), "{cards:?}");
                let mut sorted = cards.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len(), hand, "deck {deck} hand {hand}: {cards:?}");
            }
        }
    }

    #[test]
    fn the_same_hash_gives_the_same_hand() {
        let hand = |h| {
            let mut cards = Vec::new();
            deal(h, 128, 6, |c| cards.push(c));
            cards
        };
        assert_eq!(hand(42), hand(42));
        assert_ne!(hand(42), hand(43));
    }
}
