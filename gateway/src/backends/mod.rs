//! Layer 1: the backends apiagg talks to. The route table with every upstream's pingora peers,
//! endpoint health, TLS trust, and the one HTTP client stack the controllers share.

mod certs;
mod client;
mod credentials;
mod endpoint_health;
mod exhaustion;
#[cfg(test)]
pub mod fixtures;
mod h1;
mod kubeconfig;
mod names;
mod open_files;
mod pool;
mod reload;
mod slots;
mod table;
mod tls;
mod upstream;
mod watch_list;

pub use certs::{bundle_not_after, check_pair, earliest_not_after, CertError, Purpose};
pub use client::{Client, Clients, FetchError, Fetched, Lines};
pub use credentials::{ClientIdentity, CredentialError};
pub use endpoint_health::{EndpointHealth, Failure, HealthBook};
pub use exhaustion::own_exhaustion;
pub use h1::{H1Client, ADDED_TO_ANSWERS};
pub use kubeconfig::{kubeconfig_client, KubeconfigClient};
pub use names::{names_of, HostPort, Names};
pub use open_files::{FileSlot, OpenFiles};
pub use pool::IdleConnections;
pub use reload::{Reload, ReloadCounter, Reloadable, WatchedFile};
pub use slots::Slot;
pub use table::{build as build_table, RouteTable, TableError};
pub(crate) use tls::verify_signature_with;
pub use upstream::{build_delegate, delegate_credentials, BuildError, Upstream, UpstreamEndpoint};
pub use watch_list::{Plan as WatchListPlan, Verdict};

#[cfg(test)]
pub(crate) mod test_head;

/// A delegate at `url` without credentials (unit tests of what talks to one).
#[cfg(test)]
pub(crate) fn plain_delegate(url: &str) -> Upstream {
    let config = apiagg_config::DelegateConfig {
        url: url.parse().expect("url"),
        ca_pem: None,
        insecure_skip_tls_verify: false,
        token: None,
        client_cert: None,
        endpoints: Vec::new(),
    };
    let credentials = delegate_credentials(&config).expect("credentials");
    build_delegate(
        &config,
        &credentials,
        &Default::default(),
        &Default::default(),
    )
    .expect("upstream")
}
