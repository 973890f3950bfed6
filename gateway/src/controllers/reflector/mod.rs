//! The one reflector loop of cluster objects (the cluster's Services and EndpointSlices,
//! FlowSchemas and priority levels), as kube-runtime keeps one `watcher` and an apply function:
//! [`run`] lists a collection page by page, then watches it from the list's resourceVersion as
//! client-go's reflector does — bookmarks asked for, re-watches spread over five minutes, 410 (as
//! a status or an `ERROR` event) meaning "list again", a watch that ends at once treated as a
//! failure so it never becomes a busy loop, failures retried with backoff. What it learns goes
//! to a [`Follow`], which owns the objects; a [`Group`] runs one reflector per kind feeding one
//! applier.

mod read;
mod step;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use self::read::Watch;
use self::step::{Next, Reflector, Report, Seen};
use crate::backends::{Clients, Upstream};

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

/// Follows `follow`'s collection at `delegate` for ever (abort the task to stop it): performs
/// what [`Reflector::step`] decides and tells it what came of it.
pub async fn run(follow: impl Follow, delegate: Arc<Upstream>, clients: Arc<Clients>) {
    let mut reflector = Reflector::default();
    let mut open: Option<Watch> = None;
    let mut step = reflector.step(Seen::Ready);
    loop {
        match step.report.take() {
            Some(Report::Failing(why)) => follow.problem(Some(why)).await,
            Some(Report::Recovered) => follow.problem(None).await,
            None => {}
        }
        let seen = match step.next {
            Next::List => {
                open = None;
                list_all(&follow, &delegate, &clients).await
            }
            Next::Watch { from } => {
                open = None;
                match clients.pick(&delegate) {
                    Err(e) => Seen::Failed(e),
                    Ok(client) => match Watch::open(&client, |q| follow.path(q), &from).await {
                        Ok(watch) => open.insert(watch).next().await,
                        Err(seen) => seen,
                    },
                }
            }
            Next::Apply(change) => {
                follow.changed(change).await;
                read_on(&mut open).await
            }
            Next::ReadOn => read_on(&mut open).await,
            Next::Backoff(delay) => {
                open = None;
                tokio::time::sleep(delay).await;
                Seen::Ready
            }
        };
        step = reflector.step(seen);
    }
}

/// Lists the whole collection and hands it to `follow`.
async fn list_all(follow: &impl Follow, delegate: &Upstream, clients: &Clients) -> Seen<'static> {
    let client = match clients.pick(delegate) {
        Ok(client) => client,
        Err(e) => return Seen::Failed(e),
    };
    let mut items = Vec::new();
    let listed = read::list(
        &client,
        |q| follow.path(q),
        |page| items.extend(page.iter().cloned()),
    )
    .await;
    match listed {
        Ok(version) => {
            follow.listed(items).await;
            Seen::Listed(version)
        }
        Err(e) => Seen::Failed(e),
    }
}

/// The next thing the open watch brings ([`Seen::Ready`] when none is open: decide again).
async fn read_on(open: &mut Option<Watch>) -> Seen<'_> {
    match open {
        Some(watch) => watch.next().await,
        None => Seen::Ready,
    }
}

/// One change a watch reported.
#[derive(Debug, PartialEq)]
pub struct Change {
    /// The object (as it was last, for a delete).
    pub object: Value,
    /// `DELETED` rather than `ADDED` or `MODIFIED`.
    pub deleted: bool,
}

/// Escapes a query value (resource versions and continue tokens are opaque).
pub fn url_escape(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}
