//! In-memory object store with a resource-version counter and a change feed.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::{Response, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use crate::response::{json as json_response, not_found, Body};

/// A change, as sent to watchers.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: &'static str,
    pub namespace: String,
    pub object: Value,
    pub resource_version: u64,
}

/// A watch from a resourceVersion older than the history keeps: `410 Expired`, as etcd's
/// compaction makes it upstream.
#[derive(Debug)]
pub struct Expired {
    pub asked: u64,
    pub oldest: u64,
}

/// Events kept for watches from a resourceVersion (`--watch-history`).
pub const DEFAULT_HISTORY: usize = 1024;

/// Why a write failed.
#[derive(Debug)]
pub enum StoreError {
    AlreadyExists(String),
    NotFound(String),
    Invalid(String),
}

#[derive(Default)]
struct Inner {
    /// `(namespace, name)` → object; the namespace is empty for cluster-scoped objects.
    objects: BTreeMap<(String, String), Value>,
    resource_version: u64,
    /// The latest changes, oldest first, for watches from a resourceVersion.
    history: VecDeque<Event>,
    /// The resourceVersion of the newest change dropped from `history` (a watch must start at
    /// or after it).
    compacted: u64,
}

pub struct Store {
    api_version: String,
    kind: String,
    inner: Mutex<Inner>,
    events: broadcast::Sender<Event>,
    history_limit: usize,
    /// Lists wait while this is `true` (`/debug/hold-lists`, `/debug/release-lists`).
    lists_held: tokio::sync::watch::Sender<bool>,
    /// Watches wait before their head while this is `true` (`/debug/hold-watches`,
    /// `/debug/release-watches`): a backend that withholds a watch's head.
    watches_held: tokio::sync::watch::Sender<bool>,
    /// The content type and bytes of the last create or update body (`/debug/last-body`).
    last_body: Mutex<Option<(Option<String>, Bytes)>>,
    /// Lists answer a gzip bomb (`/debug/gzip-bomb-lists`).
    gzip_bombs: std::sync::atomic::AtomicBool,
}

impl Store {
    pub fn new(api_version: String, kind: String) -> Self {
        Store::with_history(api_version, kind, DEFAULT_HISTORY)
    }

    /// A store that keeps the last `history_limit` changes for watches from a resourceVersion.
    pub fn with_history(api_version: String, kind: String, history_limit: usize) -> Self {
        let (events, _) = broadcast::channel(1024);
        Store {
            api_version,
            kind,
            inner: Mutex::default(),
            events,
            history_limit,
            lists_held: tokio::sync::watch::Sender::new(false),
            watches_held: tokio::sync::watch::Sender::new(false),
            last_body: Mutex::default(),
            gzip_bombs: Default::default(),
        }
    }

