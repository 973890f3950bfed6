//! What an authenticated caller may do: apiagg's built-in rule without an authorizer
//! (`AlwaysAllow`), or a chain of authorizers as kube-apiserver reads it — `authorization.mode:
//! Webhook` (the delegate's SubjectAccessReviews, cached) or an `AuthorizationConfiguration`
//! file (`--authorization-config`: webhooks with match conditions and failure policies, RBAC
//! decided here from the cluster's objects, AlwaysAllow, AlwaysDeny; re-read when it changes).
//! Request attributes come from the request's one parse (`apiagg_authz::request`, selectors
//! included), caller-sent `Impersonate-*` headers are authorized first as kube-apiserver's
//! constrained impersonation filter does, a GET of `pods/exec|attach|portforward` also needs
//! `create`, and refusals are worded as its `responsewriters.Forbidden` words them.

use std::sync::Arc;
use std::time::Duration;

use apiagg_authz::{Attributes, Subject};
use apiagg_config::{Authorization, AuthorizationMode};
use apiagg_requestinfo::RequestInfo;
use arc_swap::ArcSwap;
use http::HeaderMap;
use serde_json::{json, Map, Value};

use super::user::{unescape_key, InvalidIdentity, User, ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED};
use super::{Authenticated, Method};
use crate::backends::{Clients, Upstream};
use apiagg_observe::Metrics;

mod builtin;
mod cache;
mod chain;
mod impersonation;
mod messages;
mod metrics;
mod structured;
mod webhook;

use self::builtin::Builtin;
pub use self::chain::{Chain, RbacSource};
use self::chain::{Link, Verdict};
use self::impersonation::*;
use self::messages::*;
pub use self::metrics::AuthzMetrics;
pub use self::structured::StructuredAuthz;
use self::webhook::Webhook;

/// Upper bound of one SubjectAccessReview of `authorization.mode: Webhook`.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Every access check of one request (each impersonated name, group and extra value, then the
/// request itself) ends within this long of the request's arrival.
pub const ACCESS_CHECKS: Duration = Duration::from_secs(30);
/// The most `Impersonate-*` values one request may carry, duplicates removed (each costs an
/// access check): past it, 431.
pub const MAX_IMPERSONATION_VALUES: usize = 64;
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
        /// The deciding authorizer's reason (RBAC gives none), for the audit.
        reason: String,
    },
    /// The authorizer could not decide (a webhook could not be asked, the cluster's RBAC
    /// objects are not listed yet, or the request cannot be described): 500 `InternalError`.
    /// Retryable: the webhook may answer next time.
    #[error("{0}")]
    Internal(String),
    /// More `Impersonate-*` values than [`MAX_IMPERSONATION_VALUES`]: 431. Not retryable: the
    /// request must change.
    #[error("{0}")]
    TooManyValues(String),
}

/// A request as the authorizer sees it.
#[derive(Debug, Clone, Copy)]
pub struct AuthzRequest<'a> {
    /// The request's one parse.
    pub info: &'a RequestInfo<'a>,
    /// Request headers (for `Impersonate-*`).
    pub headers: &'a HeaderMap,
}

/// Where reviews are sent and counted.
#[derive(Clone, Copy)]
pub struct Reviewer<'a> {
    /// The delegate (no delegate: every review at the delegate fails).
    pub delegate: Option<&'a Upstream>,
    /// The controllers' HTTP clients (apiagg's own credentials at the delegate).
    pub clients: &'a Clients,
    /// `apiagg_authorization_decisions_total`.
    pub metrics: &'a Metrics,
    /// When the request's access checks must have ended ([`ACCESS_CHECKS`] after it arrived).
    pub until: std::time::Instant,
}

/// The configured authorizer: a chain, or apiagg's built-in rule.
#[derive(Default)]
pub struct Authorizer {
    chain: Option<Arc<ArcSwap<Chain>>>,
    builtin: Builtin,
    modes: ModeCache,
}

/// The identity an authorizer sees for `user`.
fn subject(user: &User) -> Subject<'_> {
    Subject {
        name: &user.name,
        uid: &user.uid,
        groups: &user.groups,
        extra: &user.extra,
    }
}

