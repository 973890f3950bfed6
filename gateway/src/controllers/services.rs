//! Services and EndpointSlices from the cluster (config `serviceResolution: cluster | endpoints`):
//! one reflector per kind lists and then watches them at the delegate with apiagg's own
//! credentials and sends what it learns to the registry controller, whose loop owns the
//! [`ClusterServices`] and applies it. A failing list or watch is retried with backoff while the
//! last known state keeps resolving; an expired resourceVersion (410) relists.

use std::sync::{Arc, Mutex};

use apiagg_config::{ClusterServices, ServiceResolution, SERVICE_NAME_LABEL};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use async_trait::async_trait;
use serde_json::Value;

use super::reflector::{self, Follow};
use crate::backends::{Clients, Upstream};

/// A change a reflector learned, applied by the registry controller's loop (the only owner of
/// the [`ClusterServices`]); says whether resolution could see it.
pub type ClusterChange = Box<dyn FnOnce(&mut ClusterServices) -> bool + Send>;

/// Changes waiting for the registry controller at most (a reflector waits beyond it).
pub const CLUSTER_CHANGES: usize = 256;

/// The kinds a reflector follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Services,
    EndpointSlices,
}

impl Kind {
    /// The collection path and its selector.
    fn query(self) -> (&'static str, Option<&'static str>) {
        match self {
            Kind::Services => ("/api/v1/services", None),
            Kind::EndpointSlices => (
                "/apis/discovery.k8s.io/v1/endpointslices",
                Some(SERVICE_NAME_LABEL),
            ),
        }
    }

    fn path(self, extra: &str) -> String {
        let (path, selector) = self.query();
        match selector {
            Some(label) => format!("{path}?labelSelector={}&{extra}", label.replace('/', "%2F")),
            None => format!("{path}?{extra}"),
        }
    }
}

/// The reflectors of one delegate; dropped, they stop.
pub struct ClusterWatch {
    tasks: Vec<JoinHandle<()>>,
    /// The delegate they read from.
    pub delegate: Arc<Upstream>,
    /// The mode they serve.
    pub mode: ServiceResolution,
}

impl Drop for ClusterWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl ClusterWatch {
    /// Starts the reflectors `mode` needs (none for `config`) on the current runtime.
    pub fn spawn(
        mode: ServiceResolution,
        delegate: Arc<Upstream>,
        clients: Arc<Clients>,
        changes: mpsc::Sender<ClusterChange>,
    ) -> Option<ClusterWatch> {
        let kinds: &[Kind] = match mode {
            ServiceResolution::Config => return None,
            ServiceResolution::Cluster => &[Kind::Services],
            ServiceResolution::Endpoints => &[Kind::Services, Kind::EndpointSlices],
        };
        let listed = Arc::new(Mutex::new(Vec::new()));
        let tasks: Vec<JoinHandle<()>> = kinds
            .iter()
            .map(|&kind| {
                let reflector = Reflector {
                    kind,
                    kinds: kinds.len(),
                    changes: changes.clone(),
                    listed: listed.clone(),
                };
                tokio::spawn(reflector::run(reflector, delegate.clone(), clients.clone()))
            })
            .collect();
        Some(ClusterWatch {
            tasks,
            delegate,
            mode,
        })
    }
}

/// One kind's reflector: hands what it learns to the registry controller.
struct Reflector {
    kind: Kind,
    /// How many kinds must be listed before resolution answers.
    kinds: usize,
    /// To the registry controller.
    changes: mpsc::Sender<ClusterChange>,
    /// The kinds listed at least once.
    listed: Arc<Mutex<Vec<Kind>>>,
}

impl Reflector {
    /// Hands `change` to the registry controller (waiting while it is behind).
    async fn apply(&self, change: impl FnOnce(&mut ClusterServices) -> bool + Send + 'static) {
        // The receiver lives as long as the controller that owns these reflectors.
        let _ = self.changes.send(Box::new(change)).await;
    }
}

#[async_trait]
impl Follow for Reflector {
    fn path(&self, query: &str) -> String {
        self.kind.path(query)
    }

    async fn listed(&self, items: Vec<Value>) {
        let kind = self.kind;
        let all_listed = {
            let mut listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
            if !listed.contains(&kind) {
                listed.push(kind);
            }
            listed.len() == self.kinds
        };
        self.apply(move |cluster| {
            let changed = match kind {
                Kind::Services => cluster.replace_services(&items),
                Kind::EndpointSlices => cluster.replace_slices(&items),
            };
            let first = all_listed && !cluster.listed();
            if first {
                cluster.mark_listed();
                tracing::info!(count = items.len(), "listed the cluster's {kind:?}");
            }
            changed || first
        })
        .await;
    }

    async fn changed(&self, change: reflector::Change) {
        let (kind, object, deleted) = (self.kind, change.object, change.deleted);
        self.apply(move |cluster| match kind {
            Kind::Services => cluster.service_event(&object, deleted),
            Kind::EndpointSlices => cluster.slice_event(&object, deleted),
        })
        .await;
    }

    /// Logs a problem and records it for the conditions.
    async fn problem(&self, problem: Option<String>) {
        let kind = self.kind;
        self.apply(move |cluster| {
            let changed = cluster.set_problem(problem.clone());
            if changed {
                match &problem {
                    Some(p) => tracing::warn!(?kind, "cannot read the cluster's {kind:?}, the last known ones keep resolving: {p}"),
                    None => tracing::info!(?kind, "reading the cluster's {kind:?} again"),
                }
            }
            changed && !cluster.listed()
        })
        .await;
    }
}
