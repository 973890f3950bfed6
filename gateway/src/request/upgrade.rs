//! HTTP/1.1 upgrades (WebSocket, SPDY/3.1) tunnelled by apiagg itself (upstream:
//! k8s.io/apimachinery's `pkg/util/proxy/upgradeaware.go`, as kube-aggregator's
//! `pkg/apiserver/handler_proxy.go` uses it).
//!
//! pingora 0.9's own upgrade tunnel can end a session right after the `101` when the backend
//! answers quickly (cloudflare/pingora#946). apiagg therefore dials the backend itself, relays the
//! backend's answer, and on `101` splices the raw client connection with the backend connection.

use std::io;
use std::time::Duration;

use pingora_core::protocols::http::server::Session as HttpSession;
use pingora_core::protocols::l4::stream::Stream as L4Stream;
use pingora_core::protocols::Stream;
use pingora_http::RequestHeader;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::ctx::{Dispatch, RequestCtx, Session};
use super::forward::{self, Forwarding};
use super::refusal::Refusal;
use super::service::ApiaggProxy;
use crate::backends::Upstream;
use apiagg_observe::RouteKind;

const HEAD_LIMIT: usize = 64 * 1024;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Why a request that mentions an upgrade is refused (400 Status; never retryable: the same
/// request is refused again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// `Upgrade` names one protocol, not one apiagg tunnels.
    #[error("the upgrade to {0:?} is refused: apiagg tunnels only \"websocket\" and \"SPDY/3.1\"")]
    Protocol(String),
    /// `Upgrade` names several protocols (apiagg would have to pick one for the backend).
    #[error(
        "the upgrade to {0:?} is refused: name exactly one protocol, \"websocket\" or \"SPDY/3.1\""
    )]
    Several(String),
    /// `Upgrade` is present but names nothing.
    #[error("the upgrade is refused: the Upgrade header is empty")]
    Empty,
    /// `Connection: upgrade` without an `Upgrade` header.
    #[error("the upgrade is refused: \"Connection: upgrade\" without an Upgrade header")]
    Unnamed,
    /// `Upgrade` without `upgrade` in `Connection` (not an upgrade in HTTP/1.1, and an Upgrade
    /// header must never reach a backend on a normal request).
    #[error("the upgrade to {0:?} is refused: the Upgrade header is sent without \"Connection: upgrade\"")]
    NotNominated(String),
}

impl ApiaggProxy {
    /// Tunnels an upgrade as `dispatch` says; a failure before anything was relayed is
    /// answered with its Status by the one writer (audited, with the request's headers).
    pub(super) async fn tunnel(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        dispatch: Dispatch,
    ) -> pingora_error::Result<()> {
        ctx.outcome.kind = RouteKind::Upgrade;
        ctx.outcome.sent_to(&dispatch.upstream);
        ctx.trace.backend(&dispatch.upstream, None);
        let tunnelled = {
            let forwarding = self.forwarding(session, ctx, &dispatch);
            let connect = self.gateway.options.connect_timeout;
            // Boxed: the tunnel's state stays out of every request's future.
            Box::pin(tunnel(session, &dispatch.upstream, &forwarding, connect)).await
        };
        match tunnelled {
            Ok(code) => {
                ctx.outcome.code = code;
                Ok(())
            }
            Err(refusal) => ctx.answer(session, refusal.into()).await,
        }
    }
}

/// The protocols apiagg tunnels (compared case-insensitively): kubectl exec, attach and
/// port-forward ask for `SPDY/3.1`, newer ones for `websocket` (`v5.channel.k8s.io`).
const TUNNELLED: [&str; 2] = ["websocket", "SPDY/3.1"];

