//! Measurement prototype for issue 23, step 1: a proxied HTTP/1.1 GET on pingora-core alone
//! (no pingora-proxy), to count what the leaner path costs per request. Not product code.
//!
//! Usage: `core_proxy LISTEN_ADDR UPSTREAM_ADDR [own-pool|hold]` (both `ip:port`, plain
//! HTTP/1.1). `own-pool` keeps idle upstream connections in a plain `Mutex<Vec<Stream>>` instead
//! of pingora's pool, to measure what that pool costs; it does not watch idle connections (a
//! connection the upstream closed is found only when the next request fails on it). `hold`
//! proxies nothing: every request gets a `200` head of a watch and is then held until the
//! client goes away, which measures what pingora-core's server side alone holds per idle watch
//! (the client connection, its session and task): the part no backend protocol changes.
//!
//! Every request: read the head, forward it (minus hop-by-hop headers) to the one upstream
//! through `connectors::http::v1::Connector` (pingora's pool, keep-alive), copy the status,
//! headers (minus hop-by-hop) and body back, release the upstream connection to the pool and keep
//! the client connection alive. The v1 connector is what `connectors::http::Connector` calls for
//! an HTTP/1.1-only peer; used directly, a pooled connection is taken with a small future and only
//! a new connection goes through the (boxed) connect future. Through `http::Connector` the whole
//! connect future is part of every request's future, which pingora boxes and copies per request:
//! 74,700 instructions per GET instead of 63,700 (docs/benchmarks.md).
//!
//! Request bodies are not forwarded (GET only): a request with a body gets 501. No auth, no
//! routing, no metrics, no logging, no retries, no upgrades, no HTTP/2, no TLS.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use http::{HeaderMap, HeaderName};
use pingora_core::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream};
// HTTP/1.1 only: `connectors::http::Connector` minus its HTTP/2 and custom-protocol branches.
use pingora_core::connectors::http::v1::Connector;
use pingora_core::connectors::ConnectorOptions;
use pingora_core::listeners::ListenerConfig;
use pingora_core::protocols::http::v1::client::HttpSession as UpstreamSession;
use pingora_core::protocols::http::ServerSession;
use pingora_core::protocols::l4::stream::L4BufferSettings;
use pingora_core::protocols::Stream;
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::{Server, ShutdownWatch};
use pingora_core::services::listening::Service;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_error::{Error, ErrorType, Result};
use pingora_http::{RequestHeader, ResponseHeader};

// The same allocator as the apiagg binary, so the comparison is like for like.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Headers that belong to one hop (RFC 9110 §7.6.1), never forwarded. `Transfer-Encoding` is
/// kept: pingora frames the body it writes from it (and `Content-Length`).
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
];

const UPSTREAM_IDLE: Duration = Duration::from_secs(90);

struct CoreProxy {
    /// `hold`: answer every request with a watch head and hold it (no upstream).
    hold: bool,
    /// `Some` with `own-pool`: idle upstream connections, last in first out.
    own_pool: Option<Mutex<Vec<Stream>>>,
    connector: Connector,
    peer: HttpPeer,
}

/// The hop-by-hop headers present: one pass over the names, no hashing (a `remove` for each of
/// the seven names cost ~5,600 instructions per GET); the `Vec` allocates only when one is found.
fn hop_by_hop(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .keys()
        .filter(|name| HOP_BY_HOP.iter().any(|h| *name == *h))
        .cloned()
        .collect()
}

fn strip_request(req: &mut RequestHeader) {
    for h in hop_by_hop(&req.headers) {
        req.remove_header(&h);
    }
}

fn strip_response(resp: &mut ResponseHeader) {
    for h in hop_by_hop(&resp.headers) {
        resp.remove_header(&h);
    }
}

