//! The OpenAPI controller (kube-aggregator's `pkg/controllers/openapi` and
//! `pkg/controllers/openapiv3`): keeps every source's documents current and publishes the merged
//! snapshot that `/openapi/v2` and `/openapi/v3` serve. One download per backend Service serves
//! every APIService behind it.
//!
//! Schedule: a full round on start, on every route change and every `--openapi-refresh`; a
//! failing source is retried alone with backoff. Downloads are bounded by `--openapi-timeout`.
//! At start-up the delegate's documents are merged and published first, bounded by
//! `--openapi-startup-timeout`, and only then does readyz report the OpenAPI checks green.
//!
//! Unlike kube-aggregator, per-group-version v3 documents of remote APIServices are downloaded
//! and served by apiagg itself (not proxied), with apiagg's SHA-512 hash of the bytes it serves,
//! so the hash redirect and immutable caching work the same for local and remote documents.
//!
//! `/openapi/v2` documents are downloaded from a client's first ask on, and merged only when a
//! client asks after a change (`V2Demand`); with `--openapi-v2=false`, never.
//!
//! The loop only schedules rounds. A round asks the pure [`plan::plan`] which sources to
//! download, downloads them, and merges what the pure [`inputs::merge_inputs`] collects from
//! their documents; the result is published when it changed.

mod documents;
mod download;
mod inputs;
mod own;
mod plan;
mod sources;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use apiagg_openapi_merge::{render_v2, render_v3, OpenApiDocs};
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use tokio::time::Instant;

use self::documents::Documents;
use self::download::{Download, Error};
use self::inputs::{merge_inputs, Inputs};
use self::plan::{plan, Scope};
use self::sources::{refresh_local, refresh_service, LocalSource, Sources};
use super::backoff::Backoff;
use crate::backends::{Client, Clients, FetchError, RouteTable, Upstream};
use crate::state::{OpenApiV2, Options, Publisher, Routes, V2Demand};
use apiagg_observe::{Lifecycle, Metrics, Milestone, Repeats};

/// How often a download failure that goes on is logged again (with the count of repeats).
const REPEAT_INTERVAL: Duration = Duration::from_secs(600);

/// What the OpenAPI controller works with.
pub struct Handles {
    /// The routes whose backends it reads.
    pub routes: Routes,
    /// The downloads' clients.
    pub clients: Arc<Clients>,
    /// The OpenAPI documents' only writer.
    pub published: Publisher<Option<Arc<OpenApiDocs>>>,
    /// Start-up milestones.
    pub lifecycle: Arc<Lifecycle>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Clients asking for `/openapi/v2` (merged on demand).
    pub v2_demand: Arc<V2Demand>,
}

/// Keeps `/openapi/v2` and `/openapi/v3` current.
pub struct OpenApiController {
    /// What it works with.
    handles: Handles,
    refresh: Duration,
    timeout: Duration,
    startup_timeout: Duration,
    /// Failing sources, logged when their failure starts or changes, then every ten minutes.
    repeats: Repeats,
    /// The sources' v2 documents, shared by content.
    documents: Documents,
    /// `--openapi-v2`.
    v2: OpenApiV2,
    /// Every source's v2 document was read once (a full round since a client first asked):
    /// only then is a merge for a client whole.
    v2_synced: std::sync::atomic::AtomicBool,
}

impl OpenApiController {
    /// A controller publishing `gateway`'s OpenAPI documents.
    pub fn new(handles: Handles, options: &Options) -> OpenApiController {
        OpenApiController {
            handles,
            refresh: options.openapi_refresh,
            timeout: options.openapi_timeout,
            startup_timeout: options.openapi_startup_timeout,
            repeats: Repeats::new(REPEAT_INTERVAL),
            documents: Documents::default(),
            v2: options.openapi_v2,
            v2_synced: Default::default(),
        }
    }

