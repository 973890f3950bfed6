//! A TCP relay in front of a backend that can go silent: once told, it forwards nothing more in
//! either direction and closes nothing, and the connections it accepts from then on are held
//! open without ever reaching the backend — a backend behind a black-holed network path, which
//! neither a reset nor a FIN reveals (kubernetes#141318).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A running relay; it stops (closing everything it holds) when dropped.
pub struct Relay {
    /// The loopback port it listens on.
    pub port: u16,
    silent: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Relay {
    /// Relays every connection to `127.0.0.1:backend`.
    pub async fn start(backend: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let port = listener.local_addr().expect("relay address").port();
        let silent = Arc::new(AtomicBool::new(false));
        let quiet = silent.clone();
        let task = tokio::spawn(async move {
            let mut held = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                held.spawn(relay(client, backend, quiet.clone()));
            }
        });
        Relay { port, silent, task }
    }

    /// From now on nothing is forwarded and nothing is closed.
    pub fn go_silent(&self) {
        self.silent.store(true, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection: both directions copied until the relay goes silent, then held.
async fn relay(client: TcpStream, backend: u16, silent: Arc<AtomicBool>) {
    if silent.load(Ordering::SeqCst) {
        return hold(client).await;
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", backend)).await else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = copy(client_read, server_write, silent.clone());
    let down = copy(server_read, client_write, silent);
    // Each direction ends at the first close (then both close) or holds once silent.
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

/// Copies until the source closes; once silent, swallows what arrives and holds both halves.
async fn copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    silent: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if silent.load(Ordering::SeqCst) {
            // Nothing more goes through, and nothing is closed: both halves stay open.
            let _held = (from, to);
            return std::future::pending().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Holds an accepted connection open without reading or answering.
async fn hold(client: TcpStream) {
    let _held = client;
    std::future::pending::<()>().await
}
