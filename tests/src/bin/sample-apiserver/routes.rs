//! Request dispatch.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE, VARY};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use crate::auth::{self, Auth, Connection};
use crate::cluster::ClusterResources;
use crate::debug;
use crate::discovery::{negotiate, Discovery};
use crate::fixtures::Fixtures;
use crate::openapi::GeneratedOpenApi;
use crate::openapi_files::OpenApiFiles;
use crate::resource::{self, ResourceInfo};
use crate::response::{bytes, json, method_not_allowed, not_found, status, text, Body, JSON};
use crate::store::Store;
use crate::{sar, tokens, upgrade};

pub const SERVER_HEADER: HeaderName = HeaderName::from_static("x-sample-server");

/// The answering connection's number (see [`crate::auth::Connection::serial`]).
pub const CONNECTION_HEADER: HeaderName = HeaderName::from_static("x-sample-connection");

/// Everything a request handler reads.
pub struct State {
    /// Authentication of callers (off when no flag asks for it).
    pub auth: Auth,
    pub server_name: String,
    pub server_header: HeaderValue,
    pub namespaced: bool,
    pub info: ResourceInfo,
    /// `/apis/<group>/<version>`.
    pub gv_path: String,
    pub fixtures: Fixtures,
    pub discovery: Discovery,
    /// OpenAPI of the generated group, served when the fixtures have none.
    pub openapi: GeneratedOpenApi,
    /// `--openapi-v2` and `--openapi-v3-dir`, read per request; they win over the above.
    pub openapi_files: OpenApiFiles,
    pub store: Arc<Store>,
    /// Services, EndpointSlices and flow-control objects (`--cluster`).
    pub cluster: Option<ClusterResources>,
    /// SubjectAccessReview policy (`--authorization-policy`).
    pub policy: Option<sar::Policy>,
    /// Requests served so far, by path (`GET /debug/requests` shows them): tests prove with it
    /// that a refresh they wait for reached the backend. (`GET /debug/last-body` shows the
    /// content type, length and SHA-256 of the last create or update body the resource read.)
    pub requests: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    /// Requests arrived and not answered yet, by path (`GET /debug/in-flight` shows those held
    /// now; requests under `/debug/` are left out): tests wait with it until the backend holds
    /// what they sent, say `slow?ms=` requests filling a bound. A request counts until its
    /// response head is ready (a watch only briefly) or its caller leaves.
    pub in_flight: std::sync::Mutex<BTreeMap<String, u64>>,
    /// What each path was asked for and answered (`GET /debug/negotiation` shows it): path →
    /// `Accept` (empty when absent) → `"<status> <Content-Type>"` → count. Tests read with it
    /// which discovery format a client asked for and got.
    pub negotiation: std::sync::Mutex<NegotiationLog>,
    /// The last [`QUERIES_KEPT`] requests outside `/debug/`, as `METHOD path?query`, with
    /// ` as <X-Remote-User values>` when the request named a user (`GET /debug/queries` shows
    /// them): tests read which list and watch options arrived, and in whose name.
    pub queries: std::sync::Mutex<std::collections::VecDeque<String>>,
    /// `GET /apis` still to answer 500 (`--fail-discovery`).
    pub discovery_failures: std::sync::atomic::AtomicU64,
}

/// See [`State::queries`].
pub const QUERIES_KEPT: usize = 256;

/// See [`State::negotiation`].
pub type NegotiationLog = BTreeMap<String, BTreeMap<String, BTreeMap<String, u64>>>;

/// Entry point of every request: counts it, authenticates the caller (open paths skip that),
/// routes it and labels the answer with `X-Sample-Server`.
pub async fn handle(
    state: Arc<State>,
    conn: Arc<Connection>,
    mut req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let accept = req
        .headers()
        .get(ACCEPT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if !path.starts_with("/debug/") {
        let mut log = state.queries.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() == QUERIES_KEPT {
            log.pop_front();
        }
        let user = req
            .headers()
            .get_all("x-remote-user")
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect::<Vec<_>>();
        let caller = match user.as_slice() {
            [] => String::new(),
            users => format!(" as {}", users.join(",")),
        };
        log.push_back(format!("{method} {}{caller}", req.uri()));
    }
    if path != "/debug/requests" {
        let mut log = state.requests.lock().unwrap_or_else(|e| e.into_inner());
        *log.entry(path.clone()).or_default() += 1;
    }
    let _held = (!path.starts_with("/debug/")).then(|| Held::new(state.clone(), &path));
    let mut resp = if state.auth.enabled() && auth::is_open(&path) {
        route(&state, req).await
    } else {
        // Upgrade requests too: they are authenticated here, before `upgrade::respond`.
        match state.auth.authenticate(&conn, req.headers()) {
            Ok(caller) => {
                req.extensions_mut().insert(caller);
                route(&state, req).await
            }
            Err(refusal) => refusal.response(),
        }
    };
    tracing::debug!(%method, %path, status = resp.status().as_u16(), "request");
    if !path.starts_with("/debug/") {
        let answer = format!(
            "{} {}",
            resp.status().as_u16(),
            resp.headers()
                .get(CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default()
        );
        let mut log = state.negotiation.lock().unwrap_or_else(|e| e.into_inner());
        *log.entry(path)
            .or_default()
            .entry(accept.unwrap_or_default())
            .or_default()
            .entry(answer)
            .or_default() += 1;
    }
    resp.headers_mut()
        .insert(SERVER_HEADER, state.server_header.clone());
    resp.headers_mut()
        .insert(CONNECTION_HEADER, HeaderValue::from(conn.serial));
    Ok(resp)
}

/// One request counted in [`State::in_flight`] until dropped (answered, or its caller gone).
struct Held {
    state: Arc<State>,
    path: String,
}

impl Held {
    fn new(state: Arc<State>, path: &str) -> Held {
        let mut held = state.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        *held.entry(path.to_string()).or_default() += 1;
        drop(held);
        Held {
            state,
            path: path.to_string(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self
            .state
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.path) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.path);
            }
        }
    }
}

