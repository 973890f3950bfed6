//! The front-door controls the composition root builds around the request path, as
//! kube-apiserver's generic server wraps the aggregator: API Priority and Fairness (its objects
//! from a file, reloaded on change, or followed in the delegate's cluster) and auditing (its
//! backends run before the first request and are flushed after the last).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;

use crate::backends::{kubeconfig_client, Reloadable, WatchedFile};
use crate::state::Gateway;
use apiagg_audit::{Auditor, Authorization, Settings as AuditSettings, WebhookTarget};
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
/// The webhook's token file, when it has one, goes into `watched` (re-read when it changes).
pub fn auditor(
    settings: AuditSettings,
    gateway: &Gateway,
    watched: &mut Vec<Reloadable>,
) -> anyhow::Result<Auditor> {
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let found = tokens.clone();
    let connect = move |path: &Path| {
        let client = kubeconfig_client(path, WEBHOOK_CONNECT_TIMEOUT)?;
        let authorization = client.token.map(|token| {
            lock(&found).push(Reloadable::from(token.clone()));
            Arc::new(move || token.header().map(|value| (*value).clone())) as Authorization
        });
        Ok(WebhookTarget {
            http: client.http,
            url: client.url,
            authorization,
        })
    };
    let auditor =
        Auditor::start(settings, gateway.metrics.registry(), &connect).context("audit")?;
    watched.append(&mut lock(&tokens));
    if auditor.is_enabled() {
        tracing::info!("auditing is on");
    }
    Ok(auditor)
}

fn lock<T>(items: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    items.lock().unwrap_or_else(|e| e.into_inner())
}

/// The flow-control objects of `flow`, applied again when their file changes.
pub fn flow_objects(path: PathBuf, flow: Arc<FlowControl>) -> Reloadable {
    WatchedFile::watch("flow control objects", path, move |path| {
        let report = flow.configure(from_file(path)?)?;
        tracing::info!("flow control from {}: {report}", path.display());
        Ok::<(), ConfigError>(())
    })
}

/// The audit policy of `auditor`, read again when its file changes.
pub fn audit_policy(path: PathBuf, auditor: Auditor) -> Reloadable {
    WatchedFile::watch("audit policy", path, move |_| auditor.reload_policy())
}
