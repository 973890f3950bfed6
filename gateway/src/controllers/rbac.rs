//! The cluster's RBAC objects for the RBAC authorizer of `--authorization-config`: one
//! reflector per kind (`roles`, `clusterroles`, `rolebindings`, `clusterrolebindings` of
//! `rbac.authorization.k8s.io/v1`) lists and then watches the delegate with apiagg's own
//! credentials; one applier owns the objects and publishes a new policy after every batch of
//! changes, so a deleted binding's grant goes with the next request. Nothing is published
//! before all four kinds are listed (readyz waits for it, `informer-sync`); while the delegate
//! is away the last published objects keep deciding, and reflectors restart when the config
//! names another delegate.

use std::sync::Arc;

use apiagg_authz::rbac::{PolicyBuilder, RbacKind, RbacObject};
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use serde_json::Value;
use tokio::sync::mpsc;

use super::reflector::{Group, Learned};
use crate::auth::RbacSource;
use crate::backends::{Clients, Upstream};
use crate::state::Routes;
use apiagg_observe::{Lifecycle, Milestone};

/// The kinds followed, in the order of `listed`.
const KINDS: [RbacKind; 4] = [
    RbacKind::ClusterRole,
    RbacKind::ClusterRoleBinding,
    RbacKind::Role,
    RbacKind::RoleBinding,
];

/// The collection of `kind` with `query`.
fn path(kind: RbacKind, query: &str) -> String {
    let resource = match kind {
        RbacKind::Role => "roles",
        RbacKind::ClusterRole => "clusterroles",
        RbacKind::RoleBinding => "rolebindings",
        RbacKind::ClusterRoleBinding => "clusterrolebindings",
    };
    format!("/apis/rbac.authorization.k8s.io/v1/{resource}?{query}")
}

/// What the RBAC controller uses.
pub struct Handles {
    /// Where the policy is published.
    pub source: Arc<RbacSource>,
    /// The routes, for the delegate.
    pub routes: Routes,
    /// apiagg's own clients.
    pub clients: Arc<Clients>,
    /// Reached `AuthorizerSynced` once every kind is listed.
    pub lifecycle: Arc<Lifecycle>,
}

/// Follows the delegate's RBAC objects, restarted when the delegate changes.
pub struct RbacController {
    handles: Handles,
}

impl RbacController {
    /// A controller over `handles`; nothing runs before `start`.
    pub fn new(handles: Handles) -> RbacController {
        RbacController { handles }
    }
}

#[async_trait]
impl BackgroundService for RbacController {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut routes = self.handles.routes.subscribe();
        let mut running: Option<(Arc<Upstream>, Group)> = None;
        loop {
            let delegate = self.handles.routes.load().delegate.clone();
            let same = match (&running, &delegate) {
                (Some((a, _)), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            if !same {
                running = delegate.map(|d| {
                    let applier = Applier {
                        builder: PolicyBuilder::new(),
                        listed: [false; 4],
                        source: self.handles.source.clone(),
                        lifecycle: self.handles.lifecycle.clone(),
                    };
                    let clients = self.handles.clients.clone();
                    let group = Group::spawn(
                        &KINDS,
                        path,
                        "RBAC objects",
                        (d.clone(), clients),
                        |learned| applier.run(learned),
                    );
                    (d, group)
                });
                if running.is_none() {
                    tracing::warn!(
                        "RBAC authorizer: no delegate is configured to read the cluster's roles and bindings from"
                    );
                }
            }
            tokio::select! {
                changed = routes.changed() => if changed.is_err() { break },
                _ = shutdown.changed() => break,
            }
        }
        drop(running);
    }
}

/// The only owner of the objects of one delegate.
struct Applier {
    builder: PolicyBuilder,
    listed: [bool; 4],
    source: Arc<RbacSource>,
    lifecycle: Arc<Lifecycle>,
}

impl Applier {
    /// Applies what the reflectors learn, publishing after each batch once every kind is
    /// listed.
    async fn run(mut self, mut learned: mpsc::Receiver<Learned<RbacKind>>) {
        while let Some(first) = learned.recv().await {
            self.learn(first);
            while let Ok(more) = learned.try_recv() {
                self.learn(more);
            }
            if self.listed.iter().all(|&l| l) {
                self.source.publish(self.builder.snapshot());
                if !self.lifecycle.reached(Milestone::AuthorizerSynced) {
                    let counts = self.builder.snapshot().counts();
                    tracing::info!(
                        ?counts,
                        "RBAC authorizer: the cluster's roles and bindings are listed"
                    );
                    self.lifecycle.reach(Milestone::AuthorizerSynced);
                }
            }
        }
    }

    fn learn(&mut self, learned: Learned<RbacKind>) {
        match learned {
            Learned::Listed(kind, items) => {
                let objects = items
                    .into_iter()
                    .filter_map(|item| decoded(kind, item))
                    .collect::<Vec<_>>();
                if let Err(e) = self.builder.replace_all(kind, objects) {
                    tracing::warn!(%kind, "RBAC objects refused: {e}");
                }
                if let Some(i) = KINDS.iter().position(|k| *k == kind) {
                    self.listed[i] = true;
                }
            }
            Learned::Changed(kind, change) if change.deleted => {
                let meta = &change.object["metadata"];
                let namespace = meta["namespace"].as_str().unwrap_or("");
                let name = meta["name"].as_str().unwrap_or("");
                self.builder.remove(kind, namespace, name);
            }
            Learned::Changed(kind, change) => {
                if let Some(object) = decoded(kind, change.object) {
                    if let Err(e) = self.builder.apply(object) {
                        tracing::warn!(%kind, "RBAC object refused: {e}");
                    }
                }
            }
        }
    }
}

/// An object of `kind`, or `None` (logged) when it cannot be read.
fn decoded(kind: RbacKind, value: Value) -> Option<RbacObject> {
    RbacObject::from_json_as(kind, value)
        .map_err(|e| tracing::warn!(%kind, "ignoring an RBAC object that cannot be read: {e}"))
        .ok()
}
