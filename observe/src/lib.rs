//! What apiagg reports about itself: Prometheus metrics, the lifecycle flags (mux completion,
//! readiness, shutdown, in-flight requests), the health checks built on them and the
//! OpenTelemetry tracer (`otel/`).
//!
//! A leaf: it depends on no other apiagg crate, and never on pingora or the request path; metrics
//! take strings and numbers, so every other crate may report through it.

mod errors;
mod health_checks;
mod lifecycle;
mod metrics;
mod otel;
mod repeats;
mod watches;

pub use errors::error_chain;
pub use health_checks::{answer as health_answer, Endpoint as HealthEndpoint};
pub use lifecycle::{InFlight, Lifecycle, Milestone};
pub use metrics::{
    CertificateKind, GroupVersionMetrics, Metrics, RouteKind, Running, WatchEventSeries,
    WatchEvents,
};
pub use otel::{load as load_tracing, Tracer, TRACEPARENT, TRACESTATE};
pub use repeats::Repeats;
pub use watches::{drain_rate, OpenWatch, Watches, MIN_DRAIN_RATE};
