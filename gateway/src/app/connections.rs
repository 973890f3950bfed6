//! A bound on client connections below the open-file limit. Every client connection holds a
//! descriptor and every request in flight to a backend another; at the limit `accept()` and
//! `connect()` fail with `EMFILE` for everyone. apiagg counts the client connections it serves
//! and, at `--max-connections` or when client and backend connections together spend the
//! open-file budget (`backends::OpenFiles`), drops new ones at once (before the TLS handshake),
//! keeping the rest of the limit for connections to backends, the delegate, files and the
//! store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use pingora_core::apps::ServerApp;
use pingora_core::listeners::tls::Acceptor;
use pingora_core::listeners::ConnectionFilter;
use pingora_core::protocols::l4::stream::Stream as TcpStream;
use pingora_core::protocols::Stream;
use pingora_core::server::ShutdownWatch;
use prometheus::{IntCounter, IntGauge};

use crate::backends::OpenFiles;
use crate::deadlines::{ConnectionTimeouts, Deadlined, TimedOut};

/// The open files kept for everything but client connections: a quarter of the limit, at
/// least 1,024.
pub fn default_bound(open_file_limit: u64) -> usize {
    let limit = open_file_limit.min(4_000_000);
    let reserve = (limit / 4).max(1024);
    limit.saturating_sub(reserve).max(64) as usize
}

/// Client connections being served, and the bound on them.
#[derive(Debug)]
pub struct ConnectionBound {
    files: Arc<OpenFiles>,
    max: usize,
    /// Whether the bound is refusing connections now (logged when it changes).
    refusing: AtomicBool,
    gauge: IntGauge,
    refused: IntCounter,
}

impl ConnectionBound {
    /// A bound of `max` connections within the budget of `files`, counted in `registry`.
    pub fn new(
        max: usize,
        files: Arc<OpenFiles>,
        registry: &prometheus::Registry,
    ) -> prometheus::Result<Arc<Self>> {
        let gauge = IntGauge::new(
            "apiagg_client_connections",
            "Client connections being served.",
        )?;
        let refused = IntCounter::new(
            "apiagg_client_connections_refused_total",
            "Client connections dropped at accept because --max-connections were open.",
        )?;
        registry.register(Box::new(gauge.clone()))?;
        registry.register(Box::new(refused.clone()))?;
        Ok(Arc::new(ConnectionBound {
            files,
            max,
            refusing: AtomicBool::new(false),
            gauge,
            refused,
        }))
    }

    fn admit(&self) -> bool {
        let open = self.files.clients();
        let refuse = !self.files.client_fits(self.max);
        if self.refusing.swap(refuse, Ordering::AcqRel) != refuse {
            if refuse {
                tracing::warn!(
                    open,
                    "--max-connections or the open-file budget reached: new client connections are \
                     dropped until some close"
                );
            } else {
                tracing::info!(open, "client connections below --max-connections again");
            }
        }
        if refuse {
            self.refused.inc();
        }
        !refuse
    }
}

/// pingora's accept-time filter reading the bound.
#[derive(Debug)]
pub struct Filter(pub Arc<ConnectionBound>);

#[async_trait]
impl ConnectionFilter for Filter {
    async fn should_accept(&self, _addr: Option<&std::net::SocketAddr>) -> bool {
        self.0.admit()
    }
}

/// A server application counted as one open connection while it serves one, from before its
/// TLS handshake (run here, bounded by the request-head timeout as Go bounds kube-apiserver's)
/// to its end, each connection under the deadlines of its phase (`crate::deadlines::Deadlined`).
pub struct Counted<A> {
    inner: Arc<A>,
    bound: Arc<ConnectionBound>,
    deadlines: Option<(ConnectionTimeouts, TimedOut)>,
    tls: Option<Arc<Acceptor>>,
}

