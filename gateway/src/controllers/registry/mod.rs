//! The registry controller: turns the config file and the delegate's group-versions into the
//! route table, installs the first one before the listener opens, and hot-reloads on file change
//! and SIGHUP. A rejected config never replaces the serving one.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use apiagg_config::{ConfigError, GatewayConfig, LocalGroupVersion, Sources};
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use tokio::signal::unix::{signal, SignalKind};

mod inputs;
mod refresh;

use self::inputs::{declared, fingerprints, next_registration, proxy_identity, Backends, Built};
use super::autoregister::DelegateGroups;
use super::services::{ClusterWatch, SharedCluster};
use crate::backends::{build_table, BuildError, Clients, CredentialError, HealthBook, TableError};
use crate::observe::{Lifecycle, Metrics, Milestone};
use crate::state::{Gateway, Options, Routes};
use crate::store::Store;

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
}

/// What the controller keeps between rounds.
struct Serving {
    sources: Sources,
    config: GatewayConfig,
    backends: Backends,
    delegate_groups: DelegateGroups,
    /// The last credential problem logged (each is logged once, when it changes).
    credential_problem: Option<String>,
    /// The reflectors of the cluster's Services, when the config resolves through them.
    cluster_watch: Option<ClusterWatch>,
}

/// Watches the config and keeps the route table current.
pub struct RegistryController {
    routes: Arc<Routes>,
    health: Arc<HealthBook>,
    clients: Arc<Clients>,
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
    store: Arc<dyn Store>,
    /// The cluster's Services, kept across delegate changes so resolution never starts over.
    cluster: Arc<SharedCluster>,
    options: Options,
    path: PathBuf,
    initial: Mutex<Option<Serving>>,
}

impl RegistryController {
    /// Installs the routes of an already parsed config right away (so they serve from the first
    /// request) and returns the controller that keeps them current.
    pub fn new(
        gateway: &Gateway,
        path: PathBuf,
        sources: Sources,
        config: GatewayConfig,
    ) -> Result<RegistryController, Error> {
        let controller = RegistryController {
            routes: gateway.routes.clone(),
            health: gateway.health.clone(),
            clients: gateway.clients.clone(),
            lifecycle: gateway.lifecycle.clone(),
            metrics: gateway.metrics.clone(),
            store: gateway.store.clone(),
            cluster: Arc::default(),
            options: gateway.options.clone(),
            path,
            initial: Mutex::new(None),
        };
        let first = Backends::load(&config, &controller.health).and_then(|backends| {
            controller.install(&config, &backends, None)?;
            Ok(backends)
        });
        // A first config that fails is the caller's error to report (there is no previous
        // config to keep serving): counted here, not logged a second time.
        controller.count(&first);
        let serving = Serving {
            sources,
            config,
            backends: first?,
            delegate_groups: DelegateGroups::default(),
            credential_problem: None,
            cluster_watch: None,
        };
        controller.lifecycle.reach(Milestone::ConfigLoaded);
        controller.publish_lifecycle(&serving);
        *controller.initial.lock().unwrap_or_else(|e| e.into_inner()) = Some(serving);
        Ok(controller)
    }

    /// Builds and publishes the routes for `config`; nothing changes on error.
    fn install(
        &self,
        config: &GatewayConfig,
        backends: &Backends,
        delegate_groups: Option<&[LocalGroupVersion]>,
    ) -> Result<(), Error> {
        let built = self.registry(config, delegate_groups);
        self.publish(built, config, backends, delegate_groups, false)
    }

