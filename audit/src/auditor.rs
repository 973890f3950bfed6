//! The auditor: the policy and the backends' queues, shared by every request. Started before
//! serving (the policy file, the log file and the webhook's kubeconfig are read then, so a bad
//! one stops the start), shut down after the last request drained (everything queued is
//! written, within a bound).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus::Registry;

use super::policy::{Attributes, Level, Policy};
use super::request::{Begin, RequestAudit};
use super::settings::{Settings, DEFAULT_BODY_BUDGET, DEFAULT_BODY_LIMIT};
use super::sink::{AuditMetrics, Sink, Writers};
use super::webhook::ConnectWebhook;
use super::{log, webhook, AuditError};

/// Auditing for the whole gateway: cheap to clone (one `Arc`), `Send + Sync`. A disabled
/// auditor costs one branch per request.
#[derive(Clone)]
pub struct Auditor {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    policy_file: PathBuf,
    policy: ArcSwap<Policy>,
    sink: Arc<Sink>,
    writers: Writers,
}

impl Auditor {
    /// No auditing: [`begin`](Self::begin) always returns `None`.
    pub fn disabled() -> Auditor {
        Auditor { inner: None }
    }

    /// Reads the policy, opens the log, connects to the webhook's kubeconfig with `connect`,
    /// registers the metrics in `registry` and starts one writer thread per backend. Without a policy file, or without
    /// any backend, auditing is off (as in kube-apiserver) and nothing is registered.
    pub fn start(
        settings: Settings,
        registry: &Registry,
        connect: &ConnectWebhook,
    ) -> Result<Auditor, AuditError> {
        let backends = settings.log.is_some() || settings.webhook.is_some();
        let Some(policy_file) = settings.policy_file else {
            if backends {
                tracing::info!("no audit policy file provided: no audit events will be recorded");
            }
            return Ok(Auditor::disabled());
        };
        let policy = Policy::load(&policy_file)?;
        if !backends {
            tracing::info!("no audit backend configured: no audit events will be recorded");
            return Ok(Auditor::disabled());
        }
        if let Some(webhook) = &settings.webhook {
            webhook.validate()?;
        }
        let metrics = AuditMetrics::register(registry)?;
        let or = |value, default| if value == 0 { default } else { value };
        let limit = or(settings.body_limit, DEFAULT_BODY_LIMIT);
        let budget = or(settings.body_budget, DEFAULT_BODY_BUDGET);
        let mut sink = Sink::new(metrics.clone(), limit, budget);
        let writers = Writers::default();
        if let Some(log) = &settings.log {
            let events = sink.add_queue("log", log.buffer_size);
            writers.push(log::start(log, events, metrics.clone())?);
        }
        if let Some(webhook) = &settings.webhook {
            let events = sink.add_queue("webhook", webhook.buffer_size);
            writers.push(webhook::start(webhook, connect, events, metrics)?);
        }
        tracing::info!(
            policy = %policy_file.display(),
            rules = policy.rule_count(),
            log = ?settings.log.as_ref().map(|l| l.path.display().to_string()),
            webhook = ?settings.webhook.as_ref().map(|w| w.kubeconfig_file.display().to_string()),
            "auditing"
        );
        Ok(Auditor {
            inner: Some(Arc::new(Inner {
                policy_file,
                policy: ArcSwap::from_pointee(policy),
                sink: Arc::new(sink),
                writers,
            })),
        })
    }

    /// Whether requests may be audited at all.
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Evaluates the policy for an authenticated request. `None` when auditing is off or the
    /// policy says `None`: nothing more to do for this request. Otherwise the request's audit,
    /// which has already written `RequestReceived` (unless the policy omits that stage).
    pub fn begin(&self, begin: Begin<'_>) -> Option<Box<RequestAudit>> {
        let inner = self.inner.as_ref()?;
        let decision = inner.policy.load().evaluate(&Attributes {
            user: begin.user.username(),
            groups: begin.user.groups(),
            info: begin.info,
        });
        inner.sink.metrics.level(decision.level).inc();
        if decision.level == Level::None {
            return None;
        }
        Some(Box::new(RequestAudit::start(
            inner.sink.clone(),
            begin,
            decision,
        )))
    }

    /// Reads the policy file again; the new policy applies to requests that begin afterwards.
    /// On error the old policy stays. A no-op when auditing is off.
    pub fn reload_policy(&self) -> Result<(), AuditError> {
        if let Some(inner) = &self.inner {
            let policy = Policy::load(&inner.policy_file)?;
            inner.policy.store(Arc::new(policy));
        }
        Ok(())
    }

    /// Writes every queued event to every backend, waiting at most `timeout`; events still
    /// queued then are dropped and counted. Events emitted after this call are dropped and
    /// counted too. Call it once the last request has drained; later calls return at once.
    pub async fn shutdown(&self, timeout: Duration) {
        if let Some(inner) = &self.inner {
            inner.writers.shutdown(timeout).await;
        }
    }
}

#[cfg(test)]
mod tests;
