//! The availability of every APIService as the availability controller last saw it: its
//! `Available` condition and its endpoints, published whole as one snapshot. One writer (the
//! controller), read by the request path (503 messages, the APIService API's conditions),
//! `/debug/apiagg/status` and the discovery controller (which acts on the flips).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use super::snapshot::Snapshot;

/// `Available` condition of one APIService.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Always `Available`.
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// RFC 3339, changed only when `status` changes.
    pub last_transition_time: String,
    /// Upstream reason (`Local`, `Passed`, `ServiceNotFound`, `MissingEndpoints`,
    /// `FailedDiscoveryCheck`).
    pub reason: &'static str,
    /// Human message.
    pub message: String,
}

/// One endpoint as shown in the status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndpointStatus {
    /// Endpoint URL.
    pub url: String,
    /// Whether requests go to it.
    pub healthy: bool,
    /// Last failure, when unhealthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Status of one APIService.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiServiceStatus {
    /// The `Available` condition.
    pub condition: Condition,
    /// `Local` or `namespace/name:port`.
    pub service: String,
    /// Endpoints and their health.
    pub endpoints: Vec<EndpointStatus>,
}

/// Every APIService's status, by name: the value the availability controller publishes.
#[derive(Debug, Clone, Default)]
pub struct Statuses {
    /// The statuses, sorted by name.
    pub by_name: BTreeMap<String, ApiServiceStatus>,
    /// How many rounds flipped some APIService's availability (or removed one); discovery
    /// publishes again when it moves.
    pub flips: u64,
}

/// The availability snapshot, as its readers hold it.
pub type StatusBook = Snapshot<Arc<Statuses>>;

impl Statuses {
    /// One status.
    pub fn get(&self, name: &str) -> Option<&ApiServiceStatus> {
        self.by_name.get(name)
    }

    /// The status of every APIService as JSON (`/debug/apiagg/status`, `apiagg status`), with
    /// how its streaming lists are served (`watchList`, from `watch_list`) when it has a
    /// backend of its own.
    pub fn document(&self, watch_list: impl Fn(&str) -> Option<serde_json::Value>) -> bytes::Bytes {
        let items: Vec<serde_json::Value> = self
            .by_name
            .iter()
            .map(|(name, status)| {
                let mut item = serde_json::json!({
                    "name": name,
                    "service": status.service,
                    "conditions": [status.condition],
                    "endpoints": status.endpoints,
                });
                if let Some(support) = watch_list(name) {
                    item["watchList"] = support;
                }
                item
            })
            .collect();
        bytes::Bytes::from(serde_json::json!({ "items": items }).to_string())
    }
}
