//! The one reflector loop of cluster objects (the cluster's Services and EndpointSlices,
//! FlowSchemas and priority levels), as kube-runtime keeps one `watcher` and an apply function:
//! [`run`] lists a collection page by page, then watches it from the list's resourceVersion as
//! client-go's reflector does — bookmarks asked for, re-watches spread over five minutes, 410 (as
//! a status or an `ERROR` event) meaning "list again", a watch that ends at once treated as a
//! failure so it never becomes a busy loop, failures retried with backoff. What it learns goes
//! to a [`Follow`], which owns the objects; a [`Group`] runs one reflector per kind feeding one
//! applier.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::backoff::Backoff;
use crate::backends::{Client, Clients, FetchError, Lines, Upstream};

/// What one reflector does with what it learns, and where it reads.
#[async_trait]
pub trait Follow: Send + Sync + 'static {
    /// The collection's path with `query` appended (selectors are the follower's).
    fn path(&self, query: &str) -> String;
    /// A full list: `items` is now everything there is.
    async fn listed(&self, items: Vec<Value>);
    /// One change a watch reported.
    async fn changed(&self, change: Change);
    /// The reflector failed (`Some`, with why) or reads again after a failure (`None`); called
    /// only when this changes, so the follower logs it as it comes.
    async fn problem(&self, problem: Option<String>);
}

/// What one reflector of a [`Group`] learned, for the group's one applier.
pub enum Learned<K> {
    /// A full list of kind `K`.
    Listed(K, Vec<Value>),
    /// One change of kind `K`.
    Changed(K, Change),
}

/// What the reflectors of a group learned and the applier has not taken yet, at most (a
/// reflector waits beyond it).
const LEARNED: usize = 256;

/// One kind's reflector of a group: hands what it learns to the group's applier.
struct Forward<K> {
    kind: K,
    path: fn(K, &str) -> String,
    what: &'static str,
    learned: mpsc::Sender<Learned<K>>,
}

#[async_trait]
impl<K: Copy + std::fmt::Debug + Send + Sync + 'static> Follow for Forward<K> {
    fn path(&self, query: &str) -> String {
        (self.path)(self.kind, query)
    }

    async fn listed(&self, items: Vec<Value>) {
        // The applier ends only with the reflectors: nothing is lost.
        let _ = self.learned.send(Learned::Listed(self.kind, items)).await;
    }

    async fn changed(&self, change: Change) {
        let _ = self.learned.send(Learned::Changed(self.kind, change)).await;
    }

    async fn problem(&self, problem: Option<String>) {
        let (kind, what) = (self.kind, self.what);
        match problem {
            Some(p) => tracing::warn!(
                ?kind,
                "cannot read the cluster's {what}, the last known ones stay: {p}"
            ),
            None => tracing::info!(?kind, "reading the cluster's {what} again"),
        }
    }
}

/// The reflectors of several kinds at one delegate and the applier they feed; dropped, they
/// stop.
pub struct Group(Vec<JoinHandle<()>>);

impl Drop for Group {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl Group {
    /// Starts one reflector per kind of `kinds` at `delegate` (`path(kind, query)` is a
    /// collection's path, `what` names the objects in logs) and `apply`, which receives
    /// everything they learn, on the current runtime.
    pub fn spawn<K, F>(
        kinds: &[K],
        path: fn(K, &str) -> String,
        what: &'static str,
        (delegate, clients): (Arc<Upstream>, Arc<Clients>),
        apply: impl FnOnce(mpsc::Receiver<Learned<K>>) -> F,
    ) -> Group
    where
        K: Copy + std::fmt::Debug + Send + Sync + 'static,
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let (learned, applied) = mpsc::channel(LEARNED);
        let mut tasks: Vec<JoinHandle<()>> = kinds
            .iter()
            .map(|&kind| {
                let forward = Forward {
                    kind,
                    path,
                    what,
                    learned: learned.clone(),
                };
                tokio::spawn(run(forward, delegate.clone(), clients.clone()))
            })
            .collect();
        tasks.push(tokio::spawn(apply(applied)));
        Group(tasks)
    }
}

/// Follows `follow`'s collection at `delegate` for ever (abort the task to stop it).
pub async fn run(follow: impl Follow, delegate: Arc<Upstream>, clients: Arc<Clients>) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    let mut version: Option<String> = None;
    let mut problem: Option<String> = None;
    loop {
        let step = async {
            let client = clients.pick(&delegate)?;
            match version.clone() {
                None => {
                    let mut items = Vec::new();
                    let listed = list(
                        &client,
                        |q| follow.path(q),
                        |page| items.extend(page.iter().cloned()),
                    )
                    .await?;
                    follow.listed(items).await;
                    version = Some(listed);
                    Ok(None)
                }
                Some(from) => watch(&client, &follow, &from, &mut version).await.map(Some),
            }
        };
        match step.await {
            Ok(Some(Ended::Expired)) => version = None,
            Ok(_) => {
                backoff.succeeded();
                if problem.take().is_some() {
                    follow.problem(None).await;
                }
            }
            Err(e) => {
                let message = e.to_string();
                if problem.as_deref() != Some(message.as_str()) {
                    follow.problem(Some(message.clone())).await;
                    problem = Some(message);
                }
                tokio::time::sleep(backoff.failed()).await;
            }
        }
    }
}