async fn route(state: &Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let raw_path = req.uri().path();
    // Python clients ask for `/apis/`, `/version/`: a trailing slash is ignored.
    let path = match raw_path.strip_suffix('/') {
        Some(p) if !p.is_empty() => p.to_string(),
        _ => raw_path.to_string(),
    };
    if path == "/debug/requests" {
        let log = state.requests.lock().unwrap_or_else(|e| e.into_inner());
        return json(StatusCode::OK, &json!(*log));
    }
    if path == "/debug/in-flight" {
        let held = state.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        return json(StatusCode::OK, &json!(*held));
    }
    if path == "/debug/negotiation" {
        let log = state.negotiation.lock().unwrap_or_else(|e| e.into_inner());
        return json(StatusCode::OK, &json!(*log));
    }
    if path == "/debug/last-body" {
        return state.store.last_body();
    }
    if path == "/debug/queries" {
        let log = state.queries.lock().unwrap_or_else(|e| e.into_inner());
        return json(StatusCode::OK, &json!(*log));
    }
    if let ("/debug/hold-lists" | "/debug/release-lists", &Method::POST) =
        (path.as_str(), req.method())
    {
        state.store.hold_lists(path == "/debug/hold-lists");
        return json(StatusCode::OK, &json!({}));
    }
    if let ("/debug/gzip-bomb-lists", &Method::POST) = (path.as_str(), req.method()) {
        state.store.gzip_bomb_lists();
        return json(StatusCode::OK, &json!({}));
    }
    if let ("/debug/hold-watches" | "/debug/release-watches", &Method::POST) =
        (path.as_str(), req.method())
    {
        state.store.hold_watches(path == "/debug/hold-watches");
        return json(StatusCode::OK, &json!({}));
    }
    if path == "/debug/whoami" {
        return match *req.method() {
            Method::GET | Method::HEAD => debug::whoami(&req),
            _ => method_not_allowed(req.method()),
        };
    }
    if let (tokens::TOKEN_REVIEW_PATH, Some(tokens)) = (path.as_str(), &state.auth.tokens) {
        return match *req.method() {
            Method::POST => tokens::review(tokens, req).await,
            _ => method_not_allowed(req.method()),
        };
    }
    if let (sar::REVIEW_PATH, Some(policy)) = (path.as_str(), &state.policy) {
        return match *req.method() {
            Method::POST => sar::review(policy, req).await,
            _ => method_not_allowed(req.method()),
        };
    }
    if let Some(cluster) = state.cluster.as_ref().filter(|c| c.owns(&path)) {
        return cluster.route(&path, req).await;
    }
    if let Some(rest) = path.strip_prefix(&format!("{}/", state.gv_path)) {
        let rest = rest.to_string();
        return group_version(state, &rest, req).await;
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return match document(state, &path, &req) {
            Some(_) => method_not_allowed(req.method()),
            None => not_found(),
        };
    }
    document(state, &path, &req).unwrap_or_else(not_found)
}

