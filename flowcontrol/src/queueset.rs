//! The fair queue set of one `Queue` priority level (upstream `fairqueuing/queueset`), guarded
//! by the level's mutex: a request is shuffle-sharded into the shortest queue of its flow's
//! hand, and the next request to run comes from the non-empty queue with the smallest virtual
//! dispatch time `nextDispatchR` (ties: round robin). A dispatch adds the estimated work (one
//! seat × 3 ms) to its queue's `nextDispatchR`; the finish corrects it by the actual service
//! time, so flows share the seats by time used, not by count. The virtual clock `R` advances
//! with real time × min(seats asked, limit) / active queues; a queue that goes active starts
//! at `R`, and `nextDispatchR` never precedes its head's arrival `R` (upstream's anti-windup).

use std::collections::VecDeque;
use std::time::Instant;

use tokio::sync::oneshot;

use super::admission::Decision;

/// Upstream's estimated service time of one seat (`G`).
const ESTIMATED_SERVICE: f64 = 0.003;
/// Upper bound of `handSize` (60 bits of hash, at least 4 per card).
pub const MAX_HAND: usize = 15;

/// What a dispatched waiter receives: where its seat came from, for the finish.
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
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Entry>,
    executing: u32,
    next_dispatch_r: f64,
}

impl Queue {
    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.executing == 0
    }

    /// Anti-windup: dispatch in the virtual world never precedes arrival.
    fn bound(&mut self) {
        if let Some(head) = self.waiting.front() {
            self.next_dispatch_r = self.next_dispatch_r.max(head.arrival_r);
        }
    }
}

/// The queues of one level.
pub struct QueueSet {
    queues: Vec<Queue>,
    /// Queues new requests are dealt over (more may linger until they go idle).
    desired: usize,
    hand_size: usize,
    queue_length_limit: usize,
    waiting: usize,
    /// Seats of dispatched-from-queue requests still running.
    executing: usize,
    /// Queues with waiting or executing requests.
    active: usize,
    current_r: f64,
    last: Instant,
    robin: usize,
    next_id: u64,
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
            executing: 0,
            active: 0,
            current_r: 0.0,
            last: now,
            robin: 0,
            next_id: 0,
        };
        set.configure(queues, hand_size, queue_length_limit);
        set
    }

    /// New parameters; added queues exist at once, removed ones go when idle.
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
            let asked = (self.waiting + self.executing) as f64;
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

    /// Queues a request of the flow with hash `hash`; returns its queue and id, or `None`
    /// when the shortest queue of its hand is full.
    pub fn enqueue(
        &mut self,
        hash: u64,
        entry: (Decision, oneshot::Sender<Grant>),
        limit: u32,
        now: Instant,
    ) -> Option<(usize, u64)> {
        self.sync(limit, now);
        let mut best = (usize::MAX, usize::MAX);
        deal(hash, self.desired, self.hand_size, |index| {
            let length = self.queues[index].waiting.len();
            if length < best.1 {
                best = (index, length);
            }
        });
        let (index, length) = best;
        if length >= self.queue_length_limit {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        let current_r = self.current_r;
        let (decision, grant) = entry;
        self.with_queue(index, |queue| {
            if queue.idle() {
                queue.next_dispatch_r = current_r;
            }
            queue.waiting.push_back(Entry {
                id,
                arrival_r: current_r,
                arrived: now,
                decision,
                grant,
            });
        })?;
        self.waiting += 1;
        Some((index, id))
    }

    /// Takes the next request to run (the caller holds a seat for it).
    pub fn pop(&mut self, limit: u32, now: Instant) -> Option<(usize, Entry)> {
        if self.waiting == 0 {
            return None;
        }
        self.sync(limit, now);
        let count = self.queues.len();
        let mut best: Option<(usize, f64)> = None;
        for step in 1..=count {
            let index = (self.robin + step) % count;
            let queue = &self.queues[index];
            if queue.waiting.is_empty() {
                continue;
            }
            if best.is_none_or(|(_, r)| queue.next_dispatch_r < r) {
                best = Some((index, queue.next_dispatch_r));
            }
        }
        let (index, _) = best?;
        self.robin = index;
        let entry = self.with_queue(index, |queue| {
            let entry = queue.waiting.pop_front();
            queue.executing += 1;
            queue.next_dispatch_r += ESTIMATED_SERVICE;
            queue.bound();
            entry
        })??;
        self.waiting -= 1;
        self.executing += 1;
        Some((index, entry))
    }

    /// Removes request `id` from queue `index` (its client went away or its time is up);
    /// `None` when it is no longer there (it was dispatched).
    pub fn remove(&mut self, index: usize, id: u64, limit: u32, now: Instant) -> Option<Entry> {
        self.sync(limit, now);
        let entry = self.with_queue(index, |queue| {
            let at = queue.waiting.iter().position(|e| e.id == id)?;
            let entry = queue.waiting.remove(at);
            queue.bound();
            entry
        })??;
        self.waiting -= 1;
        self.trim();
        Some(entry)
    }

    /// A request dispatched from `grant.queue` finished: its queue is charged the actual
    /// service time instead of the estimate.
    pub fn finish(&mut self, grant: Grant, limit: u32, now: Instant) {
        self.sync(limit, now);
        let served = now.saturating_duration_since(grant.started);
        let done = self.with_queue(grant.queue, |queue| {
            if queue.executing == 0 {
                return false;
            }
            queue.executing -= 1;
            queue.next_dispatch_r -= ESTIMATED_SERVICE - served.as_secs_f64();
            queue.bound();
            true
        });
        if done == Some(true) {
            self.executing -= 1;
        }
        self.trim();
    }

    /// Drops idle queues beyond the desired number from the end (seats and waiters name
    /// queues by index, so only the tail can go).
    fn trim(&mut self) {
        while self.queues.len() > self.desired && self.queues.last().is_some_and(Queue::idle) {
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
