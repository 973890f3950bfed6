//! What an authenticated caller may do: `AlwaysAllow`, or kube-apiserver's webhook authorizer —
//! a SubjectAccessReview at the delegate for every request, its decision cached by a hash of the
//! review (allowed 5 min, denied 30 s by default, in separate bounded caches; failures are not
//! cached; concurrent reviews of one key merged into one). Request attributes
//! are derived as k8s.io/apiserver's `requestinfo.go` does, caller-sent `Impersonate-*` headers
//! are authorized first as its impersonation filter does, and refusals are worded as its
//! `responsewriters.Forbidden` words them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use apiagg_config::{Authorization, AuthorizationMode};
use apiagg_requestinfo::RequestInfo;
use http::HeaderMap;
use moka::future::Cache;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::user::{unescape_key, InvalidIdentity, User, ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED};
use super::{Authenticated, Method};
use crate::backends::{Clients, FetchError, Upstream};
use apiagg_observe::Metrics;

mod attributes;
mod builtin;
mod impersonation;
mod messages;
mod review;

pub use self::attributes::attributes;
use self::builtin::Builtin;
use self::impersonation::*;
use self::messages::*;
use self::review::*;

/// Upper bound of one SubjectAccessReview.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Most decisions remembered in each cache (allowed, denied); past it the least used go first.
const CACHE_LIMIT: u64 = 16_384;
/// Where SubjectAccessReviews are posted.
const REVIEW_PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
/// Members may do anything without a review (kube-apiserver's privileged-group authorizer).
const PRIVILEGED_GROUP: &str = "system:masters";
/// The prefix of every impersonation header (lower case, as `http` stores names).
pub const IMPERSONATE_PREFIX: &str = "impersonate-";
const IMPERSONATE_USER: &str = "impersonate-user";
const IMPERSONATE_GROUP: &str = "impersonate-group";
const IMPERSONATE_UID: &str = "impersonate-uid";
const IMPERSONATE_EXTRA: &str = "impersonate-extra-";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// Why a request may not go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The authorizer said no: 403 `Forbidden`. Not retryable until the policy changes.
    #[error("{message}")]
    Forbidden {
        /// kube-apiserver's message (`pods "x" is forbidden: User "u" cannot get …`).
        message: String,
        /// `details` of the Status: `name`, `group`, `kind` (each only when not empty).
        details: Value,
    },
    /// The authorizer could not decide (the delegate could not be asked, or the request cannot
    /// be described): 500 `InternalError`. Retryable: the delegate may answer next time.
    #[error("{0}")]
    Internal(String),
}

/// A request as the authorizer sees it.
#[derive(Debug, Clone, Copy)]
pub struct AuthzRequest<'a> {
    /// The request's one parse.
    pub info: &'a RequestInfo<'a>,
    /// Request headers (for `Impersonate-*`).
    pub headers: &'a HeaderMap,
}

/// Authorization attributes of one check (k8s.io/apiserver's `authorizer.AttributesRecord`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, … (resource) or the lower-case method (non-resource).
    pub verb: String,
    /// A resource request (`resourceAttributes`) or not (`nonResourceAttributes`).
    pub resource_request: bool,
    /// The decoded path (non-resource requests).
    pub path: String,
    /// Namespace (resource requests).
    pub namespace: String,
    /// API group, empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// Object name.
    pub name: String,
}

/// A decision of the authorizer: allowed or not, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decision {
    allowed: bool,
    reason: String,
}

/// A review that ended in a denial: not an error for callers, but kept out of the allowed
/// cache.
enum Loaded<E> {
    Denied(Decision),
    Failed(E),
}

/// Decisions by the SHA-256 of the review (user and attributes): allowed and denied ones in
/// separate bounded caches (a flood of denials cannot evict allowed decisions), each entry
/// until its cache's TTL, least used evicted first; concurrent reviews of one key merged.
struct DecisionCache {
    allowed: Option<Cache<[u8; 32], Decision>>,
    denied: Option<Cache<[u8; 32], Decision>>,
}

/// A bounded cache whose entries live `ttl`; none when `ttl` is zero (nothing is kept).
fn bounded(ttl: Duration) -> Option<Cache<[u8; 32], Decision>> {
    (!ttl.is_zero()).then(|| {
        Cache::builder()
            .max_capacity(CACHE_LIMIT)
            .time_to_live(ttl)
            .build()
    })
}

