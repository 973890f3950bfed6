//! Fair shares of the TokenReview budget. Reviews of unknown tokens are what a caller with no
//! credentials can make apiagg send to the delegate, so their rate stays bounded process-wide
//! (the delegate's protection); within that rate each source gets its turn: waiting reviews
//! are served round-robin by client address, then by connection (the client's address and
//! port), so a flood of garbage tokens from some connections delays a valid token from another
//! by a bounded number of turns instead of taking every review. Waits, queues per connection
//! and the queue as a whole are bounded; past a bound the answer is 429 at once, and a full
//! gate makes room for a newcomer by dropping a review of its heaviest source, so filling the
//! queue costs the flooder its own places, never another caller's.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::DefaultDirectRateLimiter;
use tokio::sync::oneshot;

/// Reviews one connection may have waiting (HTTP/2 multiplexes many requests on one).
const PER_CONNECTION: usize = 4;
/// Reviews waiting in all; past it new ones are refused at once.
const WAITING: usize = 1_024;
/// The longest a review waits for its turn before the caller gets 429.
pub const MAX_WAIT: Duration = Duration::from_secs(5);

/// Where a review comes from: the client's address and port (one TCP connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Source {
    ip: IpAddr,
    port: u16,
}

impl Source {
    /// The source of a request from `peer` (unknown peers share one source).
    pub fn of(peer: Option<SocketAddr>) -> Source {
        match peer {
            Some(peer) => Source {
                ip: peer.ip(),
                port: peer.port(),
            },
            None => Source {
                ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                port: 0,
            },
        }
    }
}

/// Why a review may not be sent now. Retryable: the token may well be valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Busy {
    /// The source's queue, or the whole queue, is full.
    #[error("too many reviews waiting")]
    Full,
    /// The review waited its longest without its turn coming.
    #[error("no turn in time")]
    Waited,
}

/// The waiting reviews of one client address, by connection, in turn order.
#[derive(Default)]
struct Address {
    connections: HashMap<u16, VecDeque<oneshot::Sender<()>>>,
    turns: VecDeque<u16>,
    waiting: usize,
}

/// Every waiting review, by address in turn order.
#[derive(Default)]
struct Queues {
    addresses: HashMap<IpAddr, Address>,
    turns: VecDeque<IpAddr>,
    waiting: usize,
    /// A task hands out turns while anything waits.
    dispatching: bool,
}

/// The process's TokenReview budget, shared fairly.
pub struct ReviewGate {
    limiter: DefaultDirectRateLimiter,
    queues: Mutex<Queues>,
    max_wait: Duration,
}

impl ReviewGate {
    /// A gate whose reviews wait at most `max_wait` for their turn.
    pub fn waiting_at_most(limiter: DefaultDirectRateLimiter, max_wait: Duration) -> Arc<Self> {
        Arc::new(ReviewGate {
            limiter,
            queues: Mutex::new(Queues::default()),
            max_wait,
        })
    }

