//! Layer 3: the request path on pingora-core, as a table of contents. Every module imports
//! only modules listed below it here (scripts/module_cycles.py checks that none imports one
//! that imports it back).
//!
//! - The server and the path: `serve` (pingora's `HttpServerApp`: read a head, run the path,
//!   answer, record), `phases` (steps 0–7 in kube-apiserver's order), `resolve` (7: where the
//!   request goes), `dispatch` (8 and 9: its places and how it is sent), `proxy` and
//!   `response` (forwarding and the answer's way back), `resume` (a watch resumed on another
//!   API server of the delegate), `upgrade` (tunnels), `watch_list` (streaming lists),
//!   `apiservice_api` (the APIService API).
//! - The steps' own concerns: `authorize` (impersonation and authorization), `head` (heads
//!   pingora could not read).
//! - What every step shares: `service` (the proxy and what it reads), `ctx` (a request's state,
//!   what happens to it, and the one writer of apiagg's own answers).
//! - A request's state, one concern each: `audit`, `flow`, `bounds`, `trace`, `attempts`,
//!   `watch_position` (where a resumable watch stands).
//! - Leaves: `reply` and `refusal` (answers apiagg writes itself), `answers`, `openapi` and
//!   `statusz` (documents it serves: discovery, OpenAPI, `/statusz` and `/flagz`), `forward`
//!   (the header policy), `framing`, `backend`, `errors`,
//!   `deadline`, `classify`.
//!
//! Everything here reads published snapshots only, and builds no document per request; the
//! one lock is an endpoint's `connecting`, taken only to open a new backend connection
//! (proxy.rs), never on a pooled one.

mod serve;

mod apiservice_api;
mod dispatch;
mod phases;
mod proxy;
mod resolve;
mod response;
mod resume;
mod upgrade;
mod watch_list;

mod authorize;
mod head;

mod ctx;
mod service;

mod attempts;
mod audit;
mod bounds;
mod flow;
mod trace;
mod watch_position;

mod answers;
mod backend;
mod classify;
mod deadline;
mod errors;
mod forward;
mod framing;
mod openapi;
mod refusal;
mod reply;
mod statusz;

/// For the fuzz targets only (the `fuzzing` module of lib.rs).
#[cfg(feature = "fuzzing")]
pub use self::classify::{classify, non_canonical, Route as FuzzRoute};
pub use self::service::{ApiaggProxy, Controls};