impl<A> Counted<A> {
    /// Counts the connections `inner` serves against `bound`.
    pub fn new(inner: A, bound: Arc<ConnectionBound>) -> Counted<A> {
        Counted {
            inner: Arc::new(inner),
            bound,
            deadlines: None,
            tls: None,
        }
    }

    /// The same, running the TLS handshake of each connection with `tls` (plain TCP when
    /// `None`).
    pub fn with_tls(mut self, tls: Option<Arc<Acceptor>>) -> Self {
        self.tls = tls;
        self
    }

    /// The TLS session of `stream`, or `None` when its handshake fails or outlasts the
    /// request-head timeout (counted).
    async fn handshake(&self, acceptor: &Acceptor, stream: Stream) -> Option<Stream> {
        let Ok(tcp) = stream.into_any().downcast::<TcpStream>() else {
            tracing::warn!("a client connection that is not TCP cannot be served over TLS");
            return None;
        };
        let limit = self
            .deadlines
            .as_ref()
            .map_or(ConnectionTimeouts::default().read_header, |(t, _)| {
                t.read_header
            });
        match tokio::time::timeout(limit, acceptor.tls_handshake(*tcp)).await {
            Ok(Ok(tls)) => Some(Box::new(tls)),
            Ok(Err(e)) => {
                // A client that went away or speaks something else: expected, not an error.
                tracing::debug!("TLS handshake with a client failed: {e}");
                None
            }
            Err(_) => {
                if let Some((_, timed_out)) = &self.deadlines {
                    timed_out.tls_handshake();
                }
                None
            }
        }
    }

    /// The same, each connection bounded by `timeouts` (closes counted in `timed_out`).
    pub fn with_deadlines(mut self, timeouts: ConnectionTimeouts, timed_out: TimedOut) -> Self {
        self.deadlines = Some((timeouts, timed_out));
        self
    }
}

/// One counted connection.
struct Open<'a>(&'a ConnectionBound);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.files.client_closed();
        self.0.gauge.dec();
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for Counted<A> {
    /// Serves one connection (every request on it) while it is counted open.
    async fn process_new(
        self: &Arc<Self>,
        session: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let bound = &*self.bound;
        bound.files.client_opened();
        bound.gauge.inc();
        let _open = Open(bound);
        let session = match &self.tls {
            // Boxed: the handshake's state is freed once it is done, never part of the
            // connection's future (measured: 8 KiB more per idle connection unboxed).
            Some(acceptor) => Box::pin(self.handshake(acceptor, session)).await?,
            None => session,
        };
        let session = match &self.deadlines {
            Some((timeouts, timed_out)) => Deadlined::wrap(session, *timeouts, timed_out.clone()),
            None => session,
        };
        self.inner.process_new(session, shutdown).await
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_leaves_a_quarter_of_the_limit_and_at_least_1024_files() {
        assert_eq!(default_bound(20_000), 15_000);
        assert_eq!(default_bound(4_096), 3_072);
        assert_eq!(default_bound(2_048), 1_024);
        assert_eq!(default_bound(1_024), 64);
        assert_eq!(default_bound(u64::MAX), 3_000_000);
    }

    #[tokio::test]
    async fn connections_beyond_the_bound_are_refused_and_counted() {
        let registry = prometheus::Registry::new();
        let files = OpenFiles::new(20_000);
        let bound = ConnectionBound::new(2, files.clone(), &registry).expect("metrics");
        let filter = Filter(bound.clone());
        assert!(filter.should_accept(None).await);
        files.client_opened();
        files.client_opened();
        assert!(!filter.should_accept(None).await);
        assert!(!filter.should_accept(None).await);
        assert_eq!(bound.refused.get(), 2);
        files.client_closed();
        assert!(filter.should_accept(None).await);
        // Backend connections spend the same budget.
        let slots: Vec<_> = std::iter::from_fn(|| files.try_upstream()).collect();
        assert_eq!(slots.len(), files.budget() - 1);
        assert!(!filter.should_accept(None).await);
    }
}
