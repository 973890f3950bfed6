//! Layer 3: the background loops. Each takes only the handles it uses (its `Handles`, wired by
//! the composition root), and has one shape: a `start(shutdown)` loop that only schedules and
//! applies, beside a pure, unit-tested step that decides what to publish.
//! - `registry`: the config file, the store, the delegate's group-versions (`autoregister`) and
//!   the cluster's Services (`services`) → `compose` → the route table, published on change;
//! - `availability`: probes → `evaluate` → conditions, status writes to stored APIServices;
//! - `discovery` and `openapi`: `plan` → downloads → merge → the published documents;
//! - `flowcontrol`: flow control's upkeep, and the cluster's FlowSchemas and priority levels
//!   followed at the delegate; `files`: every file apiagg watches, re-read when it changes.

mod autoregister;
mod availability;
mod backoff;
mod discovery;
mod files;
mod flowcontrol;
mod openapi;
mod rbac;
mod reflector;
mod registry;
mod services;
mod targets;

pub use availability::{probe_endpoint, AvailabilityController, Handles as AvailabilityHandles};
pub use discovery::{DiscoveryController, Handles as DiscoveryHandles};
pub use files::FileWatcher;
pub use flowcontrol::{FlowControlController, Handles as FlowControlHandles};
pub use openapi::{Handles as OpenApiHandles, OpenApiController};
pub use rbac::{Handles as RbacHandles, RbacController};
pub use registry::{Handles as RegistryHandles, RegistryController};
