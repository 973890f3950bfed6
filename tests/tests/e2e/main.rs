//! apiagg's end-to-end suites, one module each, in one test binary: each starts the real
//! `apiagg` and `sample-apiserver` binaries on loopback through the `apiagg_tests` harness.
//! Select a suite with its module path: `cargo test -p apiagg-tests --test e2e audit_trail::`.
//!
//! All suites share this process: a test sets no process-wide state (environment, working
//! directory, resource limits of its own process) and picks its ports from the system.

mod apiservice_api;
mod apiservice_apply;
mod apiservice_attacks;
mod apiservice_etcd;
mod apiservice_store;
mod audit_backends;
mod audit_trail;
mod audit_transcode;
mod authz;
mod authz_chain;
mod availability;
mod backend_429;
mod backend_bounds;
mod body_framing;
mod cbor;
mod cert_errors;
mod cluster_services;
mod connection_deadlines;
mod dashboards;
mod delegate_ha;
mod delegate_watch_resume;
mod discovery;
mod failover;
mod flow_control;
mod flow_control_cluster;
mod front_door_order;
mod gateway;
mod gateway_lifecycle;
mod goaway;
mod golden_fixtures;
mod hostile;
mod hostile_wire;
mod isolation;
mod limits;
mod many_groups;
mod metrics;
mod monitoring_rules;
mod not_found;
mod oidc_provider;
mod openapi;
mod openapi_failures;
mod overload;
mod real_kube;
mod registry;
mod sample_apiserver;
mod sample_auth;
mod secure_defaults;
mod shutdown;
mod step_order;
mod timeouts;
mod tls_curves;
mod tracing;
mod trust;
mod trust_delegate;
mod trust_identity;
mod trust_jwt;
mod trust_kubectl;
mod trust_tls;
mod upstream_metrics;
mod watch_lifetimes;
mod watch_list;
mod watch_list_broken;
mod watch_list_clients;
mod watch_list_gzip;
mod watch_list_settings;
mod watch_scale;
mod zpages;
