//! The webhook backend (`--audit-webhook-config-file`), as kube-apiserver's webhook plugin behind
//! its buffered (batch) plugin: events are collected into an `EventList` of at most
//! `batch_max_size` events or for at most `batch_max_wait`, batches are throttled (token bucket,
//! `throttle_qps`/`throttle_burst`) and POSTed to the kubeconfig's server; a failed POST (any
//! error or status other than 2xx: upstream retries them all) is retried with exponential backoff
//! (`initial_backoff`, ×1.5, 20% jitter) up to `max_attempts`, then the batch is dropped and
//! counted (`apiserver_audit_error_total{plugin="webhook"}`). A few batches are sent at once, so
//! one slow answer does not hold the queue; a down webhook fills the bounded queue and new events
//! are dropped and counted, while requests go on untouched.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::{sleep_until, Instant};

use super::event::{Event, EventList};
use super::id::next_random;
use super::settings::WebhookSettings;
use super::sink::{next_event, poll_clock, spawn_writer, stopped, AuditMetrics, Stop, Writer};
use super::AuditError;
use apiagg_observe::{error_chain, Repeats};

/// The name in metrics.
const PLUGIN: &str = "webhook";
/// Batches in flight at once.
const MAX_IN_FLIGHT: usize = 4;
/// Of a webhook's answer, at most this much is read (to reuse the connection).
const ANSWER_LIMIT: usize = 64 << 10;

/// Why one POST of a batch failed. Every variant is retryable (upstream's webhook retries them
/// all): the batch is sent again with backoff, up to `max_attempts`.
#[derive(Debug, thiserror::Error)]
enum PostError {
    /// The request could not be sent or its answer not read (connect, TLS, timeout); the
    /// message holds the whole chain of causes. Retryable.
    #[error("{}", error_chain(.0))]
    Send(reqwest::Error),
    /// The webhook answered with a status other than 2xx. Retryable.
    #[error("the webhook answered {0}")]
    Status(reqwest::StatusCode),
}

/// Where the webhook backend posts its batches and with which client. The gateway reads it from
/// the kubeconfig (server URL with its path, CA or insecure-skip-tls-verify, client certificate,
/// token), as it reads every kubeconfig, so this crate holds no TLS or credential code.
#[derive(Clone)]
pub struct WebhookTarget {
    /// The client, with its trust, client certificate and connect timeout.
    pub http: reqwest::Client,
    /// The server URL, path included.
    pub url: String,
    /// The `Authorization` value of a POST, asked for each one (a rotated token file is
    /// picked up); `None` when the kubeconfig has no token.
    pub authorization: Option<Authorization>,
}

/// The `Authorization` header value of the next POST.
pub type Authorization = Arc<dyn Fn() -> Option<HeaderValue> + Send + Sync>;

/// Builds the [`WebhookTarget`] of the kubeconfig at a path; the error names what is wrong.
pub type ConnectWebhook = dyn Fn(&Path) -> Result<WebhookTarget, String> + Send + Sync;

impl WebhookTarget {
    /// One POST of `body`; any failure (including a status other than 2xx) is an error.
    async fn post(&self, body: Bytes, timeout: Duration) -> Result<(), PostError> {
        let mut request = self
            .http
            .post(&self.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .timeout(timeout)
            .body(body);
        if let Some(value) = self.authorization.as_ref().and_then(|a| a()) {
            request = request.header(http::header::AUTHORIZATION, value);
        }
        let mut response = request.send().await.map_err(PostError::Send)?;
        let status = response.status();
        let mut read = 0;
        while let Ok(Some(chunk)) = response.chunk().await {
            read += chunk.len();
            if read > ANSWER_LIMIT {
                break;
            }
        }
        if status.is_success() {
            Ok(())
        } else {
            Err(PostError::Status(status))
        }
    }
}

/// Connects to the kubeconfig's server (errors now, before serving) and starts the writer.
pub(super) fn start(
    settings: &WebhookSettings,
    connect: &ConnectWebhook,
    events: mpsc::Receiver<Arc<Event>>,
    metrics: AuditMetrics,
) -> Result<Writer, AuditError> {
    settings.validate()?;
    let target = connect(&settings.kubeconfig_file).map_err(|message| AuditError::Webhook {
        path: settings.kubeconfig_file.clone(),
        message,
    })?;
    let webhook = Webhook {
        shared: Arc::new(Shared {
            target,
            settings: settings.clone(),
            metrics,
            repeats: Repeats::new(Duration::from_secs(60)),
            pending: AtomicU64::new(0),
        }),
    };
    spawn_writer(PLUGIN, move |stop| webhook.run(events, stop))
}

/// What the batch senders share.
struct Shared {
    target: WebhookTarget,
    settings: WebhookSettings,
    metrics: AuditMetrics,
    repeats: Repeats,
    /// Events handed to senders and not yet sent or counted as failed.
    pending: AtomicU64,
}

struct Webhook {
    shared: Arc<Shared>,
}

impl Webhook {
    async fn run(self, mut events: mpsc::Receiver<Arc<Event>>, mut stop: Stop) {
        let settings = &self.shared.settings;
        let max = settings.batch_max_size;
        let mut throttle = Throttle::new(settings);
        let mut sending = JoinSet::new();
        let mut deadline = None;
        let mut clock = poll_clock();
        while deadline.is_none() {
            let first = tokio::select! {
                biased;
                at = stopped(&mut stop) => { deadline = Some(at); break; }
                event = next_event(&mut events, &mut clock) => match event { Some(e) => e, None => break },
            };
            let mut batch = Vec::with_capacity(max.min(64));
            batch.push(first);
            // What is already queued joins the batch without going round the select.
            while batch.len() < max {
                match events.try_recv() {
                    Ok(event) => batch.push(event),
                    Err(_) => break,
                }
            }
            let until = Instant::now() + settings.batch_max_wait;
            while batch.len() < max {
                tokio::select! {
                    biased;
                    at = stopped(&mut stop) => { deadline = Some(at); break; }
                    event = next_event(&mut events, &mut clock) => match event { Some(e) => batch.push(e), None => break },
                    _ = sleep_until(until) => break,
                }
            }
            self.dispatch(batch, &mut sending, &mut throttle, &stop)
                .await;
            while sending.try_join_next().is_some() {}
        }
        // Shutdown (or every sender gone): send what is queued, until the deadline.
        let deadline = deadline.unwrap_or_else(Instant::now);
        events.close();
        let mut batch = Vec::new();
        while let Some(event) = events.recv().await {
            batch.push(event);
            if batch.len() == max {
                self.dispatch(
                    std::mem::take(&mut batch),
                    &mut sending,
                    &mut throttle,
                    &stop,
                )
                .await;
            }
        }
        self.dispatch(batch, &mut sending, &mut throttle, &stop)
            .await;
        let all_sent = async { while sending.join_next().await.is_some() {} };
        let _ = tokio::time::timeout_at(deadline, all_sent).await;
        sending.abort_all();
        let left = self.shared.pending.swap(0, Ordering::SeqCst);
        if left > 0 {
            self.shared.metrics.failed(PLUGIN, PLUGIN, "shutdown", left);
            tracing::warn!(
                events = left,
                "audit webhook: events not sent by the shutdown deadline"
            );
        }
    }

