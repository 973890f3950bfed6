//! Layer 0: what the process reports about itself: Prometheus metrics, the lifecycle flags
//! (mux completion, readiness, shutdown, in-flight requests), the health checks built on them and
//! the OpenTelemetry tracer (`otel/`).
//! Leaves: nothing here imports another room of the gateway; metrics take strings and numbers.

mod health;
mod lifecycle;
mod metrics;
mod otel;
mod repeats;
mod watches;

pub use health::{answer as health_answer, Endpoint as HealthEndpoint};
pub use lifecycle::{InFlight, Lifecycle, Milestone};
pub use metrics::{CertificateKind, GroupVersionMetrics, Metrics, RouteKind, Running};
pub use otel::{load as load_tracing, Tracer, TRACEPARENT, TRACESTATE};
pub use repeats::Repeats;
pub use watches::{OpenWatch, Watches};
