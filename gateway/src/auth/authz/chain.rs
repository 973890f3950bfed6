//! The authorizer chain, as kube-apiserver composes it: members of `system:masters` are allowed
//! first (its privileged-group authorizer, never a webhook call), then each configured
//! authorizer in order; the first Allow or Deny wins, NoOpinion passes on, and the end is a
//! denial. Errors are collected on the way: a request nobody allowed whose chain met an error
//! is a 500, not a 403 (upstream's `WithAuthorization`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use apiagg_authz::rbac::Policy;
use apiagg_authz::{Attributes, Decision, Subject};
use arc_swap::ArcSwap;

use super::metrics::AuthzMetrics;
use super::webhook::Webhook;
use super::{Reviewer, PRIVILEGED_GROUP};

/// The cluster's RBAC objects as the RBAC authorizer reads them: one writer (the RBAC
/// controller) publishes a new [`Policy`] after every change; requests read it lock-free.
pub struct RbacSource {
    policy: ArcSwap<Policy>,
    listed: AtomicBool,
}

impl Default for RbacSource {
    fn default() -> Self {
        RbacSource {
            policy: ArcSwap::from_pointee(Policy::new()),
            listed: AtomicBool::new(false),
        }
    }
}

impl RbacSource {
    /// Publishes the objects known now (only once every kind has been listed).
    pub fn publish(&self, policy: Arc<Policy>) {
        self.policy.store(policy);
        self.listed.store(true, Ordering::Release);
    }

    /// Whether every kind has been listed once (decisions before that are errors).
    pub fn listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    fn decide(&self, subject: &Subject<'_>, a: &Attributes) -> (Decision, Option<String>) {
        if !self.listed() {
            let why = "RBAC: the cluster's roles and bindings are not listed yet".to_string();
            return (Decision::NoOpinion(String::new()), Some(why));
        }
        (self.policy.load().authorize(subject, a), None)
    }
}

/// One authorizer of the chain.
pub(super) enum Link {
    /// A webhook (boxed: its cache and client dwarf the other links).
    Webhook(Box<Webhook>),
    /// RBAC from the cluster's objects.
    Rbac(Arc<RbacSource>),
    /// Allows everything.
    AlwaysAllow,
    /// Has no opinion on anything, as upstream's (the end of the chain denies).
    AlwaysDeny,
}

impl Link {
    /// `type` and `name` of the metrics.
    fn labels(&self) -> (&'static str, &str) {
        match self {
            Link::Webhook(w) => ("Webhook", &w.name),
            Link::Rbac(_) => ("RBAC", "rbac"),
            Link::AlwaysAllow => ("AlwaysAllow", "alwaysallow"),
            Link::AlwaysDeny => ("AlwaysDeny", "alwaysdeny"),
        }
    }
}

/// The chain's answer: its decision and the errors met.
#[derive(Debug)]
pub(super) struct Verdict {
    pub(super) decision: Decision,
    pub(super) errors: Vec<String>,
    /// Allowed by `AlwaysAllow`: no policy looked at the request. apiagg never lends its own
    /// credentials (its `impersonate` right at the delegate) on such a decision.
    pub(super) blanket: bool,
}

impl Verdict {
    /// An allow of `system:masters` or of a policy (a webhook, RBAC).
    pub(super) fn allowed() -> Verdict {
        Verdict {
            decision: Decision::Allow(String::new()),
            errors: Vec::new(),
            blanket: false,
        }
    }
}

/// An ordered chain of authorizers.
pub struct Chain {
    links: Vec<Link>,
    metrics: AuthzMetrics,
}

impl Chain {
    pub(super) fn new(links: Vec<Link>, metrics: AuthzMetrics) -> Chain {
        Chain { links, metrics }
    }

    /// `(type, name)` of each authorizer, for the start-up log.
    pub fn describe(&self) -> Vec<String> {
        self.links
            .iter()
            .map(|l| {
                let (kind, name) = l.labels();
                format!("{kind} {name:?}")
            })
            .collect()
    }

    /// The decision for `subject` doing `a`.
    pub(super) async fn decide(
        &self,
        subject: &Subject<'_>,
        a: &Attributes,
        reviewer: Reviewer<'_>,
    ) -> Verdict {
        if subject.groups.iter().any(|g| g == PRIVILEGED_GROUP) {
            return Verdict::allowed();
        }
        let mut reasons: Vec<String> = Vec::new();
        let mut errors = Vec::new();
        for link in &self.links {
            let (decision, error) = match link {
                // Boxed: a review's future is kilobytes, and the chain's future (which every
                // request under RBAC builds and the request path boxes) stays small without it.
                Link::Webhook(w) => Box::pin(w.decide(subject, a, reviewer, &self.metrics)).await,
                Link::Rbac(source) => source.decide(subject, a),
                Link::AlwaysAllow => (Decision::Allow(String::new()), None),
                Link::AlwaysDeny => (Decision::NoOpinion("Everything is forbidden.".into()), None),
            };
            errors.extend(error);
            match decision {
                Decision::NoOpinion(reason) => {
                    if !reason.is_empty() {
                        reasons.push(reason);
                    }
                }
                terminal => {
                    let (kind, name) = link.labels();
                    self.metrics.decided(kind, name, terminal.allowed());
                    return Verdict {
                        blanket: matches!(link, Link::AlwaysAllow),
                        decision: terminal,
                        errors,
                    };
                }
            }
        }
        Verdict {
            decision: Decision::NoOpinion(reasons.join("\n")),
            errors,
            blanket: false,
        }
    }

    /// Whether an `AlwaysAllow` authorizer is in the chain (then requests without credentials
    /// are refused, as kube-apiserver turns anonymous authentication off beside it).
    pub fn allows_everything(&self) -> bool {
        self.links.iter().any(|l| matches!(l, Link::AlwaysAllow))
    }
}
