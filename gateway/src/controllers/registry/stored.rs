//! Input: the APIServices registered through the API, as the registry reads them: decoded, with
//! only their name, spec and `apiagg.io/watch-list` annotation kept. A status write (the availability controller's), a new
//! resourceVersion or managedFields entry therefore changes nothing here, and rebuilds nothing.
//! A stored object that does not decode is left out (it cannot route; the API still lists it).

use std::sync::Arc;

use apiagg_apis::{APIService, WATCH_LIST_ANNOTATION};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use apiagg_store::Store;

/// The routing part of every stored APIService, sorted by name.
pub fn routable(store: &dyn Store) -> Arc<[APIService]> {
    let (objects, _) = store.list();
    let mut out: Vec<APIService> = objects
        .iter()
        .filter_map(|value| serde_json::from_value::<APIService>((**value).clone()).ok())
        .map(|object| APIService {
            metadata: ObjectMeta {
                annotations: object.metadata.annotations.and_then(|a| {
                    a.get_key_value(WATCH_LIST_ANNOTATION)
                        .map(|(k, v)| [(k.clone(), v.clone())].into())
                }),
                name: object.metadata.name,
                ..ObjectMeta::default()
            },
            spec: object.spec,
            status: None,
        })
        .collect();
    out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    out.into()
}

/// Follows the store: the receiver holds [`routable`] and changes only when it does.
pub fn follow(store: Arc<dyn Store>) -> (watch::Receiver<Arc<[APIService]>>, JoinHandle<()>) {
    // Subscribed before listing: no change between the two is missed.
    let live = match store.watch(None) {
        Ok(watch) => Some(watch.live),
        Err(e) => {
            tracing::error!("cannot follow the APIService store: {e}");
            None
        }
    };
    let (tx, rx) = watch::channel(routable(store.as_ref()));
    let task = tokio::spawn(async move {
        let Some(mut live) = live else {
            return;
        };
        loop {
            match live.recv().await {
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
            // A burst of writes is one read.
            while live.try_recv().is_ok() {}
            let now = routable(store.as_ref());
            tx.send_if_modified(|current| {
                let changed = *current != now;
                if changed {
                    *current = now;
                }
                changed
            });
        }
    });
    (rx, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiagg_store::Embedded;

    fn object(name: &str, service: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": name},
            "spec": {"group": "wardle.example.com", "version": "v1", "groupPriorityMinimum": 1000,
                     "versionPriority": 15, "insecureSkipTLSVerify": true,
                     "service": {"namespace": "test", "name": service, "port": 443}},
        })
    }

    #[tokio::test]
    async fn status_writes_change_nothing_and_spec_changes_are_seen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> = Arc::new(Embedded::open(&dir.path().join("s")).expect("store"));
        let name = "v1.wardle.example.com";
        store.create(name, object(name, "a")).await.expect("create");
        let (mut rx, task) = follow(store.clone());
        assert_eq!(rx.borrow_and_update().len(), 1);

        // A status write: a new resourceVersion, a condition; the routing part is the same.
        let mut with_status = (*store.get(name).expect("stored")).clone();
        with_status["status"] =
            serde_json::json!({"conditions": [{"type": "Available", "status": "True"}]});
        store.update(name, with_status, None).await.expect("status");
        // A spec change after it: the only change the receiver sees.
        let mut moved = (*store.get(name).expect("stored")).clone();
        moved["spec"]["service"]["name"] = "b".into();
        store.update(name, moved, None).await.expect("spec");
        tokio::time::timeout(std::time::Duration::from_secs(10), rx.changed())
            .await
            .expect("a change")
            .expect("open");
        let seen = rx.borrow_and_update().clone();
        let service = seen[0].spec.as_ref().and_then(|s| s.service.as_ref());
        assert_eq!(service.and_then(|s| s.name.as_deref()), Some("b"));
        assert!(seen[0].status.is_none());
        assert!(seen[0].metadata.resource_version.is_none());

        // Only status writes from here: nothing changes.
        for round in 0..3 {
            let mut status = (*store.get(name).expect("stored")).clone();
            status["status"]["conditions"][0]["message"] = format!("round {round}").into();
            store.update(name, status, None).await.expect("status");
        }
        // A marker object proves the follower handled every write before it.
        let marker = "v1.marker.example.com";
        store
            .create(marker, object(marker, "m"))
            .await
            .expect("marker");
        tokio::time::timeout(std::time::Duration::from_secs(10), rx.changed())
            .await
            .expect("the marker")
            .expect("open");
        assert_eq!(rx.borrow_and_update().len(), 2);
        assert!(!rx.has_changed().expect("open"));
        task.abort();
    }
}
