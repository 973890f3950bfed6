//! A webhook of the chain, as k8s.io/apiserver's webhook authorizer: match conditions (CEL over
//! the review) first, then the decision cache, then a SubjectAccessReview posted to the
//! webhook (the delegate for `authorization.mode: Webhook` and `InClusterConfig`, the server a
//! kubeconfig names otherwise), retried with backoff when the failure is transient. A call
//! that fails, or a match condition that cannot be evaluated, gives the failure policy's
//! decision with the error (the chain answers 500 when nobody allows); an answer that is both
//! allowed and denied is a denial with an error; a conditional answer is never an Allow.

use std::time::{Duration, Instant};

use apiagg_authz::review::{self, read_status, ReviewVersion};
use apiagg_authz::validate::{FailurePolicy, WebhookSpec};
use apiagg_authz::{matching::MatchConditions, Attributes, Decision, Subject};

use super::cache::DecisionCache;
use super::metrics::{AuthzMetrics, CallResult};
use super::Reviewer;
use crate::backends::KubeconfigClient;

/// Attempts of one review (upstream's webhook backoff: 500 ms, factor 1.5, five steps).
const ATTEMPTS: u32 = 5;
/// The first pause between attempts.
const FIRST_PAUSE: Duration = Duration::from_millis(500);

/// Where a webhook's reviews go.
pub(super) enum Target {
    /// The delegate's SubjectAccessReview API, with apiagg's own credentials
    /// (`authorization.mode: Webhook`, and `InClusterConfig`: the cluster apiagg fronts).
    Delegate,
    /// The server a kubeconfig names (`KubeConfigFile`): its URL is where reviews are posted.
    Kubeconfig(KubeconfigClient),
}

/// One webhook of the chain.
pub(super) struct Webhook {
    /// Its name (metrics, logs).
    pub(super) name: String,
    target: Target,
    version: ReviewVersion,
    timeout: Duration,
    failure: FailurePolicy,
    conditions: MatchConditions,
    cache: DecisionCache,
}

/// Why a call has no answer (never cached).
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum CallError {
    /// No delegate is configured. Not retryable until the config names one.
    #[error("no delegate to ask")]
    NoDelegate,
    /// The call did not end within the webhook's timeout. Not retried (upstream neither).
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Connecting, sending or reading failed. Retryable when `transient`.
    #[error("{message}")]
    Transport {
        /// What failed.
        message: String,
        /// A reset connection: asked again after a pause.
        transient: bool,
    },
    /// The webhook answered with another status than 200 or 201. Retryable for 429, 500,
    /// 503 and 504.
    #[error("the webhook answered {0}")]
    Status(u16),
    /// The answer is not a SubjectAccessReview. Not retryable.
    #[error("invalid answer: {0}")]
    Answer(String),
}

impl CallError {
    fn transient(&self) -> bool {
        match self {
            CallError::Transport { transient, .. } => *transient,
            CallError::Status(code) => matches!(code, 429 | 500 | 503 | 504),
            _ => false,
        }
    }

    fn result(&self) -> CallResult {
        match self {
            CallError::Timeout(_) | CallError::Status(504) => CallResult::Timeout,
            _ => CallResult::Error,
        }
    }
}

/// A webhook's decision and, when it could not decide, why (the chain turns that into a 500
/// when nobody allows).
pub(super) type Outcome = (Decision, Option<String>);

impl Webhook {
    /// The webhook a validated configuration describes; `client` for `KubeConfigFile`.
    pub(super) fn new(spec: WebhookSpec, client: Option<KubeconfigClient>) -> Webhook {
        let target = client.map_or(Target::Delegate, Target::Kubeconfig);
        Webhook {
            name: spec.name,
            target,
            version: spec.review_version,
            timeout: spec.timeout,
            failure: spec.failure_policy,
            conditions: spec.match_conditions,
            cache: DecisionCache::new(spec.authorized_ttl, spec.unauthorized_ttl),
        }
    }

    /// `authorization.mode: Webhook`: the delegate, named `default` as upstream names its
    /// `--authorization-mode` webhook, no match conditions, failures an error.
    pub(super) fn legacy(authorized: Duration, unauthorized: Duration) -> Webhook {
        Webhook {
            name: "default".into(),
            target: Target::Delegate,
            version: ReviewVersion::V1,
            timeout: super::REVIEW_TIMEOUT,
            failure: FailurePolicy::NoOpinion,
            conditions: MatchConditions::default(),
            // A zero TTL keeps nothing (`DecisionCache` leaves that cache out).
            cache: DecisionCache::new(Some(authorized), Some(unauthorized)),
        }
    }