impl CoreProxy {
    /// Forward one request; `Err` before the response head was written means nothing reached
    /// the client yet.
    async fn proxy(&self, down: &mut ServerSession) -> Result<()> {
        let has_body = !down.is_body_empty();
        if has_body {
            return Error::e_explain(ErrorType::HTTPStatus(501), "request bodies not forwarded");
        }
        let mut req = Box::new(down.req_header().clone());
        strip_request(&mut req);

        // The pooled connection first: its future is small. Connecting (a much larger future)
        // is boxed, so its state is not part of every request's future.
        let pooled = match &self.own_pool {
            Some(pool) => pool
                .lock()
                .unwrap()
                .pop()
                .map(|s| UpstreamSession::new_with_options(s, &self.peer)),
            None => self.connector.reused_http_session(&self.peer).await,
        };
        let mut up = match pooled {
            Some(up) => up,
            None => {
                Box::pin(self.connector.get_http_session(&self.peer))
                    .await?
                    .0
            }
        };
        up.write_request_header(req).await?;
        up.finish_body().await?;
        up.read_response().await?;
        let mut resp = match up.resp_header() {
            Some(r) => Box::new(r.clone()),
            None => return Error::e_explain(ErrorType::InvalidHTTPHeader, "no response header"),
        };
        strip_response(&mut resp);
        down.write_response_header(resp).await?;

        // Bytes from the upstream buffer go out as they are (no copy of the payload).
        while let Some(chunk) = up.read_body_bytes().await? {
            down.write_response_body(chunk, false).await?;
        }
        down.finish_body().await?;
        if up.is_body_done() {
            match &self.own_pool {
                Some(pool) => {
                    up.respect_keepalive();
                    if let Some(s) = up.reuse().await {
                        pool.lock().unwrap().push(s);
                    }
                }
                None => {
                    self.connector
                        .release_http_session(up, &self.peer, Some(UPSTREAM_IDLE))
                        .await
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl HttpServerApp for CoreProxy {
    async fn process_new_http(
        self: &Arc<Self>,
        mut down: ServerSession,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        match down.read_request().await {
            Ok(true) => {}
            _ => return None,
        }
        down.set_keepalive(if *shutdown.borrow() { None } else { Some(60) });
        if self.hold {
            let mut head = ResponseHeader::build(200, Some(2)).ok()?;
            head.insert_header("Content-Type", "application/json")
                .ok()?;
            head.insert_header("Transfer-Encoding", "chunked").ok()?;
            down.write_response_header(Box::new(head)).await.ok()?;
            // Until the client goes away (end of stream or an error).
            while let Ok(Some(_)) = down.read_body_or_idle(true).await {}
            return None;
        }
        if let Err(e) = self.proxy(&mut down).await {
            if down.response_written().is_some() {
                // The answer was cut short: the client must see the connection close.
                return None;
            }
            let code = match e.etype() {
                ErrorType::HTTPStatus(c) => *c,
                _ => 502,
            };
            down.set_keepalive(None);
            let _ = down.respond_error(code).await;
        }
        let settings = HttpPersistentSettings::for_session(&down);
        match down.finish().await {
            Ok(Some(s)) => Some(ReusedHttpStream::from_reusable_stream(s, settings)),
            _ => None,
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || {
        eprintln!(
            "usage: {} LISTEN_ADDR UPSTREAM_ADDR [own-pool|hold]",
            args[0]
        );
        std::process::exit(2);
    };
    let (own_pool, hold) = match args.get(3).map(String::as_str) {
        None => (false, false),
        Some("own-pool") => (true, false),
        Some("hold") => (false, true),
        Some(_) => usage(),
    };
    if args.len() < 3 {
        usage();
    }
    let listen = &args[1];
    let upstream: SocketAddr = args[2].parse().expect("UPSTREAM_ADDR: ip:port");

    let conf = ServerConf {
        threads: 1,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    let mut peer = HttpPeer::new(upstream, false, String::new());
    peer.options.idle_timeout = Some(UPSTREAM_IDLE);
    let app = CoreProxy {
        hold,
        own_pool: own_pool.then(Default::default),
        connector: Connector::new(Some(ConnectorOptions::from_server_conf(
            &server.configuration,
        ))),
        peer,
    };
    let mut service = Service::new("core_proxy".to_string(), app);
    // CORE_PROXY_L4_READ: the listener's L4 read buffer in bytes (pingora's default: 64 KiB).
    let mut listener = ListenerConfig::tcp(listen.as_str());
    if let Some(read) = std::env::var("CORE_PROXY_L4_READ")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        listener = listener.l4_buffer(L4BufferSettings::default().read(read));
    }
    service.add_listener(listener);
    server.add_service(service);
    server.run_forever();
}
