//! Connection upgrades: a WebSocket echo and a raw SPDY/3.1 byte echo.
//!
//! Upgrade requests authenticate like any other (`routes::handle` refuses them with `401`
//! before [`respond`] runs), so only an authenticated caller gets `101 Switching Protocols`.

use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL,
    UPGRADE,
};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::response::{bad_request, full, Body};

/// The protocol a request asks to switch to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    WebSocket,
    Spdy,
}

/// `Some` when the request carries `Connection: upgrade` and a known `Upgrade`.
pub fn requested(req: &Request<Incoming>) -> Option<Protocol> {
    let connection_upgrade = req
        .headers()
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    if !connection_upgrade {
        return None;
    }
    let upgrade = req.headers().get(UPGRADE)?.to_str().ok()?.trim();
    if upgrade.eq_ignore_ascii_case("websocket") {
        Some(Protocol::WebSocket)
    } else if upgrade.eq_ignore_ascii_case("SPDY/3.1") {
        Some(Protocol::Spdy)
    } else {
        None
    }
}

/// Answers `101 Switching Protocols` and echoes on the upgraded connection.
pub fn respond(mut req: Request<Incoming>, protocol: Protocol) -> Response<Body> {
    let mut resp = Response::new(full(""));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = resp.headers_mut();
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    // The trace context the tunnel's request carried, for tests of its propagation.
    if let Some(traceparent) = req.headers().get("traceparent") {
        headers.insert("x-received-traceparent", traceparent.clone());
    }
    match protocol {
        Protocol::WebSocket => {
            let Some(key) = req.headers().get(SEC_WEBSOCKET_KEY) else {
                return bad_request("missing Sec-WebSocket-Key");
            };
            let accept = derive_accept_key(key.as_bytes());
            let Ok(accept) = HeaderValue::from_str(&accept) else {
                return bad_request("invalid Sec-WebSocket-Key");
            };
            headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
            headers.insert(SEC_WEBSOCKET_ACCEPT, accept);
            let first_protocol = req
                .headers()
                .get(SEC_WEBSOCKET_PROTOCOL)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(',').map(str::trim).find(|p| !p.is_empty()))
                .and_then(|p| HeaderValue::from_str(p).ok());
            if let Some(p) = first_protocol {
                headers.insert(SEC_WEBSOCKET_PROTOCOL, p);
            }
        }
        Protocol::Spdy => {
            headers.insert(UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        }
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let io = match on_upgrade.await {
            Ok(upgraded) => TokioIo::new(upgraded),
            Err(e) => {
                tracing::warn!(error = %e, "upgrade failed");
                return;
            }
        };
        let result = match protocol {
            Protocol::WebSocket => websocket_echo(io).await,
            Protocol::Spdy => byte_echo(io).await,
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, ?protocol, "upgraded connection ended with an error");
        }
    });
    resp
}

async fn websocket_echo(io: TokioIo<hyper::upgrade::Upgraded>) -> anyhow::Result<()> {
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
    while let Some(message) = ws.next().await {
        // Pings and the closing handshake are answered by tungstenite itself.
        if let m @ (Message::Text(_) | Message::Binary(_)) = message? {
            ws.send(m).await?;
        }
    }
    Ok(())
}

async fn byte_echo(io: TokioIo<hyper::upgrade::Upgraded>) -> anyhow::Result<()> {
    let (mut reader, mut writer) = tokio::io::split(io);
    tokio::io::copy(&mut reader, &mut writer).await?;
    writer.shutdown().await?;
    Ok(())
}