    /// The decision for `subject` doing `a`.
    pub(super) async fn decide(
        &self,
        subject: &Subject<'_>,
        a: &Attributes,
        reviewer: Reviewer<'_>,
        metrics: &AuthzMetrics,
    ) -> Outcome {
        let failure = |why: String| -> Outcome {
            let decision = match self.failure {
                FailurePolicy::NoOpinion => Decision::NoOpinion(String::new()),
                FailurePolicy::Deny => Decision::Deny(String::new()),
            };
            (decision, Some(format!("webhook {:?}: {why}", self.name)))
        };
        if !self.conditions.is_empty() {
            let started = Instant::now();
            let matched = self.conditions.evaluate(&review::review_spec(subject, a));
            let excluded = matches!(matched, Ok(false));
            metrics.matched(&self.name, started.elapsed(), matched.is_err(), excluded);
            match matched {
                Ok(true) => {}
                Ok(false) => return (Decision::NoOpinion(String::new()), None),
                Err(e) => return failure(format!("match conditions: {}", e.0.join("; "))),
            }
        }
        let key = review::cache_key(subject, a);
        let count = |decision: &str, cache: &str| {
            reviewer.metrics.authorization_decision(decision, cache);
        };
        if let Some(outcome) = self.cache.get(&key).await {
            count(label(&outcome.0), "hit");
            return outcome;
        }
        // Only the caller whose review runs counts a miss; callers merged into it, a hit.
        let mut asked = false;
        let call = async {
            asked = true;
            self.ask(subject, a, reviewer, metrics).await
        };
        match self.cache.load(key, call).await {
            Ok((decision, error)) => {
                count(label(&decision), if asked { "miss" } else { "hit" });
                (decision, error)
            }
            Err(e) => {
                count("error", "miss");
                if self.failure == FailurePolicy::NoOpinion {
                    metrics.failed_open(&self.name, e.result());
                }
                failure(e.to_string())
            }
        }
    }

    /// Posts the review, retrying transient failures with backoff; the answer's decision and
    /// the error it carries (allowed and denied at once).
    async fn ask(
        &self,
        subject: &Subject<'_>,
        a: &Attributes,
        reviewer: Reviewer<'_>,
        metrics: &AuthzMetrics,
    ) -> Result<Outcome, CallError> {
        let body = review::review_body(review::review_spec(subject, a), self.version);
        let mut pause = FIRST_PAUSE;
        let mut attempt = 1;
        loop {
            let started = Instant::now();
            let called = tokio::time::timeout(self.timeout, self.post(&body, reviewer)).await;
            let called = called.unwrap_or(Err(CallError::Timeout(self.timeout)));
            let result = called
                .as_ref()
                .map_or_else(|e| e.result(), |_| CallResult::Success);
            metrics.called(&self.name, result, started.elapsed());
            match called {
                Ok(bytes) => {
                    let answer =
                        read_status(&bytes).map_err(|e| CallError::Answer(e.to_string()))?;
                    let error = answer
                        .error()
                        .map(|e| format!("webhook {:?}: {e}", self.name));
                    return Ok((answer.decision(), error));
                }
                Err(e) if e.transient() && attempt < ATTEMPTS => {
                    tokio::time::sleep(jittered(pause)).await;
                    pause = pause.mul_f64(1.5);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One post of `body`: the answer's bytes on 200 or 201.
    async fn post(
        &self,
        body: &serde_json::Value,
        reviewer: Reviewer<'_>,
    ) -> Result<bytes::Bytes, CallError> {
        match &self.target {
            Target::Delegate => {
                let delegate = reviewer.delegate.ok_or(CallError::NoDelegate)?;
                let client = reviewer.clients.pick(delegate).map_err(transport)?;
                let path = format!("/apis/{}/subjectaccessreviews", self.version.api_version());
                let answer = client
                    .post_json(&path, body, self.timeout)
                    .await
                    .map_err(transport)?;
                if !matches!(answer.status, 200 | 201) {
                    return Err(CallError::Status(answer.status));
                }
                Ok(answer.body)
            }
            Target::Kubeconfig(client) => {
                let mut request = client.http.post(&client.url).json(body);
                if let Some(header) = client.token.as_ref().and_then(|t| t.header()) {
                    request = request.header(http::header::AUTHORIZATION, (*header).clone());
                }
                let response = request.send().await.map_err(|e| {
                    let message = apiagg_observe::error_chain(&e);
                    CallError::Transport {
                        transient: is_reset(&message),
                        message,
                    }
                })?;
                let status = response.status().as_u16();
                if !matches!(status, 200 | 201) {
                    return Err(CallError::Status(status));
                }
                read_capped(response).await
            }
        }
    }
}

/// Largest review answer read.
const MAX_ANSWER: usize = 1 << 20;

async fn read_capped(mut response: reqwest::Response) -> Result<bytes::Bytes, CallError> {
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| CallError::Transport {
        transient: false,
        message: apiagg_observe::error_chain(&e),
    })? {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(CallError::Answer(format!(
                "the answer exceeds {MAX_ANSWER} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

fn transport(e: crate::backends::FetchError) -> CallError {
    let message = e.to_string();
    CallError::Transport {
        transient: is_reset(&message),
        message,
    }
}

/// Whether a transport failure is a reset connection (upstream retries those).
fn is_reset(message: &str) -> bool {
    message.contains("connection reset") || message.contains("Connection reset")
}

/// `pause` with up to a fifth added, as upstream's backoff jitter.
fn jittered(pause: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    pause.mul_f64(1.0 + f64::from(nanos % 1000) / 5000.0)
}

/// `apiagg_authorization_decisions_total`'s `decision`: a no-opinion is not an allow.
fn label(decision: &Decision) -> &'static str {
    if decision.allowed() {
        "allowed"
    } else {
        "denied"
    }
}
