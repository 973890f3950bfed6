//! The etcd store, for several apiagg replicas: objects under `<prefix>/apiregistration.k8s.io/
//! apiservices/<name>`, `resourceVersion` = etcd's revision, writes as compare-and-swap
//! transactions. Every replica keeps a mirror fed by one etcd watch, so reads, routing and API
//! watches go on from the last known state while etcd is away; when it returns, the mirror is
//! re-listed and the differences become events.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, Identity,
    KeyValue, TlsOptions, Txn, TxnOp, WatchOptions,
};
use serde_json::{json, Value};
use tokio::sync::{broadcast, watch};

use super::window::Window;
use super::{Event, EventKind, Store, StoreError, Watch};

/// How long a write waits to see itself in the mirror (read-your-writes).
const SEEN_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and how to reach etcd (kube-apiserver's `--etcd-*` flags).
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// `--etcd-servers`.
    pub servers: Vec<String>,
    /// `--etcd-prefix`.
    pub prefix: String,
    /// `--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile` contents (PEM).
    pub ca: Option<Vec<u8>>,
    /// Client certificate and key (PEM).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// APIServices in etcd, mirrored in memory.
pub struct Etcd {
    client: Client,
    prefix: String,
    objects: RwLock<BTreeMap<String, Arc<Value>>>,
    window: Mutex<Window>,
    events: broadcast::Sender<Event>,
    /// The etcd revision the mirror reflects.
    seen: watch::Sender<u64>,
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl Etcd {
    /// Connects, lists every APIService once, and returns the store with its sync loop, which
    /// the caller runs for the life of the process.
    pub async fn connect(
        options: &EtcdOptions,
    ) -> Result<(Arc<Etcd>, impl std::future::Future<Output = ()>), StoreError> {
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(10));
        if options.ca.is_some() || options.identity.is_some() {
            let mut tls = TlsOptions::new();
            if let Some(ca) = &options.ca {
                tls = tls.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &options.identity {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            connect = connect.with_tls(tls);
        }
        let client = Client::connect(&options.servers, Some(connect))
            .await
            .map_err(|e| backend(format!("etcd {}: {e}", options.servers.join(","))))?;
        let prefix = format!(
            "{}/apiregistration.k8s.io/apiservices/",
            options.prefix.trim_end_matches('/')
        );
        let store = Arc::new(Etcd {
            client,
            prefix,
            objects: RwLock::new(BTreeMap::new()),
            window: Mutex::new(Window::new(0)),
            events: broadcast::channel(1024).0,
            seen: watch::Sender::new(0),
        });
        let revision = store.relist().await?;
        *store.window.lock().unwrap_or_else(|e| e.into_inner()) = Window::new(revision);
        let sync = store.clone().sync(revision);
        Ok((store, sync))
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn decode(&self, kv: &KeyValue) -> Option<(String, Value)> {
        let name = kv.key_str().ok()?.strip_prefix(&self.prefix)?.to_string();
        let mut value: Value = serde_json::from_slice(kv.value()).ok()?;
        value["metadata"]["resourceVersion"] = json!(kv.mod_revision().to_string());
        Some((name, value))
    }

    /// Applies one change to the mirror and tells watchers (skipped when already applied).
    fn apply(&self, kind: EventKind, name: &str, object: Value, revision: u64) {
        {
            let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
            match kind {
                EventKind::Deleted => {
                    if objects.remove(name).is_none() {
                        return;
                    }
                }
                _ => {
                    let newer = objects
                        .get(name)
                        .is_none_or(|o| super::revision_of(o) < revision);
                    if !newer {
                        return;
                    }
                    objects.insert(name.to_string(), Arc::new(object.clone()));
                }
            }
        }
        let event = Event {
            kind,
            object: Arc::new(object),
            revision,
        };
        self.window
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event.clone());
        let _ = self.events.send(event);
    }

    /// Lists every object; the differences to the mirror become events. Returns the revision.
    async fn relist(&self) -> Result<u64, StoreError> {
        let mut kv = self.client.kv_client();
        let listed = kv
            .get(self.prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(backend)?;
        let revision = listed.header().map_or(0, |h| h.revision()) as u64;
        let mut names = Vec::new();
        for item in listed.kvs() {
            if let Some((name, value)) = self.decode(item) {
                let kind = if self.get(&name).is_some() {
                    EventKind::Modified
                } else {
                    EventKind::Added
                };
                let rv = item.mod_revision() as u64;
                self.apply(kind, &name, value, rv);
                names.push(name);
            }
        }
        let gone: Vec<Arc<Value>> = {
            let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
            objects
                .iter()
                .filter(|(n, _)| !names.contains(n))
                .map(|(_, o)| o.clone())
                .collect()
        };
        for object in gone {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let mut last = (*object).clone();
            last["metadata"]["resourceVersion"] = json!(revision.to_string());
            self.apply(EventKind::Deleted, &name, last, revision);
        }
        self.seen.send_replace(revision);
        Ok(revision)
    }

    /// Follows etcd from `revision`: watch, and after any failure wait, re-list, watch again.
    async fn sync(self: Arc<Self>, mut revision: u64) {
        let mut problem: Option<String> = None;
        loop {
            match self.follow(revision).await {
                Ok(()) => {}
                Err(e) => {
                    let text = e.to_string();
                    if problem.as_deref() != Some(text.as_str()) {
                        tracing::warn!("etcd: {text}; the last known APIServices keep serving");
                        problem = Some(text);
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            match self.relist().await {
                Ok(r) => {
                    if problem.take().is_some() {
                        tracing::info!("etcd is back; APIServices re-listed");
                    }
                    revision = r;
                }
                Err(e) => {
                    let text = e.to_string();
                    if problem.as_deref() != Some(text.as_str()) {
                        tracing::warn!("etcd: {text}; the last known APIServices keep serving");
                        problem = Some(text);
                    }
                }
            }
        }
    }

    async fn follow(&self, revision: u64) -> Result<(), StoreError> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_progress_notify()
            .with_start_revision(revision as i64 + 1);
        let mut stream = self
            .client
            .watch_client()
            .watch(self.prefix.clone(), Some(options))
            .await
            .map_err(backend)?;
        while let Some(response) = stream.message().await.map_err(backend)? {
            if response.compact_revision() > 0 || response.canceled() {
                return Err(backend("watch compacted or cancelled"));
            }
            let mut last = response.header().map_or(0, |h| h.revision()) as u64;
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                let rv = kv.mod_revision() as u64;
                last = last.max(rv);
                match event.event_type() {
                    EventType::Put => {
                        if let Some((name, value)) = self.decode(kv) {
                            let kind = if kv.create_revision() == kv.mod_revision() {
                                EventKind::Added
                            } else {
                                EventKind::Modified
                            };
                            self.apply(kind, &name, value, rv);
                        }
                    }
                    EventType::Delete => {
                        let prev = event.prev_kv().and_then(|p| self.decode(p));
                        if let Some((name, mut value)) = prev {
                            value["metadata"]["resourceVersion"] = json!(rv.to_string());
                            self.apply(EventKind::Deleted, &name, value, rv);
                        }
                    }
                }
            }
            self.seen.send_if_modified(|seen| {
                let newer = last > *seen;
                *seen = (*seen).max(last);
                newer
            });
        }
        Err(backend("watch ended"))
    }

    /// Waits until the mirror reflects `revision` (read-your-writes), then returns the object as
    /// stored. The write is durable either way: if the mirror lags (etcd just came back), the
    /// written object is returned as it was sent.
    async fn seen(&self, name: &str, written: Value, revision: u64) -> Arc<Value> {
        let mut seen = self.seen.subscribe();
        let reached = tokio::time::timeout(SEEN_TIMEOUT, seen.wait_for(|r| *r >= revision)).await;
        if matches!(reached, Ok(Ok(_))) {
            if let Some(object) = self.get(name) {
                return object;
            }
        }
        let mut written = written;
        written["metadata"]["resourceVersion"] = json!(revision.to_string());
        Arc::new(written)
    }

    async fn put(
        &self,
        name: &str,
        object: &Value,
        when: Compare,
        missing: StoreError,
    ) -> Result<u64, StoreError> {
        let mut value = object.clone();
        if let Some(meta) = value["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        let bytes = serde_json::to_vec(&value).map_err(backend)?;
        let txn = Txn::new()
            .when([when])
            .and_then([TxnOp::put(self.key(name), bytes, None)]);
        let response = self.client.kv_client().txn(txn).await.map_err(backend)?;
        if !response.succeeded() {
            return Err(missing);
        }
        Ok(response.header().map_or(0, |h| h.revision()) as u64)
    }

    /// The object exists, and has resourceVersion `expected` when one is given.
    fn precondition(&self, name: &str, expected: Option<u64>) -> Compare {
        let key = self.key(name);
        match expected {
            Some(rv) => Compare::mod_revision(key, CompareOp::Equal, rv as i64),
            None => Compare::create_revision(key, CompareOp::Greater, 0),
        }
    }

    /// Why a conditional write did not apply: the object is gone or changed.
    fn missed(&self, name: &str) -> StoreError {
        match self.get(name) {
            None => StoreError::NotFound(name.into()),
            Some(_) => StoreError::Conflict(name.into()),
        }
    }
}

#[async_trait::async_trait]
impl Store for Etcd {
    fn list(&self) -> (Vec<Arc<Value>>, u64) {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        (objects.values().cloned().collect(), *self.seen.borrow())
    }

    fn get(&self, name: &str) -> Option<Arc<Value>> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects.get(name).cloned()
    }

    async fn create(&self, name: &str, object: Value) -> Result<Arc<Value>, StoreError> {
        let absent = Compare::create_revision(self.key(name), CompareOp::Equal, 0);
        let exists = StoreError::AlreadyExists(name.into());
        let revision = self.put(name, &object, absent, exists).await?;
        Ok(self.seen(name, object, revision).await)
    }

    async fn update(
        &self,
        name: &str,
        object: Value,
        expected: Option<u64>,
    ) -> Result<Arc<Value>, StoreError> {
        let when = self.precondition(name, expected);
        let revision = match self
            .put(name, &object, when, StoreError::Conflict(name.into()))
            .await
        {
            Err(StoreError::Conflict(_)) => return Err(self.missed(name)),
            other => other?,
        };
        Ok(self.seen(name, object, revision).await)
    }

    async fn delete(&self, name: &str, expected: Option<u64>) -> Result<Arc<Value>, StoreError> {
        let last = self
            .get(name)
            .ok_or_else(|| StoreError::NotFound(name.into()))?;
        let txn = Txn::new()
            .when([self.precondition(name, expected)])
            .and_then([TxnOp::delete(self.key(name), None)]);
        let response = self.client.kv_client().txn(txn).await.map_err(backend)?;
        if !response.succeeded() {
            return Err(self.missed(name));
        }
        let revision = response.header().map_or(0, |h| h.revision()) as u64;
        let mut seen = self.seen.subscribe();
        let _ = tokio::time::timeout(SEEN_TIMEOUT, seen.wait_for(|r| *r >= revision)).await;
        let mut last = (*last).clone();
        last["metadata"]["resourceVersion"] = json!(revision.to_string());
        Ok(Arc::new(last))
    }

    fn watch(&self, from: Option<u64>) -> Result<Watch, StoreError> {
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let live = self.events.subscribe();
        let backlog = match from {
            None => Vec::new(),
            Some(from) => window.since(from)?,
        };
        Ok(Watch { backlog, live })
    }
}
