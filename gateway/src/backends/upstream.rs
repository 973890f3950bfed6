//! Where requests go: the upstream of one APIService (or the delegate) with ready-to-use pingora
//! peers per endpoint, round-robin over the healthy ones.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use apiagg_apis::WatchListMode;
use apiagg_config::{DelegateConfig, Endpoint};
use pingora_core::protocols::ALPN;

use super::pool::{IdleConnections, IDLE_PER_ENDPOINT};
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::utils::tls::{parse_x509, WrappedX509};
use rustls::pki_types::CertificateDer;

use super::certs::earliest_not_after;
use super::credentials::{BearerToken, ClientIdentity, CredentialError, DelegateCredentials};
use super::endpoint_health::{EndpointHealth, HealthBook};
use super::names::Names;
use super::slots::Slots;
use super::tls::{self, TlsError};
use super::watch_list::WatchListSupport;
use apiagg_observe::GroupVersionMetrics;

/// Streams apiagg opens on one HTTP/2 connection to a backend (see where it is set).
const H2_STREAMS_PER_CONNECTION: usize = 100;

/// Why an upstream cannot be built. Only [`BuildError::Resolve`] may heal by itself (DNS).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A host name did not resolve (retryable: names come and go).
    #[error("cannot resolve {authority}: {source}")]
    Resolve {
        authority: String,
        source: std::io::Error,
    },
    /// A host name resolved to nothing (retryable).
    #[error("{0} resolves to no address")]
    NoAddress(String),
    /// `host:port` cannot be sent as a `Host` header (the input must change).
    #[error("{0} is not a valid Host header value")]
    InvalidAuthority(String),
    /// The CA bundle is unusable (the input must change).
    #[error("{what}: {source}")]
    Trust {
        what: &'static str,
        source: TlsError,
    },
    /// The delegate URL is unusable (the input must change).
    #[error("delegate: {0}")]
    DelegateUrl(#[source] apiagg_config::EndpointError),
    /// A credential file is missing or invalid (retryable once the file is fixed). The cause
    /// is in the message only (not a `source`, which error chains would print again).
    #[error("{what}: {error}")]
    Credentials {
        what: &'static str,
        error: CredentialError,
    },
}

/// One reachable endpoint of an upstream.
pub struct UpstreamEndpoint {
    /// Pingora peer template (cloned per request) for requests that carry the caller's identity:
    /// with the proxy client certificate to remote backends, with no certificate to the delegate.
    pub peer: HttpPeer,
    /// Peer for requests apiagg makes in its own name (to the delegate: its client certificate,
    /// in a connection pool of its own); the same as `peer` for remote backends.
    pub own_peer: HttpPeer,
    /// Resolved address.
    pub addr: SocketAddr,
    /// Endpoint speaks TLS.
    pub tls: bool,
    /// `host:port` as configured, for messages.
    pub authority: String,
    /// The same, ready to send as `Host` and `X-Forwarded-Host`.
    pub authority_header: http::HeaderValue,
    /// The endpoint URL as configured.
    pub url: String,
    /// Health shared with the availability controller.
    pub health: Arc<EndpointHealth>,
    /// The key of `health` in the [`HealthBook`] (this endpoint for this APIService).
    pub health_key: u64,
    /// Idle HTTP/1.1 connections for `peer`, and for `own_peer` (HTTP/2 connections are
    /// pingora's, multiplexed).
    pub idle: IdleConnections,
    pub own_idle: IdleConnections,
    /// Held while a new HTTP/2 connection to the endpoint is made: requests arriving together
    /// share it instead of each opening one.
    pub connecting: tokio::sync::Mutex<()>,
}

/// Where the requests of one APIService (or the delegate) go.
pub struct Upstream {
    /// APIService name, or `delegate`.
    pub label: String,
    /// TLS server name (`<svc>.<ns>.svc`, or the delegate's host).
    pub server_name: String,
    /// Endpoints, in configured order.
    pub endpoints: Vec<UpstreamEndpoint>,
    /// A remote backend (identity as `X-Remote-*`), not the delegate.
    pub remote: bool,
    /// rustls config for upgrade tunnels that carry the caller's identity (HTTP/1.1 only).
    pub tls_config: Arc<rustls::ClientConfig>,
    /// rustls config for connections in apiagg's own name (controllers, impersonation).
    pub own_tls_config: Arc<rustls::ClientConfig>,
    /// apiagg's bearer token for the delegate.
    pub token: Option<Arc<BearerToken>>,
    /// Per-backend request metrics (remote APIServices only).
    pub metrics: Option<Arc<GroupVersionMetrics>>,
    /// Requests in flight to all of its endpoints (kept across rebuilds).
    pub slots: Arc<Slots>,
    /// Whether its backend honours streaming lists (kept across rebuilds of the same
    /// endpoints).
    pub watch_list: Arc<WatchListSupport>,
    /// The earliest `notAfter` (Unix seconds) of the CA bundle it verifies its endpoints with,
    /// for the expiry metric; `None` with system roots or no verification.
    pub ca_not_after: Option<i64>,
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