impl DecisionCache {
    fn new(allowed: Duration, denied: Duration) -> DecisionCache {
        DecisionCache {
            allowed: bounded(allowed),
            denied: bounded(denied),
        }
    }

    async fn get(&self, key: &[u8; 32]) -> Option<Decision> {
        if let Some(d) = self.allowed.as_ref()?.get(key).await {
            return Some(d);
        }
        self.denied.as_ref()?.get(key).await
    }

    /// The decision `review` gives for `key`, asked once for all concurrent callers; allowed
    /// and denied decisions are remembered, failures are not.
    async fn load<E: Clone + Send + Sync + 'static>(
        &self,
        key: [u8; 32],
        review: impl Future<Output = Result<Decision, E>>,
    ) -> Result<Decision, E> {
        let review = async {
            match review.await {
                Ok(d) if d.allowed => Ok(d),
                Ok(d) => {
                    if let Some(denied) = &self.denied {
                        denied.insert(key, d.clone()).await;
                    }
                    Err(Loaded::Denied(d))
                }
                Err(e) => Err(Loaded::Failed(e)),
            }
        };
        let loaded = match &self.allowed {
            Some(allowed) => allowed
                .try_get_with(key, review)
                .await
                .map_err(|e| match &*e {
                    Loaded::Denied(d) => Loaded::Denied(d.clone()),
                    Loaded::Failed(e) => Loaded::Failed(e.clone()),
                }),
            None => review.await,
        };
        match loaded {
            Ok(d) | Err(Loaded::Denied(d)) => Ok(d),
            Err(Loaded::Failed(e)) => Err(e),
        }
    }
}

/// The webhook authorizer: SubjectAccessReviews at the delegate, cached.
struct Webhook {
    cache: DecisionCache,
}

/// Where reviews are sent and counted.
#[derive(Clone, Copy)]
pub struct Reviewer<'a> {
    /// The delegate (no delegate: every review fails).
    pub delegate: Option<&'a Upstream>,
    /// The controllers' HTTP clients (apiagg's own credentials at the delegate).
    pub clients: &'a Clients,
    /// `apiagg_authorization_decisions_total`.
    pub metrics: &'a Metrics,
}

/// The configured authorizer: the delegate's SubjectAccessReviews, or apiagg's built-in rule.
pub struct Authorizer {
    webhook: Option<Webhook>,
    builtin: Builtin,
}

impl Default for Authorizer {
    fn default() -> Self {
        Authorizer::new(&Authorization::default())
    }
}

impl Authorizer {
    /// The authorizer `config` asks for.
    pub fn new(config: &Authorization) -> Authorizer {
        let webhook = (config.mode == AuthorizationMode::Webhook).then(|| Webhook {
            cache: DecisionCache::new(config.cache_authorized_ttl, config.cache_unauthorized_ttl),
        });
        Authorizer {
            webhook,
            builtin: Builtin::new(config),
        }
    }

    /// Whether the delegate authorizes every request (`Webhook`).
    pub fn enabled(&self) -> bool {
        self.webhook.is_some()
    }

    /// The built-in rule alone (no authorizer): `Ok` when `caller` may do what `request` asks.
    pub fn check_builtin(
        &self,
        request: &AuthzRequest<'_>,
        caller: &Authenticated,
    ) -> Result<(), Refusal> {
        self.builtin.check(request, &caller.user)
    }

    /// Who may do what apiagg protects, one line each, for the start-up log.
    pub fn describe(&self, anonymous: bool) -> Vec<String> {
        match &self.webhook {
            Some(_) => vec![
                "every request (APIService API, /metrics, /debug, proxied requests): the \
                 delegate's SubjectAccessReview (system:masters always)"
                    .to_string(),
            ],
            None => self.builtin.describe(anonymous),
        }
    }

