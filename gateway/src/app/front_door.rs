//! The front-door controls the composition root builds around the request path, as
//! kube-apiserver's generic server wraps the aggregator: API Priority and Fairness (its objects
//! from a file, reloaded on change, or followed in the delegate's cluster) and auditing (its
//! backends run before the first request and are flushed after the last).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;

use crate::backends::{kubeconfig_client, Reload, Reloadable};
use crate::controllers::FlowControlWatch;
use crate::state::Gateway;
use apiagg_audit::{AuditError, Auditor, Authorization, Settings as AuditSettings, WebhookTarget};
use apiagg_flowcontrol::{from_file, ConfigError, FlowControl, Settings};

/// Upper bound of connecting to a webhook.
const WEBHOOK_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where flow control takes its FlowSchemas and PriorityLevelConfigurations from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowSource {
    /// kube-apiserver's built-in objects only.
    Defaults,
    /// A file of objects (the built-in mandatory ones and missing suggested ones added).
    File(PathBuf),
    /// The delegate's cluster, listed and watched as kube-apiserver does.
    Cluster,
}

/// API Priority and Fairness settings (`--enable-priority-and-fairness` and friends).
#[derive(Debug, Clone)]
pub struct FlowOptions {
    /// Off: requests are not classified, queued or limited.
    pub enabled: bool,
    /// `--max-requests-inflight` + `--max-mutating-requests-inflight`.
    pub total_seats: u32,
    /// Longest wait in a queue.
    pub request_wait_limit: Duration,
    /// Where the objects come from.
    pub source: FlowSource,
}

/// Builds flow control from `options`; `None` when it is off. A file that cannot be read or
/// does not compile stops the start with the reason.
pub fn flow_control(
    options: &FlowOptions,
    gateway: &Gateway,
) -> anyhow::Result<Option<Arc<FlowControl>>> {
    if !options.enabled {
        tracing::warn!("API Priority and Fairness is off: nothing bounds the requests in flight");
        return Ok(None);
    }
    let settings = Settings {
        total_seats: options.total_seats,
        request_wait_limit: options.request_wait_limit,
    };
    let flow =
        Arc::new(FlowControl::new(settings, gateway.metrics.registry()).context("flow control")?);
    if let FlowSource::File(path) = &options.source {
        let objects = from_file(path)?;
        let report = flow
            .configure(objects)
            .with_context(|| format!("flow control objects in {}", path.display()))?;
        tracing::info!("flow control from {}: {report}", path.display());
    }
    tracing::info!(
        seats = options.total_seats,
        "API Priority and Fairness is on"
    );
    Ok(Some(flow))
}

/// Starts auditing as `settings` ask (off without a policy file and a backend); an invalid
/// policy or an unwritable log stops the start with the reason.
pub fn auditor(settings: AuditSettings, gateway: &Gateway) -> anyhow::Result<Auditor> {
    let auditor =
        Auditor::start(settings, gateway.metrics.registry(), &audit_webhook).context("audit")?;
    if auditor.is_enabled() {
        tracing::info!("auditing is on");
    }
    Ok(auditor)
}

/// The audit webhook's client, from its kubeconfig.
fn audit_webhook(path: &Path) -> Result<WebhookTarget, String> {
    let client = kubeconfig_client(path, WEBHOOK_CONNECT_TIMEOUT)?;
    let authorization = client.token.map(|token| {
        let token = Arc::new(token);
        Arc::new(move || token.header()) as Authorization
    });
    Ok(WebhookTarget {
        http: client.http,
        url: client.url,
        authorization,
    })
}

