//! Input: the config file as last accepted, with what it names loaded from disk: the delegate's
//! upstream and the client certificates (apiagg's to the delegate, the proxy client
//! certificate remote backends see).

use std::collections::BTreeSet;
use std::sync::Arc;

use apiagg_config::{GatewayConfig, Sources};

use super::Error;
use crate::backends::{
    build_delegate, delegate_credentials, names_of, BuildError, ClientIdentity, HealthBook,
    HostPort, Names, RouteTable, Upstream,
};
use apiagg_observe::CertificateKind;

/// An accepted config and what it loaded; replaced whole when the files or the credentials
/// change.
pub struct Loaded {
    /// The bytes it was parsed from.
    pub sources: Sources,
    /// The parsed config.
    pub config: Arc<GatewayConfig>,
    /// The delegate and the client certificates it names.
    pub backends: Backends,
}

/// The host names of the delegate's endpoints.
pub fn delegate_names(config: &GatewayConfig) -> BTreeSet<HostPort> {
    let Some(delegate) = &config.delegate else {
        return BTreeSet::new();
    };
    let urls = if delegate.endpoints.is_empty() {
        std::slice::from_ref(&delegate.url)
    } else {
        &delegate.endpoints[..]
    };
    let hosts: Vec<(String, u16)> = urls
        .iter()
        .filter_map(|u| {
            let origin = u.origin().ascii_serialization();
            let ep = apiagg_config::parse_endpoint(&origin).ok()?;
            Some((ep.host, ep.port))
        })
        .collect();
    names_of(hosts.iter().map(|(h, p)| (h.as_str(), *p)))
}

/// The delegate and the certificate presented to remote backends, as loaded from their files.
pub struct Backends {
    pub(super) delegate: Option<Arc<Upstream>>,
    pub(super) proxy_identity: Option<Arc<ClientIdentity>>,
    /// Fingerprints of the client certificates (delegate, proxy), to notice rotations.
    pub(super) fingerprints: (Option<u64>, Option<u64>),
    /// The earliest `notAfter` of the client certificate presented to the delegate.
    delegate_client_not_after: Option<i64>,
}

impl Backends {
    /// Loads them; the delegate's host names resolve through `names`.
    pub(super) fn load(
        config: &GatewayConfig,
        health: &HealthBook,
        names: &Names,
    ) -> Result<Backends, Error> {
        let proxy_identity = proxy_identity(config)?;
        let (delegate, delegate_client_not_after) = delegate_of(config, health, names)?;
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
fn delegate_of(
    config: &GatewayConfig,
    health: &HealthBook,
    names: &Names,
) -> Result<(Option<Arc<Upstream>>, Option<i64>), Error> {
    let Some(delegate) = config.delegate.as_ref() else {
        return Ok((None, None));
    };
    let credentials = delegate_credentials(delegate)?;
    let upstream = build_delegate(delegate, &credentials, health, names)?;
    let not_after = credentials.identity.as_ref().and_then(|i| i.not_after);
    Ok((Some(Arc::new(upstream)), not_after))
}
