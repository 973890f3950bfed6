//! One probe of an endpoint: what the endpoint health behind an APIService's condition comes
//! from.

use std::time::Duration;

use crate::backends::{Client, FetchError};

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

/// One probe: `None` on a 2xx answer within `timeout`. A failure is worded as
/// kube-aggregator's remote availability controller words it (`failing or missing response
/// from <url>: Get "<url>": <cause>`, the cause as Go's HTTP client says it where apiagg's can).
pub(super) async fn probe(
    client: &Client,
    url: &str,
    path: &str,
    timeout: Duration,
) -> Option<ProbeFailure> {
    let failing = format!("failing or missing response from {url}{path}");
    let (message, definitive) = match tokio::time::timeout(timeout, client.probe(path)).await {
        Ok(Ok(code)) if (200..300).contains(&code) => return None,
        Ok(Ok(code)) => (
            format!("{failing}: bad status from {url}{path}: {code}"),
            false,
        ),
        // apiagg's own exhaustion says nothing about the endpoint: no verdict.
        Ok(Err(FetchError::Exhausted { .. })) => return Some(ProbeFailure::ours()),
        Ok(Err(FetchError::Connect { message, .. })) => {
            (format!("{failing}: Get \"{url}{path}\": {message}"), true)
        }
        Ok(Err(FetchError::Request { message, .. })) => {
            (format!("{failing}: Get \"{url}{path}\": {message}"), false)
        }
        Ok(Err(e)) => (format!("{failing}: {e}"), false),
        Err(_) => (format!("timed out waiting for {url}{path}"), false),
    };
    Some(ProbeFailure {
        message,
        definitive,
        ours: false,
    })
}