    /// A download through `client`, bounded by `--openapi-timeout`; v2 documents too when
    /// `v2`.
    fn download<'a>(&'a self, client: &'a Client, v2: bool) -> Download<'a> {
        Download {
            client,
            timeout: self.timeout,
            documents: &self.documents,
            v2,
        }
    }

    /// The client of one source's next healthy endpoint.
    fn client(&self, label: &str, upstream: Option<&Arc<Upstream>>) -> Result<Client, Error> {
        let upstream = upstream.ok_or_else(|| FetchError::NoEndpoint(label.to_string()))?;
        Ok(self.handles.clients.pick(upstream)?)
    }

    /// Records how a source's download went: failures keep the last good documents and
    /// schedule a retry.
    fn record(&self, label: &str, backoff: &mut Backoff, result: Result<(), Error>) {
        match result {
            Ok(()) => {
                backoff.succeeded();
                self.repeats.recovered(label, "OpenAPI download");
            }
            Err(why) => {
                self.repeats.warn(
                    label,
                    &format!("OpenAPI download failed, the last good documents stay: {why}"),
                );
                self.handles
                    .metrics
                    .openapi_download_failures
                    .with_label_values(&[label])
                    .inc();
                backoff.failed();
            }
        }
    }

    /// Downloads what `scope` asks for (v2 documents too when `v2`), then publishes.
    async fn round(&self, sources: &mut Sources, scope: Scope, v2: bool) {
        let routes = self.handles.routes.load();
        let plan = plan(&routes, sources, scope, Instant::now());

        let mut work = Vec::new();
        for read in &plan.services {
            let target = &read.target;
            let mut source = sources.services.remove(&target.key).unwrap_or_default();
            work.push(async move {
                if read.run {
                    let label = target.label();
                    let result = match self.client(&label, target.upstream.as_ref()) {
                        Ok(client) => {
                            let download = self.download(&client, v2);
                            refresh_service(&download, target, &mut source).await
                        }
                        Err(e) => Err(e),
                    };
                    self.record(&label, &mut source.backoff, result);
                }
                (target.key.clone(), source)
            });
        }
        let mut local = plan.delegate.as_ref().map(|delegate| {
            let kept = sources.local.take().filter(|_| !delegate.fresh);
            kept.unwrap_or_else(|| LocalSource {
                identity: delegate.identity.clone(),
                ..LocalSource::default()
            })
        });
        let local_work = async {
            if let (Some(delegate), Some(source)) = (&plan.delegate, local.as_mut()) {
                if delegate.run {
                    let result = match self.client("delegate", Some(&delegate.upstream)) {
                        Ok(client) => refresh_local(&self.download(&client, v2), source).await,
                        Err(e) => Err(e),
                    };
                    self.record("delegate", &mut source.backoff, result);
                }
            }
        };
        let (results, ()) =
            futures_util::future::join(futures_util::future::join_all(work), local_work).await;
        sources.services.extend(results);
        sources.services.retain(|key, _| {
            !plan.drop_others || plan.services.iter().any(|s| &s.target.key == key)
        });
        sources.local = local;
        if v2 && scope == Scope::All {
            self.v2_synced
                .store(true, std::sync::atomic::Ordering::Release);
        }
        self.publish(&routes, sources).await;
        self.handles.v2_demand.published();
        // Readiness waits for the delegate's documents (kube-apiserver merges its own spec
        // before it reports ready); a failing delegate is retried, bounded by the start-up timer.
        let delegate_done = sources
            .local
            .as_ref()
            .is_none_or(|l| l.backoff.retry_at.is_none());
        if delegate_done && !self.handles.lifecycle.reached(Milestone::OpenApiSynced) {
            self.handles.lifecycle.reach(Milestone::OpenApiSynced);
            tracing::info!("first OpenAPI merge published");
        }
    }

