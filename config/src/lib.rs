//! The gateway's configuration and what it resolves to: the config file schema and loader
//! (multi-document YAML, kubectl-style; errors that say what is wrong and where), the trust
//! settings (serving TLS, authentication, authorization, the proxy client certificate, delegate
//! credentials from a kubeconfig or the in-cluster service account), Service resolution through
//! the cluster's Services and EndpointSlices, who owns a group-version, and the [`Registry`]: an
//! immutable snapshot of every APIService with its backend endpoints and an O(1) route table.
//! No networking: the gateway reads the files and the cluster and feeds them in.
//!
//! The APIService object itself, version order and priorities are in `apiagg-apis`; what the
//! APIService API does to a write is in `apiagg-strategy`. Modules are private; every item has
//! one path, at the crate root.

mod cluster;
mod endpoint;
mod file;
mod ownership;
mod registry;

pub use cluster::{object_key, ClusterServices, ServiceResolution, Unresolved, SERVICE_NAME_LABEL};
pub use endpoint::{parse_endpoint, Endpoint, EndpointError};
pub use file::{
    from_kubeconfig, in_cluster, Authentication, Authorization, AuthorizationMode, CertSource,
    ConfigError, DelegateConfig, DelegateError, GatewayConfig, KubeconfigProblem, Problem,
    ProxyClient, RequestHeader, ServiceEntry, ServingTls, SniCertificate, SourcedApiService,
    Sources, TokenReview, TokenSource, TrustError, DEFAULT_LISTEN, SERVICE_ACCOUNT_DIR,
};
pub use ownership::{
    is_builtin_group, refuse_owned, split_stored, Displaced, BUILTIN_GROUP, CONFLICTS_WITH_DELEGATE,
};
pub use registry::{
    route_key, ApiServiceEntry, Backend, LocalGroupVersion, Origin, Registry, RemoteBackend,
};
