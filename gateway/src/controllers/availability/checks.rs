//! The checks behind an APIService's condition: one probe of an endpoint, and the verdict from
//! its backend's resolution and endpoint health.

use std::time::Duration;

use apiagg_config::{ApiServiceEntry, Backend};

use crate::backends::{Client, FetchError, Upstream};

/// What the checks decided for one APIService, before time stamps.
pub(super) struct Verdict {
    pub(super) status: &'static str,
    pub(super) reason: &'static str,
    pub(super) message: String,
}

pub(super) fn verdict(
    entry: &ApiServiceEntry,
    upstream: Option<&Upstream>,
    broken: Option<&String>,
) -> Verdict {
    let Backend::Remote(remote) = &entry.backend else {
        return Verdict {
            status: "True",
            reason: "Local",
            message: "Local APIServices are always available".into(),
        };
    };
    let (name, ns) = (&remote.service, &remote.namespace);
    match (&remote.endpoints, upstream) {
        (Err(unresolved), _) => Verdict {
            status: unresolved.status,
            reason: unresolved.reason,
            message: unresolved.message.clone(),
        },
        (Ok(_), None) if broken.is_some() => Verdict {
            status: "False",
            reason: "FailedDiscoveryCheck",
            message: broken.cloned().unwrap_or_default(),
        },
        (Ok(_), None) => Verdict {
            status: "False",
            reason: "MissingEndpoints",
            message: format!(
                "endpoints for service/{name} in \"{ns}\" have no addresses with port name \"\""
            ),
        },
        (Ok(_), Some(up)) if up.available() => Verdict {
            status: "True",
            reason: "Passed",
            message: "all checks passed".into(),
        },
        (Ok(_), Some(up)) => Verdict {
            status: "False",
            reason: "FailedDiscoveryCheck",
            message: up
                .endpoints
                .iter()
                .rev()
                .find_map(|e| e.health.last_error())
                .map_or_else(|| "all endpoints failed".to_string(), |e| (*e).clone()),
        },
    }
}

/// A failed probe: the message of the failed condition, and whether it is definitive (nobody
/// accepts connections there) rather than slow or erring (which must repeat to count).
pub(super) struct ProbeFailure {
    pub(super) message: String,
    pub(super) definitive: bool,
    /// apiagg itself was out of resources: the probe tells nothing about the endpoint.
    pub(super) ours: bool,
}

impl ProbeFailure {
    fn ours() -> ProbeFailure {
        ProbeFailure {
            message: String::new(),
            definitive: false,
            ours: true,
        }
    }
}

/// One probe: `None` on a 2xx answer within `timeout`.
pub(super) async fn probe(
    client: &Client,
    url: &str,
    path: &str,
    timeout: Duration,
) -> Option<ProbeFailure> {
    let failing = "failing or missing response from";
    let (message, definitive) = match tokio::time::timeout(timeout, client.probe(path)).await {
        Ok(Ok(code)) if (200..300).contains(&code) => return None,
        Ok(Ok(code)) => (
            format!("{failing} {url}{path}: bad status from {url}{path}: {code}"),
            false,
        ),
        // apiagg's own exhaustion says nothing about the endpoint: no verdict.
        Ok(Err(FetchError::Exhausted { .. })) => return Some(ProbeFailure::ours()),
        Ok(Err(FetchError::Connect { message, .. })) => {
            (format!("{failing} {url}{path}: {message}"), true)
        }
        Ok(Err(FetchError::Request { message, .. })) => {
            (format!("{failing} {url}{path}: {message}"), false)
        }
        Ok(Err(e)) => (format!("{failing} {url}{path}: {e}"), false),
        Err(_) => (format!("timed out waiting for {url}{path}"), false),
    };
    Some(ProbeFailure {
        message,
        definitive,
        ours: false,
    })
}