    /// Starts sending `batch` once the throttle and the in-flight bound allow; after the stop
    /// signal, only until its deadline (then the batch is counted as dropped).
    async fn dispatch(
        &self,
        batch: Vec<Arc<Event>>,
        sending: &mut JoinSet<()>,
        throttle: &mut Throttle,
        stop: &Stop,
    ) {
        if batch.is_empty() {
            return;
        }
        let mut stop = stop.clone();
        let in_time = {
            let ready = async {
                throttle.acquire().await;
                while sending.len() >= MAX_IN_FLIGHT {
                    sending.join_next().await;
                }
            };
            tokio::pin!(ready);
            tokio::select! {
                biased;
                () = &mut ready => true,
                deadline = stopped(&mut stop) => {
                    tokio::time::timeout_at(deadline, &mut ready).await.is_ok()
                }
            }
        };
        let n = batch.len() as u64;
        if !in_time {
            self.shared.metrics.failed(PLUGIN, PLUGIN, "shutdown", n);
            return;
        }
        self.shared.pending.fetch_add(n, Ordering::SeqCst);
        sending.spawn(send(self.shared.clone(), batch, stop));
    }
}

/// Sends one batch with retries; counts it as failed when every attempt failed or the shutdown
/// deadline comes first.
async fn send(shared: Arc<Shared>, batch: Vec<Arc<Event>>, mut stop: Stop) {
    let n = batch.len() as u64;
    let settings = &shared.settings;
    let body = Bytes::from(EventList(&batch).to_vec());
    let mut delay = settings.initial_backoff;
    let mut attempt = 1;
    let outcome = loop {
        match shared
            .target
            .post(body.clone(), shared.settings.request_timeout)
            .await
        {
            Ok(()) => break Ok(()),
            Err(e) if attempt >= settings.max_attempts => break Err(("send_failed", e)),
            Err(e) => {
                tracing::debug!(attempt, error = %e, "audit webhook: retrying");
                let jitter = 1.0 + 0.2 * (next_random() >> 11) as f64 / (1u64 << 53) as f64;
                if !backoff(delay.mul_f64(jitter), &mut stop).await {
                    break Err(("shutdown", e));
                }
                delay = delay.mul_f64(1.5);
                attempt += 1;
            }
        }
    };
    shared.pending.fetch_sub(n, Ordering::SeqCst);
    if let Err((reason, error)) = outcome {
        shared.metrics.failed(PLUGIN, PLUGIN, reason, n);
        let message = error.to_string();
        if let Some(suppressed) = shared.repeats.admit(PLUGIN, &message) {
            tracing::error!(
                url = %shared.target.url,
                events = n,
                error = %message,
                suppressed,
                "audit webhook: events dropped"
            );
        }
    }
}

/// Waits `delay` before a retry; `false` when the shutdown deadline comes first.
async fn backoff(delay: Duration, stop: &mut Stop) -> bool {
    let wake = Instant::now() + delay;
    tokio::select! {
        _ = sleep_until(wake) => true,
        deadline = stopped(stop) => {
            if wake > deadline {
                return false;
            }
            sleep_until(wake).await;
            true
        }
    }
}

/// A token bucket of batches (client-go's `NewTokenBucketRateLimiter`); a no-op when disabled.
struct Throttle {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Throttle {
    fn new(settings: &WebhookSettings) -> Throttle {
        let rate = if settings.throttle_enable {
            f64::from(settings.throttle_qps)
        } else {
            0.0
        };
        let burst = f64::from(settings.throttle_burst.max(1));
        Throttle {
            rate,
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    async fn acquire(&mut self) {
        if self.rate <= 0.0 {
            return;
        }
        let now = Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.last).as_secs_f64() * self.rate).min(self.burst);
        self.last = now;
        if self.tokens < 1.0 {
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / self.rate);
            tokio::time::sleep(wait).await;
            self.tokens = 1.0;
            self.last = Instant::now();
        }
        self.tokens -= 1.0;
    }
}

#[cfg(test)]
mod tests;
