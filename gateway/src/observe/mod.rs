//! Layer 0: what the process reports about itself: Prometheus metrics, the lifecycle flags
//! (mux completion, readiness, shutdown, in-flight requests) and the health checks built on them.
//! Leaves: nothing here imports another room of the gateway; metrics take strings and numbers.

mod health;
mod lifecycle;
mod metrics;
mod repeats;
mod watches;

pub use health::{answer as health_answer, Endpoint as HealthEndpoint};
pub use lifecycle::{InFlight, Lifecycle, Milestone};
pub use metrics::{CertificateKind, GroupVersionMetrics, Metrics, RouteKind, Running};
pub use repeats::Repeats;
pub use watches::{OpenWatch, Watches};
