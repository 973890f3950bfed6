//! API Priority and Fairness objects from the cluster: one reflector per kind lists and then
//! watches `flowschemas` and `prioritylevelconfigurations` at the delegate
//! (`/apis/flowcontrol.apiserver.k8s.io/v1`) with apiagg's own credentials, as
//! [`super::services`] does for Services; an applier hands every change, debounced a little,
//! to [`FlowControl::configure`] once both kinds are listed. A failing list or watch is retried
//! with backoff and an expired resourceVersion (410) relists; a configuration that does not
//! compile keeps the last good one. Problems are logged when they change. (The file source is
//! `apiagg_flowcontrol::from_file`, called by the composition root.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use async_trait::async_trait;

use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;

use super::reflector::{Group, Learned};
use crate::backends::{Clients, Upstream};
use crate::state::Routes;
use apiagg_flowcontrol::{FlowControl, Object, API_VERSION};
use apiagg_observe::{Lifecycle, Milestone};

/// Changes closer together than this are applied together.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// The kinds followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    FlowSchemas,
    PriorityLevels,
}

impl Kind {
    const ALL: [Kind; 2] = [Kind::FlowSchemas, Kind::PriorityLevels];

    fn index(self) -> usize {
        self as usize
    }

    fn path(self, query: &str) -> String {
        let resource = match self {
            Kind::FlowSchemas => "flowschemas",
            Kind::PriorityLevels => "prioritylevelconfigurations",
        };
        format!("/apis/{API_VERSION}/{resource}?{query}")
    }

    fn kind(self) -> &'static str {
        match self {
            Kind::FlowSchemas => "FlowSchema",
            Kind::PriorityLevels => "PriorityLevelConfiguration",
        }
    }

    /// An object of this kind from its JSON (list items carry no `apiVersion`/`kind`).
    fn decode(self, mut value: Value) -> Result<Object, serde_json::Error> {
        if let Some(map) = value.as_object_mut() {
            map.insert("apiVersion".into(), API_VERSION.into());
            map.insert("kind".into(), self.kind().into());
        }
        Ok(match self {
            Kind::FlowSchemas => Object::FlowSchema(serde_json::from_value(value)?),
            Kind::PriorityLevels => Object::PriorityLevel(serde_json::from_value(value)?),
        })
    }
}

/// The objects known so far, by kind and name.
#[derive(Default)]
struct Known {
    objects: [BTreeMap<String, Object>; 2],
    listed: [bool; 2],
}

impl Known {
    /// Applies one watch event; whether anything changed.
    fn event(&mut self, kind: Kind, event_type: &str, object: Value) -> bool {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let map = &mut self.objects[kind.index()];
        match event_type {
            "DELETED" => map.remove(&name).is_some(),
            "ADDED" | "MODIFIED" => match kind.decode(object) {
                Ok(decoded) => map.insert(name, decoded.clone()).as_ref() != Some(&decoded),
                Err(e) => {
                    tracing::warn!(?kind, %name, "ignoring an undecodable object: {e}");
                    false
                }
            },
            _ => false,
        }
    }

    /// Applies a full list of one kind; whether anything changed. An undecodable item keeps
    /// the version known before (a relist after 410 must not change what one replica does).
    fn listed(&mut self, kind: Kind, page: Vec<Value>) -> bool {
        let index = kind.index();
        let mut items = BTreeMap::new();
        for item in page {
            let name = item["metadata"]["name"].as_str().unwrap_or("").to_string();
            match kind.decode(item) {
                Ok(object) => {
                    items.insert(name, object);
                }
                Err(e) => {
                    tracing::warn!(?kind, %name, "ignoring an undecodable object: {e}");
                    if let Some(before) = self.objects[index].get(&name) {
                        items.insert(name, before.clone());
                    }
                }
            }
        }
        let changed = !self.listed[index] || self.objects[index] != items;
        self.objects[index] = items;
        self.listed[index] = true;
        changed
    }

    /// Applies what a reflector learned; whether anything changed.
    fn learn(&mut self, learned: Learned<Kind>) -> bool {
        match learned {
            Learned::Listed(kind, items) => self.listed(kind, items),
            Learned::Changed(kind, change) => {
                let event_type = if change.deleted {
                    "DELETED"
                } else {
                    "MODIFIED"
                };
                self.event(kind, event_type, change.object)
            }
        }
    }

    fn all(&self) -> Vec<Object> {
        self.objects
            .iter()
            .flat_map(|m| m.values().cloned())
            .collect()
    }
}

/// What the flow-control controller uses.
pub struct Handles {
    /// The flow control it keeps.
    pub flow: Arc<FlowControl>,
    /// The routes, for the delegate (read from the config, which may change it).
    pub routes: Routes,
    /// apiagg's own clients.
    pub clients: Arc<Clients>,
    /// Follow the delegate's cluster objects (`FlowSource::Cluster`); otherwise only upkeep.
    pub from_cluster: bool,
    /// Where `FlowControlSynced` is reached: once the cluster's objects are applied.
    pub lifecycle: Arc<Lifecycle>,
}

/// Flow control's upkeep (seat borrowing every 10 s) and, when the objects come from the
/// cluster, the reflectors of the delegate's objects, restarted when the delegate changes.
pub struct FlowControlController {
    handles: Handles,
}

