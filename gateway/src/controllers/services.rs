//! Services and EndpointSlices from the cluster (config `serviceResolution: cluster | endpoints`):
//! one reflector per kind lists and then watches them at the delegate with apiagg's own
//! credentials and sends what it learns to one applier task, the only writer of the shared
//! [`ClusterServices`]; the applier bumps a generation the registry controller waits on. A failing list or watch is retried with backoff
//! while the last known state keeps resolving; an expired resourceVersion (410) relists.

use std::sync::{Arc, Mutex, MutexGuard};

use apiagg_config::{ClusterServices, ServiceResolution, SERVICE_NAME_LABEL};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use async_trait::async_trait;
use serde_json::Value;

use super::reflector::{self, Follow};
use crate::backends::{Clients, Upstream};

/// The Services and EndpointSlices known so far: written by one applier task, read by the
/// registry controller (off the request path).
#[derive(Default)]
pub struct SharedCluster {
    state: Mutex<ClusterServices>,
    generation: watch::Sender<u64>,
}

impl SharedCluster {
    /// The current state, for building a registry.
    pub fn lock(&self) -> MutexGuard<'_, ClusterServices> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes up on every change resolution could see.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    fn update(&self, change: Change) {
        let changed = change(&mut self.lock());
        if changed {
            self.generation.send_modify(|g| *g += 1);
        }
    }
}

/// A change a reflector learned, applied by the applier; says whether resolution could see it.
type Change = Box<dyn FnOnce(&mut ClusterServices) -> bool + Send>;

/// Changes waiting for the applier at most (a reflector waits beyond it).
const CHANGES: usize = 256;

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
        shared: Arc<SharedCluster>,
    ) -> Option<ClusterWatch> {
        let kinds: &[Kind] = match mode {
            ServiceResolution::Config => return None,
            ServiceResolution::Cluster => &[Kind::Services],
            ServiceResolution::Endpoints => &[Kind::Services, Kind::EndpointSlices],
        };
        let listed = Arc::new(Mutex::new(Vec::new()));
        let (changes, mut applied) = tokio::sync::mpsc::channel::<Change>(CHANGES);
        let mut tasks: Vec<JoinHandle<()>> = kinds
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
        tasks.push(tokio::spawn(async move {
            while let Some(change) = applied.recv().await {
                shared.update(change);
            }
        }));
        Some(ClusterWatch {
            tasks,
            delegate,
            mode,
        })
    }
}

/// One kind's reflector: hands what it learns to the applier.
struct Reflector {
    kind: Kind,
    /// How many kinds must be listed before resolution answers.
    kinds: usize,
    /// To the applier.
    changes: tokio::sync::mpsc::Sender<Change>,
    /// The kinds listed at least once.
    listed: Arc<Mutex<Vec<Kind>>>,
}

impl Reflector {
    /// Hands `change` to the applier (waiting while it is behind).
    async fn apply(&self, change: impl FnOnce(&mut ClusterServices) -> bool + Send + 'static) {
        // The applier ends only with the reflectors' ClusterWatch: nothing is lost.
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
