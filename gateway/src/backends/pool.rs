//! Idle HTTP/1.1 connections to one endpoint: apiagg's own pool, one per endpoint and identity
//! (the endpoint's address, CA, verification and client certificate are fixed for its life: a
//! change builds a new endpoint, and its pool).
//!
//! A connection goes back after a complete exchange that may be reused, and is taken again
//! only while it is fresh (idle less than the endpoint's idle timeout) and still open: before
//! reuse, one non-blocking peek at its socket tells a connection the backend closed (end of
//! stream), or one with bytes nobody asked for, from an idle one (nothing to read). Checking
//! at reuse costs one system call and no task; pingora's pool spawned a task per release to
//! watch each idle connection. A connection closed while idle is let go at its next take (at
//! most `capacity` of them per endpoint wait that long).
//!
//! The queue is lock-free (`crossbeam_queue::ArrayQueue`): taking and returning a connection
//! take no lock.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use nix::errno::Errno;
use nix::sys::socket::{recv, MsgFlags};
use pingora_core::protocols::Stream;

/// Idle connections kept per endpoint and identity, at most (pingora's default pool size).
pub const IDLE_PER_ENDPOINT: usize = 128;

/// The idle HTTP/1.1 connections of one endpoint.
pub struct IdleConnections {
    queue: ArrayQueue<Idle>,
    /// How long a connection may stay idle and still be reused.
    idle_timeout: Duration,
}

struct Idle {
    stream: Stream,
    since: Instant,
}

impl IdleConnections {
    /// An empty pool of at most `capacity` connections, each reused within `idle_timeout`.
    pub fn new(capacity: usize, idle_timeout: Duration) -> IdleConnections {
        IdleConnections {
            queue: ArrayQueue::new(capacity.max(1)),
            idle_timeout,
        }
    }

    /// A pooled connection that is fresh and still open; stale ones met on the way are closed.
    pub fn take(&self) -> Option<Stream> {
        while let Some(idle) = self.queue.pop() {
            if idle.since.elapsed() < self.idle_timeout && still_open(idle.stream.id()) {
                return Some(idle.stream);
            }
        }
        None
    }

    /// Keeps `stream` for the next request (closed when the pool is full).
    pub fn put(&self, stream: Stream) {
        let idle = Idle {
            stream,
            since: Instant::now(),
        };
        // A full pool closes the connection (dropped with the refused entry).
        let _ = self.queue.push(idle);
    }

    /// Closes every waiting connection: the endpoint's probe failed, and a connection opened
    /// before may be half-dead (kube-aggregator drops them too, kubernetes#137157).
    pub fn clear(&self) {
        while self.queue.pop().is_some() {}
    }

    /// Connections waiting now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no connection waits.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

/// Whether the connection on `fd` is idle and open: nothing to read without blocking. End of
/// stream (the backend closed it) or unread bytes (an answer nobody asked for) mean it must not
/// carry another request.
fn still_open(fd: RawFd) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        recv(fd, &mut byte, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT),
        Err(Errno::EAGAIN)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pingora_core::protocols::l4::stream::Stream as L4Stream;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    async fn connected() -> (Stream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = TcpStream::connect(addr).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        (Box::new(L4Stream::from(client)), server)
    }

    #[tokio::test]
    async fn an_open_idle_connection_is_reused_and_a_closed_one_is_not() {
        let pool = IdleConnections::new(4, Duration::from_secs(90));
        let (open, _keep) = connected().await;
        pool.put(open);
        assert!(pool.take().is_some(), "an idle, open connection is reused");

        let (closed, server) = connected().await;
        pool.put(closed);
        drop(server);
        // The FIN arrives at once on loopback; give the kernel a moment all the same.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            pool.take().is_none(),
            "a connection the backend closed is let go"
        );
        assert!(pool.is_empty());
    }

    #[tokio::test]
    async fn a_failed_probe_closes_every_waiting_connection() {
        use tokio::io::AsyncReadExt;
        let pool = IdleConnections::new(4, Duration::from_secs(90));
        let (first, mut server_one) = connected().await;
        let (second, _server_two) = connected().await;
        pool.put(first);
        pool.put(second);
        pool.clear();
        assert!(pool.is_empty() && pool.take().is_none());
        // The backend sees the connection closed.
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), server_one.read(&mut byte)).await;
        assert!(matches!(read, Ok(Ok(0))), "{read:?}");
    }

    #[tokio::test]
    async fn stray_bytes_and_age_retire_a_connection_and_the_pool_is_bounded() {
        let pool = IdleConnections::new(1, Duration::from_secs(90));
        let (chatty, mut server) = connected().await;
        pool.put(chatty);
        server
            .write_all(b"HTTP/1.1 200 OK\r\n")
            .await
            .expect("write");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(pool.take().is_none(), "unasked bytes retire a connection");

        let (first, _a) = connected().await;
        let (second, _b) = connected().await;
        pool.put(first);
        pool.put(second);
        assert_eq!(pool.len(), 1, "the pool keeps at most its capacity");

        let aged = IdleConnections::new(4, Duration::ZERO);
        let (old, _c) = connected().await;
        aged.put(old);
        assert!(
            aged.take().is_none(),
            "a connection idle past the timeout is let go"
        );
    }
}
