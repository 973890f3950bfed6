//! What the registry is built from besides the config file: the delegate and the client
//! certificates (loaded from their files), the APIServices registered through the API, and the
//! read-only view of declared APIServices the API lists.

use std::sync::Arc;

use apiagg_config::{
    split_stored, Displaced, GatewayConfig, LocalGroupVersion, Registry, ServiceResolution,
    SourcedApiService,
};
use tokio::sync::broadcast;

use super::{Error, RegistryController};
use crate::backends::{
    build_delegate, delegate_credentials, BuildError, ClientIdentity, HealthBook, RouteTable,
    Upstream,
};
use crate::observe::CertificateKind;
use crate::store::{Event, Store};

/// The delegate and the certificate presented to remote backends, as loaded from their files.
pub(super) struct Backends {
    pub(super) delegate: Option<Arc<Upstream>>,
    pub(super) proxy_identity: Option<Arc<ClientIdentity>>,
    /// Fingerprints of the client certificates (delegate, proxy), to notice rotations.
    pub(super) fingerprints: (Option<u64>, Option<u64>),
    /// The earliest `notAfter` of the client certificate presented to the delegate.
    delegate_client_not_after: Option<i64>,
}

impl Backends {
    pub(super) fn load(config: &GatewayConfig, health: &HealthBook) -> Result<Backends, Error> {
        let proxy_identity = proxy_identity(config)?;
        let (delegate, delegate_client_not_after) = delegate_of(config, health)?;
        Ok(Backends {
            delegate,
            fingerprints: fingerprints(config, proxy_identity.as_deref())?,
            proxy_identity,
            delegate_client_not_after,
        })
    }

    /// The earliest `notAfter` of each kind of certificate these backends and the routes of
    /// `table` use (`None`: none of that kind), for the expiry metric.
    pub(super) fn expiry(&self, table: &RouteTable) -> [(CertificateKind, Option<i64>); 4] {
        let backend_ca = table
            .upstreams
            .iter()
            .flatten()
            .filter_map(|u| u.ca_not_after)
            .min();
        let proxy_client = self.proxy_identity.as_ref().and_then(|i| i.not_after);
        let delegate_ca = table.delegate.as_ref().and_then(|d| d.ca_not_after);
        [
            (CertificateKind::ProxyClient, proxy_client),
            (
                CertificateKind::DelegateClient,
                self.delegate_client_not_after,
            ),
            (CertificateKind::DelegateCa, delegate_ca),
            (CertificateKind::BackendCa, backend_ca),
        ]
    }
}

/// The fingerprints of the client certificate files the config names (delegate, proxy).
pub(super) fn fingerprints(
    config: &GatewayConfig,
    proxy: Option<&ClientIdentity>,
) -> Result<(Option<u64>, Option<u64>), Error> {
    let delegate = config
        .delegate
        .as_ref()
        .and_then(|d| d.client_cert.as_ref())
        .map(|source| ClientIdentity::load(source).map(|i| i.fingerprint))
        .transpose()
        .map_err(|error| {
            Error::Delegate(BuildError::Credentials {
                what: "delegate client certificate",
                error,
            })
        })?;
    Ok((delegate, proxy.map(|p| p.fingerprint)))
}

/// The APIServices the API lists read-only: the config file's, annotated with where they are
/// declared, and the local ones registered for the delegate's group-versions.
pub(super) fn declared(
    config: &GatewayConfig,
    delegate: &[LocalGroupVersion],
) -> Vec<serde_json::Value> {
    let mut out: Vec<serde_json::Value> = config
        .api_services
        .iter()
        .filter_map(|s| {
            let mut value = serde_json::to_value(&s.object).ok()?;
            value["apiVersion"] = "apiregistration.k8s.io/v1".into();
            value["kind"] = "APIService".into();
            value["metadata"]["annotations"][crate::apiservices::DECLARED_BY] =
                s.origin.clone().into();
            Some(value)
        })
        .collect();
    for gv in delegate {
        let name = format!("{}.{}", gv.version, gv.group);
        if out.iter().any(|o| o["metadata"]["name"] == name.as_str()) {
            continue;
        }
        let (gpm, vp) = apiagg_apis::builtin_priority(&gv.group, &gv.version);
        out.push(serde_json::json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": name, "annotations": {crate::apiservices::DECLARED_BY: "the delegate"}},
            "spec": {"group": gv.group, "version": gv.version, "groupPriorityMinimum": gpm, "versionPriority": vp},
        }));
    }
    out
}

