//! What auditing is configured with: kube-apiserver's `--audit-policy-file`, `--audit-log-*`
//! and `--audit-webhook-*` options, with their defaults.

use std::path::PathBuf;
use std::time::Duration;

use super::AuditError;

/// Captured request and response bodies are kept up to this size by default (1 MiB).
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;
/// Queued events hold at most this many bytes of bodies by default (128 MiB).
pub const DEFAULT_BODY_BUDGET: usize = 128 << 20;

/// Auditing settings. Auditing is on when a policy file and at least one backend are given
/// (as in kube-apiserver: a backend without a policy records nothing).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `--audit-policy-file`.
    pub policy_file: Option<PathBuf>,
    /// The log backend (`--audit-log-path` set).
    pub log: Option<LogSettings>,
    /// The webhook backend (`--audit-webhook-config-file` set).
    pub webhook: Option<WebhookSettings>,
    /// Bodies larger than this are not recorded (an annotation says so); 0 means the default.
    pub body_limit: usize,
    /// Bytes of bodies the queued events may hold together; past it bodies are not recorded
    /// (an annotation says so) until the backends catch up. 0 means the default.
    pub body_budget: usize,
}

/// The format of log lines (`--audit-log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One `audit.k8s.io/v1` `Event` as JSON per line (the default).
    #[default]
    Json,
    /// kube-apiserver's one-line text (`legacy`).
    Legacy,
}

impl std::str::FromStr for LogFormat {
    type Err = AuditError;

    fn from_str(s: &str) -> Result<LogFormat, AuditError> {
        match s {
            "json" => Ok(LogFormat::Json),
            "legacy" => Ok(LogFormat::Legacy),
            other => Err(AuditError::Settings(format!(
                "log format {other:?} is not in list of known formats (legacy,json)"
            ))),
        }
    }
}

/// The log backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// `--audit-log-path`: the file, or `-` for standard output.
    pub path: PathBuf,
    /// `--audit-log-maxage`: days to keep rotated files (0: no limit). Default 366.
    pub max_age_days: u32,
    /// `--audit-log-maxbackup`: rotated files to keep (0: no limit). Default 100.
    pub max_backups: u32,
    /// `--audit-log-maxsize`: megabytes before rotation (0: never rotate). Default 100.
    pub max_size_mb: u64,
    /// `--audit-log-format`.
    pub format: LogFormat,
    /// `--audit-log-batch-buffer-size`: events queued for the writer. Default 10000.
    pub buffer_size: usize,
}

impl LogSettings {
    /// The defaults of kube-apiserver for a log at `path`.
    pub fn new(path: impl Into<PathBuf>) -> LogSettings {
        LogSettings {
            path: path.into(),
            max_age_days: 366,
            max_backups: 100,
            max_size_mb: 100,
            format: LogFormat::Json,
            buffer_size: 10_000,
        }
    }
}

/// The webhook backend (always batching, as kube-apiserver's default `batch` mode).
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookSettings {
    /// `--audit-webhook-config-file`: a kubeconfig naming the server (full URL), its CA, and
    /// the client certificate or token to present.
    pub kubeconfig_file: PathBuf,
    /// `--audit-webhook-batch-max-size`: events per request. Default 400.
    pub batch_max_size: usize,
    /// `--audit-webhook-batch-max-wait`: the longest an event waits for its batch. Default 30s.
    pub batch_max_wait: Duration,
    /// `--audit-webhook-batch-buffer-size`: events queued before new ones are dropped.
    /// Default 10000.
    pub buffer_size: usize,
    /// `--audit-webhook-batch-throttle-enable`. Default true.
    pub throttle_enable: bool,
    /// `--audit-webhook-batch-throttle-qps`: batches per second. Default 10.
    pub throttle_qps: f32,
    /// `--audit-webhook-batch-throttle-burst`. Default 15.
    pub throttle_burst: u32,
    /// `--audit-webhook-initial-backoff`: the wait before the first retry (then ×1.5 each
    /// time, with 20% jitter). Default 10s.
    pub initial_backoff: Duration,
    /// Attempts per batch before it is dropped and counted. Default 5 (upstream's steps).
    pub max_attempts: u32,
    /// Bound of one request, reading the answer included. Default 30s (upstream's).
    pub request_timeout: Duration,
}

impl WebhookSettings {
    /// The defaults of kube-apiserver for the webhook described by `kubeconfig_file`.
    pub fn new(kubeconfig_file: impl Into<PathBuf>) -> WebhookSettings {
        WebhookSettings {
            kubeconfig_file: kubeconfig_file.into(),
            batch_max_size: 400,
            batch_max_wait: Duration::from_secs(30),
            buffer_size: 10_000,
            throttle_enable: true,
            throttle_qps: 10.0,
            throttle_burst: 15,
            initial_backoff: Duration::from_secs(10),
            max_attempts: 5,
            request_timeout: Duration::from_secs(30),
        }
    }

    /// The checks of kube-apiserver's `validateBackendBatchOptions`.
    pub(super) fn validate(&self) -> Result<(), AuditError> {
        let invalid = |what: &str, value: &dyn std::fmt::Display| {
            Err(AuditError::Settings(format!(
                "invalid audit batch webhook {what} {value}, must be a positive number"
            )))
        };
        if self.buffer_size == 0 {
            return invalid("buffer size", &self.buffer_size);
        }
        if self.batch_max_size == 0 {
            return invalid("max batch size", &self.batch_max_size);
        }
        if self.throttle_enable
            && self.throttle_qps.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        {
            return invalid("throttle QPS", &self.throttle_qps);
        }
        if self.throttle_enable && self.throttle_burst == 0 {
            return invalid("throttle burst", &self.throttle_burst);
        }
        if self.max_attempts == 0 {
            return invalid("max attempts", &self.max_attempts);
        }
        Ok(())
    }
}
