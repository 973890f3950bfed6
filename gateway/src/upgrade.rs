//! HTTP/1.1 upgrades (WebSocket, SPDY/3.1) tunnelled by apiagg itself (spec §4.5).
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
use pingora_proxy::Session;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::reply::Reply;
use crate::routes::Upstream;
use crate::status;

const HEAD_LIMIT: usize = 64 * 1024;
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Whether a request asks for a protocol upgrade (`Connection` contains `upgrade`).
pub fn is_upgrade(req: &RequestHeader) -> bool {
    req.headers.get_all("connection").iter().any(|v| {
        v.to_str()
            .map(|s| s.to_ascii_lowercase().contains("upgrade"))
            .unwrap_or(false)
    }) && req.headers.contains_key("upgrade")
}

fn is_hidden(name: &str, strip_credentials: bool) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.starts_with("x-remote-")
        || lower == "host"
        || (strip_credentials
            && (lower == "authorization"
                || lower == "proxy-authorization"
                || lower.starts_with("impersonate-")))
}

/// The request head sent to the backend.
fn request_head(
    req: &RequestHeader,
    authority: &str,
    client_ip: Option<String>,
    strip: bool,
) -> Vec<u8> {
    let target = req.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {authority}\r\n",
        req.method, target
    )
    .into_bytes();
    let mut forwarded_for = None;
    for (name, value) in req.headers.iter() {
        if is_hidden(name.as_str(), strip) {
            continue;
        }
        if name.as_str().eq_ignore_ascii_case("x-forwarded-for") {
            forwarded_for = value.to_str().ok().map(str::to_string);
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if let Some(ip) = client_ip {
        let value = match forwarded_for {
            Some(prior) if !prior.is_empty() => format!("{prior}, {ip}"),
            _ => ip,
        };
        head.extend_from_slice(format!("X-Forwarded-For: {value}\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    head
}

async fn dial(upstream: &Upstream, index: usize) -> io::Result<Box<dyn Io>> {
    let endpoint = &upstream.endpoints[index];
    let tcp = tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(endpoint.addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    tcp.set_nodelay(true)?;
    if !endpoint.tls {
        return Ok(Box::new(tcp));
    }
    let name = ServerName::try_from(upstream.server_name.clone())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let connector = tokio_rustls::TlsConnector::from(upstream.tls_config.clone());
    let tls = tokio::time::timeout(DIAL_TIMEOUT, connector.connect(name, tcp))
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
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            let status = buf
                .split(|b| *b == b' ')
                .nth(1)
                .and_then(|s| std::str::from_utf8(s).ok())
                .and_then(|s| s.parse::<u16>().ok())
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidData, "malformed status line")
                })?;
            return Ok((status, buf, rest));
        }
        if buf.len() > HEAD_LIMIT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "response head too large",
            ));
        }
    }
}

/// Takes the raw client connection out of the pingora session, leaving a parsed copy of the
/// request on a detached socket so the rest of pingora's request handling stays consistent.
async fn take_client_stream(session: &mut Session) -> io::Result<Stream> {
    let raw_head = session.downstream_session.to_h1_raw();
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
    match std::mem::replace(&mut *session.downstream_session, placeholder) {
        HttpSession::H1(client) => Ok(client.into_inner()),
        other => {
            *session.downstream_session = other;
            Err(io::Error::other(
                "upgrades need an HTTP/1.1 client connection",
            ))
        }
    }
}

async fn fail(session: &mut Session, code: u16, message: String) -> u16 {
    tracing::warn!("{message}");
    let body = status::failure(code, "ServiceUnavailable", &message, None);
    match Reply::json(code, body).send(session).await {
        Ok(()) => code,
        Err(_) => 0,
    }
}

/// Tunnels an upgrade request to `upstream`; returns the status code relayed to the client.
pub async fn tunnel(session: &mut Session, upstream: &Upstream) -> u16 {
    if session.is_http2() {
        return fail(session, 503, "upgrades need HTTP/1.1".into()).await;
    }
    let Some(index) = upstream.pick() else {
        return fail(
            session,
            503,
            format!("service unavailable: {} has no endpoints", upstream.label),
        )
        .await;
    };
    let authority = upstream.endpoints[index].authority.clone();
    let mut backend = match dial(upstream, index).await {
        Ok(b) => b,
        Err(e) => {
            let message = format!(
                "error dialing backend {} at {authority}: {e}",
                upstream.label
            );
            return fail(session, 503, message).await;
        }
    };
    let client_ip = session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip().to_string());
    let head = request_head(
        session.req_header(),
        &authority,
        client_ip,
        upstream.strip_credentials,
    );
    let (code, response_head, early) = match async {
        backend.write_all(&head).await?;
        backend.flush().await?;
        tokio::time::timeout(Duration::from_secs(30), read_head(&mut backend))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer to the upgrade"))?
    }
    .await
    {
        Ok(answer) => answer,
        Err(e) => {
            let message = format!(
                "error trying to reach service {} at {authority}: {e}",
                upstream.label
            );
            return fail(session, 503, message).await;
        }
    };
    if code != 101 && code < 400 {
        let message = format!("invalid upgrade response: status code {code}");
        return fail(session, 503, message).await;
    }

    let mut client = match take_client_stream(session).await {
        Ok(s) => s,
        Err(e) => {
            return fail(
                session,
                500,
                format!("cannot take over the connection: {e}"),
            )
            .await
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
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_strips_identity_and_sets_host() {
        let mut req =
            RequestHeader::build("GET", b"/apis/a.io/v1/x/exec?command=ls", None).expect("req");
        req.insert_header("Connection", "Upgrade").expect("h");
        req.insert_header("Upgrade", "websocket").expect("h");
        req.insert_header("Authorization", "Bearer t").expect("h");
        req.insert_header("X-Remote-User", "admin").expect("h");
        req.insert_header("Host", "gateway").expect("h");
        assert!(is_upgrade(&req));
        let head = String::from_utf8(request_head(
            &req,
            "10.0.0.1:443",
            Some("127.0.0.1".into()),
            true,
        ))
        .expect("utf8");
        assert!(head
            .starts_with("GET /apis/a.io/v1/x/exec?command=ls HTTP/1.1\r\nHost: 10.0.0.1:443\r\n"));
        assert!(!head.to_ascii_lowercase().contains("authorization"));
        assert!(!head.to_ascii_lowercase().contains("x-remote-user"));
        assert!(head.contains("X-Forwarded-For: 127.0.0.1\r\n"));
        assert!(head.ends_with("\r\n\r\n"));
    }
}
