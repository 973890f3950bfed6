//! Where APIServices registered through apiagg's API are kept. [`Store`] is what the API
//! and the registry need; [`Embedded`] keeps them in a redb file under `--data-dir` (one
//! replica), [`Etcd`] in etcd under `--etcd-prefix` (`--etcd-servers`, shared by replicas, as
//! kube-apiserver keeps them). Objects are JSON as served, `metadata.resourceVersion` set by the
//! store; watches resume from a revision within the store's window.
//!
//! A leaf: it depends on no other apiagg crate and knows nothing of routes or requests; the
//! APIService API and the registry controller are its only users.

mod embedded;
mod etcd;
mod window;

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

pub use embedded::Embedded;
pub use etcd::{Etcd, EtcdOptions};

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed (the object as it was last).
    Deleted,
}

impl EventKind {
    /// The watch event `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// One change, at the revision it made.
#[derive(Debug, Clone)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The object after the change (before it, for a delete, with the new revision).
    pub object: Arc<Value>,
    /// The store's revision after the change.
    pub revision: u64,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No such object (not retryable).
    #[error("apiservices.apiregistration.k8s.io {0:?} not found")]
    NotFound(String),
    /// The name is taken (not retryable).
    #[error("apiservices.apiregistration.k8s.io {0:?} already exists")]
    AlreadyExists(String),
    /// The object changed since the given resourceVersion (retryable after a fresh read).
    #[error("Operation cannot be fulfilled on apiservices.apiregistration.k8s.io {0:?}: the object has been modified; please apply your changes to the latest version and try again")]
    Conflict(String),
    /// A watch from a revision older than the kept window (re-list; not retryable as is).
    #[error("too old resource version: {asked} ({oldest})")]
    Gone {
        /// The revision asked for.
        asked: u64,
        /// The oldest revision a watch can start from.
        oldest: u64,
    },
    /// The database failed (retryable: the disk may recover).
    #[error("storage: {0}")]
    Backend(String),
}

/// A watch: the events after the asked revision that are already known, then live ones.
pub struct Watch {
    /// Events already past, in order.
    pub backlog: Vec<Event>,
    /// Later events.
    pub live: broadcast::Receiver<Event>,
}

/// Storage of APIService objects: reads from memory, writes durable when they return.
#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// Every object, by name, and the revision of that view.
    fn list(&self) -> (Vec<Arc<Value>>, u64);
    /// One object.
    fn get(&self, name: &str) -> Option<Arc<Value>>;
    /// Stores a new object.
    async fn create(&self, name: &str, object: Value) -> Result<Arc<Value>, StoreError>;
    /// Replaces an object; `expected` is the resourceVersion it must still have, if given.
    async fn update(
        &self,
        name: &str,
        object: Value,
        expected: Option<u64>,
    ) -> Result<Arc<Value>, StoreError>;
    /// Removes an object; `expected` as for [`Store::update`].
    async fn delete(&self, name: &str, expected: Option<u64>) -> Result<Arc<Value>, StoreError>;
    /// Events after revision `from` (now when `None`).
    fn watch(&self, from: Option<u64>) -> Result<Watch, StoreError>;
}

/// The resourceVersion of a stored object.
pub fn revision_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