impl Authorizer {
    /// The authorizer the config file's `authorization:` asks for.
    pub fn new(config: &Authorization, metrics: &AuthzMetrics) -> Authorizer {
        let chain = (config.mode == AuthorizationMode::Webhook).then(|| {
            let webhook =
                Webhook::legacy(config.cache_authorized_ttl, config.cache_unauthorized_ttl);
            let chain = Chain::new(vec![Link::Webhook(Box::new(webhook))], metrics.clone());
            Arc::new(ArcSwap::from_pointee(chain))
        });
        Authorizer {
            chain,
            builtin: Builtin::new(config),
            modes: ModeCache::default(),
        }
    }

    /// The chain of an `AuthorizationConfiguration` file.
    pub fn structured(structured: &StructuredAuthz) -> Authorizer {
        Authorizer {
            chain: Some(structured.chain()),
            builtin: Builtin::default(),
            modes: ModeCache::default(),
        }
    }

    /// Whether a chain authorizes every request.
    pub fn enabled(&self) -> bool {
        self.chain.is_some()
    }

    /// Whether the chain holds an `AlwaysAllow` authorizer now: requests without credentials
    /// are then refused (kube-apiserver turns anonymous authentication off beside it,
    /// pkg/kubeapiserver/options/authentication.go `ApplyAuthorization`).
    pub fn allows_everything(&self) -> bool {
        self.chain
            .as_ref()
            .is_some_and(|c| c.load().allows_everything())
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
        /// Where `Impersonate-*` goes when apiagg does not honour it itself.
        const TO_THE_DELEGATE: &str = "the headers go to the delegate with the caller's own \
             credentials (only for callers the delegate authenticates itself: TokenReview \
             tokens), which decides; remote backends and callers only apiagg authenticates get 403";
        let Some(chain) = &self.chain else {
            let mut lines = self.builtin.describe(anonymous);
            lines.push(format!(
                "impersonation: never honoured by apiagg (no authorizer): {TO_THE_DELEGATE}"
            ));
            return lines;
        };
        let chain = chain.load();
        let mut lines = vec![format!(
            "every request (APIService API, /metrics, /debug, proxied requests): the \
             authorizer chain system:masters → {} → deny",
            chain.describe().join(" → ")
        )];
        let mut impersonation = "impersonation: a caller acts as the user it names when \
             system:masters or an authorizer that decides (Webhook, RBAC) allows it; apiagg then \
             asks the delegate with its own credentials"
            .to_string();
        if chain.allows_everything() {
            impersonation.push_str(&format!("; allowed only by AlwaysAllow, {TO_THE_DELEGATE}"));
        }
        lines.push(impersonation);
        lines
    }

    /// The chain's decision for `user` doing `a`.
    async fn decide(&self, user: &Subject<'_>, a: &Attributes, reviewer: Reviewer<'_>) -> Verdict {
        match &self.chain {
            Some(chain) => chain.load_full().decide(user, a, reviewer).await,
            None => Verdict::allowed(),
        }
    }

    /// Authorizes the `Impersonate-*` headers of `request` for `caller` (kube-apiserver's
    /// impersonation filter, which runs before flow control). `Ok(Some(user))`: allowed, the
    /// request now acts as that user (the headers are honoured and must not pass on);
    /// `Ok(None)`: nothing to impersonate here (no headers, no chain, or only `AlwaysAllow` allowed it: then the headers go to the delegate, which
    /// decides, with the caller's own credentials).
    pub async fn impersonate(
        &self,
        request: &AuthzRequest<'_>,
        caller: &Authenticated,
        reviewer: Reviewer<'_>,
    ) -> Result<Option<Authenticated>, Refusal> {
        if self.chain.is_none() {
            return Ok(None);
        }
        let wanted = match wanted(request.headers) {
            Ok(Some(wanted)) => wanted,
            Ok(None) => return Ok(None),
            Err(e @ ImpersonationError::TooMany(_)) => {
                return Err(Refusal::TooManyValues(e.to_string()))
            }
            Err(e) => return Err(internal(request, &e)),
        };
        let attributes = apiagg_authz::request::attributes(request.info);
        let checks = self.impersonated(&wanted, &caller.user, &attributes, reviewer);
        let grant = within(reviewer, request, checks).await?;
        if grant.blanket {
            // Only AlwaysAllow said yes: apiagg's own `impersonate` right is never lent on a
            // decision no policy made. The headers stay; only the delegate, asked with the
            // caller's own credentials, may honour them (request::dispatch).
            tracing::debug!(
                caller = %caller.user.name,
                "impersonation allowed only by AlwaysAllow: left to the delegate"
            );
            return Ok(None);
        }
        Ok(Some(Authenticated {
            user: Arc::new(grant.user),
            method: Method::Impersonation,
        }))
    }