/// Watches from `from`, handing each change to `follow` and keeping `version` current.
async fn watch(
    client: &Client,
    follow: &impl Follow,
    from: &str,
    version: &mut Option<String>,
) -> Result<Ended, FetchError> {
    let mut watch = match Watch::open(client, |q| follow.path(q), from).await? {
        Ok(watch) => watch,
        Err(ended) => return Ok(ended),
    };
    loop {
        match watch.next(version).await? {
            Ok(change) => follow.changed(change).await,
            Err(ended) => return Ok(ended),
        }
    }
}

/// Objects per list page.
const PAGE: usize = 500;
/// Upper bound of one list page.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// A watch that brings nothing, not even a bookmark, for this long is watched again.
const WATCH_SILENCE: Duration = Duration::from_secs(90);

/// How a watch ended without a transport error.
enum Ended {
    /// Its time was up: watch again from the last resourceVersion.
    Timeout,
    /// The resourceVersion is too old (410): list again.
    Expired,
}

/// One change a watch reported.
pub struct Change {
    /// The object (as it was last, for a delete).
    pub object: Value,
    /// `DELETED` rather than `ADDED` or `MODIFIED`.
    pub deleted: bool,
}

/// Lists every object of a collection, page by page (`path_of(query)` is the path of a page),
/// handing each page's items to `each`; returns the list's resourceVersion.
async fn list(
    client: &Client,
    path_of: impl Fn(&str) -> String,
    mut each: impl FnMut(&[Value]),
) -> Result<String, FetchError> {
    let mut next: Option<String> = None;
    loop {
        let mut query = format!("limit={PAGE}");
        if let Some(token) = &next {
            query.push_str("&continue=");
            query.push_str(&url_escape(token));
        }
        let page: Value = client
            .get(&path_of(&query), "application/json", None, LIST_TIMEOUT)
            .await?
            .json()?;
        if let Some(items) = page["items"].as_array() {
            each(items);
        }
        let meta = &page["metadata"];
        match meta["continue"].as_str().filter(|t| !t.is_empty()) {
            Some(token) => next = Some(token.to_string()),
            None => return Ok(meta["resourceVersion"].as_str().unwrap_or("").to_string()),
        }
    }
}

/// An open watch.
struct Watch {
    lines: Lines,
    path: String,
    started: Instant,
}

impl Watch {
    /// Watches the collection from `from` (`path_of(query)` as for [`list`]); `Err(Ended)`
    /// when the version is already too old.
    async fn open(
        client: &Client,
        path_of: impl Fn(&str) -> String,
        from: &str,
    ) -> Result<Result<Watch, Ended>, FetchError> {
        // Spread re-watches of many replicas over five minutes, as client-go does.
        let seconds = 300 + u64::from(jitter()) % 300;
        let path = path_of(&format!(
            "watch=1&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds={seconds}",
            url_escape(from)
        ));
        match client
            .stream(&path, Duration::from_secs(seconds + 30))
            .await?
        {
            Ok(lines) => Ok(Ok(Watch {
                lines,
                path,
                started: Instant::now(),
            })),
            Err(refused) if refused.status == 410 => Ok(Err(Ended::Expired)),
            Err(refused) => Err(refused.unexpected()),
        }
    }

    /// The next change, keeping `version` current (bookmarks included); `Err(Ended)` once the
    /// watch is over.
    async fn next(
        &mut self,
        version: &mut Option<String>,
    ) -> Result<Result<Change, Ended>, FetchError> {
        loop {
            // kube-apiserver sends a bookmark at least every minute: a watch silent for longer
            // is taken as a lost connection (a black hole keeps no FIN), and watched again from
            // `version` on a new one. Stale objects (RBAC grants) last at most this long.
            let Ok(line) = tokio::time::timeout(WATCH_SILENCE, self.lines.next()).await else {
                tracing::debug!(path = %self.path, "watch silent for {WATCH_SILENCE:?}: watching again");
                return Ok(Err(Ended::Timeout));
            };
            let Some(line) = line? else { break };
            let mut event: Value =
                serde_json::from_slice(&line).map_err(|e| FetchError::Invalid {
                    url: self.path.clone(),
                    message: format!("watch event: {e}"),
                })?;
            let object = event["object"].take();
            let deleted = match event["type"].as_str().unwrap_or("") {
                "ERROR" if object["code"].as_u64() == Some(410) => return Ok(Err(Ended::Expired)),
                "ERROR" => {
                    let message = object["message"].as_str().unwrap_or("watch error");
                    return Err(FetchError::Invalid {
                        url: self.path.clone(),
                        message: message.to_string(),
                    });
                }
                "ADDED" | "MODIFIED" => false,
                "DELETED" => true,
                _ => {
                    remember(version, &object);
                    continue;
                }
            };
            remember(version, &object);
            return Ok(Ok(Change { object, deleted }));
        }
        if self.started.elapsed() < Duration::from_secs(1) {
            // A delegate that ends watches at once must not make this a busy loop.
            return Err(FetchError::Invalid {
                url: self.path.clone(),
                message: "the watch ended at once".into(),
            });
        }
        Ok(Err(Ended::Timeout))
    }
}

fn remember(version: &mut Option<String>, object: &Value) {
    if let Some(rv) = object["metadata"]["resourceVersion"].as_str() {
        *version = Some(rv.to_string());
    }
}

/// A few bits of the clock, to spread re-watches.
fn jitter() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

/// Escapes a query value (resource versions and continue tokens are opaque).
pub fn url_escape(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}
