//! The metrics kube-apiserver has for authorization, with its names and labels: decisions per
//! authorizer of the chain, webhook calls (result, duration, failing open), match conditions
//! (errors, exclusions, evaluation time) and reloads of the authorization configuration file.
//! `type` and `name` come from the configuration, a closed set; the legacy `authorization.mode:
//! Webhook` is the webhook named `default`, as upstream names its `--authorization-mode` webhook.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// How one webhook call ended, as kube-apiserver labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallResult {
    /// The webhook answered.
    Success,
    /// The call ran out of time.
    Timeout,
    /// Anything else (refused, reset, a status that is not a review).
    Error,
}

impl CallResult {
    fn label(self) -> &'static str {
        match self {
            CallResult::Success => "success",
            CallResult::Timeout => "timeout",
            CallResult::Error => "error",
        }
    }
}

/// Authorization's metrics (cheap to clone).
#[derive(Clone)]
pub struct AuthzMetrics {
    decisions: IntCounterVec,
    webhook_calls: IntCounterVec,
    webhook_duration: HistogramVec,
    fail_open: IntCounterVec,
    match_errors: IntCounterVec,
    match_exclusions: IntCounterVec,
    match_seconds: HistogramVec,
    reloads: IntCounterVec,
    reload_last: GaugeVec,
}

impl AuthzMetrics {
    /// Registers them.
    pub fn register(registry: &Registry) -> prometheus::Result<AuthzMetrics> {
        let counter = |name, help, labels: &[&str]| -> prometheus::Result<IntCounterVec> {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let histogram = |name, help, buckets: Vec<f64>, labels: &[&str]| {
            let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)?;
            registry.register(Box::new(h.clone()))?;
            Ok::<_, prometheus::Error>(h)
        };
        let reload_last = GaugeVec::new(
            Opts::new(
                "apiserver_authorization_config_controller_automatic_reload_last_timestamp_seconds",
                "Timestamp of the last automatic reload of authorization configuration split by status and apiserver identity.",
            ),
            &["status"],
        )?;
        registry.register(Box::new(reload_last.clone()))?;
        Ok(AuthzMetrics {
            decisions: counter(
                "apiserver_authorization_decisions_total",
                "Total number of terminal decisions made by an authorizer split by authorizer type, name, and decision.",
                &["type", "name", "decision"],
            )?,
            webhook_calls: counter(
                "apiserver_authorization_webhook_evaluations_total",
                "Round-trips to authorization webhooks.",
                &["name", "result"],
            )?,
            webhook_duration: histogram(
                "apiserver_authorization_webhook_duration_seconds",
                "Request latency in seconds.",
                prometheus::DEFAULT_BUCKETS.to_vec(),
                &["name", "result"],
            )?,
            fail_open: counter(
                "apiserver_authorization_webhook_evaluations_fail_open_total",
                "NoOpinion results due to webhook timeout or error.",
                &["name", "result"],
            )?,
            match_errors: counter(
                "apiserver_authorization_match_condition_evaluation_errors_total",
                "Total number of errors when an authorization webhook encounters a match condition error split by authorizer type and name.",
                &["type", "name"],
            )?,
            match_exclusions: counter(
                "apiserver_authorization_match_condition_exclusions_total",
                "Total number of exclusions when an authorization webhook is skipped because match conditions exclude it.",
                &["type", "name"],
            )?,
            match_seconds: histogram(
                "apiserver_authorization_match_condition_evaluation_seconds",
                "Authorization match condition evaluation time in seconds, split by authorizer type and name.",
                vec![0.001, 0.005, 0.01, 0.025, 0.1, 0.2, 0.25],
                &["type", "name"],
            )?,
            reloads: counter(
                "apiserver_authorization_config_controller_automatic_reloads_total",
                "Total number of automatic reloads of authorization configuration split by status and apiserver identity.",
                &["status"],
            )?,
            reload_last,
        })
    }

    /// A terminal decision (Allow or Deny; upstream does not count NoOpinion) of the
    /// authorizer `kind`/`name`.
    pub fn decided(&self, kind: &str, name: &str, allowed: bool) {
        let decision = if allowed { "allowed" } else { "denied" };
        self.decisions
            .with_label_values(&[kind, name, decision])
            .inc();
    }

    /// One call of webhook `name`.
    pub fn called(&self, name: &str, result: CallResult, took: Duration) {
        let result = result.label();
        self.webhook_calls.with_label_values(&[name, result]).inc();
        self.webhook_duration
            .with_label_values(&[name, result])
            .observe(took.as_secs_f64());
    }

    /// Webhook `name` failed (after its retries) and its failure policy is `NoOpinion`.
    pub fn failed_open(&self, name: &str, result: CallResult) {
        self.fail_open
            .with_label_values(&[name, result.label()])
            .inc();
    }

    /// The match conditions of webhook `name` were evaluated: how long it took, whether one
    /// failed, and whether they excluded the request.
    pub fn matched(&self, name: &str, took: Duration, errored: bool, excluded: bool) {
        let labels = ["Webhook", name];
        self.match_seconds
            .with_label_values(&labels)
            .observe(took.as_secs_f64());
        if errored {
            self.match_errors.with_label_values(&labels).inc();
        }
        if excluded {
            self.match_exclusions.with_label_values(&labels).inc();
        }
    }

    /// A reload of the file: `success` or `failure`.
    pub fn reloaded(&self, ok: bool) {
        let status = if ok { "success" } else { "failure" };
        self.reloads.with_label_values(&[status]).inc();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.reload_last.with_label_values(&[status]).set(now);
    }
}
