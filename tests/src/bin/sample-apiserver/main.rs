//! `sample-apiserver`: a small extension API server for apiagg's end-to-end tests.
//!
//! Prints `listening on http(s)://ADDR` on stdout once bound; logs go to stderr.

mod args;
mod auth;
mod cbor;
mod client_cert;
mod cluster;
mod debug;
mod discovery;
mod fixtures;
mod listing;
mod openapi;
mod openapi_files;
mod resource;
mod response;
mod routes;
mod sar;
mod selector;
mod store;
mod tls;
mod tokens;
mod upgrade;
mod watch;

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use hyper::header::HeaderValue;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;

use crate::args::Args;
use crate::auth::{Auth, Connection};
use crate::discovery::Discovery;
use crate::fixtures::Fixtures;
use crate::resource::ResourceInfo;
use crate::routes::State;
use crate::store::Store;

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let state = Arc::new(build_state(&args)?);
    let client_verifier = state
        .auth
        .front_proxy
        .as_ref()
        .or(state.auth.client_ca.as_ref())
        .map(|ca| ca.handshake_verifier());
    let acceptor = match (&args.tls, &args.cert_dir) {
        (true, Some(dir)) => Some(TlsAcceptor::from(tls::server_config(
            dir,
            &args.hostnames,
            args.h2,
            client_verifier,
        )?)),
        _ => None,
    };

    let listener = bind(args.listen).with_context(|| format!("binding {}", args.listen))?;
    let scheme = if acceptor.is_some() { "https" } else { "http" };
    let addr = listener.local_addr()?;
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on {scheme}://{addr}")?;
        stdout.flush()?;
    }
    tracing::info!(%addr, scheme, group = %args.group, version = %args.version, "serving");

    tokio::select! {
        result = accept_loop(listener, acceptor, state, args.goaway_after) => result,
        () = shutdown_signal() => {
            tracing::info!("shutting down");
            Ok(())
        }
    }
}

/// Binds with `SO_REUSEPORT`, so a test can hold a port (bound, never listening) while this
/// server is down and start it again on the same port without a race.
fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

fn build_state(args: &Args) -> Result<State> {
    let fixtures = match &args.fixtures {
        Some(dir) => Fixtures::load(dir)?,
        None => Fixtures::default(),
    };
    let discovery = Discovery::new(args, &fixtures);
    let server_name = args.server_name();
    let server_header = HeaderValue::from_str(&server_name)
        .with_context(|| format!("--name {server_name:?} is not a valid header value"))?;
    let api_version = format!("{}/{}", args.group, args.version);
    Ok(State {
        auth: Auth::from_args(args)?,
        server_header,
        server_name,
        namespaced: args.namespaced,
        gv_path: format!("/apis/{api_version}"),
        store: Arc::new(Store::with_history(
            api_version,
            args.kind.clone(),
            args.watch_history,
        )),
        cluster: args.cluster.then(cluster::ClusterResources::new),
        policy: args.authorization_policy.clone().map(sar::Policy::new),
        requests: Default::default(),
        in_flight: Default::default(),
        negotiation: Default::default(),
        queries: Default::default(),
        discovery_failures: args.fail_discovery.into(),
        info: ResourceInfo {
            group: args.group.clone(),
            version: args.version.clone(),
            resource: args.resource.clone(),
            kind: args.kind.clone(),
            cbor: !args.no_cbor,
            watch_list: args.watch_list,
            expired_status: args.watch_expired_status,
        },
        fixtures,
        discovery,
        openapi: openapi::GeneratedOpenApi::new(args),
        openapi_files: openapi_files::OpenApiFiles {
            v2: args.openapi_v2.clone(),
            v3_dir: args.openapi_v3_dir.clone(),
        },
    })
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    state: Arc<State>,
    goaway_after: Option<u64>,
) -> Result<()> {
    let mut serial = 0;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        serial += 1;
        let (acceptor, state) = (acceptor.clone(), state.clone());
        tokio::spawn(async move {
            match acceptor {
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(tls) => {
                        let peer = tls.get_ref().1.peer_certificates();
                        let conn = Connection {
                            front_proxy: state
                                .auth
                                .front_proxy
                                .as_ref()
                                .is_some_and(|proxy| proxy.trusts(peer)),
                            certificate: state
                                .auth
                                .client_ca
                                .as_ref()
                                .and_then(|ca| ca.subject(peer)),
                            serial,
                        };
                        serve(tls, state, conn, goaway_after).await
                    }
                    Err(e) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                },
                None => {
                    let conn = Connection {
                        serial,
                        ..Connection::default()
                    };
                    serve(stream, state, conn, goaway_after).await
                }
            }
        });
    }
}

/// Header values kube-apiserver accepts in a request (`maxHeaderValueCount`, with Go 1.27+).
const MAX_HEADER_VALUES: usize = 16_384;
/// kube-apiserver's `MaxHeaderBytes`.
const MAX_HEADER_BYTES: usize = 1 << 20;
/// What Go's HTTP/1 server reads beyond `MaxHeaderBytes` (net/http `initialReadLimitSize`).
const GO_READ_SLACK: usize = 4096;
/// Go's HTTP/2 header-list limit for that `MaxHeaderBytes` (ten fields' overhead more).
const H2_MAX_HEADER_LIST: u32 = (MAX_HEADER_BYTES + 10 * 32) as u32;

/// Serves one connection: HTTP/1.1 (with upgrades) or HTTP/2; with `goaway_after`, shut down
/// gracefully once that many requests arrived on it.
async fn serve<S>(stream: S, state: Arc<State>, conn: Connection, goaway_after: Option<u64>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = Arc::new(conn);
    let received = Arc::new(AtomicU64::new(0));
    let enough = Arc::new(Notify::new());
    let (counted, told) = (received.clone(), enough.clone());
    let service = service_fn(move |req| {
        if Some(counted.fetch_add(1, Ordering::Relaxed) + 1) == goaway_after {
            told.notify_one();
        }
        routes::handle(state.clone(), conn.clone(), req)
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // What kube-apiserver reads (k8s.io/apiserver `secure_serving.go` and
    // `header_value_count_go127.go`), not hyper's defaults (100 header lines, 16 KiB HTTP/2
    // header lists), which would refuse a user in a few hundred groups kube-apiserver serves.
    builder
        .http1()
        .max_headers(MAX_HEADER_VALUES)
        .max_buf_size(MAX_HEADER_BYTES + GO_READ_SLACK);
    builder.http2().max_header_list_size(H2_MAX_HEADER_LIST);
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    let served = tokio::select! {
        served = connection.as_mut() => served,
        () = enough.notified() => {
            tracing::debug!(requests = received.load(Ordering::Relaxed), "shutting the connection down gracefully");
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = served {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
