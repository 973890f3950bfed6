//! The config controller: installs the first routes, registers the delegate's group-versions,
//! and hot-reloads the config on file change and SIGHUP. A rejected config never replaces the
//! serving one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use apiagg_config::{GatewayConfig, LocalGroupVersion, Registry, Sources};
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use tokio::signal::unix::{signal, SignalKind};

use crate::health_state::HealthBook;
use crate::routes::{self, Upstream};
use crate::state::Gateway;

/// Watches the config and keeps the route table current.
pub struct ConfigController {
    gateway: Arc<Gateway>,
    path: PathBuf,
    initial: std::sync::Mutex<Option<Serving>>,
}

impl ConfigController {
    /// Installs the routes of an already validated config right away (so they serve from the
    /// first request) and returns the controller that keeps them current.
    pub fn new(
        gateway: Arc<Gateway>,
        path: PathBuf,
        sources: Sources,
        config: GatewayConfig,
    ) -> Result<ConfigController, String> {
        let delegate = build_delegate(&config, &gateway.health)?;
        let controller = ConfigController {
            gateway,
            path,
            initial: std::sync::Mutex::new(None),
        };
        let first = controller.install(&config, delegate.as_ref(), &[]);
        controller.record(&first);
        first?;
        controller.gateway.lifecycle.set_config_loaded();
        let serving = Serving {
            sources,
            config,
            delegate,
            delegate_groups: None,
        };
        controller.publish_lifecycle(&serving);
        *controller.initial.lock().unwrap_or_else(|e| e.into_inner()) = Some(serving);
        Ok(controller)
    }
}

/// What the controller keeps between rounds.
struct Serving {
    sources: Sources,
    config: GatewayConfig,
    delegate: Option<Delegate>,
    delegate_groups: Option<Vec<LocalGroupVersion>>,
}

type Delegate = Arc<Upstream>;

fn build_delegate(config: &GatewayConfig, book: &HealthBook) -> Result<Option<Delegate>, String> {
    config
        .delegate
        .as_ref()
        .map(|d| routes::build_delegate(d, book).map(Arc::new))
        .transpose()
}

impl ConfigController {
    /// Builds and publishes the routes for `config`; nothing changes on error.
    fn install(
        &self,
        config: &GatewayConfig,
        delegate: Option<&Delegate>,
        delegate_groups: &[LocalGroupVersion],
    ) -> Result<(), String> {
        let registry = Registry::build(config, delegate_groups).map_err(|e| e.to_string())?;
        let count = registry.entries().len();
        let table = routes::build(
            Arc::new(registry),
            delegate.cloned(),
            &self.gateway.health,
            &self.gateway.metrics,
        )?;
        let live = table
            .registry
            .entries()
            .iter()
            .map(|e| format!("{}/{}", e.group, e.version))
            .collect();
        self.gateway.metrics.retain_group_versions(&live);
        self.gateway.routes.store(Arc::new(table));
        self.gateway.metrics.registered.set(count as i64);
        self.gateway.routes_generation.send_modify(|g| *g += 1);
        Ok(())
    }

    fn record(&self, result: &Result<(), String>) {
        let metrics = &self.gateway.metrics;
        match result {
            Ok(()) => {
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

    /// Applies changed sources; on error nothing changes. Returns whether the delegate changed.
    fn reload(&self, serving: &mut Serving, sources: Sources) -> Result<bool, String> {
        let config = sources.parse().map_err(|e| e.to_string())?;
        if config.listen != serving.config.listen || config.tls != serving.config.tls {
            tracing::warn!("listen and tls changes take effect only after a restart");
        }
        if config.delegate == serving.config.delegate {
            let groups = serving.delegate_groups.as_deref().unwrap_or(&[]);
            self.install(&config, serving.delegate.as_ref(), groups)?;
            serving.sources = sources;
            serving.config = config;
            return Ok(false);
        }
        let delegate = build_delegate(&config, &self.gateway.health)?;
        self.install(&config, delegate.as_ref(), &[])?;
        *serving = Serving {
            sources,
            config,
            delegate,
            delegate_groups: None,
        };
        Ok(true)
    }

    /// Fetches the delegate's group-versions and reinstalls the routes with them.
    async fn register_delegate(&self, serving: &mut Serving) -> Result<(), String> {
        let Some(delegate) = &serving.delegate else {
            return Ok(());
        };
        let groups = crate::delegate::group_versions(delegate).await?;
        if serving.delegate_groups.as_ref() != Some(&groups) {
            self.install(&serving.config, Some(delegate), &groups)?;
            tracing::info!(
                count = groups.len(),
                "registered the delegate's group-versions"
            );
        }
        serving.delegate_groups = Some(groups);
        Ok(())
    }

    fn publish_lifecycle(&self, serving: &Serving) {
        let lc = &self.gateway.lifecycle;
        if serving.delegate.is_none() || serving.delegate_groups.is_some() {
            lc.set_delegate_registered();
            lc.try_complete();
        }
    }
}

#[async_trait]
impl BackgroundService for ConfigController {
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
        let mut poll = tokio::time::interval(self.gateway.options.reload_interval);
        let mut delegate_backoff = Duration::from_millis(250);
        let mut next_delegate = tokio::time::Instant::now();
        loop {
            if serving.delegate.is_some() && tokio::time::Instant::now() >= next_delegate {
                match self.register_delegate(&mut serving).await {
                    Ok(()) => {
                        delegate_backoff = Duration::from_millis(250);
                        next_delegate =
                            tokio::time::Instant::now() + self.gateway.options.delegate_refresh;
                    }
                    Err(e) => {
                        tracing::warn!("reading the delegate's groups failed (retrying in {delegate_backoff:?}): {e}");
                        next_delegate = tokio::time::Instant::now() + delegate_backoff;
                        delegate_backoff = (delegate_backoff * 2).min(Duration::from_secs(10));
                    }
                }
            }
            self.publish_lifecycle(&serving);

            let forced = tokio::select! {
                _ = poll.tick() => false,
                _ = async {
                    match hangup.as_mut() {
                        Some(h) => { h.recv().await; }
                        None => std::future::pending::<()>().await,
                    }
                } => true,
                _ = tokio::time::sleep_until(next_delegate), if serving.delegate.is_some() => continue,
                _ = shutdown.changed() => return,
            };
            let sources = match Sources::read(&self.path) {
                Ok(s) => s,
                Err(e) => {
                    if forced {
                        self.record(&Err(e.to_string()));
                    }
                    continue;
                }
            };
            if !forced && sources == serving.sources {
                continue;
            }
            if forced {
                tracing::info!("SIGHUP: reloading the config");
            }
            let delegate_changed = match self.reload(&mut serving, sources.clone()) {
                Ok(changed) => {
                    tracing::info!(
                        apiservices = serving.config.api_services.len(),
                        "config reloaded"
                    );
                    self.record(&Ok(()));
                    changed
                }
                Err(e) => {
                    // Remember the rejected bytes so the same error is not logged every tick.
                    serving.sources = sources;
                    self.record(&Err(e));
                    false
                }
            };
            if delegate_changed {
                next_delegate = tokio::time::Instant::now();
            }
        }
    }
}
