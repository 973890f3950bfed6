//! Client connection deadlines, as kube-apiserver's server sets them: the TLS handshake and
//! then a request head must each arrive within `--read-header-timeout` (32 s), the head from
//! its first byte (the first request's from the handshake's end; Go bounds the handshake by
//! the same timeout); an HTTP/1.1 connection idle between requests for `--idle-timeout`
//! (90 s) is closed; an HTTP/2 connection must send its preface and first SETTINGS frame within
//! `--http2-preface-timeout` (10 s) (pingora closes one with no open stream for
//! `--idle-timeout`). Someone with no credentials can otherwise hold connections forever, and
//! `--max-connections` of them lock every client out.
//!
//! [`Deadlined`] wraps the client's stream and enforces the deadline of the phase the
//! connection is in; the request path switches it off once a request head was read (bodies,
//! watches and upgrades are never cut by it) and starts the idle phase when the answer ended.
//! A connection closed by a deadline is counted by phase in
//! `apiagg_client_connections_timed_out_total`.

use std::fmt;
use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::protocols::raw_connect::ProxyDigest;
use pingora_core::protocols::tls::SslDigest;
use pingora_core::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, SocketDigest, Ssl, Stream,
    TimingDigest, UniqueID, UniqueIDType, ALPN,
};
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// How long a client connection may take in each phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionTimeouts {
    /// A request head, from its first byte (or the connection's start).
    pub read_header: Duration,
    /// Between two requests (HTTP/1.1), or with no stream open (HTTP/2).
    pub idle: Duration,
    /// The HTTP/2 preface and first SETTINGS frame, from the connection's start.
    pub http2_preface: Duration,
}

impl Default for ConnectionTimeouts {
    /// kube-apiserver's: `ReadHeaderTimeout` 32 s, `IdleTimeout` 90 s, the HTTP/2 preface 10 s.
    fn default() -> Self {
        ConnectionTimeouts {
            read_header: Duration::from_secs(32),
            idle: Duration::from_secs(90),
            http2_preface: Duration::from_secs(10),
        }
    }
}

/// Connections closed by each deadline.
#[derive(Debug, Clone)]
pub struct TimedOut {
    handshake: IntCounter,
    head: IntCounter,
    idle: IntCounter,
    preface: IntCounter,
}

impl TimedOut {
    /// `apiagg_client_connections_timed_out_total{phase}`, registered in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<TimedOut> {
        let counter = IntCounterVec::new(
            Opts::new(
                "apiagg_client_connections_timed_out_total",
                "Client connections closed because the TLS handshake, a request head, the \
                 next request or the HTTP/2 preface did not come in time.",
            ),
            &["phase"],
        )?;
        registry.register(Box::new(counter.clone()))?;
        Ok(TimedOut {
            handshake: counter.with_label_values(&["tls-handshake"]),
            head: counter.with_label_values(&["request-head"]),
            idle: counter.with_label_values(&["idle"]),
            preface: counter.with_label_values(&["http2-preface"]),
        })
    }
}

impl TimedOut {
    /// A TLS handshake outlasted the request-head timeout.
    pub fn tls_handshake(&self) {
        self.handshake.inc();
    }
}

/// What the request path tells the connection.
const NONE: u8 = 0;
/// A request head was read: no deadline until its answer ends.
const REQUEST: u8 = 1;
/// The answer ended: the connection is idle until the next request's first byte.
const ANSWERED: u8 = 2;

/// The bytes of the HTTP/2 client preface plus a frame header.
const PREFACE: usize = 24;
const FRAME_HEAD: usize = 9;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the rest of a request head.
    Head,
    /// Between requests.
    Idle,
    /// Waiting for the HTTP/2 preface and SETTINGS (`seen` bytes so far).
    Preface { seen: usize, needed: usize },
    /// A request is being served, or HTTP/2 is under way: no deadline here.
    Off,
}

/// A client stream with the deadline of its phase.
pub struct Deadlined {
    inner: Stream,
    phase: Phase,
    deadline: Instant,
    sleep: Pin<Box<Sleep>>,
    signal: AtomicU8,
    timeouts: ConnectionTimeouts,
    timed_out: TimedOut,
    /// The first bytes of an HTTP/2 connection (its SETTINGS frame's length is in them).
    first: [u8; PREFACE + FRAME_HEAD],
}

impl fmt::Debug for Deadlined {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deadlined")
            .field("inner", &self.inner)
            .field("phase", &self.phase)
            .finish_non_exhaustive()
    }
}

impl Deadlined {
    /// `inner`, bounded from now by `timeouts` (the HTTP/2 preface's when TLS chose h2).
    pub fn wrap(inner: Stream, timeouts: ConnectionTimeouts, timed_out: TimedOut) -> Stream {
        let h2 = inner.selected_alpn_proto() == Some(ALPN::H2);
        let (phase, limit) = if h2 {
            let preface = Phase::Preface {
                seen: 0,
                needed: PREFACE + FRAME_HEAD,
            };
            (preface, timeouts.http2_preface)
        } else {
            (Phase::Head, timeouts.read_header)
        };
        let deadline = Instant::now() + limit;
        Box::new(Deadlined {
            inner,
            phase,
            deadline,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            signal: AtomicU8::new(NONE),
            timeouts,
            timed_out,
            first: [0; PREFACE + FRAME_HEAD],
        })
    }

