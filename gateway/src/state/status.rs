//! The availability of every APIService as the availability controller last saw it: its
//! `Available` condition and its endpoints. One writer (the controller), read by the request path
//! (503 messages) and `/debug/apiagg/status`.

use dashmap::DashMap;
use serde::Serialize;
use tokio::sync::watch;

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

/// Every APIService's status, by name.
pub struct StatusBook {
    statuses: DashMap<String, ApiServiceStatus>,
    /// Bumped whenever some APIService's availability changes.
    generation: watch::Sender<u64>,
}

impl Default for StatusBook {
    fn default() -> Self {
        StatusBook {
            statuses: DashMap::new(),
            generation: watch::Sender::new(0),
        }
    }
}

impl StatusBook {
    /// Stores one status.
    pub fn insert(&self, name: String, status: ApiServiceStatus) {
        self.statuses.insert(name, status);
    }

    /// Removes the statuses of APIServices `live` does not name; returns what was removed.
    pub fn retain(&self, live: impl Fn(&str) -> bool) -> Vec<(String, ApiServiceStatus)> {
        let gone: Vec<String> = self
            .statuses
            .iter()
            .filter(|e| !live(e.key()))
            .map(|e| e.key().clone())
            .collect();
        gone.into_iter()
            .filter_map(|name| self.statuses.remove(&name))
            .collect()
    }

    /// Tells subscribers that some availability changed.
    pub fn announce(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// A receiver that sees every [`StatusBook::announce`].
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// A copy of one status.
    pub fn get(&self, name: &str) -> Option<ApiServiceStatus> {
        self.statuses.get(name).map(|s| s.clone())
    }

    /// Every status, sorted by name.
    pub fn all(&self) -> Vec<(String, ApiServiceStatus)> {
        let mut all: Vec<(String, ApiServiceStatus)> = self
            .statuses
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

impl StatusBook {
    /// The status of every APIService as JSON (`/debug/apiagg/status`, `apiagg status`), with
    /// how its streaming lists are served (`watchList`, from `watch_list`) when it has a
    /// backend of its own.
    pub fn document(&self, watch_list: impl Fn(&str) -> Option<serde_json::Value>) -> bytes::Bytes {
        let items: Vec<serde_json::Value> = self
            .all()
            .into_iter()
            .map(|(name, status)| {
                let mut item = serde_json::json!({
                    "name": name,
                    "service": status.service,
                    "conditions": [status.condition],
                    "endpoints": status.endpoints,
                });
                if let Some(support) = watch_list(&name) {
                    item["watchList"] = support;
                }
                item
            })
            .collect();
        bytes::Bytes::from(serde_json::json!({ "items": items }).to_string())
    }
}
