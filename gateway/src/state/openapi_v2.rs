//! OpenAPI v2 on demand: v2 (kubectl 1.27 and 1.28 explain from it) is downloaded only once a
//! client asked for it, and merged only when a client asks after a change, so a gateway whose
//! clients read v3 never holds the sources' v2 documents nor the merged one (the largest thing
//! it would hold: 14 MB of JSON, its protobuf and their gzip for a cluster with a large CRD
//! set). `--openapi-v2=false` turns it off: no v2 download, no merge,
//! and `/openapi/v2` answers 404 as a server without it does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// Whether `/openapi/v2` is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenApiV2 {
    /// Merged when first asked after a change (the default).
    OnDemand,
    /// Not served (`--openapi-v2=false`).
    Off,
}

/// A client asked for v2: the request path tells the OpenAPI controller.
#[derive(Default)]
pub struct V2Demand {
    asked: AtomicBool,
    /// A client asked once: the sources' v2 documents are kept current from then on.
    ever: AtomicBool,
    wake: Notify,
    /// Woken after every publication of the OpenAPI controller.
    published: Notify,
}

impl V2Demand {
    /// A client wants the merged v2 document: the controller merges it if it has none.
    pub fn ask(&self) {
        self.ever.store(true, Ordering::Release);
        self.asked.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Whether a client ever asked (then v2 documents are downloaded).
    pub fn ever_asked(&self) -> bool {
        self.ever.load(Ordering::Acquire)
    }

    /// Whether a client asked since the last call (the controller's side).
    pub fn take(&self) -> bool {
        self.asked.swap(false, Ordering::AcqRel)
    }

    /// Completes when a client asks.
    pub async fn asked(&self) {
        self.wake.notified().await;
    }

    /// The controller published what it had (merged or not): waiting clients look again.
    pub fn published(&self) {
        self.published.notify_waiters();
    }

    /// Asks for the merged document and waits, at most `bound`, until `merged` says it is
    /// there (looking again after each publication of the controller).
    pub async fn ask_and_wait(&self, bound: Duration, merged: impl Fn() -> bool) {
        let until = tokio::time::Instant::now() + bound;
        loop {
            let published = std::pin::pin!(self.published.notified());
            let mut published = published;
            published.as_mut().enable();
            if merged() {
                return;
            }
            self.ask();
            if tokio::time::timeout_at(until, published).await.is_err() {
                return;
            }
        }
    }
}