    /// Publishes the routes of a built registry.
    fn publish(
        &self,
        built: Built,
        config: &GatewayConfig,
        backends: &Backends,
        delegate_groups: Option<&[LocalGroupVersion]>,
        only_if_changed: bool,
    ) -> Result<(), Error> {
        let Built {
            registry,
            displaced,
        } = built;
        let count = registry.entries().len();
        let mut table = build_table(
            Arc::new(registry),
            backends.delegate.clone(),
            backends.proxy_identity.as_deref(),
            &self.health,
            &self.metrics,
        )?;
        if only_if_changed {
            let current = self.routes.load();
            let same = table.registry.entries() == current.registry.entries()
                && *current.displaced == displaced
                && table.endpoint_keys() == current.endpoint_keys()
                && table.broken == current.broken;
            if same {
                return Ok(());
            }
        }
        let live = table
            .registry
            .entries()
            .iter()
            .map(|e| format!("{}/{}", e.group, e.version))
            .collect();
        self.metrics.retain_group_versions(&live);
        self.clients.retain(&table.endpoint_keys());
        table.declared = Arc::new(declared(config, delegate_groups.unwrap_or(&[])));
        table.delegate_groups = match &backends.delegate {
            None => Some(Arc::from(Vec::new())),
            Some(_) => delegate_groups.map(Arc::from),
        };
        table.displaced = Arc::new(displaced);
        for (kind, not_after) in backends.expiry(&table) {
            self.metrics.certificate_expiry(kind, not_after);
        }
        self.routes.publish(table);
        self.metrics.registered.set(count as i64);
        Ok(())
    }

    /// Logs a rejected reload and counts the outcome.
    fn record<T>(&self, result: &Result<T, Error>) {
        if let Err(e) = result {
            tracing::error!(config = %self.path.display(), "config rejected, the previous config keeps serving: {e}");
        }
        self.count(result);
    }

    /// Counts the outcome of a load in the reload metrics.
    fn count<T>(&self, result: &Result<T, Error>) {
        let metrics = &self.metrics;
        let (label, ok) = if result.is_ok() {
            ("success", 1)
        } else {
            ("failure", 0)
        };
        metrics.reloads.with_label_values(&[label]).inc();
        metrics.last_reload_ok.set(ok);
    }

    /// Applies changed sources; on error nothing changes.
    fn reload(&self, serving: &mut Serving, sources: Sources) -> Result<(), Error> {
        let config = sources.parse()?;
        if config.listen != serving.config.listen || config.tls != serving.config.tls {
            tracing::warn!("listen and tls changes take effect only after a restart");
        }
        if config.authentication != serving.config.authentication {
            tracing::warn!("authentication changes take effect only after a restart");
        }
        let backends = Backends::load(&config, &self.health)?;
        if config.delegate == serving.config.delegate {
            let groups = serving.delegate_groups.groups.as_deref();
            self.install(&config, &backends, groups)?;
            serving.sources = sources;
            serving.config = config;
            serving.backends = backends;
            return Ok(());
        }
        self.install(&config, &backends, None)?;
        *serving = Serving {
            sources,
            config,
            backends,
            delegate_groups: DelegateGroups::default(),
            credential_problem: None,
            cluster_watch: serving.cluster_watch.take(),
        };
        Ok(())
    }

    /// Re-reads the credential files: a rotated token is used from the next request, a rotated
    /// certificate reinstalls the routes. A broken file keeps the last good credentials.
    fn poll_credentials(&self, serving: &mut Serving) {
        let token = serving
            .backends
            .delegate
            .as_ref()
            .and_then(|d| d.token.clone());
        let mut problem = token
            .and_then(|t| t.refresh().err())
            .map(|e| format!("delegate token: {e}"));
        let now = proxy_identity(&serving.config)
            .and_then(|proxy| fingerprints(&serving.config, proxy.as_deref()));
        let rotated = match now {
            Ok(now) if now != serving.backends.fingerprints => {
                Backends::load(&serving.config, &self.health).map(Some)
            }
            Ok(_) => Ok(None),
            Err(e) => Err(e),
        };
        match rotated {
            Ok(Some(backends)) => {
                let groups = serving.delegate_groups.groups.as_deref();
                match self.install(&serving.config, &backends, groups) {
                    Ok(()) => {
                        tracing::info!("client certificates changed: routes rebuilt");
                        serving.backends = backends;
                    }
                    Err(e) => problem = Some(e.to_string()),
                }
            }
            Ok(None) => {}
            Err(e) => problem = Some(e.to_string()),
        }
        if problem != serving.credential_problem {
            match &problem {
                Some(p) => tracing::warn!("credentials not reloaded, the previous ones serve: {p}"),
                None if serving.credential_problem.is_some() => {
                    tracing::info!("credentials readable again")
                }
                None => {}
            }
            serving.credential_problem = problem;
        }
    }

