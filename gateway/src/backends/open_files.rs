//! The process's budget of open files for connections. Every client connection holds a
//! descriptor, and so does every request in flight to a backend or the delegate (a connection
//! of its own over HTTP/1.1, a tunnel for an upgrade, the connections of an emulated streaming
//! list; requests multiplexed over HTTP/2 are counted one each all the same). One HTTP/2 client
//! connection carries up to 100 streams, so bounding client connections alone does not keep
//! apiagg below its open-file limit: both draw on this one budget, as nginx's
//! `worker_connections` counts client and upstream connections together. Past it a new request
//! is refused before it connects (503 saying so) and a new client connection is dropped at
//! accept, so apiagg never reaches `EMFILE` on the proxy path; what is left below the limit
//! (the reserve) keeps files, the store, the pools and the controllers' probes working.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Connections open and the budget they share.
#[derive(Debug)]
pub struct OpenFiles {
    clients: AtomicUsize,
    upstream: AtomicUsize,
    budget: usize,
}

/// One request's connection to a backend; dropping it gives the descriptor back.
#[derive(Debug)]
pub struct FileSlot(Arc<OpenFiles>);

impl Drop for FileSlot {
    fn drop(&mut self) {
        self.0.upstream.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Descriptors kept out of the budget for everything else: a quarter of the limit, at most
/// 1,024.
pub fn reserve(open_file_limit: usize) -> usize {
    (open_file_limit / 4).min(1024)
}

impl OpenFiles {
    /// The budget of a process allowed `open_file_limit` open files.
    pub fn new(open_file_limit: usize) -> Arc<OpenFiles> {
        Arc::new(OpenFiles {
            clients: AtomicUsize::new(0),
            upstream: AtomicUsize::new(0),
            budget: open_file_limit
                .saturating_sub(reserve(open_file_limit))
                .max(64),
        })
    }

    /// Connections the budget allows, clients and backends together.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Client connections open now.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Acquire)
    }

    /// Whether one more client connection fits, with `max_clients` of them at most.
    pub fn client_fits(&self, max_clients: usize) -> bool {
        let clients = self.clients();
        clients < max_clients && clients + self.upstream.load(Ordering::Acquire) < self.budget
    }

    /// A client connection opened (counted until [`OpenFiles::client_closed`]).
    pub fn client_opened(&self) {
        self.clients.fetch_add(1, Ordering::AcqRel);
    }

    /// A client connection closed.
    pub fn client_closed(&self) {
        self.clients.fetch_sub(1, Ordering::AcqRel);
    }

    /// A descriptor for one request's backend connection, unless the budget is spent.
    pub fn try_upstream(self: &Arc<Self>) -> Option<FileSlot> {
        let before = self.upstream.fetch_add(1, Ordering::AcqRel);
        if before + self.clients() >= self.budget {
            self.upstream.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(FileSlot(self.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_and_backend_connections_share_one_budget() {
        let files = OpenFiles::new(1_200);
        assert_eq!(files.budget(), 900);
        for _ in 0..100 {
            files.client_opened();
        }
        let slots: Vec<_> = (0..1_000).filter_map(|_| files.try_upstream()).collect();
        assert_eq!(slots.len(), 800, "the rest of the budget");
        assert!(!files.client_fits(1_000), "no room left for a client");
        drop(slots);
        assert!(files.client_fits(1_000));
        assert!(!files.client_fits(100), "at most max_clients");
    }

    #[test]
    fn the_reserve_is_a_quarter_of_the_limit_up_to_1024() {
        assert_eq!(reserve(20_000), 1_024);
        assert_eq!(reserve(1_024), 256);
        assert_eq!(OpenFiles::new(100).budget(), 75);
        assert_eq!(OpenFiles::new(40).budget(), 64, "never below 64");
    }
}
