//! The registry controller: the route table from its inputs. Each input is kept current by a
//! task of its own — the config file ([`config_file`]), the store ([`stored`]), the delegate's
//! group-versions ([`delegate`]), the cluster's Services (the reflectors of `services`) — and one
//! pure step, [`compose`], builds the registry from them. The loop here only schedules: it
//! waits for an input to change, composes, resolves the host names the registry needs (off the
//! runtime workers), builds the table and publishes it when it differs from the one serving.
//! The first table is installed before the listener opens; a rejected config never replaces
//! the serving one.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use apiagg_config::{ClusterServices, ConfigError, GatewayConfig, LocalGroupVersion, Sources};
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

mod compose;
mod config_file;
mod delegate;
mod inputs;
mod stored;

use self::compose::{compose, names_wanted, Composed, RegistryInputs};
pub use self::config_file::ConfigFiles;
use self::config_file::{count, ConfigFile, RESOLVE_TIMEOUT};
use self::inputs::{delegate_names, Backends, Loaded};
use super::services::{ClusterChange, ClusterWatch, CLUSTER_CHANGES};
use crate::backends::{
    build_table, BuildError, Clients, CredentialError, HealthBook, HostPort, Names, Reloadable,
    RouteTable, TableError,
};
use crate::state::{Options, Publisher};
use apiagg_observe::{Lifecycle, Metrics, Milestone};
use apiagg_store::Store;

/// How often endpoint names are resolved again.
const NAME_REFRESH: std::time::Duration = std::time::Duration::from_secs(30);

