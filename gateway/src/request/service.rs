//! The proxy service: what every request reads (the gateway's snapshots, the authenticator,
//! the front-door controls) and what outlives requests (the backend connector, the repeated
//! failures logged). Its steps are methods in the files of their concerns.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use pingora_core::apps::HttpServerOptions;
use pingora_core::connectors::http::v2::Connector as Http2Connector;
use pingora_core::connectors::ConnectorOptions;
use pingora_core::server::configuration::ServerConf;
use tokio::sync::Notify;

use crate::auth::Authenticator;
use crate::backends::OpenFiles;
use crate::state::Gateway;
use apiagg_audit::Auditor;
use apiagg_flowcontrol::FlowControl;
use apiagg_observe::{Repeats, Tracer};

/// The front-door controls around the request path, as kube-apiserver's handler chain wraps
/// the aggregator.
pub struct Controls {
    /// API Priority and Fairness, when on.
    pub flow: Option<Arc<FlowControl>>,
    /// Auditing ([`Auditor::disabled`] when off).
    pub audit: Auditor,
    /// Tracing (`--tracing-config-file`), when on.
    pub tracer: Option<Arc<Tracer>>,
    /// The open-file budget client and backend connections share.
    pub open_files: Arc<OpenFiles>,
}

/// The proxy service.
pub struct ApiaggProxy {
    pub(super) gateway: Arc<Gateway>,
    pub(super) auth: Arc<Authenticator>,
    /// API Priority and Fairness (`--enable-priority-and-fairness`).
    pub(super) flow: Option<Arc<FlowControl>>,
    /// Auditing (`--audit-policy-file`).
    pub(super) audit: Auditor,
    /// Tracing (`--tracing-config-file`).
    pub(super) tracer: Option<Arc<Tracer>>,
    /// The open-file budget: every request to a backend takes a descriptor of it.
    pub(super) open_files: Arc<OpenFiles>,
    /// Backend failures logged so far, to log repeats on change and then rate-limited.
    pub(super) repeats: Repeats,
    /// New connections to backends and the delegate, and the pool of multiplexed HTTP/2 ones
    /// (idle HTTP/1.1 connections wait in their endpoint's own pool, backends/pool.rs).
    pub(super) connector: Http2Connector,
    /// How pingora serves client connections (HTTP/2's idle timeout).
    pub(super) server_options: HttpServerOptions,
    /// Set, and waiters woken, once the server stopped listening: connections waiting for a
    /// request close.
    pub(super) closed: AtomicBool,
    pub(super) closing: Notify,
    /// The task that wakes `closing` when apiagg stops taking requests was started.
    pub(super) stop_watched: AtomicBool,
}

impl ApiaggProxy {
    /// A proxy reading `gateway`'s snapshots, authenticating callers with `auth`, and wrapped
    /// in the front-door `controls`; `conf` sizes its backend connection pool, `server` says
    /// how client connections are served.
    pub fn new(
        gateway: Arc<Gateway>,
        auth: Arc<Authenticator>,
        controls: Controls,
        conf: &ServerConf,
        server: HttpServerOptions,
    ) -> ApiaggProxy {
        ApiaggProxy {
            connector: Http2Connector::new(Some(ConnectorOptions::from_server_conf(conf))),
            server_options: server,
            closed: AtomicBool::new(false),
            closing: Notify::new(),
            stop_watched: AtomicBool::new(false),
            gateway,
            auth,
            flow: controls.flow,
            audit: controls.audit,
            tracer: controls.tracer,
            open_files: controls.open_files,
            repeats: Repeats::new(std::time::Duration::from_secs(10)),
        }
    }
}