    /// A request head was read on `stream`: no deadline until its answer ends.
    pub fn request_started(stream: &Stream) {
        if let Some(d) = stream.as_any().downcast_ref::<Deadlined>() {
            d.signal.store(REQUEST, Ordering::Release);
        }
    }

    /// The answer on `stream` ended: the idle deadline runs until the next request.
    pub fn answered(stream: &Stream) {
        if let Some(d) = stream.as_any().downcast_ref::<Deadlined>() {
            d.signal.store(ANSWERED, Ordering::Release);
        }
    }

    /// Applies what the request path said since the last read.
    fn follow_signal(&mut self) {
        match self.signal.swap(NONE, Ordering::AcqRel) {
            REQUEST => self.phase = Phase::Off,
            ANSWERED => {
                self.phase = Phase::Idle;
                self.set_deadline(self.timeouts.idle);
            }
            _ => {}
        }
    }

    fn set_deadline(&mut self, limit: Duration) {
        self.deadline = Instant::now() + limit;
    }

    /// Notes `bytes` just read: the first byte of a head starts its deadline; the HTTP/2
    /// preface and first frame end the preface phase.
    fn saw(&mut self, bytes: &[u8]) {
        match self.phase {
            Phase::Idle if !bytes.is_empty() => {
                self.phase = Phase::Head;
                self.set_deadline(self.timeouts.read_header);
            }
            Phase::Preface { seen, needed } => {
                let mut seen_now = seen;
                for &b in bytes {
                    if seen_now < self.first.len() {
                        self.first[seen_now] = b;
                    }
                    seen_now += 1;
                }
                let mut needed = needed;
                if seen < self.first.len() && seen_now >= self.first.len() {
                    // The first frame's length (24 bits) after the preface.
                    let h = &self.first[PREFACE..];
                    let length =
                        usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                    needed = PREFACE + FRAME_HEAD + length;
                }
                self.phase = if seen_now >= needed && seen_now >= self.first.len() {
                    Phase::Off
                } else {
                    Phase::Preface {
                        seen: seen_now,
                        needed,
                    }
                };
            }
            _ => {}
        }
    }

    /// `Err(TimedOut)` once the phase's deadline passed (counted once).
    ///
    /// The timer is never set later than the deadline, and is moved only when it fires early
    /// or would fire late: it is armed at most `--read-header-timeout` ahead, so the deadlines
    /// of a keep-alive connection's next idle spell and next head (each later than the last)
    /// need no timer operation per request; an early firing re-arms it.
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let counter = match self.phase {
            Phase::Off => return Poll::Pending,
            Phase::Head => &self.timed_out.head,
            Phase::Idle => &self.timed_out.idle,
            Phase::Preface { .. } => &self.timed_out.preface,
        };
        loop {
            if self.sleep.deadline() > self.deadline {
                let deadline = self.deadline;
                self.sleep.as_mut().reset(deadline);
            }
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            if now < self.deadline {
                // Early: the deadline moved on since the timer was set.
                let next = self.deadline.min(now + self.timeouts.read_header);
                self.sleep.as_mut().reset(next);
                continue;
            }
            counter.inc();
            let what = match self.phase {
                Phase::Head => "the request head did not arrive in time",
                Phase::Idle => "the connection was idle too long",
                _ => "the HTTP/2 preface did not arrive in time",
            };
            self.phase = Phase::Off;
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)));
        }
    }
}

impl AsyncRead for Deadlined {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        this.follow_signal();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if this.phase != Phase::Off {
                    this.saw(&buf.filled()[before..]);
                }
                Poll::Ready(result)
            }
            Poll::Pending => match this.check_deadline(cx) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                _ => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for Deadlined {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[async_trait]
impl Shutdown for Deadlined {
    async fn shutdown(&mut self) {
        self.inner.shutdown().await;
    }
}

impl UniqueID for Deadlined {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for Deadlined {
    fn get_ssl(&self) -> Option<&pingora_core::protocols::tls::TlsRef> {
        self.inner.get_ssl()
    }

    fn get_ssl_digest(&self) -> Option<Arc<SslDigest>> {
        self.inner.get_ssl_digest()
    }

    fn selected_alpn_proto(&self) -> Option<ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for Deadlined {
    fn get_timing_digest(&self) -> Vec<Option<TimingDigest>> {
        self.inner.get_timing_digest()
    }

    fn get_read_pending_time(&self) -> Duration {
        self.inner.get_read_pending_time()
    }

    fn get_write_pending_time(&self) -> Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for Deadlined {
    fn get_proxy_digest(&self) -> Option<Arc<ProxyDigest>> {
        self.inner.get_proxy_digest()
    }

    fn set_proxy_digest(&mut self, digest: ProxyDigest) {
        self.inner.set_proxy_digest(digest);
    }
}

impl GetSocketDigest for Deadlined {
    fn get_socket_digest(&self) -> Option<Arc<SocketDigest>> {
        self.inner.get_socket_digest()
    }

    fn set_socket_digest(&mut self, digest: SocketDigest) {
        self.inner.set_socket_digest(digest);
    }
}

#[async_trait]
impl Peek for Deadlined {
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}
