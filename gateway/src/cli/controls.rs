//! The command line of the front-door controls, named as kube-apiserver's flags: API Priority
//! and Fairness (`--max-requests-inflight`, …) and auditing (`--audit-*`).

use std::path::PathBuf;
use std::time::Duration;

use apiagg_gateway::app::{
    AuditSettings, FlowOptions, FlowSource, LogFormat, LogSettings, WebhookSettings,
};
use clap::Args;

/// API Priority and Fairness and auditing.
#[derive(Args, Debug)]
pub struct ControlArgs {
    /// Requests that do not change anything, in flight at most (with the next, the seats of
    /// API Priority and Fairness).
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u32).range(1..))]
    max_requests_inflight: u32,
    /// Requests that change something, in flight at most.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    max_mutating_requests_inflight: u32,
    /// Classify, queue and limit requests with API Priority and Fairness
    /// (flowcontrol.apiserver.k8s.io/v1). `false` turns it off.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    enable_priority_and_fairness: bool,
    /// FlowSchemas and PriorityLevelConfigurations (YAML) to use; kube-apiserver's mandatory
    /// objects and missing suggested ones are added; re-read when it changes.
    #[arg(long, conflicts_with = "flow_control_from_cluster")]
    flow_control_config_file: Option<PathBuf>,
    /// Follow the FlowSchemas and PriorityLevelConfigurations of the delegate's cluster (list
    /// and watch, as kube-apiserver does).
    #[arg(long)]
    flow_control_from_cluster: bool,
    /// Longest wait of a request in a flow-control queue before it gets 429.
    #[arg(long, value_parser = crate::interval, default_value = "15s")]
    flow_control_request_wait_limit: Duration,
    /// Audit policy (audit.k8s.io/v1 Policy); auditing is on with it and a log or webhook.
    #[arg(long)]
    audit_policy_file: Option<PathBuf>,
    /// Audit log file (`-`: standard output), JSON lines.
    #[arg(long)]
    audit_log_path: Option<PathBuf>,
    /// Days to keep rotated audit logs (0: no limit).
    #[arg(long, default_value_t = 366)]
    audit_log_maxage: u32,
    /// Rotated audit logs to keep (0: no limit).
    #[arg(long, default_value_t = 100)]
    audit_log_maxbackup: u32,
    /// Megabytes of audit log before it is rotated (0: never).
    #[arg(long, default_value_t = 100)]
    audit_log_maxsize: u64,
    /// `json` (kube-apiserver's default) or `legacy`.
    #[arg(long, default_value = "json")]
    audit_log_format: LogFormat,
    /// Audit webhook: a kubeconfig file naming the server events are sent to.
    #[arg(long)]
    audit_webhook_config_file: Option<PathBuf>,
    /// Events per webhook request at most.
    #[arg(long, default_value_t = 400)]
    audit_webhook_batch_max_size: usize,
    /// Longest wait before a partial batch is sent.
    #[arg(long, value_parser = crate::interval, default_value = "30s")]
    audit_webhook_batch_max_wait: Duration,
    /// First wait before a failed webhook request is retried (doubling after).
    #[arg(long, value_parser = crate::interval, default_value = "10s")]
    audit_webhook_initial_backoff: Duration,
}

impl ControlArgs {
    /// Flow-control settings.
    pub fn flow(&self) -> FlowOptions {
        let source = match (
            &self.flow_control_config_file,
            self.flow_control_from_cluster,
        ) {
            (Some(path), _) => FlowSource::File(path.clone()),
            (None, true) => FlowSource::Cluster,
            (None, false) => FlowSource::Defaults,
        };
        FlowOptions {
            enabled: self.enable_priority_and_fairness,
            total_seats: self
                .max_requests_inflight
                .saturating_add(self.max_mutating_requests_inflight),
            request_wait_limit: self.flow_control_request_wait_limit,
            source,
        }
    }

    /// Audit settings.
    pub fn audit(&self) -> AuditSettings {
        let log = self.audit_log_path.as_ref().map(|path| {
            let mut log = LogSettings::new(path.clone());
            log.max_age_days = self.audit_log_maxage;
            log.max_backups = self.audit_log_maxbackup;
            log.max_size_mb = self.audit_log_maxsize;
            log.format = self.audit_log_format;
            log
        });
        let webhook = self.audit_webhook_config_file.as_ref().map(|path| {
            let mut webhook = WebhookSettings::new(path.clone());
            webhook.batch_max_size = self.audit_webhook_batch_max_size;
            webhook.batch_max_wait = self.audit_webhook_batch_max_wait;
            webhook.initial_backoff = self.audit_webhook_initial_backoff;
            webhook
        });
        AuditSettings {
            policy_file: self.audit_policy_file.clone(),
            log,
            webhook,
            ..AuditSettings::default()
        }
    }
}
