//! The chain a valid file describes, defaulted and compiled: what the gateway builds its
//! authorizers from.

use std::time::Duration;

use crate::matching::MatchConditions;
pub use crate::review::ReviewVersion;

/// A loaded, validated configuration.
#[derive(Debug)]
pub struct Loaded {
    /// The authorizers, in the file's order: each is asked until one allows or denies.
    pub authorizers: Vec<AuthorizerSpec>,
}

/// One `authorizers[i]`.
#[derive(Debug)]
pub enum AuthorizerSpec {
    /// `type: Webhook`: a SubjectAccessReview sent to a webhook.
    Webhook(WebhookSpec),
    /// `type: RBAC`: the cluster's Roles and bindings.
    Rbac {
        /// `name`.
        name: String,
    },
    /// `type: AlwaysAllow`: allows every request.
    AlwaysAllow {
        /// `name`.
        name: String,
    },
    /// `type: AlwaysDeny`: upstream answers no opinion ("Everything is forbidden."), so the
    /// authorizers after it are still asked and the end of the chain denies.
    AlwaysDeny {
        /// `name`.
        name: String,
    },
}

impl AuthorizerSpec {
    /// Its `name`.
    pub fn name(&self) -> &str {
        match self {
            AuthorizerSpec::Webhook(w) => &w.name,
            AuthorizerSpec::Rbac { name }
            | AuthorizerSpec::AlwaysAllow { name }
            | AuthorizerSpec::AlwaysDeny { name } => name,
        }
    }

    /// Its `type` as the file spells it.
    pub fn type_name(&self) -> &'static str {
        match self {
            AuthorizerSpec::Webhook(_) => "Webhook",
            AuthorizerSpec::Rbac { .. } => "RBAC",
            AuthorizerSpec::AlwaysAllow { .. } => "AlwaysAllow",
            AuthorizerSpec::AlwaysDeny { .. } => "AlwaysDeny",
        }
    }
}

/// `authorizers[i].webhook`, defaulted.
#[derive(Debug)]
pub struct WebhookSpec {
    /// The authorizer's `name`.
    pub name: String,
    /// The call's timeout, in (0s, 30s].
    pub timeout: Duration,
    /// How long an allow is cached (`authorizedTTL`, default 5m); `None` when
    /// `cacheAuthorizedRequests` is false.
    pub authorized_ttl: Option<Duration>,
    /// How long a denial or no-opinion is cached (`unauthorizedTTL`, default 30s); `None` when
    /// `cacheUnauthorizedRequests` is false.
    pub unauthorized_ttl: Option<Duration>,
    /// The SubjectAccessReview version sent and expected back.
    pub review_version: ReviewVersion,
    /// The decision when the call fails, its answer is malformed, or a match condition fails.
    pub failure_policy: FailurePolicy,
    /// Where the webhook is.
    pub connection: Connection,
    /// All true for the webhook to be asked (none: always asked).
    pub match_conditions: MatchConditions,
}

/// `failurePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// `NoOpinion`: the next authorizer decides.
    NoOpinion,
    /// `Deny`: the request is denied, the rest of the chain not asked.
    Deny,
}

/// `connectionInfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connection {
    /// `KubeConfigFile`: the webhook named by this kubeconfig (an absolute path; the gateway
    /// reads it, this crate does no I/O).
    KubeConfigFile(String),
    /// `InClusterConfig`: the SubjectAccessReview API of the cluster's kube-apiserver, reached
    /// with the gateway's in-cluster credentials.
    InClusterConfig,
}
