//! Layer 4: the composition root. Builds the shared state, the controllers, the pingora server
//! and its listener, and drives graceful shutdown.

mod check_backend;
mod commands;
mod connections;
mod controllers;
mod controls;
mod curves;
mod goaway;
mod limits;
mod listen;
mod serving;
mod shutdown;
mod stores;
mod traces;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use apiagg_config::Sources;
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::{RunArgs, Server};
use pingora_core::services::background::background_service;

use crate::auth::{Authenticator, AuthnMetrics, AuthzMetrics, StructuredAuthn, StructuredAuthz};
use crate::backends::{OpenFiles, Reloadable};
use crate::controllers::{FlowControlController, FlowControlHandles, RbacController, RbacHandles};
use crate::deadlines::TimedOut;
use crate::request::{ApiaggProxy, Controls};
use crate::state::{Gateway, Options};
use apiagg_observe::Milestone;
use pingora_core::apps::HttpServerOptions;

pub use crate::deadlines::ConnectionTimeouts;
pub use apiagg_audit::{LogFormat, LogSettings, Settings as AuditSettings, WebhookSettings};
pub use check_backend::check_backend;
pub use commands::{check, check_tracing, print_status};
pub use controls::{FlowOptions, FlowSource};
pub use curves::{curve_id, CurveError};
pub use goaway::MAX_CHANCE as MAX_GOAWAY_CHANCE;
pub use stores::StoreChoice;

/// Everything `apiagg serve` needs besides the config file's contents.
pub struct Launch {
    /// The config file.
    pub config: PathBuf,
    /// Where APIServices registered through the API are kept.
    pub store: StoreChoice,
    /// Overrides the config's `listen`.
    pub listen: Option<String>,
    /// Proxy worker threads.
    pub threads: usize,
    /// Client connections served at once (`None`: three quarters of the open-file limit).
    pub max_connections: Option<usize>,
    /// How long a client connection may wait for a request head, idle, or the HTTP/2 preface.
    pub connection_timeouts: ConnectionTimeouts,
    /// API Priority and Fairness.
    pub flow: FlowOptions,
    /// Auditing.
    pub audit: AuditSettings,
    /// OpenTelemetry tracing: a `TracingConfiguration` file (off without it).
    pub tracing: Option<PathBuf>,
    /// Structured authentication: an `AuthenticationConfiguration` file.
    pub authentication: Option<PathBuf>,
    /// Structured authorization: an `AuthorizationConfiguration` file.
    pub authorization: Option<PathBuf>,
    /// `--goaway-chance`: the chance of a GOAWAY after an HTTP/2 answer.
    pub goaway_chance: f64,
    /// `--tls-curve-preferences`: the TLS groups (IDs) the listener accepts; empty: the
    /// provider's default groups.
    pub tls_curves: Vec<u16>,
    /// Behaviour of the gateway.
    pub options: Options,
}