/// Whether a request asks for an upgrade apiagg tunnels: `Ok(true)` for exactly one `Upgrade`
/// protocol of [`TUNNELLED`] with `upgrade` in `Connection`; `Ok(false)` when it mentions no
/// upgrade at all (no `Upgrade`, no `upgrade` in `Connection`); anything else is refused, so
/// no request reaches pingora's proxy path with an `Upgrade` header (an `h2c` upgrade would
/// carry raw HTTP/2 over apiagg's authenticated connection with forged `X-Remote-*`).
pub fn is_upgrade(req: &RequestHeader) -> Result<bool, Refused> {
    let mut upgrades = req.headers.get_all(http::header::UPGRADE).iter().peekable();
    let nominated = req
        .headers
        .get_all(http::header::CONNECTION)
        .iter()
        .any(|v| tokens(v.as_bytes()).any(|t| t.eq_ignore_ascii_case(b"upgrade")));
    if upgrades.peek().is_none() {
        return if nominated {
            Err(Refused::Unnamed)
        } else {
            Ok(false)
        };
    }
    let mut named = upgrades.flat_map(|v| tokens(v.as_bytes()));
    let (Some(protocol), None) = (named.next(), named.next()) else {
        let all: Vec<String> = req
            .headers
            .get_all(http::header::UPGRADE)
            .iter()
            .map(|v| shown(v.as_bytes()))
            .collect();
        let all = all.join(", ");
        return Err(if all.trim_matches([',', ' ', '\t']).is_empty() {
            Refused::Empty
        } else {
            Refused::Several(all)
        });
    };
    if !TUNNELLED
        .iter()
        .any(|t| t.as_bytes().eq_ignore_ascii_case(protocol))
    {
        return Err(Refused::Protocol(shown(protocol)));
    }
    if !nominated {
        return Err(Refused::NotNominated(shown(protocol)));
    }
    Ok(true)
}

/// The non-empty, trimmed elements of a comma-separated header value.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// A header value as text for a message, at most 64 bytes of it.
fn shown(value: &[u8]) -> String {
    String::from_utf8_lossy(&value[..value.len().min(64)]).into_owned()
}

/// Connects to endpoint `index`, with apiagg's own TLS identity when `own` (impersonation);
/// TCP and TLS together bounded by `connect` (`--backend-connect-timeout`).
async fn dial(
    upstream: &Upstream,
    index: usize,
    own: bool,
    connect: Duration,
) -> io::Result<Box<dyn Io>> {
    let deadline = tokio::time::Instant::now() + connect;
    let endpoint = &upstream.endpoints[index];
    let tcp = tokio::time::timeout_at(deadline, TcpStream::connect(endpoint.addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    tcp.set_nodelay(true)?;
    if !endpoint.tls {
        return Ok(Box::new(tcp));
    }
    let name = ServerName::try_from(upstream.server_name.clone())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let config = if own {
        &upstream.own_tls_config
    } else {
        &upstream.tls_config
    };
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    let tls = tokio::time::timeout_at(deadline, connector.connect(name, tcp))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    Ok(Box::new(tls))
}

/// Reads the backend's response head; returns the status code, the head bytes, and any bytes
/// read past the head.
async fn read_head(backend: &mut Box<dyn Io>) -> io::Result<(u16, Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = backend.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "backend closed the connection before answering",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buf) {
            Ok(httparse::Status::Complete(end)) => {
                let code = response.code.unwrap_or(0);
                let rest = buf.split_off(end);
                return Ok((code, buf, rest));
            }
            Ok(httparse::Status::Partial) if buf.len() <= HEAD_LIMIT => {}
            Ok(httparse::Status::Partial) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "response head too large",
                ))
            }
            Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("malformed response head: {e}"),
                ))
            }
        }
    }
}

