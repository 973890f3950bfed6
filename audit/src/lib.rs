//! Auditing (`audit.k8s.io/v1`), as kube-apiserver audits: the policy decides a level
//! per request, events are handed to the log and webhook backends through bounded queues.
//!
//! Use from the request path (kube-apiserver's `WithAuditInit` and `WithAudit` filters):
//! 1. take the ID: [`AuditId::from_header`] on the request's `Audit-ID`, else [`AuditId::new`];
//!    echo it in the response's `Audit-ID` header (for every request, audited or not);
//! 2. after authentication, [`Auditor::begin`]: `None` means the request is not audited;
//!    otherwise keep the [`RequestAudit`] with the request (it wrote `RequestReceived`);
//! 3. [`RequestAudit::authorized`] with the decision, [`RequestAudit::impersonating`] when the
//!    caller impersonates, [`RequestAudit::annotate`] for anything else worth recording;
//! 4. the body pieces while [`RequestAudit::wants_request_body`] /
//!    [`RequestAudit::wants_response_body`] say so (bounded by the body limit);
//! 5. [`RequestAudit::response_started`] when the response header goes out;
//! 6. [`RequestAudit::complete`] when the request is done (the gateway's `record`), or
//!    [`RequestAudit::panicked`]; a `RequestAudit` dropped without either completes itself;
//! 7. [`Auditor::shutdown`] after the last request drained.
//!
//! Events are serialized and written on each backend's own thread; the request path only clones
//! a few `Arc`s and pushes onto queues that never wait (a full queue drops and counts).
//!
//! Bodies: only bodies of at most [`Settings::body_limit`] bytes (1 MiB) with a JSON form are
//! recorded (CBOR and YAML request bodies transcoded, see [`RequestAudit::request_content_type`]),
//! and none of long-running requests (watch, exec, attach, port-forward, log, proxy); the queued
//! events hold at most [`Settings::body_budget`] bytes of bodies together (128 MiB), so a slow
//! backend cannot make audit memory grow with traffic. A body left out is named in an
//! annotation (`audit.apiagg.io/request-object`, `audit.apiagg.io/response-object`) with why.
//!
//! Metrics (kube-apiserver's names): `apiserver_audit_event_total`,
//! `apiserver_audit_error_total{plugin="log"|"webhook"|"buffered"}` (buffered: a full queue),
//! `apiserver_audit_level_total{level}`; and `apiagg_audit_events_dropped_total{backend,reason}`
//! with `reason` one of `queue_full`, `shutdown`, `send_failed`, `write_failed`.

mod auditor;
mod event;
mod id;
mod log;
mod policy;
mod request;
mod rotate;
mod settings;
mod sink;
#[cfg(test)]
mod testing;
mod webhook;

use std::path::PathBuf;

pub use self::{
    auditor::Auditor,
    id::{AuditId, HEADER as AUDIT_ID_HEADER, HEADER_WIRE as AUDIT_ID_WIRE},
    policy::{Attributes, Decision, Level, OmitStages, Policy, PolicyError, Problem, Stage},
    request::{Begin, Identity, RequestAudit, StatusSummary},
    settings::{
        LogFormat, LogSettings, Settings, WebhookSettings, DEFAULT_BODY_BUDGET, DEFAULT_BODY_LIMIT,
    },
    webhook::{Authorization, ConnectWebhook, WebhookTarget},
};

/// Why auditing cannot start. None is retryable: the settings or files must change.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The policy file is unreadable or invalid.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The log file (or its folder) cannot be opened for writing.
    #[error("audit log {path:?}: {source}")]
    LogFile {
        /// `--audit-log-path`.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The webhook's kubeconfig is unusable (the message names what is wrong).
    #[error("audit webhook config {path:?}: {message}")]
    Webhook {
        /// `--audit-webhook-config-file`.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A setting is out of range (the message names it).
    #[error("{0}")]
    Settings(String),
    /// The metrics cannot be registered (registered twice in one registry).
    #[error("audit metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// A writer thread or its runtime cannot be started.
    #[error("cannot start an audit writer thread: {0}")]
    Thread(std::io::Error),
}