/// Runs the gateway until it is told to stop.
pub fn serve(launch: Launch) -> anyhow::Result<()> {
    limits::disable_huge_pages();
    let open_files = limits::raise_open_files().map_or(1024, limits::Raised::limit);
    let path = &launch.config;
    let sources =
        Sources::read(path).with_context(|| format!("reading config {}", path.display()))?;
    let config = sources
        .parse()
        .with_context(|| format!("invalid config {}", path.display()))?;
    let listen = launch
        .listen
        .clone()
        .unwrap_or_else(|| config.listen.clone());
    let mut options = launch.options;
    options.serving_tls = config.tls.is_some();
    let store = stores::open(&launch.store)?;
    let (gateway, writers) = Gateway::new(options, store).context("creating metrics")?;
    let gateway = Arc::new(gateway);
    let authn_metrics =
        AuthnMetrics::register(gateway.metrics.registry()).context("creating metrics")?;
    let authz_metrics =
        AuthzMetrics::register(gateway.metrics.registry()).context("creating metrics")?;
    let mut auth = Authenticator::new(&config.authentication)
        .with_context(|| format!("invalid config {}", path.display()))?
        .authorizing(&config.authorization, &authz_metrics)
        .counted(authn_metrics.clone());
    if let Some(file) = &launch.authentication {
        let anonymous_set = config.authentication.anonymous_set;
        let structured = StructuredAuthn::load(file, anonymous_set, authn_metrics)?;
        auth = auth.with_structured(Arc::new(structured));
    }
    let mut rbac = None;
    if let Some(file) = &launch.authorization {
        let configured = config.authorization.configured;
        let structured = StructuredAuthz::load(file, configured, authz_metrics)?;
        rbac = structured.rbac();
        auth = auth.with_structured_authz(Arc::new(structured));
    }
    if rbac.is_none() {
        // No authorizer reads cluster objects: readyz need not wait for them.
        gateway.lifecycle.reach(Milestone::AuthorizerSynced);
    }
    let auth = Arc::new(auth);
    let certificates = config
        .tls
        .as_ref()
        .map(serving::ServingCertificates::load)
        .transpose()
        .map_err(|e| anyhow::anyhow!("tls: {e}"))?
        .map(Arc::new);
    let mut watched: Vec<Reloadable> = auth.reloadable();
    if let Some(c) = &certificates {
        watched.push(c.clone().into());
    }

    let conf = ServerConf {
        threads: launch.threads.max(1),
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();

    let max_connections = launch
        .max_connections
        .unwrap_or_else(|| connections::default_bound(open_files));
    let file_budget = OpenFiles::new(usize::try_from(open_files).unwrap_or(usize::MAX));
    let bound = connections::ConnectionBound::new(
        max_connections,
        file_budget.clone(),
        gateway.metrics.registry(),
    )
    .context("creating metrics")?;
    let flow = controls::flow_control(&launch.flow, &gateway)?;
    if let (Some(flow), FlowSource::File(path)) = (&flow, &launch.flow.source) {
        watched.push(controls::flow_objects(path.clone(), flow.clone()));
    }
    // The audit backends run before the first request is accepted.
    let auditor = controls::auditor(launch.audit.clone(), &gateway, &mut watched)?;
    if let (true, Some(path)) = (auditor.is_enabled(), &launch.audit.policy_file) {
        watched.push(controls::audit_policy(path.clone(), auditor.clone()));
    }
    let tracer = launch
        .tracing
        .as_deref()
        .map(|path| traces::tracer(path, &gateway))
        .transpose()?;
    let controls = Controls {
        flow: flow.clone(),
        audit: auditor.clone(),
        tracer: tracer.clone(),
        open_files: file_budget.clone(),
    };
    // An HTTP/2 connection with no stream open is closed after the idle timeout (HTTP/1.1's
    // idle and head deadlines, and HTTP/2's preface, are the stream's: deadlines::Deadlined).
    let mut server_options = HttpServerOptions::default();
    server_options.h2_idle_timeout = Some(launch.connection_timeouts.idle);
    let proxy_app = ApiaggProxy::new(
        gateway.clone(),
        auth.clone(),
        controls,
        &server.configuration,
        server_options,
    );
    let timed_out = TimedOut::register(gateway.metrics.registry()).context("creating metrics")?;
    let proxy_app =
        goaway::Goaway::new(proxy_app, launch.goaway_chance, gateway.metrics.registry())
            .context("creating metrics")?;
    let kx = curves::provider(&launch.tls_curves)?;
    let listener = listen::Listener::new(&listen, config.tls.as_ref())?;
    let (listening, tls) = listener.config(certificates, auth.certificates(), kx)?;
    let mut proxy = pingora_core::services::listening::Service::new(
        "apiagg".to_string(),
        connections::Counted::new(proxy_app, bound.clone())
            .with_deadlines(launch.connection_timeouts, timed_out)
            .with_tls(tls),
    );
    proxy.set_connection_filter(Arc::new(connections::Filter(bound)));
    tracing::info!(
        max_connections,
        open_files,
        connection_budget = file_budget.budget(),
        "client connections, and client and backend connections together, are bounded below \
         the open-file limit"
    );
    proxy.add_listener(listening);

    controllers::add(
        &mut server,
        &gateway,
        writers,
        watched,
        (path, sources, config),
    )?;
    let from_cluster = flow.is_some() && launch.flow.source == FlowSource::Cluster;
    if !from_cluster {
        // The flow-control objects are the file's or the built-in ones, in force already.
        gateway.lifecycle.reach(Milestone::FlowControlSynced);
    }
    if let Some(flow) = flow {
        let controller = FlowControlController::new(FlowControlHandles {
            flow,
            routes: gateway.routes.clone(),
            clients: gateway.clients.clone(),
            from_cluster,
            lifecycle: gateway.lifecycle.clone(),
        });
        server.add_service(background_service("flow-control controller", controller));
    }
    if let Some(source) = rbac {
        let controller = RbacController::new(RbacHandles {
            source,
            routes: gateway.routes.clone(),
            clients: gateway.clients.clone(),
            lifecycle: gateway.lifecycle.clone(),
        });
        server.add_service(background_service("RBAC controller", controller));
    }
    server.add_service(proxy);
    tracing::info!(listen = %listener.address, "apiagg starting");
    for (wide_open, line) in auth.access() {
        if wide_open {
            tracing::warn!("access: {line}");
        } else {
            tracing::info!("access: {line}");
        }
    }
    // The first line on stdout says where to connect (tests and scripts read it).
    println!("listening on {}", listener.url());
    server.run(RunArgs {
        shutdown_signal: Box::new(shutdown::GracefulShutdown::new(&gateway, auditor, tracer)),
    });
    drop(listener);
    Ok(())
}