    /// Authorizes `request` of `caller` (the impersonated user once impersonation was
    /// allowed): the chain's decision, or the built-in rule without one. Runs after flow
    /// control, so a flood is throttled before it costs reviews. `Ok`: the allowing
    /// authorizer's reason (none for the built-in rule and the paths open to all).
    pub async fn authorize(
        &self,
        request: &AuthzRequest<'_>,
        caller: &Authenticated,
        reviewer: Reviewer<'_>,
    ) -> Result<String, Refusal> {
        if self.chain.is_none() {
            return (self.builtin.check(request, &caller.user)).map(|()| String::new());
        }
        if always_allowed(request.info.path) {
            return Ok(String::new());
        }
        within(
            reviewer,
            request,
            self.decide_request(request, caller, reviewer),
        )
        .await
    }

    /// The chain's decisions on the request itself.
    async fn decide_request(
        &self,
        request: &AuthzRequest<'_>,
        caller: &Authenticated,
        reviewer: Reviewer<'_>,
    ) -> Result<String, Refusal> {
        let user = &caller.user;
        let mut attributes = apiagg_authz::request::attributes(request.info);
        let verdict = self.decide(&subject(user), &attributes, reviewer).await;
        let reason = refused(request, user, &attributes, verdict)?;
        // A GET of pods/exec|attach|portforward (a WebSocket upgrade) also needs `create`, as
        // kube-apiserver 1.35 asks (`AuthorizePodWebsocketUpgradeCreatePermission`).
        if is_pod_connect_get(&attributes) {
            attributes.verb = "create".into();
            let verdict = self.decide(&subject(user), &attributes, reviewer).await;
            if !verdict.decision.allowed() {
                if !verdict.errors.is_empty() {
                    return Err(internal(request, &verdict.errors.join("; ")));
                }
                return Err(connect_forbidden(&attributes, verdict.decision.reason()));
            }
        }
        Ok(reason)
    }
}

/// `checks`, ended at the request's one deadline for access checks (`reviewer.until`): past
/// it, a 500 (nobody decided), as upstream's request context ends its reviews.
async fn within<T>(
    reviewer: Reviewer<'_>,
    request: &AuthzRequest<'_>,
    checks: impl std::future::Future<Output = Result<T, Refusal>>,
) -> Result<T, Refusal> {
    let expired = || {
        let why = format!("the access checks did not end within {ACCESS_CHECKS:?}");
        internal(request, &why)
    };
    // Checks that would start after the deadline do not start.
    if std::time::Instant::now() >= reviewer.until {
        return Err(expired());
    }
    tokio::time::timeout_at(reviewer.until.into(), checks)
        .await
        .unwrap_or_else(|_| Err(expired()))
}

/// `Ok` with the reason when `verdict` allows; else the 403, or the 500 when the chain met an
/// error and nobody allowed (upstream's `WithAuthorization`).
fn refused(
    request: &AuthzRequest<'_>,
    user: &User,
    a: &Attributes,
    verdict: Verdict,
) -> Result<String, Refusal> {
    if verdict.decision.allowed() {
        return Ok(verdict.decision.into_reason());
    }
    if !verdict.errors.is_empty() {
        return Err(internal(request, &verdict.errors.join("; ")));
    }
    Err(forbidden(user, a, verdict.decision.reason()))
}

/// A GET of a pod's `exec`, `attach` or `portforward` (in any group: backends serving pods
/// are held to the same rule).
fn is_pod_connect_get(a: &Attributes) -> bool {
    a.resource_request
        && a.verb == "get"
        && a.resource == "pods"
        && matches!(a.subresource.as_str(), "exec" | "attach" | "portforward")
}

/// The user `Impersonate-*` headers ask for, when they name one that can be forwarded exactly
/// (for the audit of a request that carries them to the delegate, which decides).
pub fn requested_impersonation(headers: &HeaderMap) -> Option<User> {
    wanted(headers)
        .ok()
        .flatten()
        .and_then(|w| legacy_user(&w).ok())
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