    /// Like [`Upstream::pick`], skipping the endpoints whose bit is set in `tried` (a retry goes
    /// to another endpoint, never back to one that just failed) and, given a `cap`, those with
    /// `cap` requests in flight.
    pub fn pick_untried(&self, tried: u64, cap: Option<usize>) -> Option<usize> {
        let n = self.endpoints.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n).map(|i| (start + i) % n).find(|&i| {
            let health = &self.endpoints[i].health;
            !was_tried(tried, i)
                && health.is_healthy()
                && cap.is_none_or(|cap| health.slots.has_room(cap))
        })
    }

    /// Whether a healthy endpoint is left that `tried` does not include.
    pub fn has_untried(&self, tried: u64) -> bool {
        (0..self.endpoints.len())
            .any(|i| !was_tried(tried, i) && self.endpoints[i].health.is_healthy())
    }

    /// Whether some endpoint is healthy.
    pub fn available(&self) -> bool {
        self.endpoints.iter().any(|e| e.health.is_healthy())
    }
}

/// Whether bit `index` of a tried-endpoints mask is set (endpoints past 64 never count as
/// tried: a retry may then reach one of them twice, never more than the retry budget).
pub fn was_tried(tried: u64, index: usize) -> bool {
    index < 64 && tried & (1 << index) != 0
}

/// TLS settings shared by the endpoints of one upstream.
pub struct TlsSettings<'a> {
    /// Trust anchors (system roots when `None`).
    pub ca: Option<&'a [CertificateDer<'static>]>,
    /// `insecureSkipTLSVerify`.
    pub insecure: bool,
    /// Name verified in the certificate (and sent as SNI).
    pub server_name: &'a str,
    /// Client certificate presented on every connection.
    pub identity: Option<&'a ClientIdentity>,
}

/// How apiagg's own requests differ from the callers' ones.
#[derive(Clone, Copy)]
pub enum Own<'a> {
    /// The same connections and certificate (remote backends: identity travels as headers).
    Shared,
    /// Separate connections, with this certificate if any (the delegate).
    Separate(Option<&'a ClientIdentity>),
}

fn build_endpoint<'a>(
    label: &str,
    ep: &Endpoint,
    addr: SocketAddr,
    named: bool,
    settings: &TlsSettings<'a>,
    own: Own<'a>,
    book: &HealthBook,
) -> Result<UpstreamEndpoint, BuildError> {
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
        // Many watches share one connection, as kube-aggregator's do, but never more than a
        // backend is sure to allow: until the backend's SETTINGS arrive, its limit is unknown
        // and every stream opened is sent, and those past the limit it then announces wait for
        // a free stream for ever (a burst of 250 watches onto a new connection to hyper, which
        // allows 200: 50 never answered). 100 is the least RFC 9113 recommends a server allow
        // (Go allows 250, hyper 200, nginx 128), and what Go's transport, Chrome and .NET allow
        // until the SETTINGS arrive (pingora cannot raise a connection's cap later); a backend
        // announcing less is still obeyed once its SETTINGS arrive. The connection window is Go's transport default, so one
        // stream whose reader stalls holds only its own window and never stops the others.
        options.max_h2_streams = H2_STREAMS_PER_CONNECTION;
        options.h2_connection_window_size = Some(1 << 30);
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
    addr.hash(&mut hasher);
    if ep.tls {
        settings.server_name.hash(&mut hasher);
        settings.insecure.hash(&mut hasher);
        if let Some(ca) = settings.ca {
            for c in ca {
                c.as_ref().hash(&mut hasher);
            }
        }
    }
    let base = hasher.finish();
    let keyed = |identity: Option<&ClientIdentity>, own: bool| -> u64 {
        if identity.is_none() && !own {
            return base;
        }
        let mut hasher = DefaultHasher::new();
        (base, identity.map(|i| i.fingerprint), own).hash(&mut hasher);
        hasher.finish()
    };
    let tls_only = |identity: Option<&'a ClientIdentity>| identity.filter(|_| ep.tls);
    let caller_identity = tls_only(settings.identity);
    peer.client_cert_key = caller_identity.map(|i| i.cert_key.clone());
    peer.group_key = keyed(caller_identity, false);
    let mut own_peer = peer.clone();
    if let Own::Separate(identity) = own {
        // A connection apiagg opened in its own name never carries a caller's request.
        let identity = tls_only(identity);
        own_peer.client_cert_key = identity.map(|i| i.cert_key.clone());
        own_peer.group_key = keyed(identity, true);
    }
    // Health is per APIService and endpoint: APIServices behind one endpoint are probed on
    // their own paths and judged on their own.
    let mut hasher = DefaultHasher::new();
    (peer.group_key, label).hash(&mut hasher);
    let health_key = hasher.finish();
    let authority = super::names::authority(&ep.host, ep.port);
    let idle_timeout = peer.options.idle_timeout.unwrap_or(Duration::from_secs(90));
    Ok(UpstreamEndpoint {
        idle: IdleConnections::new(IDLE_PER_ENDPOINT, idle_timeout),
        own_idle: IdleConnections::new(IDLE_PER_ENDPOINT, idle_timeout),
        connecting: tokio::sync::Mutex::new(()),
        health: book.endpoint(health_key),
        health_key,
        peer,
        own_peer,
        addr,
        tls: ep.tls,
        authority_header: http::HeaderValue::from_str(&authority)
            .map_err(|_| BuildError::InvalidAuthority(authority.clone()))?,
        authority,
        // A name with several addresses shows which one this is.
        url: if named {
            format!("{} ({})", ep.url, addr.ip())
        } else {
            ep.url.clone()
        },
    })
}