    /// Makes every list answer a gzip bomb from now on.
    pub fn gzip_bomb_lists(&self) {
        self.gzip_bombs
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether lists answer a gzip bomb.
    pub fn gzip_bombs(&self) -> bool {
        self.gzip_bombs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Holds (`true`) or releases the lists that are waiting and those to come.
    pub fn hold_lists(&self, held: bool) {
        self.lists_held.send_replace(held);
    }

    /// Waits until lists are not held.
    pub async fn lists_released(&self) {
        let mut held = self.lists_held.subscribe();
        let _ = held.wait_for(|h| !*h).await;
    }

    /// Holds (`true`) or releases the heads of watches waiting and to come.
    pub fn hold_watches(&self, held: bool) {
        self.watches_held.send_replace(held);
    }

    /// Waits until watches are not held.
    pub async fn watches_released(&self) {
        let mut held = self.watches_held.subscribe();
        let _ = held.wait_for(|h| !*h).await;
    }

    /// Keeps a request body for [`Store::last_body`].
    pub fn record_body(&self, content_type: Option<String>, body: Bytes) {
        *self.last_body.lock().unwrap_or_else(|e| e.into_inner()) = Some((content_type, body));
    }

    /// `GET /debug/last-body`: `{contentType, length, sha256}` of the last body a create or
    /// update sent, exactly as it arrived (404 before the first).
    pub fn last_body(&self) -> Response<Body> {
        let last = self.last_body.lock().unwrap_or_else(|e| e.into_inner());
        let Some((content_type, body)) = last.as_ref() else {
            return not_found();
        };
        let sha256: String = Sha256::digest(body)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        json_response(
            StatusCode::OK,
            &json!({"contentType": content_type, "length": body.len(), "sha256": sha256}),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Objects in `namespace` (all when `None`) and the current resource version.
    pub fn list(&self, namespace: Option<&str>) -> (u64, Vec<Value>) {
        let inner = self.lock();
        let items = select(&inner, namespace, 0);
        (inner.resource_version, items)
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Stores a new object, filling in type and server-set metadata.
    pub fn create(&self, namespace: &str, mut object: Value) -> Result<Value, StoreError> {
        let mut inner = self.lock();
        let Some(body) = object.as_object_mut() else {
            return Err(StoreError::Invalid("the body must be a JSON object".into()));
        };
        // apiVersion and kind first, as kube-apiserver writes them.
        let mut fields = serde_json::Map::new();
        fields.insert("apiVersion".into(), json!(self.api_version));
        fields.insert("kind".into(), json!(self.kind));
        fields.extend(
            std::mem::take(body)
                .into_iter()
                .filter(|(k, _)| k != "apiVersion" && k != "kind"),
        );
        let meta = fields.entry("metadata").or_insert_with(|| json!({}));
        let Some(meta) = meta.as_object_mut() else {
            return Err(StoreError::Invalid("metadata must be an object".into()));
        };
        let resource_version = inner.resource_version + 1;
        let name = match (meta.get("name"), meta.get("generateName")) {
            (Some(Value::String(n)), _) if !n.is_empty() => n.clone(),
            (None, Some(Value::String(prefix))) if !prefix.is_empty() => {
                format!("{prefix}{:05x}", random() & 0xfffff)
            }
            _ => {
                return Err(StoreError::Invalid(
                    "name or generateName is required".into(),
                ))
            }
        };
        match meta.get("namespace").and_then(Value::as_str) {
            Some(ns) if !ns.is_empty() && ns != namespace => {
                return Err(StoreError::Invalid(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ))
            }
            _ => {}
        }
        let key = (namespace.to_string(), name.clone());
        if inner.objects.contains_key(&key) {
            return Err(StoreError::AlreadyExists(name));
        }
        meta.insert("name".into(), json!(name));
        if namespace.is_empty() {
            meta.remove("namespace");
        } else {
            meta.insert("namespace".into(), json!(namespace));
        }
        meta.insert("uid".into(), json!(uid()));
        meta.insert(
            "resourceVersion".into(),
            json!(resource_version.to_string()),
        );
        meta.insert("creationTimestamp".into(), json!(rfc3339_now()));

        let object = Value::Object(fields);
        inner.resource_version = resource_version;
        inner.objects.insert(key, object.clone());
        self.publish(&mut inner, "ADDED", namespace, &object);
        Ok(object)
    }

    /// Replaces an existing object (a PUT); server-set metadata is kept.
    pub fn replace(
        &self,
        namespace: &str,
        name: &str,
        mut object: Value,
    ) -> Result<Value, StoreError> {
        let mut inner = self.lock();
        let key = (namespace.to_string(), name.to_string());
        let Some(old) = inner.objects.get(&key) else {
            return Err(StoreError::NotFound(name.to_string()));
        };
        if !object.is_object()
            || object["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n != name)
        {
            return Err(StoreError::Invalid(
                "the body must be an object of the same name".into(),
            ));
        }
        let resource_version = inner.resource_version + 1;
        object["apiVersion"] = json!(self.api_version);
        object["kind"] = json!(self.kind);
        let mut meta = old["metadata"].clone();
        for (k, v) in object["metadata"].as_object().cloned().unwrap_or_default() {
            if !matches!(
                k.as_str(),
                "uid" | "creationTimestamp" | "resourceVersion" | "namespace"
            ) {
                meta[k] = v;
            }
        }
        meta["resourceVersion"] = json!(resource_version.to_string());
        object["metadata"] = meta;
        inner.resource_version = resource_version;
        inner.objects.insert(key, object.clone());
        self.publish(&mut inner, "MODIFIED", namespace, &object);
        Ok(object)
    }

    /// Removes an object and returns it.
    pub fn delete(&self, namespace: &str, name: &str) -> Result<Value, StoreError> {
        let mut inner = self.lock();
        let Some(mut object) = inner
            .objects
            .remove(&(namespace.to_string(), name.to_string()))
        else {
            return Err(StoreError::NotFound(name.to_string()));
        };
        inner.resource_version += 1;
        object["metadata"]["resourceVersion"] = json!(inner.resource_version.to_string());
        self.publish(&mut inner, "DELETED", namespace, &object);
        Ok(object)
    }

    /// What a watch from `since` starts with, plus a receiver for later changes, taken
    /// atomically: with `since` 0 every object as `ADDED` ("get state and start at most
    /// recent"), else every change after `since` the history still holds.
    pub fn watch(
        &self,
        namespace: Option<&str>,
        since: u64,
    ) -> Result<(Vec<Event>, broadcast::Receiver<Event>, u64), Expired> {
        let inner = self.lock();
        let initial = if since == 0 {
            select(&inner, namespace, 0)
                .into_iter()
                .map(|object| Event {
                    kind: "ADDED",
                    namespace: object["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    resource_version: resource_version(&object),
                    object,
                })
                .collect()
        } else if since < inner.compacted {
            return Err(Expired {
                asked: since,
                oldest: inner.compacted,
            });
        } else {
            inner
                .history
                .iter()
                .filter(|e| e.resource_version > since)
                .filter(|e| namespace.is_none_or(|ns| ns == e.namespace))
                .cloned()
                .collect()
        };
        Ok((initial, self.events.subscribe(), inner.resource_version))
    }

    /// A receiver that never yields (for a watch that ends at once).
    pub fn closed_feed(&self) -> broadcast::Receiver<Event> {
        broadcast::channel(1).1
    }

    /// The BOOKMARK object that ends a streaming list's initial events at `resource_version`.
    pub fn initial_events_end(&self, resource_version: u64) -> Value {
        json!({
            "kind": self.kind,
            "apiVersion": self.api_version,
            "metadata": {
                "resourceVersion": resource_version.to_string(),
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        })
    }

    /// Called with the lock held so watchers see events in resource-version order.
    fn publish(&self, inner: &mut Inner, kind: &'static str, namespace: &str, object: &Value) {
        let event = Event {
            kind,
            namespace: namespace.to_string(),
            object: object.clone(),
            resource_version: inner.resource_version,
        };
        inner.history.push_back(event.clone());
        while inner.history.len() > self.history_limit {
            if let Some(dropped) = inner.history.pop_front() {
                inner.compacted = dropped.resource_version;
            }
        }
        if self.history_limit == 0 {
            inner.compacted = inner.resource_version;
        }
        // No receivers is fine: nobody is watching.
        let _ = self.events.send(event);
    }
}

fn select(inner: &Inner, namespace: Option<&str>, since: u64) -> Vec<Value> {
    inner
        .objects
        .iter()
        .filter(|((ns, _), _)| namespace.is_none_or(|want| want == ns))
        .filter(|(_, obj)| resource_version(obj) > since)
        .map(|(_, obj)| obj.clone())
        .collect()
}

fn resource_version(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

fn random() -> u64 {
    RandomState::new().hash_one(SystemTime::now())
}

/// A random version-4 style UUID.
fn uid() -> String {
    let (a, b) = (random(), random());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | ((b >> 48) & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ`.
fn rfc3339_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian calendar.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn create_get_delete() {
        let store = Store::new("g/v".into(), "K".into());
        let obj = store
            .create("", json!({"metadata": {"name": "a"}}))
            .expect("create");
        assert_eq!(obj["metadata"]["resourceVersion"], "1");
        assert!(matches!(
            store.create("", json!({"metadata": {"name": "a"}})),
            Err(StoreError::AlreadyExists(_))
        ));
        assert!(store.get("", "a").is_some());
        assert!(store.delete("", "a").is_ok());
        assert!(matches!(
            store.delete("", "a"),
            Err(StoreError::NotFound(_))
        ));
    }
}