/// Takes the raw client connection out of the pingora session, leaving a parsed copy of the
/// request on a detached socket so the rest of pingora's request handling stays consistent.
async fn take_client_stream(session: &mut Session) -> io::Result<Stream> {
    let raw_head = session.to_h1_raw();
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    {
        use std::io::Write;
        let mut theirs = theirs;
        theirs.write_all(&raw_head)?;
    }
    ours.set_nonblocking(true)?;
    let detached: Stream = Box::new(L4Stream::from(tokio::net::UnixStream::from_std(ours)?));
    let mut placeholder = HttpSession::new_http1(detached);
    placeholder
        .read_request()
        .await
        .map_err(|e| io::Error::other(e.to_string()))?;
    match std::mem::replace(session, placeholder) {
        HttpSession::H1(client) => Ok(client.into_inner()),
        other => {
            *session = other;
            Err(io::Error::other(
                "upgrades need an HTTP/1.1 client connection",
            ))
        }
    }
}

fn fail(refusal: Refusal) -> Refusal {
    tracing::warn!("{}", refusal.failure.message);
    refusal
}

/// The backend's answer to an upgrade request.
struct Answer {
    code: u16,
    head: Vec<u8>,
    /// Bytes the backend sent after its head.
    early: Vec<u8>,
    backend: Box<dyn Io>,
}

/// Dials a healthy endpoint, sends the request head and reads the answer's head; the error is
/// the 503 (or 500) the client gets.
async fn ask(
    request: &RequestHeader,
    upstream: &Upstream,
    forwarding: &Forwarding<'_>,
    connect: Duration,
) -> Result<Answer, Refusal> {
    let label = &upstream.label;
    let index = upstream.pick().ok_or_else(|| {
        Refusal::unavailable(format!("service unavailable: {label} has no endpoints"))
    })?;
    let authority = &upstream.endpoints[index].authority;
    let head = forward::upgrade_head(
        request,
        forwarding,
        &upstream.endpoints[index].authority_header,
    )
    .map_err(|e| Refusal::internal(format!("cannot build the upgrade request: {e}")))?;
    let own = forwarding.identity.own_connection();
    let mut backend = dial(upstream, index, own, connect).await.map_err(|e| {
        Refusal::unavailable(format!("error dialing backend {label} at {authority}: {e}"))
    })?;
    let exchange = async {
        backend.write_all(&head).await?;
        backend.flush().await?;
        tokio::time::timeout(Duration::from_secs(30), read_head(&mut backend))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer to the upgrade"))?
    };
    let (code, head, early) = exchange.await.map_err(|e| {
        let message = format!("error trying to reach service {label} at {authority}: {e}");
        Refusal::unavailable(message)
    })?;
    if code != 101 && code < 400 {
        let message = format!("invalid upgrade response: status code {code}");
        return Err(Refusal::unavailable(message));
    }
    Ok(Answer {
        code,
        head,
        early,
        backend,
    })
}

/// Tunnels an upgrade request to `upstream` with the header policy `forwarding`; returns the
/// status code relayed to the client.
pub async fn tunnel(
    session: &mut Session,
    upstream: &Upstream,
    forwarding: &Forwarding<'_>,
    connect: Duration,
) -> Result<u16, Refusal> {
    if session.is_http2() {
        return Err(fail(Refusal::unavailable("upgrades need HTTP/1.1")));
    }
    let Answer {
        code,
        head: response_head,
        early,
        mut backend,
    } = match ask(session.req_header(), upstream, forwarding, connect).await {
        Ok(answer) => answer,
        Err(refusal) => return Err(fail(refusal)),
    };

    let mut client = match take_client_stream(session).await {
        Ok(s) => s,
        Err(e) => {
            let message = format!("cannot take over the connection: {e}");
            return Err(fail(Refusal::internal(message)));
        }
    };
    let relay = async {
        client.write_all(&response_head).await?;
        client.write_all(&early).await?;
        client.flush().await?;
        if code == 101 {
            tokio::io::copy_bidirectional(&mut client, &mut backend).await?;
        } else {
            tokio::io::copy(&mut backend, &mut client).await?;
            client.shutdown().await?;
        }
        Ok::<(), io::Error>(())
    };
    if let Err(e) = relay.await {
        tracing::debug!("upgrade tunnel to {} ended: {e}", upstream.label);
    }
    Ok(code)
}

#[cfg(test)]
mod tests;
