//! The embedded store: one redb file. Every write is one durable transaction (redb commits with
//! fsync and never tears the previous state), then published to watchers; the objects are also
//! kept in memory, and the last 1,024 events, so a watch can resume from a recent revision.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use redb::{Database, ReadableTable, TableDefinition};
use serde_json::{json, Value};
use tokio::sync::broadcast;

use super::window::Window;
use super::{Event, EventKind, Store, StoreError, Watch};

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("apiservices");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const REVISION: &str = "revision";

/// APIServices in a redb file.
pub struct Embedded {
    db: Database,
    objects: RwLock<BTreeMap<String, Arc<Value>>>,
    /// The revision, the recent events; held while writing, so writes are serial.
    log: Mutex<Log>,
    events: broadcast::Sender<Event>,
}

struct Log {
    revision: u64,
    window: Window,
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl Embedded {
    /// Opens (or creates) `dir/apiservices.redb`.
    pub fn open(dir: &Path) -> Result<Embedded, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| backend(format!("{}: {e}", dir.display())))?;
        let path = dir.join("apiservices.redb");
        let db =
            Database::create(&path).map_err(|e| backend(format!("{}: {e}", path.display())))?;
        let write = db.begin_write().map_err(backend)?;
        write.open_table(OBJECTS).map_err(backend)?;
        write.open_table(META).map_err(backend)?;
        write.commit().map_err(backend)?;
        let read = db.begin_read().map_err(backend)?;
        let table = read.open_table(OBJECTS).map_err(backend)?;
        let mut objects = BTreeMap::new();
        for row in table.iter().map_err(backend)? {
            let (name, bytes) = row.map_err(backend)?;
            let value: Value = serde_json::from_slice(bytes.value()).map_err(backend)?;
            objects.insert(name.value().to_string(), Arc::new(value));
        }
        let revision = read
            .open_table(META)
            .map_err(backend)?
            .get(REVISION)
            .map_err(backend)?
            .map_or(0, |v| v.value());
        Ok(Embedded {
            db,
            objects: RwLock::new(objects),
            log: Mutex::new(Log {
                revision,
                window: Window::new(revision),
            }),
            events: broadcast::channel(1024).0,
        })
    }

    /// Writes one change durably, then publishes it. `change` sees the current object and
    /// returns what to store (`None`: delete) and the event kind.
    fn write(
        &self,
        name: &str,
        change: impl FnOnce(Option<&Arc<Value>>) -> Result<(Option<Value>, EventKind), StoreError>,
    ) -> Result<Arc<Value>, StoreError> {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.get(name);
        let (next, kind) = change(current.as_ref())?;
        let revision = log.revision + 1;
        let stored = match next {
            Some(mut value) => {
                value["metadata"]["resourceVersion"] = json!(revision.to_string());
                Some(value)
            }
            None => None,
        };
        let txn = self.db.begin_write().map_err(backend)?;
        {
            let mut table = txn.open_table(OBJECTS).map_err(backend)?;
            match &stored {
                Some(value) => {
                    let bytes = serde_json::to_vec(value).map_err(backend)?;
                    table.insert(name, bytes.as_slice()).map_err(backend)?;
                }
                None => {
                    table.remove(name).map_err(backend)?;
                }
            }
            let mut meta = txn.open_table(META).map_err(backend)?;
            meta.insert(REVISION, revision).map_err(backend)?;
        }
        txn.commit().map_err(backend)?;
        log.revision = revision;
        let object = match stored {
            Some(value) => {
                let value = Arc::new(value);
                let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
                objects.insert(name.to_string(), value.clone());
                value
            }
            None => {
                let mut objects = self.objects.write().unwrap_or_else(|e| e.into_inner());
                objects.remove(name);
                let mut last = current.map_or(Value::Null, |c| (*c).clone());
                last["metadata"]["resourceVersion"] = json!(revision.to_string());
                Arc::new(last)
            }
        };
        let event = Event {
            kind,
            object: object.clone(),
            revision,
        };
        log.window.push(event.clone());
        // Nobody watching is fine.
        let _ = self.events.send(event);
        Ok(object)
    }
}

fn check(name: &str, current: &Arc<Value>, expected: Option<u64>) -> Result<(), StoreError> {
    match expected {
        Some(rv) if super::revision_of(current) != rv => Err(StoreError::Conflict(name.into())),
        _ => Ok(()),
    }
}

#[async_trait::async_trait]
impl Store for Embedded {
    fn list(&self) -> (Vec<Arc<Value>>, u64) {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        (objects.values().cloned().collect(), log.revision)
    }

