//! APIService model and gateway configuration: validation with the upstream messages, kube-aware
//! ordering, the config file loader and the route registry. No networking.

pub mod apiservice;
pub mod cluster;
pub mod content_hash;
pub mod endpoint;
pub mod file;
pub mod managed_fields;
pub mod ownership;
pub mod priorities;
pub mod registry;
pub mod strategy;
pub mod version;

pub use endpoint::{Endpoint, EndpointError};
pub use file::{
    Authentication, CertSource, ConfigError, DelegateConfig, DelegateError, GatewayConfig,
    ProxyClient, RequestHeader, ServiceEntry, ServingTls, SniCertificate, Sources, TokenReview,
    TokenSource, TrustError,
};
pub use registry::{ApiServiceEntry, Backend, LocalGroupVersion, Origin, Registry, RemoteBackend};
