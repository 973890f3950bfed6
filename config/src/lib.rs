//! APIService model and gateway configuration: validation with the upstream messages, kube-aware
//! ordering, the config file loader and the route registry. No networking.

pub mod apiservice;
pub mod content_hash;
pub mod endpoint;
pub mod file;
pub mod priorities;
pub mod registry;
pub mod version;

pub use endpoint::{Endpoint, EndpointError};
pub use file::{ConfigError, DelegateConfig, GatewayConfig, ServiceEntry, ServingTls, Sources};
pub use registry::{
    ApiServiceEntry, Backend, LocalGroupVersion, Origin, Registry, RegistryError, RemoteBackend,
};
