//! apiagg: a Kubernetes API aggregation gateway. The binary `apiagg` wires these modules into a
//! pingora server.

pub mod availability;
pub mod controller;
pub mod delegate;
pub mod discovery;
pub mod fetch;
pub mod health;
pub mod health_state;
pub mod lifecycle;
pub mod metrics;
pub mod openapi;
pub mod proxy;
pub mod reply;
pub mod routes;
pub mod shutdown;
pub mod state;
pub mod status;
pub mod tls;
pub mod upgrade;