    /// Authorizes the `Impersonate-*` headers of `request` for `caller` (kube-apiserver's
    /// impersonation filter, which runs before flow control). `Ok(Some(user))`: allowed, the
    /// request now acts as that user (the headers are honoured and must not pass on);
    /// `Ok(None)`: nothing to impersonate here (no headers, the path is open to all, or no
    /// webhook: then the headers go to the delegate, which decides).
    pub async fn impersonate(
        &self,
        request: &AuthzRequest<'_>,
        caller: &Authenticated,
        reviewer: Reviewer<'_>,
    ) -> Result<Option<Authenticated>, Refusal> {
        let Some(webhook) = &self.webhook else {
            return Ok(None);
        };
        if always_allowed(request.info.path) {
            return Ok(None);
        }
        let Some(wanted) = impersonation(request.headers).map_err(|e| internal(request, &e))?
        else {
            return Ok(None);
        };
        for attributes in &wanted.checks {
            // As upstream: an impersonation that cannot be checked is forbidden, not a 500.
            let reason = match webhook.check(&caller.user, attributes, reviewer).await {
                Ok(d) if d.allowed => continue,
                Ok(d) => d.reason,
                Err(e) => {
                    tracing::warn!("impersonation check failed: {e}");
                    String::new()
                }
            };
            return Err(forbidden(&caller.user, attributes, &reason));
        }
        Ok(Some(Authenticated {
            user: Arc::new(wanted.user),
            method: Method::Impersonation,
        }))
    }

    /// Authorizes `request` of `caller` (the impersonated user once impersonation was
    /// allowed): the webhook's decision, or the built-in rule without one. Runs after flow
    /// control, so a flood is throttled before it costs reviews.
    pub async fn authorize(
        &self,
        request: &AuthzRequest<'_>,
        caller: &Authenticated,
        reviewer: Reviewer<'_>,
    ) -> Result<(), Refusal> {
        let Some(webhook) = &self.webhook else {
            return self.builtin.check(request, &caller.user);
        };
        if always_allowed(request.info.path) {
            return Ok(());
        }
        let attributes = attributes(request);
        match webhook.check(&caller.user, &attributes, reviewer).await {
            Ok(d) if d.allowed => Ok(()),
            Ok(d) => Err(forbidden(&caller.user, &attributes, &d.reason)),
            Err(e) => Err(internal(request, &e)),
        }
    }
}

/// The user `Impersonate-*` headers ask for, when they name one that can be forwarded exactly
/// (for the audit of a request that carries them to the delegate, which decides).
pub fn requested_impersonation(headers: &HeaderMap) -> Option<User> {
    impersonation(headers)
        .ok()
        .flatten()
        .map(|wanted| wanted.user)
}

impl Webhook {
    /// The decision for `user` doing `attributes`: cached, else asked. `Err` when the delegate
    /// could not be asked (not cached).
    async fn check(
        &self,
        user: &User,
        attributes: &Attributes,
        reviewer: Reviewer<'_>,
    ) -> Result<Decision, AskError> {
        if user.groups.iter().any(|g| g == PRIVILEGED_GROUP) {
            return Ok(Decision {
                allowed: true,
                reason: String::new(),
            });
        }
        let count = |decision: &str, cache: &str| {
            reviewer.metrics.authorization_decision(decision, cache);
        };
        let key = cache_key(user, attributes);
        if let Some(decision) = self.cache.get(&key).await {
            count(label(&decision), "hit");
            return Ok(decision);
        }
        // Only the caller whose review runs counts a miss; callers merged into it, a hit.
        let mut asked = false;
        let review = async {
            asked = true;
            match reviewer.delegate {
                Some(delegate) => ask(user, attributes, delegate, reviewer.clients).await,
                None => Err(AskError::NoDelegate),
            }
        };
        let outcome = self.cache.load(key, review).await;
        let cache = if asked { "miss" } else { "hit" };
        match outcome {
            Ok(decision) => {
                count(label(&decision), cache);
                Ok(decision)
            }
            Err(e) => {
                count("error", "miss");
                Err(e)
            }
        }
    }
}

fn label(decision: &Decision) -> &'static str {
    if decision.allowed {
        "allowed"
    } else {
        "denied"
    }
}

/// Paths open to everybody without a review, as kube-apiserver's `system:public-info-viewer`
/// role has them: the health endpoints (and their checks) and `/version`.
fn always_allowed(path: &str) -> bool {
    if matches!(path, "/version" | "/version/") {
        return true;
    }
    ["/healthz", "/livez", "/readyz"].iter().any(|health| {
        path.strip_prefix(health)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

#[cfg(test)]
mod tests;
