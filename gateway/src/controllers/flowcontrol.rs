//! API Priority and Fairness objects from the cluster: one reflector per kind lists and then
//! watches `flowschemas` and `prioritylevelconfigurations` at the delegate
//! (`/apis/flowcontrol.apiserver.k8s.io/v1`) with apiagg's own credentials, as
//! [`super::services`] does for Services; an applier hands every change, debounced a little,
//! to [`FlowControl::configure`] once both kinds are listed. A failing list or watch is retried
//! with backoff and an expired resourceVersion (410) relists; a configuration that does not
//! compile keeps the last good one. Problems are logged when they change. (The file source is
//! `flowcontrol::from_file`, called by the composition root.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::backoff::Backoff;
use super::reflector::{self, Ended, Watch};
use crate::backends::{Clients, FetchError, Upstream};
use apiagg_flowcontrol::{FlowControl, Object, API_VERSION};

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

    fn all(&self) -> Vec<Object> {
        self.objects
            .iter()
            .flat_map(|m| m.values().cloned())
            .collect()
    }
}

/// The reflectors and the applier of one delegate; dropped, they stop.
pub struct FlowControlWatch {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FlowControlWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl FlowControlWatch {
    /// Starts following the delegate's flow-control objects on the current runtime, applying
    /// them to `flow`.
    pub fn spawn(
        flow: Arc<FlowControl>,
        delegate: Arc<Upstream>,
        clients: Arc<Clients>,
    ) -> FlowControlWatch {
        let known = Arc::new(Mutex::new(Known::default()));
        let (changed, mut changes) = watch::channel(0u64);
        let changed = Arc::new(changed);
        let mut tasks: Vec<JoinHandle<()>> = Kind::ALL
            .iter()
            .map(|&kind| {
                let reflector = Reflector {
                    kind,
                    delegate: delegate.clone(),
                    clients: clients.clone(),
                    known: known.clone(),
                    changed: changed.clone(),
                };
                tokio::spawn(reflector.run())
            })
            .collect();
        tasks.push(tokio::spawn(async move {
            let mut last: Option<String> = None;
            while changes.changed().await.is_ok() {
                tokio::time::sleep(DEBOUNCE).await;
                changes.borrow_and_update();
                let objects = {
                    let known = lock(&known);
                    if !known.listed.iter().all(|&l| l) {
                        continue;
                    }
                    known.all()
                };
                let outcome = flow.configure(objects).map(|r| r.to_string());
                report(&mut last, outcome);
            }
        }));
        FlowControlWatch { tasks }
    }
}

fn lock(known: &Mutex<Known>) -> MutexGuard<'_, Known> {
    known.lock().unwrap_or_else(|e| e.into_inner())
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

struct Reflector {
    kind: Kind,
    delegate: Arc<Upstream>,
    clients: Arc<Clients>,
    known: Arc<Mutex<Known>>,
    changed: Arc<watch::Sender<u64>>,
}

impl Reflector {
    async fn run(self) {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
        let mut version: Option<String> = None;
        let mut problem: Option<String> = None;
        loop {
            let step = match version.clone() {
                None => self.list().await.map(|v| {
                    version = Some(v);
                    None
                }),
                Some(from) => self.watch(&from, &mut version).await.map(Some),
            };
            match step {
                Ok(Some(Ended::Expired)) => version = None,
                Ok(_) => {
                    backoff.succeeded();
                    if problem.take().is_some() {
                        tracing::info!(kind = ?self.kind, "reading the cluster's flow-control objects again");
                    }
                }
                Err(e) => {
                    let message = e.to_string();
                    if problem.as_deref() != Some(message.as_str()) {
                        tracing::warn!(kind = ?self.kind, "cannot read the cluster's flow-control objects, the last known ones stay: {message}");
                        problem = Some(message);
                    }
                    tokio::time::sleep(backoff.failed()).await;
                }
            }
        }
    }

    fn notify(&self) {
        self.changed.send_modify(|g| *g += 1);
    }

    /// Lists every object, page by page; returns the list's resourceVersion.
    async fn list(&self) -> Result<String, FetchError> {
        let client = self.clients.pick(&self.delegate)?;
        let mut items = BTreeMap::new();
        let version = reflector::list(
            &client,
            |query| self.kind.path(query),
            |page| {
                for item in page {
                    let name = item["metadata"]["name"].as_str().unwrap_or("").to_string();
                    match self.kind.decode(item.clone()) {
                        Ok(object) => {
                            items.insert(name, object);
                        }
                        Err(e) => {
                            // As for a watch event: the version known before keeps serving (a
                            // relist after 410 must not change what one replica does).
                            tracing::warn!(kind = ?self.kind, %name, "ignoring an undecodable object: {e}");
                            let known = lock(&self.known);
                            if let Some(known) = known.objects[self.kind.index()].get(&name) {
                                items.insert(name, known.clone());
                            }
                        }
                    }
                }
            },
        )
        .await?;
        let changed = {
            let mut known = lock(&self.known);
            let index = self.kind.index();
            let changed = !known.listed[index] || known.objects[index] != items;
            known.objects[index] = items;
            known.listed[index] = true;
            changed
        };
        if changed {
            self.notify();
        }
        Ok(version)
    }

    /// Watches from `from`, applying each change and keeping `version` current.
    async fn watch(&self, from: &str, version: &mut Option<String>) -> Result<Ended, FetchError> {
        let client = self.clients.pick(&self.delegate)?;
        let mut watch = match Watch::open(&client, |query| self.kind.path(query), from).await? {
            Ok(watch) => watch,
            Err(ended) => return Ok(ended),
        };
        loop {
            let change = match watch.next(version).await? {
                Ok(change) => change,
                Err(ended) => return Ok(ended),
            };
            let event_type = if change.deleted {
                "DELETED"
            } else {
                "MODIFIED"
            };
            let changed = lock(&self.known).event(self.kind, event_type, change.object);
            if changed {
                self.notify();
            }
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