/// Why a config was rejected (the previous one keeps serving). Not retryable: the input must
/// change.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The files cannot be read or parsed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The delegate's upstream cannot be built.
    #[error(transparent)]
    Delegate(#[from] BuildError),
    /// The route table cannot be built.
    #[error(transparent)]
    Table(#[from] TableError),
    /// The proxy client certificate cannot be loaded. The cause is in the message, not also a
    /// `source`: error chains would print it twice.
    #[error("proxyClient: {0}")]
    ProxyClient(CredentialError),
    /// The delegate's token file cannot be read again (the old token stays).
    #[error("delegate token: {0}")]
    DelegateToken(CredentialError),
}

/// What the registry controller works with: the route table's writer and the books it feeds.
pub struct Handles {
    /// The route table's only writer.
    pub routes: Publisher<Arc<RouteTable>>,
    /// Endpoint health (upstreams register their endpoints in it).
    pub health: Arc<HealthBook>,
    /// The controllers' clients (pools of removed endpoints are dropped).
    pub clients: Arc<Clients>,
    /// Start-up milestones.
    pub lifecycle: Arc<Lifecycle>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// APIServices registered through the API.
    pub store: Arc<dyn Store>,
    /// Reload and refresh intervals.
    pub options: Options,
}

/// Keeps the route table current.
pub struct RegistryController {
    /// What it works with.
    handles: Handles,
    path: PathBuf,
    /// The config installed by [`RegistryController::new`], taken by the loop.
    initial: Mutex<Option<(Arc<Loaded>, Names)>>,
    /// The config's files as the file watcher re-reads them.
    files: Arc<ConfigFiles>,
}

/// The inputs' receivers and the tasks behind them (stopped when dropped).
struct Inputs {
    loaded: watch::Receiver<Arc<Loaded>>,
    stored: watch::Receiver<Arc<[apiagg_apis::APIService]>>,
    groups: watch::Receiver<delegate::Groups>,
    /// What the reflectors of the cluster's Services learn, for the loop to apply.
    cluster: mpsc::Receiver<ClusterChange>,
    /// The reflectors' end of it, for every start of them.
    cluster_changes: mpsc::Sender<ClusterChange>,
    /// The reflectors of the cluster's Services, when the config resolves through them.
    cluster_watch: Option<ClusterWatch>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Inputs {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

impl RegistryController {
    /// Installs the routes of an already parsed config right away (so they serve from the first
    /// request) and returns the controller that keeps them current. Host names resolve on this
    /// thread: it runs once, before anything is served.
    pub fn new(
        handles: Handles,
        path: PathBuf,
        sources: Sources,
        config: GatewayConfig,
    ) -> Result<RegistryController, Error> {
        let controller = RegistryController {
            handles,
            path: path.clone(),
            initial: Mutex::new(None),
            files: ConfigFiles::new(path.clone()),
        };
        let first = controller.install_first(sources, config);
        // A first config that fails is the caller's error to report (there is no previous
        // config to keep serving): counted here, not logged a second time.
        count(&controller.handles.metrics, &first);
        let first = first?;
        controller.files.serving(first.0.clone());
        *controller.initial.lock().unwrap_or_else(|e| e.into_inner()) = Some(first);
        controller.handles.lifecycle.reach(Milestone::ConfigLoaded);
        Ok(controller)
    }

    /// The config file and the files it names, for the file watcher.
    pub fn config_files(&self) -> Reloadable {
        self.files.clone().into()
    }

    fn install_first(
        &self,
        sources: Sources,
        config: GatewayConfig,
    ) -> Result<(Arc<Loaded>, Names), Error> {
        let backends = Backends::load(
            &config,
            &self.handles.health,
            &Names::resolve_now(&delegate_names(&config)),
        )?;
        let loaded = Arc::new(Loaded {
            sources,
            config: Arc::new(config),
            backends,
        });
        let stored = stored::routable(self.handles.store.as_ref());
        let composed = compose(&RegistryInputs {
            config: &loaded.config,
            stored: &stored,
            delegate_groups: None,
            cluster: None,
        });
        let names = Names::resolve_now(&names_wanted(&composed.registry));
        self.publish(&loaded, composed, None, &names, true)?;
        Ok((loaded, names))
    }

    /// Builds the table of `composed` and publishes it when `forced` (the config or the
    /// credentials changed) or when it differs from the table serving. Nothing changes on error.
    fn publish(
        &self,
        loaded: &Loaded,
        composed: Composed,
        groups: Option<&[LocalGroupVersion]>,
        names: &Names,
        forced: bool,
    ) -> Result<(), Error> {
        let backends = &loaded.backends;
        let count = composed.registry.entries().len();
        let mut table = build_table(
            Arc::new(composed.registry),
            backends.delegate.clone(),
            backends.proxy_identity.as_deref(),
            &self.handles.health,
            &self.handles.metrics,
            names,
        )?;
        table.declared = Arc::new(composed.declared);
        table.delegate_groups = match &backends.delegate {
            None => Some(Arc::from(Vec::new())),
            Some(_) => groups.map(Arc::from),
        };
        table.displaced = Arc::new(composed.displaced);
        if !forced && same_routes(&table, &self.handles.routes.current()) {
            return Ok(());
        }
        let live = table
            .registry
            .entries()
            .iter()
            .map(|e| format!("{}/{}", e.group, e.version))
            .collect();
        self.handles.metrics.retain_group_versions(&live);
        self.handles.clients.retain(&table.endpoint_keys());
        for (kind, not_after) in backends.expiry(&table) {
            self.handles.metrics.certificate_expiry(kind, not_after);
        }
        self.handles.routes.publish(Arc::new(table));
        self.handles.metrics.registered.set(count as i64);
        Ok(())
    }

    /// Starts every input; the loaded config starts as `loaded`.
    fn start_inputs(&self, loaded: Arc<Loaded>) -> Inputs {
        let (loaded_tx, loaded_rx) = watch::channel(loaded);
        let (cluster_changes, cluster) = mpsc::channel(CLUSTER_CHANGES);
        let config_file = ConfigFile {
            path: self.path.clone(),
            health: self.handles.health.clone(),
            metrics: self.handles.metrics.clone(),
            files: self.files.clone(),
        };
        let (stored, store_task) = stored::follow(self.handles.store.clone());
        let (groups, groups_task) = delegate::follow(
            loaded_rx.clone(),
            self.handles.clients.clone(),
            self.handles.options.delegate_refresh,
        );
        Inputs {
            loaded: loaded_rx,
            stored,
            groups,
            cluster,
            cluster_changes,
            cluster_watch: None,
            tasks: vec![
                tokio::spawn(config_file.run(loaded_tx, ConfigFile::hangups())),
                store_task,
                groups_task,
            ],
        }
    }

    /// Starts, restarts (new delegate or mode) or stops the reflectors of the cluster's
    /// Services as the loaded config asks.
    fn follow_cluster(
        &self,
        loaded: &Loaded,
        watch: &mut Option<ClusterWatch>,
        changes: &mpsc::Sender<ClusterChange>,
    ) {
        let mode = loaded.config.service_resolution;
        let wanted = loaded
            .backends
            .delegate
            .clone()
            .filter(|_| mode != apiagg_config::ServiceResolution::Config);
        let same = match (watch.as_ref(), &wanted) {
            (Some(w), Some(d)) => w.mode == mode && Arc::ptr_eq(&w.delegate, d),
            (None, None) => true,
            _ => false,
        };
        if !same {
            *watch = wanted.and_then(|delegate| {
                ClusterWatch::spawn(
                    mode,
                    delegate,
                    self.handles.clients.clone(),
                    changes.clone(),
                )
            });
        }
    }

    /// Marks the delegate registered once its group-versions (and the cluster's Services, when
    /// resolution needs them) are known.
    fn publish_lifecycle(&self, loaded: &Loaded, groups: bool, cluster: Option<&ClusterServices>) {
        let delegate_done = loaded.backends.delegate.is_none() || groups;
        let cluster_done = cluster.is_none_or(ClusterServices::settled);
        if delegate_done && cluster_done {
            self.handles.lifecycle.reach(Milestone::DelegateRegistered);
        }
    }
}

/// Whether two tables route alike: same APIServices, owners, endpoints and failures.
fn same_routes(table: &RouteTable, current: &RouteTable) -> bool {
    table.registry.entries() == current.registry.entries()
        && table.displaced == current.displaced
        && table.declared == current.declared
        && table.delegate_groups == current.delegate_groups
        && table.endpoint_keys() == current.endpoint_keys()
        && table.broken == current.broken
}

#[async_trait]
impl BackgroundService for RegistryController {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let taken = self
            .initial
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some((mut published, mut names)) = taken else {
            return;
        };
        let mut inputs = self.start_inputs(published.clone());
        let mut names_due = Instant::now() + NAME_REFRESH;
        let mut refresh_names = tokio::time::interval_at(names_due, NAME_REFRESH);
        // The cluster's Services, owned by this loop alone and kept across delegate changes
        // so resolution never starts over.
        let mut cluster = ClusterServices::default();
        loop {
            let loaded = inputs.loaded.borrow_and_update().clone();
            let stored = inputs.stored.borrow_and_update().clone();
            let groups = inputs.groups.borrow_and_update().clone();
            self.follow_cluster(&loaded, &mut inputs.cluster_watch, &inputs.cluster_changes);
            let followed = inputs.cluster_watch.as_ref().map(|_| &cluster);
            let composed = compose(&RegistryInputs {
                config: &loaded.config,
                stored: &stored,
                delegate_groups: groups.as_deref(),
                cluster: followed,
            });
            let wanted: BTreeSet<HostPort> = names_wanted(&composed.registry);
            if !names.covers(&wanted) || Instant::now() >= names_due {
                names = Names::resolve(&wanted, RESOLVE_TIMEOUT).await;
                names_due = Instant::now() + NAME_REFRESH;
            }
            let forced = !Arc::ptr_eq(&loaded, &published);
            match self.publish(&loaded, composed, groups.as_deref(), &names, forced) {
                Ok(()) => published = loaded.clone(),
                Err(e) => {
                    tracing::error!("cannot install the routes, the previous ones serve: {e}")
                }
            }
            let followed = inputs.cluster_watch.as_ref().map(|_| &cluster);
            self.publish_lifecycle(&loaded, groups.is_some(), followed);
            // Waits for a change that can move the routes.
            loop {
                tokio::select! {
                    Ok(()) = inputs.loaded.changed() => break,
                    Ok(()) = inputs.stored.changed() => break,
                    Ok(()) = inputs.groups.changed() => break,
                    Some(change) = inputs.cluster.recv() => {
                        let mut changed = change(&mut cluster);
                        while let Ok(more) = inputs.cluster.try_recv() {
                            changed |= more(&mut cluster);
                        }
                        if changed {
                            break;
                        }
                    }
                    _ = refresh_names.tick() => {
                        names_due = Instant::now();
                        break;
                    }
                    _ = shutdown.changed() => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