/// Paths below `/apis/<g>/<v>/`: upgrades, debug endpoints and the resource.
async fn group_version(state: &Arc<State>, rest: &str, req: Request<Incoming>) -> Response<Body> {
    if let Some(protocol) = upgrade::requested(&req) {
        return upgrade::respond(req, protocol);
    }
    let segments: Vec<&str> = rest.split('/').collect();
    let info = &state.info;
    let is_get = matches!(*req.method(), Method::GET | Method::HEAD);
    match segments.as_slice() {
        ["echo", ..] => debug::echo(&req, &state.server_name),
        ["whoami"] if is_get => debug::whoami(&req),
        ["slow"] if is_get => debug::slow(req.uri().query()).await,
        ["redirect"] if is_get => debug::redirect(&state.gv_path),
        ["peer-unreachable"] => debug::peer_unreachable(),
        ["slow" | "redirect" | "whoami"] => method_not_allowed(req.method()),
        // The deprecated `/watch/<resource>[/<name>]` form, which this server refuses.
        ["watch", ..] => crate::response::bad_request(
            "the deprecated /watch/ paths are not served: use ?watch=true on the resource",
        ),
        [r] if *r == info.resource => {
            let namespace = if state.namespaced { None } else { Some("") };
            resource::collection(info, &state.store, namespace, req).await
        }
        [r, name] if *r == info.resource && !state.namespaced && !name.is_empty() => {
            resource::item(info, &state.store, "", name, req).await
        }
        ["namespaces", ns, r] if *r == info.resource && state.namespaced && !ns.is_empty() => {
            resource::collection(info, &state.store, Some(ns), req).await
        }
        ["namespaces", ns, r, name]
            if *r == info.resource && state.namespaced && !ns.is_empty() && !name.is_empty() =>
        {
            resource::item(info, &state.store, ns, name, req).await
        }
        _ => not_found(),
    }
}

/// Read-only documents: discovery, fixtures, OpenAPI, health and version.
fn document(state: &State, path: &str, req: &Request<Incoming>) -> Option<Response<Body>> {
    let fixtures = &state.fixtures;
    if path == "/apis" {
        use std::sync::atomic::Ordering;
        let fail = |left: u64| left.checked_sub(1);
        if state
            .discovery_failures
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, fail)
            .is_ok()
        {
            let why = "discovery fails on purpose (--fail-discovery)";
            let code = hyper::StatusCode::INTERNAL_SERVER_ERROR;
            return Some(crate::response::status(
                code,
                "InternalError",
                why,
                json!({}),
            ));
        }
    }
    if path == "/apis" || path == "/api" {
        let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
        let negotiated = negotiate(accept);
        let aggregated = if path == "/apis" {
            Some(&state.discovery.apis)
        } else {
            state.discovery.api.as_ref()
        };
        let format = negotiated.aggregated_for(state.discovery.mode);
        let mut resp = match (format, aggregated) {
            (Some(format), Some(doc)) => {
                bytes(StatusCode::OK, format.content_type(), doc.get(format))
            }
            _ if negotiated.legacy => legacy(state, path)?,
            _ => status(
                StatusCode::NOT_ACCEPTABLE,
                "NotAcceptable",
                "only the following media types are accepted: application/json",
                json!({}),
            ),
        };
        resp.headers_mut()
            .insert(VARY, HeaderValue::from_static("Accept"));
        return Some(resp);
    }
    let files = &state.openapi_files;
    let from_files = match path {
        "/openapi/v2" => files.v2(),
        "/openapi/v3" => files.v3_index(),
        _ => path
            .strip_prefix("/openapi/v3/")
            .and_then(|key| files.v3(key)),
    };
    if let Some(found) = from_files {
        return Some(found.map_or_else(not_found, |doc| bytes(StatusCode::OK, JSON, doc)));
    }
    if let Some(doc) = fixtures.get(path) {
        return Some(bytes(StatusCode::OK, JSON, doc));
    }
    let openapi = &state.openapi;
    let ok = |doc: Bytes| Some(bytes(StatusCode::OK, JSON, doc));
    match path {
        "/openapi/v2" => return ok(fixtures.openapi_v2.clone().unwrap_or(openapi.v2.clone())),
        "/openapi/v3" => {
            return ok(fixtures
                .openapi_v3_index
                .clone()
                .unwrap_or(openapi.v3_index.clone()))
        }
        _ => {}
    }
    if let Some(gv) = path.strip_prefix("/openapi/v3/") {
        return match fixtures.openapi_v3(gv) {
            Some(doc) => ok(doc),
            None if gv == openapi.v3_path => ok(openapi.v3.clone()),
            None => None,
        };
    }
    if let Some(doc) = state.discovery.generated.get(path) {
        return Some(bytes(StatusCode::OK, JSON, doc.clone()));
    }
    match path {
        "/healthz" | "/readyz" | "/livez" => Some(text("ok")),
        "/version" => Some(json(StatusCode::OK, &version())),
        _ => None,
    }
}

/// Legacy `/api` or `/apis`: the fixture wins over the generated group.
fn legacy(state: &State, path: &str) -> Option<Response<Body>> {
    state
        .fixtures
        .get(path)
        .or_else(|| state.discovery.generated.get(path).cloned())
        .map(|doc| bytes(StatusCode::OK, JSON, doc))
}

/// A version object shaped like kube-apiserver's `/version`.
fn version() -> serde_json::Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-12-11T00:00:00Z",
        "goVersion": "go1.23.3",
        "compiler": "gc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}
