//! What an authenticated caller may do: `AlwaysAllow`, or kube-apiserver's webhook authorizer —
//! a SubjectAccessReview at the delegate for every request, its decision cached by a hash of the
//! review (allowed 5 min, denied 30 s by default; failures are not cached). Request attributes
//! are derived as k8s.io/apiserver's `requestinfo.go` does, caller-sent `Impersonate-*` headers
//! are authorized first as its impersonation filter does, and refusals are worded as its
//! `responsewriters.Forbidden` words them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use apiagg_config::file::{Authorization, AuthorizationMode};
use apiagg_requestinfo::RequestInfo;
use dashmap::DashMap;
use http::HeaderMap;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::user::{unescape_key, User, ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED};
use super::{Authenticated, Method};
use crate::backends::{Clients, Upstream};
use crate::observe::Metrics;

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
/// Most decisions remembered; past it, expired entries are dropped, then everything.
const CACHE_LIMIT: usize = 16_384;
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

struct Cached {
    decision: Decision,
    until: Instant,
}

/// Decisions by the SHA-256 of the review (user and attributes), each until its deadline; at
/// most 16,384 entries.
#[derive(Default)]
struct DecisionCache {
    entries: DashMap<[u8; 32], Cached>,
}

impl DecisionCache {
    fn get(&self, key: &[u8; 32]) -> Option<Decision> {
        let entry = self.entries.get(key)?;
        (entry.until > Instant::now()).then(|| entry.decision.clone())
    }

    fn put(&self, key: [u8; 32], decision: Decision, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        if self.entries.len() >= CACHE_LIMIT {
            let now = Instant::now();
            self.entries.retain(|_, c| c.until > now);
            if self.entries.len() >= CACHE_LIMIT {
                self.entries.clear();
            }
        }
        let until = Instant::now() + ttl;
        self.entries.insert(key, Cached { decision, until });
    }
}

/// The webhook authorizer: SubjectAccessReviews at the delegate, cached.
struct Webhook {
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
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
            authorized_ttl: config.cache_authorized_ttl,
            unauthorized_ttl: config.cache_unauthorized_ttl,
            cache: DecisionCache::default(),
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

    /// Authorizes `request` of `caller`: its impersonation first (then the request as the
    /// impersonated user), then the request. `Ok(Some(user))`: allowed, as that impersonated
    /// user (the `Impersonate-*` headers are honoured and must not pass on); `Ok(None)`: allowed
    /// as the caller.
    pub async fn authorize(
        &self,
        request: &AuthzRequest<'_>,
        caller: &Authenticated,
        reviewer: Reviewer<'_>,
    ) -> Result<Option<Authenticated>, Refusal> {
        let Some(webhook) = &self.webhook else {
            return self.builtin.check(request, &caller.user).map(|()| None);
        };
        if always_allowed(request.info.path) {
            return Ok(None);
        }
        let impersonation = impersonation(request.headers).map_err(|e| internal(request, &e))?;
        let mut user = caller.user.clone();
        let mut impersonated = None;
        if let Some(wanted) = impersonation {
            for attributes in &wanted.checks {
                // As upstream: an impersonation that cannot be checked is forbidden, not a 500.
                let reason = match webhook.check(&user, attributes, reviewer).await {
                    Ok(d) if d.allowed => continue,
                    Ok(d) => d.reason,
                    Err(e) => {
                        tracing::warn!("impersonation check failed: {e}");
                        String::new()
                    }
                };
                return Err(forbidden(&user, attributes, &reason));
            }
            user = Arc::new(wanted.user);
            impersonated = Some(Authenticated {
                user: user.clone(),
                method: Method::Impersonation,
            });
        }
        let attributes = attributes(request);
        match webhook.check(&user, &attributes, reviewer).await {
            Ok(d) if d.allowed => Ok(impersonated),
            Ok(d) => Err(forbidden(&user, &attributes, &d.reason)),
            Err(e) => Err(internal(request, &e)),
        }
    }
}

impl Webhook {
    /// The decision for `user` doing `attributes`: cached, else asked. `Err` when the delegate
    /// could not be asked (not cached).
    async fn check(
        &self,
        user: &User,
        attributes: &Attributes,
        reviewer: Reviewer<'_>,
    ) -> Result<Decision, String> {
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
        if let Some(decision) = self.cache.get(&key) {
            count(label(&decision), "hit");
            return Ok(decision);
        }
        let asked = match reviewer.delegate {
            Some(delegate) => ask(user, attributes, delegate, reviewer.clients).await,
            None => Err("SubjectAccessReview: no delegate to ask".into()),
        };
        let decision = match asked {
            Ok(decision) => decision,
            Err(e) => {
                count("error", "miss");
                return Err(e);
            }
        };
        count(label(&decision), "miss");
        let ttl = if decision.allowed {
            self.authorized_ttl
        } else {
            self.unauthorized_ttl
        };
        self.cache.put(key, decision.clone(), ttl);
        Ok(decision)
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
