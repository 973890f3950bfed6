//! Layer 3: the background loops. Each takes only the handles it uses, schedules in its
//! `start(shutdown)` loop, and publishes what its step produced: the registry (config file and
//! delegate auto-registration → route table), availability, discovery and OpenAPI.

mod autoregister;
mod availability;
mod backoff;
mod discovery;
mod files;
#[cfg(test)]
mod fixtures;
mod flowcontrol;
mod openapi;
mod registry;
mod services;
mod targets;

pub use availability::{AvailabilityController, Handles as AvailabilityHandles};
pub use discovery::{DiscoveryController, Handles as DiscoveryHandles};
pub use files::FileWatcher;
pub use flowcontrol::FlowControlWatch;
pub use openapi::{Handles as OpenApiHandles, OpenApiController};
pub use registry::{Handles as RegistryHandles, RegistryController};