/// Why a [`WatchedFile`] was not applied; what serves stays. Retryable: the file watcher tries
/// again when the file changes.
#[derive(Debug, thiserror::Error)]
pub enum WatchedFileError {
    /// The file's modification time cannot be read (the file is gone, or not readable).
    /// Retryable: it is tried again on the next round.
    #[error("{}: {error}", path.display())]
    Modified {
        /// The file.
        path: PathBuf,
        /// What reading it said (in the message, not a `source()`).
        error: std::io::Error,
    },
    /// The flow-control objects cannot be read or do not compile. Retryable once the file
    /// changes.
    #[error(transparent)]
    FlowControl(#[from] ConfigError),
    /// The audit policy cannot be read or is invalid. Retryable once the file changes.
    #[error(transparent)]
    AuditPolicy(#[from] AuditError),
}

/// A file the file watcher re-reads when its modification time changes, handing it to
/// `apply` (the flow-control objects, the audit policy); a failure keeps what serves.
pub struct WatchedFile {
    what: &'static str,
    path: PathBuf,
    apply: Box<ApplyFile>,
    seen: Mutex<Option<SystemTime>>,
}

/// What a [`WatchedFile`] does with its file.
type ApplyFile = dyn Fn(&std::path::Path) -> Result<(), WatchedFileError> + Send + Sync;

impl WatchedFile {
    /// Watches `path` (`what` names it in logs), applied by `apply` when it changes.
    fn new(
        what: &'static str,
        path: PathBuf,
        apply: impl Fn(&std::path::Path) -> Result<(), WatchedFileError> + Send + Sync + 'static,
    ) -> Arc<WatchedFile> {
        let seen = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        Arc::new(WatchedFile {
            what,
            path,
            apply: Box::new(apply),
            seen: Mutex::new(seen),
        })
    }

    /// The flow-control objects of `flow`.
    pub fn flow_objects(path: PathBuf, flow: Arc<FlowControl>) -> Reloadable {
        WatchedFile::new("flow control objects", path, move |path| {
            let report = flow.configure(from_file(path)?)?;
            tracing::info!("flow control from {}: {report}", path.display());
            Ok(())
        })
        .into()
    }

    /// The audit policy of `auditor`.
    pub fn audit_policy(path: PathBuf, auditor: Auditor) -> Reloadable {
        WatchedFile::new("audit policy", path, move |_| Ok(auditor.reload_policy()?)).into()
    }
}

impl Reload for WatchedFile {
    type Error = WatchedFileError;

    fn name(&self) -> String {
        format!("{} {}", self.what, self.path.display())
    }

    fn reload(&self) -> Result<bool, WatchedFileError> {
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .map_err(|error| WatchedFileError::Modified {
                path: self.path.clone(),
                error,
            })?;
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if *seen == Some(modified) {
            return Ok(false);
        }
        (self.apply)(&self.path)?;
        *seen = Some(modified);
        Ok(true)
    }
}

/// Flow control's upkeep (seat borrowing every 10 s) and, with `FlowSource::Cluster`, the
/// reflectors of the delegate's objects, for the life of the server.
pub struct FlowUpkeep {
    pub flow: Arc<FlowControl>,
    pub gateway: Arc<Gateway>,
    pub from_cluster: bool,
}

#[async_trait]
impl BackgroundService for FlowUpkeep {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let maintenance = self.flow.spawn_maintenance();
        let mut watch = None;
        if self.from_cluster {
            // The delegate is known once the first config is loaded.
            let mut routes = self.gateway.routes.subscribe();
            loop {
                if let Some(delegate) = self.gateway.routes.load().delegate.clone() {
                    let clients = self.gateway.clients.clone();
                    watch = Some(FlowControlWatch::spawn(
                        self.flow.clone(),
                        delegate,
                        clients,
                    ));
                    break;
                }
                tokio::select! {
                    changed = routes.changed() => if changed.is_err() { break },
                    _ = shutdown.changed() => break,
                }
            }
            if watch.is_none() {
                tracing::warn!("flow control from the cluster: no delegate is configured");
            }
        }
        let _ = shutdown.changed().await;
        maintenance.abort();
        drop(watch);
    }
}