    /// Builds the snapshot from the current inputs and stores it when something changed. The
    /// merged v2 document goes when its inputs change, and is merged again only once a client
    /// asked for it (or never, with `--openapi-v2=false`).
    async fn publish(&self, routes: &RouteTable, sources: &mut Sources) {
        let Inputs { v2, v3 } = merge_inputs(&routes.registry, sources);
        let unchanged = sources
            .v2_inputs
            .as_ref()
            .is_some_and(|previous| previous.same_as(&v2));
        if !unchanged {
            sources.v2 = None;
            sources.v2_inputs = None;
        }
        // A client's ask is taken (and answered by a merge) once every source's v2 document
        // was read; until then it waits for that round.
        let synced = self.v2_synced.load(std::sync::atomic::Ordering::Acquire);
        let asked = self.v2 == OpenApiV2::OnDemand && synced && self.handles.v2_demand.take();
        if !unchanged && asked {
            let started = StdInstant::now();
            let to_merge = v2.clone();
            match tokio::task::spawn_blocking(move || render_v2(&to_merge)).await {
                Ok(rendered) => {
                    let metrics = &self.handles.metrics;
                    metrics.openapi_v2_regenerations.inc();
                    metrics
                        .openapi_v2_regeneration_duration
                        .observe(started.elapsed().as_secs_f64());
                    sources.v2 = rendered.map(Arc::new);
                    sources.v2_inputs = Some(v2);
                    tracing::info!(
                        bytes = sources.v2.as_ref().map_or(0, |d| d.json.len()),
                        "OpenAPI v2 merged"
                    );
                }
                Err(e) => tracing::error!("OpenAPI v2 merge failed: {e}"),
            }
        }

        let v3 = render_v3(&v3);

        let current = self.handles.published.current();
        let same = current.as_ref().is_some_and(|c| {
            c.v3_index_etag == v3.etag
                && match (&c.v2, &sources.v2) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    (None, None) => true,
                    _ => false,
                }
        });
        if same {
            return;
        }
        if current.as_ref().is_none_or(|c| c.v3_index_etag != v3.etag) {
            self.handles.metrics.openapi_v3_index_regenerations.inc();
        }
        self.handles.published.publish(Some(Arc::new(OpenApiDocs {
            v2: sources.v2.clone(),
            v3_index: v3.index,
            v3_index_etag: v3.etag,
            v3: v3.docs,
        })));
    }
}

#[async_trait]
impl BackgroundService for OpenApiController {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut sources = Sources::default();
        let mut generation = self.handles.routes.subscribe();
        // Readiness never waits longer than the start-up bound for a slow delegate.
        let lifecycle = self.handles.lifecycle.clone();
        let bound = self.startup_timeout;
        let startup = tokio::spawn(async move {
            tokio::time::sleep(bound).await;
            if !lifecycle.reached(Milestone::OpenApiSynced) {
                tracing::warn!(
                    timeout = ?bound,
                    "the delegate's OpenAPI documents are not merged yet; readyz turns green without them"
                );
                lifecycle.reach(Milestone::OpenApiSynced);
            }
        });
        let mut scope = Scope::Delegate;
        let mut next_full = Instant::now();
        loop {
            if scope != Scope::Due {
                next_full = Instant::now() + self.refresh;
            }
            // Whether this round reads v2 documents (from a client's first ask on).
            let v2_read = self.v2 == OpenApiV2::OnDemand && self.handles.v2_demand.ever_asked();
            self.round(&mut sources, scope, v2_read).await;
            if scope == Scope::Delegate {
                scope = Scope::All;
                continue;
            }
            let retry = sources.next_retry();
            scope = tokio::select! {
                _ = generation.changed() => Scope::All,
                // A client wants v2: merged from what is downloaded; the first time, every
                // source's v2 document is downloaded first.
                () = self.handles.v2_demand.asked() => match v2_read {
                    true => Scope::Due,
                    false => Scope::All,
                },
                _ = tokio::time::sleep_until(next_full) => Scope::All,
                _ = async {
                    match retry {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending::<()>().await,
                    }
                } => Scope::Due,
                _ = shutdown.changed() => {
                    startup.abort();
                    return;
                }
            };
        }
    }
}