pub(super) fn proxy_identity(config: &GatewayConfig) -> Result<Option<Arc<ClientIdentity>>, Error> {
    let Some(proxy) = &config.proxy_client else {
        return Ok(None);
    };
    let source = apiagg_config::CertSource::Files {
        cert: proxy.cert_file.clone(),
        key: proxy.key_file.clone(),
    };
    let identity = ClientIdentity::load(&source).map_err(Error::ProxyClient)?;
    Ok(Some(Arc::new(identity)))
}

/// The delegate's upstream, and the earliest `notAfter` of the client certificate apiagg
/// presents to it.
pub(super) fn delegate_of(
    config: &GatewayConfig,
    health: &HealthBook,
) -> Result<(Option<Arc<Upstream>>, Option<i64>), Error> {
    let Some(delegate) = config.delegate.as_ref() else {
        return Ok((None, None));
    };
    let credentials = delegate_credentials(delegate)?;
    let upstream = build_delegate(delegate, &credentials, health)?;
    let not_after = credentials.identity.as_ref().and_then(|i| i.not_after);
    Ok((Some(Arc::new(upstream)), not_after))
}

/// A registry and the stored APIServices an owner keeps out of it.
pub(super) struct Built {
    pub(super) registry: Registry,
    pub(super) displaced: Vec<Displaced>,
}

impl RegistryController {
    /// The registry of `config`, the stored APIServices and the delegate's group-versions
    /// (`None`: not known yet), with Services resolved as the config says; and the stored
    /// APIServices an owner displaces.
    pub(super) fn registry(
        &self,
        config: &GatewayConfig,
        delegate_groups: Option<&[LocalGroupVersion]>,
    ) -> Built {
        let groups = delegate_groups.unwrap_or(&[]);
        let (combined, displaced) = with_stored(config, self.store.as_ref(), groups);
        let registry = if config.service_resolution == ServiceResolution::Config {
            Registry::build(&combined, groups)
        } else {
            let cluster = self.cluster.lock();
            Registry::build_with(&combined, groups, Some(&cluster))
        };
        Built {
            registry,
            displaced,
        }
    }
}

/// `config` plus the APIServices registered through the API (a name in the config file wins;
/// a stored object that does not decode is left out), and the stored ones an owner displaces:
/// built-in groups of Kubernetes always, the delegate's group-versions (`delegate`) as far as
/// known. Checked at every build, so the delegate's group-version wins whenever it is known.
pub(super) fn with_stored(
    config: &GatewayConfig,
    store: &dyn Store,
    delegate: &[LocalGroupVersion],
) -> (GatewayConfig, Vec<Displaced>) {
    let (stored, _) = store.list();
    let mut registered = Vec::new();
    for value in stored {
        let Ok(object) = serde_json::from_value::<apiagg_apis::APIService>((*value).clone()) else {
            continue;
        };
        let name = object.metadata.name.clone().unwrap_or_default();
        if config
            .api_services
            .iter()
            .any(|s| s.object.metadata.name.as_deref() == Some(&name))
        {
            continue;
        }
        registered.push(SourcedApiService {
            object,
            origin: "the APIService API".into(),
        });
    }
    let (routable, displaced) = split_stored(registered, delegate);
    let mut combined = config.clone();
    combined.api_services.extend(routable);
    (combined, displaced)
}

/// Waits for the next change through the API, then takes every change already queued (a burst
/// of writes is one rebuild). Never returns without a receiver.
pub(super) async fn next_registration(registered: &mut Option<broadcast::Receiver<Event>>) {
    let Some(receiver) = registered.as_mut() else {
        return std::future::pending().await;
    };
    match receiver.recv().await {
        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
        Err(broadcast::error::RecvError::Closed) => {
            *registered = None;
            return;
        }
    }
    while receiver.try_recv().is_ok() {}
}
