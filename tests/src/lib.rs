//! The harness of apiagg's end-to-end tests: it starts the real `apiagg` and `sample-apiserver`
//! binaries on loopback, waits for them, and gives the suites in `tests/tests/e2e/` the clients,
//! certificates, configs and raw-wire tools they share.
//!
//! Everything a suite usually needs is re-exported here (`use apiagg_tests::*;`); the modules
//! `api`, `audit`, `cbor`, `flow`, `oidc`, `openapi`, `pki`, `prometheus`, `rbac`, `real_kube`, `relay`, `served_tls`, `trust` and `wire` hold
//! what only some suites use (`real_kube`: the real kube-apiserver, sample-apiserver and etcd).

#![warn(missing_docs)]

pub mod api;
pub mod audit;
mod backends;
pub mod cbor;
pub mod flow;
mod gateway;
mod http;
mod kubectl;
pub mod oidc;
pub mod openapi;
pub mod otlp;
pub mod pki;
mod process;
pub mod prometheus;
pub mod rbac;
pub mod real_kube;
pub mod relay;
pub mod served_tls;
pub mod streaming;
pub mod trust;
mod wait;
pub mod wire;

use std::path::PathBuf;

pub use backends::*;
pub use gateway::*;
pub use http::*;
pub use kubectl::*;
pub use process::*;
pub use wait::*;

/// The fixture folder (`APIAGG_FIXTURES`, default `../shared/fixtures` beside the checkout);
/// panics when it is missing.
pub fn fixtures() -> PathBuf {
    apiagg_test_fixtures::existing_root()
}
