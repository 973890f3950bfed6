//! Published snapshots as reader/writer pairs: [`snapshot`] returns the one [`Publisher`] (not
//! `Clone`: whoever owns it is the only writer) and a [`Snapshot`] that any number of readers
//! clone. Reading is one atomic load; every publish bumps a generation readers can wait on.

use std::sync::Arc;

use arc_swap::{ArcSwapAny, Guard, RefCnt};
use tokio::sync::watch;

struct Shared<P: RefCnt> {
    current: ArcSwapAny<P>,
    generation: watch::Sender<u64>,
}

/// The reading half: cheap loads and change notifications.
pub struct Snapshot<P: RefCnt>(Arc<Shared<P>>);

impl<P: RefCnt> Clone for Snapshot<P> {
    fn clone(&self) -> Self {
        Snapshot(self.0.clone())
    }
}

/// The writing half, held by the snapshot's one writer.
pub struct Publisher<P: RefCnt>(Arc<Shared<P>>);

/// A snapshot starting at `initial`: its only writer and a reader.
pub fn snapshot<P: RefCnt>(initial: P) -> (Publisher<P>, Snapshot<P>) {
    let shared = Arc::new(Shared {
        current: ArcSwapAny::new(initial),
        generation: watch::Sender::new(0),
    });
    (Publisher(shared.clone()), Snapshot(shared))
}

impl<P: RefCnt> Snapshot<P> {
    /// The value now, as a short-lived guard (no reference count touched).
    pub fn guard(&self) -> Guard<P> {
        self.0.current.load()
    }

    /// The value now, owned.
    pub fn load(&self) -> P {
        self.0.current.load_full()
    }

    /// A receiver that sees every publish.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.generation.subscribe()
    }
}

impl<P: RefCnt> Publisher<P> {
    /// Publishes `value` and wakes every subscriber.
    pub fn publish(&self, value: P) {
        self.0.current.store(value);
        self.0.generation.send_modify(|g| *g += 1);
    }

    /// The value now (the writer comparing before it publishes).
    pub fn current(&self) -> P {
        self.0.current.load_full()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_what_the_one_writer_publishes() {
        let (writer, reader) = snapshot(Arc::new(1));
        let other = reader.clone();
        let mut changes = other.subscribe();
        assert_eq!(*reader.load(), 1);
        writer.publish(Arc::new(2));
        assert_eq!(*other.load(), 2);
        assert_eq!(**reader.guard(), 2);
        assert!(changes.has_changed().expect("open"));
        assert_eq!(*changes.borrow_and_update(), 1);
        let (absent, docs) = snapshot::<Option<Arc<&str>>>(None);
        assert!(docs.load().is_none());
        absent.publish(Some(Arc::new("v2")));
        assert_eq!(docs.load().as_deref(), Some(&"v2"));
    }
}
