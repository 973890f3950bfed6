//! The registry controller: turns the config file and the delegate's group-versions into the
//! route table, installs the first one before the listener opens, and hot-reloads on file change
//! and SIGHUP. A rejected config never replaces the serving one.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use apiagg_config::{
    ConfigError, GatewayConfig, LocalGroupVersion, Registry, RegistryError, Sources,
};
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use tokio::signal::unix::{signal, SignalKind};

use super::autoregister::DelegateGroups;
use crate::backends::{
    build_delegate, build_table, BuildError, Clients, HealthBook, TableError, Upstream,
};
use crate::observe::{Lifecycle, Metrics, Milestone};
use crate::state::{Gateway, Options, Routes};

/// Why a config was rejected (the previous one keeps serving). Not retryable: the input must
/// change.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The files cannot be read or parsed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An APIService is invalid or conflicts with another.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The delegate's upstream cannot be built.
    #[error(transparent)]
    Delegate(#[from] BuildError),
    /// The route table cannot be built.
    #[error(transparent)]
    Table(#[from] TableError),
}

/// What the controller keeps between rounds.
struct Serving {
    sources: Sources,
    config: GatewayConfig,
    delegate: Option<Arc<Upstream>>,
    delegate_groups: DelegateGroups,
}

/// Watches the config and keeps the route table current.
pub struct RegistryController {
    routes: Arc<Routes>,
    health: Arc<HealthBook>,
    clients: Arc<Clients>,
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
    options: Options,
    path: PathBuf,
    initial: Mutex<Option<Serving>>,
}

fn delegate_of(
    config: &GatewayConfig,
    health: &HealthBook,
) -> Result<Option<Arc<Upstream>>, Error> {
    let delegate = config.delegate.as_ref();
    Ok(delegate
        .map(|d| build_delegate(d, health))
        .transpose()?
        .map(Arc::new))
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
            options: gateway.options.clone(),
            path,
            initial: Mutex::new(None),
        };
        let first = delegate_of(&config, &controller.health).and_then(|delegate| {
            controller.install(&config, delegate.as_ref(), &[])?;
            Ok(delegate)
        });
        controller.record(&first);
        let serving = Serving {
            sources,
            config,
            delegate: first?,
            delegate_groups: DelegateGroups::default(),
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
        delegate: Option<&Arc<Upstream>>,
        delegate_groups: &[LocalGroupVersion],
    ) -> Result<(), Error> {
        let registry = Registry::build(config, delegate_groups)?;
        let count = registry.entries().len();
        let table = build_table(
            Arc::new(registry),
            delegate.cloned(),
            &self.health,
            &self.metrics,
        )?;
        let live = table
            .registry
            .entries()
            .iter()
            .map(|e| format!("{}/{}", e.group, e.version))
            .collect();
        self.metrics.retain_group_versions(&live);
        self.clients.retain(&table.endpoint_keys());
        self.routes.publish(table);
        self.metrics.registered.set(count as i64);
        Ok(())
    }

    fn record<T>(&self, result: &Result<T, Error>) {
        let metrics = &self.metrics;
        match result {
            Ok(_) => {
                metrics.reloads.with_label_values(&["success"]).inc();
                metrics.last_reload_ok.set(1);
            }
            Err(e) => {
                tracing::error!(config = %self.path.display(), "config rejected, the previous config keeps serving: {e}");
                metrics.reloads.with_label_values(&["failure"]).inc();
                metrics.last_reload_ok.set(0);
            }
        }
    }

    /// Applies changed sources; on error nothing changes.
    fn reload(&self, serving: &mut Serving, sources: Sources) -> Result<(), Error> {
        let config = sources.parse()?;
        if config.listen != serving.config.listen || config.tls != serving.config.tls {
            tracing::warn!("listen and tls changes take effect only after a restart");
        }
        if config.delegate == serving.config.delegate {
            let groups = serving.delegate_groups.groups.as_deref().unwrap_or(&[]);
            self.install(&config, serving.delegate.as_ref(), groups)?;
            serving.sources = sources;
            serving.config = config;
            return Ok(());
        }
        let delegate = delegate_of(&config, &self.health)?;
        self.install(&config, delegate.as_ref(), &[])?;
        *serving = Serving {
            sources,
            config,
            delegate,
            delegate_groups: DelegateGroups::default(),
        };
        Ok(())
    }

    /// Reads the delegate's group-versions and reinstalls the routes when they changed.
    async fn register_delegate(&self, serving: &mut Serving) {
        let Some(delegate) = serving.delegate.clone() else {
            return;
        };
        let refresh = self.options.delegate_refresh;
        let groups = &mut serving.delegate_groups;
        if let Some(groups) = groups.refresh(&delegate, &self.clients, refresh).await {
            match self.install(&serving.config, Some(&delegate), &groups) {
                Ok(()) => tracing::info!(
                    count = groups.len(),
                    "registered the delegate's group-versions"
                ),
                Err(e) => tracing::error!("cannot register the delegate's group-versions: {e}"),
            }
        }
    }

    fn publish_lifecycle(&self, serving: &Serving) {
        if serving.delegate.is_none() || serving.delegate_groups.groups.is_some() {
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
        loop {
            let has_delegate = serving.delegate.is_some();
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
                _ = shutdown.changed() => return,
            };
            self.poll_config(&mut serving, forced);
        }
    }
}
