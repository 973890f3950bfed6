//! The availability controller's pure step: every APIService's `Available` condition from what
//! the route table and the probes know (as plain data), and what changed since the last step.
//! The condition helper rule of kube-aggregator's `pkg/apis/apiregistration/v1/helper/helpers.go`
//! holds: `lastTransitionTime` moves only when `status` does.

use std::collections::{BTreeMap, HashSet};

use apiagg_config::{ApiServiceEntry, Backend};

use crate::state::{ApiServiceStatus, Condition, EndpointStatus};

/// One APIService as the checks see it.
pub struct Observed<'a> {
    /// The APIService.
    pub entry: &'a ApiServiceEntry,
    /// Its upstream's endpoints and their health, in configured order; `None` without an
    /// upstream.
    pub endpoints: Option<Vec<EndpointStatus>>,
    /// Why it has no upstream although its Service resolved (`RouteTable::broken`).
    pub broken: Option<&'a str>,
    /// Some endpoint is healthy because a probe passed, not only by default: a new endpoint
    /// takes requests before its first probe, but is not called available before it passes
    /// one (kube-aggregator sets no condition before its first check).
    pub probed: bool,
}

/// What the checks decided for one APIService, before time stamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// The condition's reason.
    pub reason: &'static str,
    /// The condition's message.
    pub message: String,
}

/// The verdict of one APIService: local ones are always available; a remote one fails with
/// why its Service did not resolve, why its upstream could not be built, a missing endpoint,
/// or the last error of its endpoints when none is healthy.
pub fn verdict(observed: &Observed<'_>) -> Verdict {
    let Backend::Remote(remote) = &observed.entry.backend else {
        return Verdict {
            status: "True",
            reason: "Local",
            message: "Local APIServices are always available".into(),
        };
    };
    let (name, ns) = (&remote.service, &remote.namespace);
    match (&remote.endpoints, &observed.endpoints) {
        (Err(unresolved), _) => Verdict {
            status: unresolved.status,
            reason: unresolved.reason,
            message: unresolved.message.clone(),
        },
        (Ok(_), None) => match observed.broken {
            Some(why) => Verdict {
                status: "False",
                reason: "FailedDiscoveryCheck",
                message: why.to_string(),
            },
            None => Verdict {
                status: "False",
                reason: "MissingEndpoints",
                message: format!(
                    "endpoints for service/{name} in \"{ns}\" have no addresses with port name \"\""
                ),
            },
        },
        (Ok(_), Some(endpoints)) if endpoints.iter().any(|e| e.healthy) => Verdict {
            status: "True",
            reason: "Passed",
            message: "all checks passed".into(),
        },
        (Ok(_), Some(endpoints)) => Verdict {
            status: "False",
            reason: "FailedDiscoveryCheck",
            message: endpoints
                .iter()
                .rev()
                .find_map(|e| e.error.clone())
                .unwrap_or_else(|| "all endpoints failed".to_string()),
        },
    }
}

/// A status to store for one APIService.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The APIService.
    pub name: String,
    /// Its new status.
    pub status: ApiServiceStatus,
    /// The condition's status is new or differs from the previous one (announced).
    pub flipped: bool,
    /// The condition's status, reason or message is new or differs from the previous one
    /// (logged once, as kube-aggregator logs `changing APIService availability`).
    pub told: bool,
    /// It was `True` and is not any more (counted in `aggregator_unavailable_apiservice_total`;
    /// a new APIService that is not available yet is not).
    pub lost: bool,
    /// Endpoint URLs of the previous status that this one lacks (their series go).
    pub gone_endpoints: Vec<String>,
}

/// What one step changes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Evaluation {
    /// New or changed statuses, in registry order; an unchanged one is not written again.
    pub updates: Vec<Update>,
    /// Statuses of APIServices no longer registered, by name.
    pub removed: Vec<(String, ApiServiceStatus)>,
}

impl Evaluation {
    /// Whether some APIService's availability changed (discovery is told).
    pub fn changed(&self) -> bool {
        !self.removed.is_empty() || self.updates.iter().any(|u| u.flipped)
    }
}

/// The `Available` conditions of `observed` against the `previous` statuses; `now` (RFC 3339)
/// stamps the conditions whose status flips.
pub fn evaluate(
    observed: &[Observed<'_>],
    previous: &BTreeMap<String, ApiServiceStatus>,
    now: &str,
) -> Evaluation {
    let mut evaluation = Evaluation::default();
    for o in observed {
        let entry = o.entry;
        let v = verdict(o);
        if v.reason == "Passed" && !o.probed {
            // Not judged yet: the previous status (or none) stays until a probe passes.
            continue;
        }
        let (service, endpoints) = match &entry.backend {
            Backend::Delegate => ("Local".to_string(), Vec::new()),
            Backend::Remote(r) => (
                format!("{}/{}:{}", r.namespace, r.service, r.port),
                o.endpoints.clone().unwrap_or_default(),
            ),
        };
        let before = previous.get(&entry.name);
        if let Some(p) = before {
            let c = &p.condition;
            let same = c.status == v.status
                && c.reason == v.reason
                && c.message == v.message
                && p.service == service
                && p.endpoints == endpoints;
            if same {
                continue;
            }
        }
        let last_transition_time = match before {
            Some(p) if p.condition.status == v.status => p.condition.last_transition_time.clone(),
            _ => now.to_string(),
        };
        let flipped = before.map(|p| p.condition.status) != Some(v.status);
        let told = before.is_none_or(|p| {
            let c = &p.condition;
            (c.status, c.reason, c.message.as_str()) != (v.status, v.reason, v.message.as_str())
        });
        let lost = flipped && before.is_some_and(|p| p.condition.status == "True");
        let gone_endpoints = before
            .map(|b| {
                b.endpoints
                    .iter()
                    .filter(|b| !endpoints.iter().any(|a| a.url == b.url))
                    .map(|b| b.url.clone())
                    .collect()
            })
            .unwrap_or_default();
        evaluation.updates.push(Update {
            name: entry.name.clone(),
            status: ApiServiceStatus {
                condition: Condition {
                    type_: "Available",
                    status: v.status,
                    last_transition_time,
                    reason: v.reason,
                    message: v.message,
                },
                service,
                endpoints,
            },
            flipped,
            told,
            lost,
            gone_endpoints,
        });
    }
    // Deleted APIServices leave no status and no series behind.
    let live: HashSet<&str> = observed.iter().map(|o| o.entry.name.as_str()).collect();
    evaluation.removed = previous
        .iter()
        .filter(|(name, _)| !live.contains(name.as_str()))
        .map(|(name, status)| (name.clone(), status.clone()))
        .collect();
    evaluation.removed.sort_by(|a, b| a.0.cmp(&b.0));
    evaluation
}
