//! Input: the delegate's group-versions (autoregistration, as kube-aggregator's autoregister
//! controller keeps one local APIService per group-version the delegate serves). Read from the
//! delegate the config names, again every `delegate_refresh` and with backoff while it fails;
//! forgotten when the config names another delegate, so its group-versions are unknown (and
//! protected) until read.

use std::sync::Arc;
use std::time::Duration;

use apiagg_config::LocalGroupVersion;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::super::autoregister::DelegateGroups;
use super::inputs::Loaded;
use crate::backends::Clients;

/// The delegate's group-versions; `None` while unknown.
pub type Groups = Option<Arc<[LocalGroupVersion]>>;

/// Follows the delegate `loaded` names; the receiver changes when its list does.
pub fn follow(
    mut loaded: watch::Receiver<Arc<Loaded>>,
    clients: Arc<Clients>,
    refresh: Duration,
) -> (watch::Receiver<Groups>, JoinHandle<()>) {
    let (tx, rx) = watch::channel(None);
    let task = tokio::spawn(async move {
        let mut known = DelegateGroups::default();
        let mut named = loaded.borrow().config.delegate.clone();
        loop {
            let current = loaded.borrow_and_update().clone();
            if current.config.delegate != named {
                named = current.config.delegate.clone();
                known = DelegateGroups::default();
                tx.send_replace(None);
            }
            let Some(delegate) = current.backends.delegate.clone() else {
                if loaded.changed().await.is_err() {
                    return;
                }
                continue;
            };
            tokio::select! {
                () = tokio::time::sleep_until(known.next()) => {
                    if let Some(groups) = known.refresh(&delegate, &clients, refresh).await {
                        tracing::info!(count = groups.len(), "registered the delegate's group-versions");
                        tx.send_replace(Some(groups.into()));
                    }
                }
                changed = loaded.changed() => if changed.is_err() { return },
            }
        }
    });
    (rx, task)
}