    /// Waits for the turn of a review from `source`: at once while nobody waits and the
    /// budget allows, else in the source's queue.
    pub async fn admit(self: &Arc<Self>, source: Source) -> Result<(), Busy> {
        let turn = {
            let mut queues = self.lock();
            if queues.waiting == 0 && self.limiter.check().is_ok() {
                return Ok(());
            }
            let turn = queues.enqueue(source)?;
            if !queues.dispatching {
                queues.dispatching = true;
                tokio::spawn(dispatch(self.clone()));
            }
            turn
        };
        match tokio::time::timeout(self.max_wait, turn).await {
            Ok(Ok(())) => Ok(()),
            // Its place was given to a review from a lighter source.
            Ok(Err(_)) => Err(Busy::Full),
            Err(_) => Err(Busy::Waited),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Hands each permit of the budget to the next waiting review, round-robin by address and
/// then by connection; ends when nothing waits.
async fn dispatch(gate: Arc<ReviewGate>) {
    loop {
        gate.limiter.until_ready().await;
        let mut queues = gate.lock();
        loop {
            let Some(waiter) = queues.next() else {
                queues.dispatching = false;
                return;
            };
            // A waiter that gave up (timed out, client gone) does not use the permit.
            if waiter.send(()).is_ok() {
                break;
            }
        }
    }
}

impl Queues {
    /// Queues a review from `source`. A full connection queue refuses it; a full gate makes
    /// room by dropping the newest review of the heaviest connection of the heaviest address,
    /// unless that is `source` itself: whoever floods the gate loses its own places first.
    fn enqueue(&mut self, source: Source) -> Result<oneshot::Receiver<()>, Busy> {
        let own = self
            .addresses
            .get(&source.ip)
            .and_then(|a| a.connections.get(&source.port))
            .map_or(0, VecDeque::len);
        if own >= PER_CONNECTION {
            return Err(Busy::Full);
        }
        if self.waiting >= WAITING {
            let heaviest = self
                .addresses
                .iter()
                .max_by_key(|(_, a)| a.waiting)
                .and_then(|(ip, a)| {
                    let port = a.connections.iter().max_by_key(|(_, q)| q.len())?.0;
                    Some((*ip, *port))
                });
            match heaviest {
                Some((ip, port)) if (ip, port) != (source.ip, source.port) => {
                    self.drop_newest(ip, port)
                }
                _ => return Err(Busy::Full),
            }
        }
        let address = self.addresses.entry(source.ip).or_default();
        if address.connections.is_empty() {
            self.turns.push_back(source.ip);
        }
        let queue = address.connections.entry(source.port).or_default();
        if queue.is_empty() {
            address.turns.push_back(source.port);
        }
        let (tx, rx) = oneshot::channel();
        queue.push_back(tx);
        address.waiting += 1;
        self.waiting += 1;
        Ok(rx)
    }

    /// Drops the newest waiting review of one connection (its caller gets 429).
    fn drop_newest(&mut self, ip: IpAddr, port: u16) {
        let Some(address) = self.addresses.get_mut(&ip) else {
            return;
        };
        let Some(queue) = address.connections.get_mut(&port) else {
            return;
        };
        if queue.pop_back().is_some() {
            address.waiting -= 1;
            self.waiting -= 1;
        }
        if queue.is_empty() {
            address.connections.remove(&port);
            address.turns.retain(|p| *p != port);
        }
        if address.connections.is_empty() {
            self.addresses.remove(&ip);
            self.turns.retain(|i| *i != ip);
        }
    }

    /// The next waiter in turn order, its queues rotated or dropped when empty.
    fn next(&mut self) -> Option<oneshot::Sender<()>> {
        while let Some(ip) = self.turns.pop_front() {
            let Some(address) = self.addresses.get_mut(&ip) else {
                continue;
            };
            while let Some(port) = address.turns.pop_front() {
                let Some(queue) = address.connections.get_mut(&port) else {
                    continue;
                };
                let waiter = queue.pop_front();
                if queue.is_empty() {
                    address.connections.remove(&port);
                } else {
                    address.turns.push_back(port);
                }
                if waiter.is_some() {
                    address.waiting -= 1;
                    self.waiting -= 1;
                }
                if address.connections.is_empty() {
                    self.addresses.remove(&ip);
                } else {
                    self.turns.push_back(ip);
                }
                return waiter;
            }
            self.addresses.remove(&ip);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(ip: [u8; 4], port: u16) -> Source {
        Source::of(Some(SocketAddr::from((ip, port))))
    }

    #[test]
    fn turns_go_round_robin_by_address_then_connection() {
        let mut queues = Queues::default();
        let mut receivers = Vec::new();
        for (ip, port) in [(1, 1), (1, 1), (1, 2), (2, 1)] {
            let rx = queues
                .enqueue(source([10, 0, 0, ip], port))
                .expect("queued");
            receivers.push(((ip, port), rx));
        }
        let mut order = Vec::new();
        while let Some(waiter) = queues.next() {
            waiter.send(()).expect("send");
            let served = receivers
                .iter_mut()
                .find_map(|(who, rx)| rx.try_recv().is_ok().then_some(*who))
                .expect("one served");
            order.push(served);
        }
        // Address 10.0.0.1 and 10.0.0.2 alternate; within 10.0.0.1, ports 1 and 2 alternate.
        assert_eq!(order, vec![(1, 1), (2, 1), (1, 2), (1, 1)]);
        assert_eq!(queues.waiting, 0);
        assert!(queues.addresses.is_empty() && queues.turns.is_empty());
    }

    #[test]
    fn a_full_gate_drops_the_heaviest_sources_newest_review_never_a_newcomers() {
        let mut queues = Queues::default();
        let mut flood = Vec::new();
        // One address fills the gate from many connections, PER_CONNECTION each.
        for port in 0..(WAITING / PER_CONNECTION) as u16 {
            for _ in 0..PER_CONNECTION {
                flood.push(queues.enqueue(source([10, 0, 0, 1], port)).expect("queued"));
            }
        }
        assert_eq!(queues.waiting, WAITING);
        // A full connection of the flooder is refused; a newcomer elsewhere gets a place.
        assert_eq!(
            queues.enqueue(source([10, 0, 0, 1], 0)).err(),
            Some(Busy::Full)
        );
        let mut newcomer = queues.enqueue(source([10, 0, 0, 2], 1)).expect("room made");
        assert_eq!(queues.waiting, WAITING);
        let dropped = flood
            .iter_mut()
            .filter_map(|rx| rx.try_recv().err())
            .filter(|e| *e == oneshot::error::TryRecvError::Closed)
            .count();
        assert_eq!(dropped, 1, "one of the flooder's reviews gave its place");
        // The newcomer's address takes its turn second.
        let first = queues.next().expect("a turn");
        first.send(()).expect("send");
        let second = queues.next().expect("a turn");
        second.send(()).expect("send");
        assert!(
            newcomer.try_recv().is_ok(),
            "the newcomer was second in turn"
        );
    }
}