impl FlowControlController {
    /// A controller over `handles`; nothing runs before `start`.
    pub fn new(handles: Handles) -> FlowControlController {
        FlowControlController { handles }
    }

    /// Starts, restarts (a new delegate) or stops the reflectors.
    fn follow(&self, watch: &mut Option<(Arc<Upstream>, Group)>) {
        let delegate = self.handles.routes.load().delegate.clone();
        let current = watch.as_ref().map(|(d, _)| d);
        let same = match (current, &delegate) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if same {
            return;
        }
        *watch = delegate.map(|delegate| {
            let (flow, lifecycle) = (self.handles.flow.clone(), self.handles.lifecycle.clone());
            let reflectors = Group::spawn(
                &Kind::ALL,
                Kind::path,
                "flow-control objects",
                (delegate.clone(), self.handles.clients.clone()),
                |learned| apply(flow, lifecycle, learned),
            );
            (delegate, reflectors)
        });
        if watch.is_none() {
            // Nothing to wait for: the built-in objects stay in force.
            self.handles.lifecycle.reach(Milestone::FlowControlSynced);
            tracing::warn!("flow control from the cluster: no delegate is configured");
        }
    }
}

#[async_trait]
impl BackgroundService for FlowControlController {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let maintenance = self.handles.flow.spawn_maintenance();
        let mut watch = None;
        if self.handles.from_cluster {
            // The first routes are installed before the controllers start; a later config may
            // name another delegate, or none.
            let mut routes = self.handles.routes.subscribe();
            if self.handles.routes.load().delegate.is_none() {
                tracing::warn!("flow control from the cluster: no delegate is configured");
            }
            loop {
                self.follow(&mut watch);
                tokio::select! {
                    changed = routes.changed() => if changed.is_err() { break },
                    _ = shutdown.changed() => break,
                }
            }
        }
        let _ = shutdown.changed().await;
        maintenance.abort();
        drop(watch);
    }
}

/// Logs the outcome of applying the cluster's objects when it differs from the last one.
fn report(last: &mut Option<String>, outcome: Result<String, apiagg_flowcontrol::ConfigError>) {
    let now = match &outcome {
        Ok(summary) => format!("ok: {summary}"),
        Err(e) => format!("error: {e}"),
    };
    if last.as_deref() == Some(now.as_str()) {
        return;
    }
    match outcome {
        Ok(summary) => tracing::info!("flow control configured from the cluster: {summary}"),
        Err(e) => tracing::warn!(
            "the cluster's flow-control objects are refused, the last good configuration stays: {e}"
        ),
    }
    *last = Some(now);
}

/// Applies what the reflectors learn, changes closer than [`DEBOUNCE`] together, to `flow` once
/// both kinds are listed; the first time, readyz's flow-control check turns green (whether the
/// objects were accepted or the last good configuration stays, as the log says).
async fn apply(
    flow: Arc<FlowControl>,
    lifecycle: Arc<Lifecycle>,
    mut learned: mpsc::Receiver<Learned<Kind>>,
) {
    let mut known = Known::default();
    let mut last: Option<String> = None;
    while let Some(first) = learned.recv().await {
        let mut changed = known.learn(first);
        tokio::time::sleep(DEBOUNCE).await;
        while let Ok(more) = learned.try_recv() {
            changed |= known.learn(more);
        }
        if changed && known.listed.iter().all(|&l| l) {
            let outcome = (flow.configure_from_cluster(known.all())).map(|r| r.to_string());
            report(&mut last, outcome);
            lifecycle.reach(Milestone::FlowControlSynced);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn level(name: &str, shares: i64) -> Value {
        json!({
            "metadata": {"name": name, "uid": "u-1", "resourceVersion": "7"},
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": shares,
                "limitResponse": {"type": "Reject"}}}
        })
    }

    #[test]
    fn events_add_change_and_remove_objects() {
        let mut known = Known::default();
        let kind = Kind::PriorityLevels;
        assert!(known.event(kind, "ADDED", level("a", 1)));
        assert!(!known.event(kind, "MODIFIED", level("a", 1)), "no change");
        assert!(known.event(kind, "MODIFIED", level("a", 2)));
        assert!(!known.event(kind, "BOOKMARK", level("b", 2)));
        assert_eq!(known.all().len(), 1);
        assert!(known.event(kind, "DELETED", level("a", 2)));
        assert!(known.all().is_empty());
        assert!(!known.event(kind, "ADDED", json!({"metadata": {"name": "x"}, "spec": 5})));
    }

    #[test]
    fn list_items_decode_without_api_version_and_configure() {
        let object = Kind::PriorityLevels
            .decode(level("lane", 3))
            .expect("decode");
        assert_eq!(object.name(), "lane");
        let flow = FlowControl::new(Default::default(), &prometheus::Registry::new()).expect("fc");
        let summary = flow.configure(vec![object]).expect("configure");
        assert_eq!(summary.priority_levels, 9);
        let mut last = None;
        report(&mut last, Ok("x".into()));
        let first = last.clone();
        report(&mut last, Ok("x".into()));
        assert_eq!(last, first);
    }

    #[test]
    fn paths_name_the_v1_collections() {
        assert_eq!(
            Kind::FlowSchemas.path("limit=500"),
            "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas?limit=500"
        );
        assert!(Kind::PriorityLevels
            .path("watch=1")
            .contains("/prioritylevelconfigurations?watch=1"));
    }
}
