//! The route table the request path reads: the registry plus, for every remote APIService and the
//! delegate, ready-to-use upstream peers. Built off the request path and published whole.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use apiagg_config::{Backend, DelegateConfig, Endpoint, Registry};
use apiagg_discovery::{
    legacy_group, legacy_group_list, render_legacy, ApiServiceRecord, RenderedDoc,
};
use pingora_core::protocols::ALPN;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::utils::tls::{parse_x509, WrappedX509};
use rustls::pki_types::CertificateDer;

use crate::health_state::{EndpointHealth, HealthBook};
use crate::metrics::{GroupVersionMetrics, Metrics};
use crate::tls;

/// One reachable endpoint of an upstream.
pub struct UpstreamEndpoint {
    /// Pingora peer template (cloned per request).
    pub peer: HttpPeer,
    /// Resolved address.
    pub addr: SocketAddr,
    /// Endpoint speaks TLS.
    pub tls: bool,
    /// `host:port` as configured, for `Host` and `X-Forwarded-Host`.
    pub authority: String,
    /// The endpoint URL as configured.
    pub url: String,
    /// Health shared with the availability controller.
    pub health: Arc<EndpointHealth>,
}

/// Where the requests of one APIService (or the delegate) go.
pub struct Upstream {
    /// APIService name, or `delegate`.
    pub label: String,
    /// TLS server name (`<svc>.<ns>.svc`, or the delegate's host).
    pub server_name: String,
    /// Endpoints, in configured order.
    pub endpoints: Vec<UpstreamEndpoint>,
    /// Client-sent credentials and identity headers are removed (remote backends).
    pub strip_credentials: bool,
    /// rustls config for connections apiagg opens itself (HTTP/1.1 only).
    pub tls_config: Arc<rustls::ClientConfig>,
    /// Actively probed, so failed endpoints can be ejected (remote APIServices; the delegate is
    /// never ejected).
    pub health_checked: bool,
    /// Per-backend request metrics (remote APIServices only).
    pub metrics: Option<Arc<GroupVersionMetrics>>,
    next: AtomicUsize,
}

impl Upstream {
    /// Picks the next healthy endpoint (round robin over the healthy ones); `None` when every
    /// endpoint is failed.
    pub fn pick(&self) -> Option<usize> {
        let n = self.endpoints.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| self.endpoints[i].health.is_healthy())
    }

    /// Whether some endpoint is healthy.
    pub fn available(&self) -> bool {
        self.endpoints.iter().any(|e| e.health.is_healthy())
    }
}

/// What the request path needs, published as one snapshot.
pub struct RouteTable {
    /// Every APIService.
    pub registry: Arc<Registry>,
    /// Upstream per registry entry (same order); `None` for local APIServices and for remote ones
    /// whose Service has no endpoints.
    pub upstreams: Vec<Option<Arc<Upstream>>>,
    /// The delegate, when configured.
    pub delegate: Option<Arc<Upstream>>,
    /// Legacy discovery built from the APIServices (spec §5): `/apis` and `/apis/<group>`.
    pub legacy: LegacyDiscovery,
}

/// Legacy discovery documents, rendered once per registry.
pub struct LegacyDiscovery {
    /// `APIGroupList` for `/apis`.
    pub apis: RenderedDoc,
    /// `APIGroup` for `/apis/<group>`, for every group with an APIService.
    pub groups: HashMap<String, RenderedDoc>,
}

impl LegacyDiscovery {
    /// Renders the legacy documents of a registry.
    pub fn build(registry: &Registry) -> Result<LegacyDiscovery, String> {
        let records: Vec<ApiServiceRecord<'_>> = registry
            .entries()
            .iter()
            .map(|e| ApiServiceRecord {
                name: &e.name,
                group: &e.group,
                version: &e.version,
                group_priority_minimum: e.group_priority_minimum,
                version_priority: e.version_priority,
            })
            .collect();
        let apis = render_legacy(&legacy_group_list(&records)).map_err(|e| e.to_string())?;
        let mut groups = HashMap::new();
        for e in registry.entries() {
            if e.group.is_empty() || groups.contains_key(&e.group) {
                continue;
            }
            if let Some(group) = legacy_group(&records, &e.group) {
                let doc = render_legacy(&group).map_err(|e| e.to_string())?;
                groups.insert(e.group.clone(), doc);
            }
        }
        Ok(LegacyDiscovery { apis, groups })
    }
}

impl RouteTable {
    /// An empty table (nothing registered yet).
    pub fn empty() -> RouteTable {
        let registry = Arc::new(Registry::default());
        let legacy = LegacyDiscovery::build(&registry).unwrap_or_else(|_| LegacyDiscovery {
            apis: RenderedDoc {
                bytes: bytes::Bytes::new(),
                etag: String::new(),
                content_type: "application/json",
            },
            groups: HashMap::new(),
        });
        RouteTable {
            registry,
            upstreams: Vec::new(),
            delegate: None,
            legacy,
        }
    }
}

/// TLS settings shared by the endpoints of one upstream.
struct TlsSettings<'a> {
    ca: Option<&'a [CertificateDer<'static>]>,
    insecure: bool,
    server_name: &'a str,
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}:{port}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}:{port} resolves to no address"))
}

fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn build_endpoint(
    ep: &Endpoint,
    settings: &TlsSettings<'_>,
    book: &HealthBook,
) -> Result<UpstreamEndpoint, String> {
    let addr = resolve(&ep.host, ep.port)?;
    let mut peer = HttpPeer::new(addr, ep.tls, settings.server_name.to_string());
    let options = &mut peer.options;
    options.connection_timeout = Some(Duration::from_secs(5));
    options.total_connection_timeout = Some(Duration::from_secs(10));
    options.idle_timeout = Some(Duration::from_secs(90));
    // Dead pooled connections are noticed within about 5 s: keepalive probes after 2 s idle,
    // HTTP/2 pings every 2 s, and unacknowledged data times out after 5 s.
    options.tcp_keepalive = Some(pingora_core::protocols::l4::ext::TcpKeepalive {
        idle: Duration::from_secs(2),
        interval: Duration::from_secs(1),
        count: 2,
        #[cfg(target_os = "linux")]
        user_timeout: Duration::from_secs(5),
    });
    if ep.tls {
        options.alpn = ALPN::H2H1;
        options.max_h2_streams = 100;
        options.h2_ping_interval = Some(Duration::from_secs(2));
        options.verify_cert = !settings.insecure;
        options.verify_hostname = !settings.insecure;
        if let Some(ca) = settings.ca {
            let wrapped: Vec<WrappedX509> = ca
                .iter()
                .map(|c| WrappedX509::new(c.to_vec(), parse_x509))
                .collect();
            options.ca = Some(Arc::from(wrapped.into_boxed_slice()));
        }
    }
    // Connections are pooled, and endpoints health-checked, by this key: the same endpoint with
    // the same TLS trust is one backend however many APIServices point at it; for plain HTTP the
    // URL alone identifies it.
    let mut hasher = DefaultHasher::new();
    ep.url.hash(&mut hasher);
    if ep.tls {
        settings.server_name.hash(&mut hasher);
        settings.insecure.hash(&mut hasher);
        if let Some(ca) = settings.ca {
            for c in ca {
                c.as_ref().hash(&mut hasher);
            }
        }
    }
    peer.group_key = hasher.finish();
    Ok(UpstreamEndpoint {
        health: book.endpoint(peer.group_key),
        peer,
        addr,
        tls: ep.tls,
        authority: authority(&ep.host, ep.port),
        url: ep.url.clone(),
    })
}

/// Builds an upstream; `remote` is true for remote APIServices (credentials stripped, endpoints
/// health-checked) and false for the delegate.
fn build_upstream(
    label: String,
    endpoints: &[Endpoint],
    settings: TlsSettings<'_>,
    remote: bool,
    book: &HealthBook,
) -> Result<Upstream, String> {
    let built = endpoints
        .iter()
        .map(|e| build_endpoint(e, &settings, book))
        .collect::<Result<Vec<_>, _>>()?;
    let tls_config = tls::client_config(settings.ca, settings.insecure, &[b"http/1.1"])?;
    Ok(Upstream {
        label,
        server_name: settings.server_name.to_string(),
        endpoints: built,
        strip_credentials: remote,
        tls_config,
        health_checked: remote,
        metrics: None,
        next: AtomicUsize::new(0),
    })
}

/// Builds the delegate upstream from its config.
pub fn build_delegate(config: &DelegateConfig, book: &HealthBook) -> Result<Upstream, String> {
    let ca = config
        .ca_pem
        .as_deref()
        .map(tls::parse_ca_pem)
        .transpose()
        .map_err(|e| format!("delegate caFile: {e}"))?;
    let endpoint =
        apiagg_config::registry::parse_endpoint(config.url.origin().ascii_serialization().as_str())
            .map_err(|e| format!("delegate: {e}"))?;
    let server_name = endpoint.host.clone();
    build_upstream(
        "delegate".into(),
        &[endpoint],
        TlsSettings {
            ca: ca.as_deref(),
            insecure: config.insecure_skip_tls_verify,
            server_name: &server_name,
        },
        false,
        book,
    )
}

/// Builds the route table for a registry. Fails with the APIService and the reason when an
/// endpoint cannot be resolved or a CA bundle is unusable.
pub fn build(
    registry: Arc<Registry>,
    delegate: Option<Arc<Upstream>>,
    book: &HealthBook,
    metrics: &Metrics,
) -> Result<RouteTable, String> {
    let mut upstreams = Vec::with_capacity(registry.entries().len());
    for entry in registry.entries() {
        let upstream = match &entry.backend {
            Backend::Local => None,
            Backend::Remote(remote) => match &remote.endpoints {
                Some(endpoints) if !endpoints.is_empty() => {
                    let ca = remote
                        .ca_bundle
                        .as_deref()
                        .map(tls::parse_ca_pem)
                        .transpose()
                        .map_err(|e| format!("APIService {}: spec.caBundle: {e}", entry.name))?;
                    let mut upstream = build_upstream(
                        entry.name.clone(),
                        endpoints,
                        TlsSettings {
                            ca: ca.as_deref(),
                            insecure: remote.insecure_skip_tls_verify,
                            server_name: &remote.server_name,
                        },
                        true,
                        book,
                    )
                    .map_err(|e| format!("APIService {}: {e}", entry.name))?;
                    upstream.metrics = Some(metrics.group_version(&entry.group, &entry.version));
                    Some(Arc::new(upstream))
                }
                _ => None,
            },
        };
        upstreams.push(upstream);
    }
    let legacy = LegacyDiscovery::build(&registry)?;
    Ok(RouteTable {
        registry,
        upstreams,
        delegate,
        legacy,
    })
}