    fn get(&self, name: &str) -> Option<Arc<Value>> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects.get(name).cloned()
    }

    async fn create(&self, name: &str, object: Value) -> Result<Arc<Value>, StoreError> {
        self.write(name, |current| match current {
            Some(_) => Err(StoreError::AlreadyExists(name.into())),
            None => Ok((Some(object), EventKind::Added)),
        })
    }

    async fn update(
        &self,
        name: &str,
        object: Value,
        expected: Option<u64>,
    ) -> Result<Arc<Value>, StoreError> {
        self.write(name, |current| {
            let current = current.ok_or_else(|| StoreError::NotFound(name.into()))?;
            check(name, current, expected)?;
            Ok((Some(object), EventKind::Modified))
        })
    }

    async fn delete(&self, name: &str, expected: Option<u64>) -> Result<Arc<Value>, StoreError> {
        self.write(name, |current| {
            let current = current.ok_or_else(|| StoreError::NotFound(name.into()))?;
            check(name, current, expected)?;
            Ok((None, EventKind::Deleted))
        })
    }

    fn watch(&self, from: Option<u64>) -> Result<Watch, StoreError> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let live = self.events.subscribe();
        let backlog = match from {
            None => Vec::new(),
            Some(from) => log.window.since(from)?,
        };
        Ok(Watch { backlog, live })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {}})
    }

    #[tokio::test]
    async fn writes_survive_reopening_and_revisions_grow() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let store = Embedded::open(dir.path()).expect("open");
            let a = store.create("a", object("a")).await.expect("create");
            assert_eq!(a["metadata"]["resourceVersion"], "1");
            assert!(matches!(
                store.create("a", object("a")).await,
                Err(StoreError::AlreadyExists(_))
            ));
            assert!(matches!(
                store.update("a", object("a"), Some(7)).await,
                Err(StoreError::Conflict(_))
            ));
            store
                .update("a", object("a"), Some(1))
                .await
                .expect("update");
            store.create("b", object("b")).await.expect("create");
            store.delete("b", None).await.expect("delete");
        }
        let store = Embedded::open(dir.path()).expect("reopen");
        let (objects, revision) = store.list();
        assert_eq!(revision, 4);
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0]["metadata"]["resourceVersion"], "2");
        // After a restart only the current revision can be resumed from.
        assert!(matches!(store.watch(Some(1)), Err(StoreError::Gone { .. })));
        assert!(store.watch(Some(4)).is_ok());
    }

    /// kube-apiserver's `CompareResourceVersion` (KEP-5504): decimal integers without leading
    /// zeros, compared by length, then digit by digit.
    fn compare(a: &str, b: &str) -> std::cmp::Ordering {
        let decimal = |s: &str| {
            !s.is_empty()
                && s.bytes().all(|b| b.is_ascii_digit())
                && (s == "0" || !s.starts_with('0'))
        };
        assert!(decimal(a) && decimal(b), "{a:?} {b:?} are not comparable");
        a.len().cmp(&b.len()).then_with(|| a.cmp(b))
    }

    /// Issue 46, item 3: every write gives a resourceVersion that compares greater than the one
    /// before it, across creates, updates, deletes, other objects and a restart.
    #[tokio::test]
    async fn resource_versions_are_comparable_and_grow_with_every_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rv = |o: &Value| {
            o["metadata"]["resourceVersion"]
                .as_str()
                .expect("rv")
                .to_string()
        };
        let mut last = "0".to_string();
        let step = |last: &mut String, object: Arc<Value>| {
            let next = rv(&object);
            assert_eq!(
                compare(last, &next),
                std::cmp::Ordering::Less,
                "{last} then {next}"
            );
            *last = next;
        };
        {
            let store = Embedded::open(dir.path()).expect("open");
            for i in 0..12 {
                let name = format!("o{i}");
                step(
                    &mut last,
                    store.create(&name, object(&name)).await.expect("create"),
                );
                let current: u64 = last.parse().expect("decimal");
                let updated = store.update(&name, object(&name), Some(current)).await;
                step(&mut last, updated.expect("update"));
            }
            step(&mut last, store.delete("o3", None).await.expect("delete"));
        }
        let store = Embedded::open(dir.path()).expect("reopen");
        let after = store
            .create("after", object("after"))
            .await
            .expect("create");
        step(&mut last, after);
        assert_eq!(last, "26");
    }

    #[tokio::test]
    async fn a_watch_resumes_from_a_recent_revision() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Embedded::open(dir.path()).expect("open");
        for name in ["a", "b", "c"] {
            store.create(name, object(name)).await.expect("create");
        }
        let watch = store.watch(Some(1)).expect("watch");
        let kinds: Vec<_> = watch.backlog.iter().map(|e| (e.kind, e.revision)).collect();
        assert_eq!(kinds, [(EventKind::Added, 2), (EventKind::Added, 3)]);
    }
}
