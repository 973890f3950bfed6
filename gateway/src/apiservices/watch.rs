//! A watch of `apiservices`: the initial events (when asked), the store's backlog, then live
//! changes, each one JSON line; a bookmark closes the initial events when the client asked with
//! `sendInitialEvents=true`.

use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use super::query::Query;
use apiagg_store::{Event, Watch};

/// The events of one watch, encoded as they are sent.
pub struct WatchStream {
    first: std::vec::IntoIter<Vec<u8>>,
    watch: Watch,
    query: Query,
}

fn line(kind: &str, object: &Value) -> Vec<u8> {
    let mut bytes = json!({"type": kind, "object": object})
        .to_string()
        .into_bytes();
    bytes.push(b'\n');
    bytes
}

impl WatchStream {
    /// A stream sending `initial` first.
    pub fn new(initial: Vec<(String, Arc<Value>)>, mut watch: Watch, query: Query) -> WatchStream {
        let mut first: Vec<Vec<u8>> = initial.iter().map(|(k, o)| line(k, o)).collect();
        if query.send_initial_events == Some(true) && query.bookmarks {
            let latest = initial
                .iter()
                .map(|(_, o)| apiagg_store::revision_of(o))
                .max();
            let rv = watch
                .backlog
                .last()
                .map(|e| e.revision)
                .or(latest)
                .unwrap_or(0);
            first.push(line(
                "BOOKMARK",
                &json!({"kind": "APIService", "apiVersion": "apiregistration.k8s.io/v1",
                    "metadata": {"resourceVersion": rv.to_string(),
                        "annotations": {"k8s.io/initial-events-end": "true"}}}),
            ));
        }
        let backlog: Vec<Vec<u8>> = std::mem::take(&mut watch.backlog)
            .iter()
            .filter(|e| query.selects(&e.object))
            .map(|e| line(e.kind.as_str(), &e.object))
            .collect();
        first.extend(backlog);
        WatchStream {
            first: first.into_iter(),
            watch,
            query,
        }
    }

    /// How long the watch may last (`timeoutSeconds`, else 30 to 60 minutes as kube-apiserver).
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.query.timeout_seconds.unwrap_or(1800).clamp(1, 3600))
    }

    /// The next line to send; `None` when the watch must end (the client re-lists).
    pub async fn next(&mut self) -> Option<Vec<u8>> {
        if let Some(line) = self.first.next() {
            return Some(line);
        }
        loop {
            match self.watch.live.recv().await {
                Ok(Event { kind, object, .. }) if self.query.selects(&object) => {
                    return Some(line(kind.as_str(), &object));
                }
                Ok(_) => continue,
                // A watcher that fell behind the window ends; its client lists again.
                Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return None,
            }
        }
    }
}
