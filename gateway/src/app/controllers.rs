//! The background controllers, each given the handles it uses: the snapshots' writers go to
//! their one writer each, everything else gets readers and the books it feeds.

use std::path::Path;

use anyhow::Context;
use apiagg_config::{GatewayConfig, Sources};
use pingora_core::server::Server;
use pingora_core::services::background::background_service;

use crate::backends::Reloadable;
use crate::controllers::{
    AvailabilityController, AvailabilityHandles, DiscoveryController, DiscoveryHandles,
    FileWatcher, OpenApiController, OpenApiHandles, RegistryController, RegistryHandles,
};
use crate::state::{Gateway, Writers};

/// Adds the registry (installing the first routes now), availability, discovery, OpenAPI and
/// file-watching controllers to `server`.
pub fn add(
    server: &mut Server,
    gateway: &Gateway,
    writers: Writers,
    watched: Vec<Reloadable>,
    (path, sources, config): (&Path, Sources, GatewayConfig),
) -> anyhow::Result<()> {
    let registry = RegistryController::new(
        RegistryHandles {
            routes: writers.routes,
            health: gateway.health.clone(),
            clients: gateway.clients.clone(),
            lifecycle: gateway.lifecycle.clone(),
            metrics: gateway.metrics.clone(),
            store: gateway.store.clone(),
            options: gateway.options.clone(),
        },
        path.to_path_buf(),
        sources,
        config,
    )
    .with_context(|| format!("config {}", path.display()))?;
    let mut watched = watched;
    watched.push(registry.config_files());
    server.add_service(background_service("registry controller", registry));
    let availability = AvailabilityController::new(AvailabilityHandles {
        routes: gateway.routes.clone(),
        health: gateway.health.clone(),
        clients: gateway.clients.clone(),
        book: writers.availability,
        metrics: gateway.metrics.clone(),
        store: gateway.store.clone(),
        options: gateway.options.probes,
    });
    server.add_service(background_service("availability controller", availability));
    let discovery = DiscoveryController::new(DiscoveryHandles {
        routes: gateway.routes.clone(),
        availability: gateway.availability.clone(),
        clients: gateway.clients.clone(),
        published: writers.discovery,
        lifecycle: gateway.lifecycle.clone(),
        metrics: gateway.metrics.clone(),
        refresh: gateway.options.discovery_refresh,
    });
    server.add_service(background_service("discovery controller", discovery));
    let openapi = OpenApiController::new(
        OpenApiHandles {
            routes: gateway.routes.clone(),
            clients: gateway.clients.clone(),
            published: writers.openapi,
            lifecycle: gateway.lifecycle.clone(),
            metrics: gateway.metrics.clone(),
            v2_demand: gateway.openapi_v2.clone(),
        },
        &gateway.options,
    );
    server.add_service(background_service("openapi controller", openapi));
    let files = FileWatcher::new(
        watched,
        gateway.options.reload_interval,
        gateway.metrics.clone(),
    );
    server.add_service(background_service("file watcher", files));
    Ok(())
}