    /// Reads the delegate's group-versions and reinstalls the routes when they changed.
    async fn register_delegate(&self, serving: &mut Serving) {
        let Some(delegate) = serving.backends.delegate.clone() else {
            return;
        };
        let refresh = self.options.delegate_refresh;
        let groups = &mut serving.delegate_groups;
        if let Some(groups) = groups.refresh(&delegate, &self.clients, refresh).await {
            match self.install(&serving.config, &serving.backends, Some(&groups)) {
                Ok(()) => tracing::info!(
                    count = groups.len(),
                    "registered the delegate's group-versions"
                ),
                Err(e) => tracing::error!("cannot register the delegate's group-versions: {e}"),
            }
        }
    }

    /// Reinstalls the routes after a change through the API.
    fn apply_registered(&self, serving: &Serving) {
        let groups = serving.delegate_groups.groups.as_deref();
        if let Err(e) = self.install(&serving.config, &serving.backends, groups) {
            tracing::error!("cannot install the registered APIServices: {e}");
        }
    }

    fn publish_lifecycle(&self, serving: &Serving) {
        let delegate_done =
            serving.backends.delegate.is_none() || serving.delegate_groups.groups.is_some();
        let cluster_done = serving.cluster_watch.is_none() || self.cluster.lock().settled();
        if delegate_done && cluster_done {
            self.lifecycle.reach(Milestone::DelegateRegistered);
        }
    }

    /// Reads the config files; applies them when they changed or when `forced` (SIGHUP).
    fn poll_config(&self, serving: &mut Serving, forced: bool) {
        let sources = match Sources::read(&self.path) {
            Ok(s) => s,
            Err(e) => {
                if forced {
                    self.record::<()>(&Err(e.into()));
                }
                return;
            }
        };
        if !forced && sources == serving.sources {
            return;
        }
        if forced {
            tracing::info!("SIGHUP: reloading the config");
        }
        let result = self.reload(serving, sources.clone());
        self.record(&result);
        match result {
            Ok(()) => tracing::info!(
                apiservices = serving.config.api_services.len(),
                "config reloaded"
            ),
            // Remember the rejected bytes so the same error is not logged every tick.
            Err(_) => serving.sources = sources,
        }
    }
}

#[async_trait]
impl BackgroundService for RegistryController {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let taken = self
            .initial
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(mut serving) = taken else {
            return;
        };
        let mut hangup = match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("cannot watch SIGHUP: {e}");
                None
            }
        };
        let mut poll = tokio::time::interval(self.options.reload_interval);
        let mut cluster_changes = self.cluster.subscribe();
        let mut names = tokio::time::interval(NAME_REFRESH);
        names.tick().await;
        let mut registered = match self.store.watch(None) {
            Ok(watch) => Some(watch.live),
            Err(e) => {
                tracing::error!("cannot follow the APIService store: {e}");
                None
            }
        };
        loop {
            self.follow_cluster(&mut serving);
            let has_delegate = serving.backends.delegate.is_some();
            if has_delegate && tokio::time::Instant::now() >= serving.delegate_groups.next() {
                self.register_delegate(&mut serving).await;
            }
            self.publish_lifecycle(&serving);
            let next_delegate = serving.delegate_groups.next();
            let forced = tokio::select! {
                _ = poll.tick() => false,
                _ = async {
                    match hangup.as_mut() {
                        Some(h) => { h.recv().await; }
                        None => std::future::pending::<()>().await,
                    }
                } => true,
                _ = tokio::time::sleep_until(next_delegate), if has_delegate => continue,
                () = next_registration(&mut registered) => {
                    self.apply_registered(&serving);
                    continue;
                }
                _ = names.tick() => {
                    self.refresh_names(&serving);
                    continue;
                }
                Ok(()) = cluster_changes.changed() => {
                    cluster_changes.borrow_and_update();
                    self.apply_cluster(&serving);
                    continue;
                }
                _ = shutdown.changed() => return,
            };
            self.poll_config(&mut serving, forced);
            self.poll_credentials(&mut serving);
        }
    }
}

#[cfg(test)]
mod tests;