/// Builds an upstream: a remote APIService's (`Own::Shared`: identity as `X-Remote-*` over the
/// proxy client certificate, endpoints health-checked) or the delegate's (`Own::Separate`).
pub fn build_upstream(
    label: String,
    endpoints: &[Endpoint],
    settings: TlsSettings<'_>,
    own: Own<'_>,
    watch_list: WatchListMode,
    book: &HealthBook,
    names: &Names,
) -> Result<Upstream, BuildError> {
    let slots = book.apiservice_slots(&label);
    let mut built = Vec::with_capacity(endpoints.len());
    for endpoint in endpoints {
        let addrs = names.addresses(&endpoint.host, endpoint.port)?;
        let named = addrs.len() > 1;
        for addr in addrs {
            built.push(build_endpoint(
                &label, endpoint, addr, named, &settings, own, book,
            )?);
        }
    }
    let config = |identity: Option<&ClientIdentity>| {
        tls::client_config(settings.ca, settings.insecure, &[b"http/1.1"], identity).map_err(
            |source| BuildError::Trust {
                what: "TLS client settings",
                source,
            },
        )
    };
    let tls_config = config(settings.identity)?;
    let fingerprint = built.iter().fold(0u64, |sum, e| {
        sum.rotate_left(7) ^ e.health_key.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    });
    let watch_list = book.watch_list(&label, fingerprint, watch_list);
    let (remote, own_tls_config) = match own {
        Own::Shared => (true, tls_config.clone()),
        Own::Separate(identity) => (false, config(identity)?),
    };
    Ok(Upstream {
        label,
        server_name: settings.server_name.to_string(),
        endpoints: built,
        remote,
        tls_config,
        own_tls_config,
        token: None,
        metrics: None,
        slots,
        watch_list,
        ca_not_after: (!settings.insecure)
            .then_some(settings.ca)
            .flatten()
            .and_then(earliest_not_after),
        next: AtomicUsize::new(0),
    })
}

/// The trust anchors of a PEM bundle, if one is given; `what` names it in errors.
pub fn trust_anchors(
    pem: Option<&[u8]>,
    what: &'static str,
) -> Result<Option<Vec<CertificateDer<'static>>>, BuildError> {
    pem.map(tls::parse_ca_pem)
        .transpose()
        .map_err(|source| BuildError::Trust { what, source })
}

/// apiagg's credentials for the delegate, read from the files its config names.
pub fn delegate_credentials(config: &DelegateConfig) -> Result<DelegateCredentials, BuildError> {
    let token = config
        .token
        .clone()
        .map(BearerToken::load)
        .transpose()
        .map_err(|error| BuildError::Credentials {
            what: "delegate token",
            error,
        })?;
    let identity = config
        .client_cert
        .as_ref()
        .map(ClientIdentity::load)
        .transpose()
        .map_err(|error| BuildError::Credentials {
            what: "delegate client certificate",
            error,
        })?;
    Ok(DelegateCredentials {
        token: token.map(Arc::new),
        identity: identity.map(Arc::new),
    })
}

/// Builds the delegate upstream from its config and apiagg's credentials for it.
pub fn build_delegate(
    config: &DelegateConfig,
    credentials: &DelegateCredentials,
    book: &HealthBook,
    names: &Names,
) -> Result<Upstream, BuildError> {
    let ca = trust_anchors(config.ca_pem.as_deref(), "delegate caFile")?;
    let parse = |url: &url::Url| {
        apiagg_config::parse_endpoint(url.origin().ascii_serialization().as_str())
            .map_err(BuildError::DelegateUrl)
    };
    let server_name = parse(&config.url)?.host;
    let endpoints = if config.endpoints.is_empty() {
        vec![parse(&config.url)?]
    } else {
        config
            .endpoints
            .iter()
            .map(parse)
            .collect::<Result<_, _>>()?
    };
    let mut upstream = build_upstream(
        "delegate".into(),
        &endpoints,
        TlsSettings {
            ca: ca.as_deref(),
            insecure: config.insecure_skip_tls_verify,
            server_name: &server_name,
            identity: None,
        },
        Own::Separate(credentials.identity.as_deref()),
        WatchListMode::Detect,
        book,
        names,
    )?;
    upstream.token = credentials.token.clone();
    Ok(upstream)
}
