//! Re-resolution without a config change: the cluster's Services (their reflectors started,
//! restarted or stopped with the config) and endpoint names (re-resolved periodically, every
//! address used).

use std::net::IpAddr;
use std::sync::Arc;

use apiagg_config::{Backend, ServiceResolution};

use super::super::services::ClusterWatch;
use super::{RegistryController, Serving};

impl RegistryController {
    /// Starts, restarts (new delegate or mode) or stops the reflectors of the cluster's
    /// Services as the serving config asks.
    pub(super) fn follow_cluster(&self, serving: &mut Serving) {
        let mode = serving.config.service_resolution;
        let delegate = serving.backends.delegate.clone();
        let current = serving
            .cluster_watch
            .as_ref()
            .map(|w| (w.mode, w.delegate.clone()));
        let wanted = delegate.filter(|_| mode != ServiceResolution::Config);
        let same = match (&current, &wanted) {
            (Some((m, d)), Some(w)) => *m == mode && Arc::ptr_eq(d, w),
            (None, None) => true,
            _ => false,
        };
        if same {
            return;
        }
        serving.cluster_watch = wanted.and_then(|delegate| {
            ClusterWatch::spawn(mode, delegate, self.clients.clone(), self.cluster.clone())
        });
    }

    /// Reinstalls the routes when a change of the cluster's Services changes a resolution.
    pub(super) fn apply_cluster(&self, serving: &Serving) {
        let groups = serving.delegate_groups.groups.as_deref();
        let built = self.registry(&serving.config, groups);
        let current = self.routes.load();
        if built.registry.entries() == current.registry.entries()
            && built.displaced == *current.displaced
        {
            return;
        }
        if let Err(e) = self.publish(built, &serving.config, &serving.backends, groups, false) {
            tracing::error!("cannot install the cluster's Services: {e}");
        }
    }

    /// Re-resolves endpoint names (a Service's DNS name, a headless set of pods) and republishes
    /// the routes when an address changed.
    pub(super) fn refresh_names(&self, serving: &Serving) {
        let named = self
            .routes
            .load()
            .registry
            .entries()
            .iter()
            .any(|e| match &e.backend {
                Backend::Remote(r) => r
                    .endpoints
                    .as_ref()
                    .is_ok_and(|eps| eps.iter().any(|ep| ep.host.parse::<IpAddr>().is_err())),
                Backend::Local => false,
            });
        if !named {
            return;
        }
        let groups = serving.delegate_groups.groups.as_deref();
        let built = self.registry(&serving.config, groups);
        if let Err(e) = self.publish(built, &serving.config, &serving.backends, groups, true) {
            tracing::warn!("cannot re-resolve endpoint names: {e}");
        }
    }
}
