//! The sources' `/openapi/v2` documents in compact form ([`SourceDoc`]), by content hash: sources
//! that serve the same bytes share one copy. A parsed tree is several times the size of its
//! text, so documents are hashed and parsed one at a time on one thread (its allocator heap is
//! reused from one document to the next), and at most [`PARALLEL_DOWNLOADS`] bodies are in
//! flight.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use apiagg_apis::sha512_upper_hex;
use apiagg_openapi_merge::SourceDoc;
use bytes::Bytes;
use tokio::sync::{oneshot, Semaphore, SemaphorePermit};

/// Bodies of `/openapi/v2` downloaded or parsed at once.
pub const PARALLEL_DOWNLOADS: usize = 4;

type Shared = Mutex<HashMap<String, Weak<SourceDoc>>>;

/// What became of a downloaded body.
pub enum Parsed {
    /// The same bytes as the accepted document.
    Same,
    /// A usable document (parsed now, or shared with a source serving the same bytes).
    Doc { hash: String, doc: Arc<SourceDoc> },
    /// Not a usable document.
    Unusable(String),
    /// The parser thread is gone (a bug, or it could not start).
    Gone,
}

struct Job {
    body: Bytes,
    /// Hash of the document the source has now.
    previous: Option<String>,
    reply: oneshot::Sender<Parsed>,
}

/// The documents of every source, and the thread that parses them.
pub struct Documents {
    shared: Arc<Shared>,
    /// Started on first use; it ends when `Documents` is dropped.
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    downloads: Semaphore,
}

impl Default for Documents {
    fn default() -> Documents {
        Documents {
            shared: Arc::default(),
            jobs: Mutex::new(None),
            downloads: Semaphore::new(PARALLEL_DOWNLOADS),
        }
    }
}

impl Documents {
    /// A turn to download a body; held until it is parsed.
    pub async fn download_turn(&self) -> Option<SemaphorePermit<'_>> {
        self.downloads.acquire().await.ok()
    }

    /// Hashes and parses `body` on the parser thread, unless its hash is `previous` or another
    /// source has the same document.
    pub async fn parse(&self, body: Bytes, previous: Option<String>) -> Parsed {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            body,
            previous,
            reply,
        };
        let sent = {
            let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
            if jobs.is_none() {
                *jobs = start(Arc::clone(&self.shared));
            }
            jobs.as_ref().is_some_and(|jobs| jobs.send(job).is_ok())
        };
        if !sent {
            return Parsed::Gone;
        }
        answer.await.unwrap_or(Parsed::Gone)
    }
}

fn start(shared: Arc<Shared>) -> Option<mpsc::Sender<Job>> {
    let (jobs, queue) = mpsc::channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("openapi-parse".into())
        .spawn(move || {
            for job in queue {
                let Job {
                    body,
                    previous,
                    reply,
                } = job;
                let parsed = parse(&shared, body, previous);
                // The downloader may have given up (shutdown): nothing to do then.
                let _ = reply.send(parsed);
            }
        });
    match spawned {
        Ok(_) => Some(jobs),
        Err(e) => {
            tracing::error!("cannot start the OpenAPI parser thread: {e}");
            None
        }
    }
}

fn parse(shared: &Shared, body: Bytes, previous: Option<String>) -> Parsed {
    let hash = sha512_upper_hex(&body);
    if previous.as_ref() == Some(&hash) {
        return Parsed::Same;
    }
    let live = |hash: &str| {
        let shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.get(hash).and_then(Weak::upgrade)
    };
    if let Some(doc) = live(&hash) {
        return Parsed::Doc { hash, doc };
    }
    let doc = match SourceDoc::from_slice(&body) {
        Ok(doc) => Arc::new(doc),
        Err(e) => return Parsed::Unusable(e.to_string()),
    };
    drop(body);
    let mut map = shared.lock().unwrap_or_else(PoisonError::into_inner);
    // Forget documents no source holds any more (the map stays bounded by the live ones).
    map.retain(|_, weak| weak.strong_count() > 0);
    map.insert(hash.clone(), Arc::downgrade(&doc));
    Parsed::Doc { hash, doc }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn identical_bodies_share_one_document() {
        let documents = Documents::default();
        let body = Bytes::from_static(br#"{"swagger":"2.0","paths":{}}"#);
        let Parsed::Doc { hash, doc: a } = documents.parse(body.clone(), None).await else {
            panic!("usable");
        };
        let Parsed::Doc { doc: b, .. } = documents.parse(body.clone(), None).await else {
            panic!("usable");
        };
        assert!(Arc::ptr_eq(&a, &b));
        assert!(matches!(
            documents.parse(body, Some(hash)).await,
            Parsed::Same
        ));
        assert!(matches!(
            documents.parse(Bytes::from_static(b"[1]"), None).await,
            Parsed::Unusable(_)
        ));
    }
}
