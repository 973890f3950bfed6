//! Answers apiagg serves itself from published snapshots: health, metrics, its status document,
//! `/version` (without a delegate), and legacy and aggregated discovery (kube-aggregator's
//! `pkg/apiserver/handler_apis.go`; k8s.io/apiserver's `pkg/endpoints/discovery/aggregated/`).

use apiagg_discovery as discovery;
use apiagg_discovery::NegotiateOptions;
use bytes::Bytes;
use pingora_http::RequestHeader;

use super::refusal::Refusal;
use super::reply::Reply;
use crate::backends::RouteTable;
use crate::state::{Discovery, Statuses};
use apiagg_apis::Reason;
use apiagg_observe::{health_answer, HealthEndpoint, Lifecycle, Metrics};

fn header<'a>(req: &'a RequestHeader, name: &str) -> Option<&'a str> {
    req.headers.get(name).and_then(|v| v.to_str().ok())
}

/// `/healthz`, `/livez`, `/readyz`, all checks or one; a check that does not exist is the
/// 404 `Status` of any unknown path (kube-apiserver 1.37.2 writes the text `404 page not
/// found` there, kubernetes#138219 a `Status`).
pub fn health(req: &RequestHeader, endpoint: HealthEndpoint, check: &str, lc: &Lifecycle) -> Reply {
    match health_answer(endpoint, check, req.uri.query(), lc) {
        Some(answer) => Reply::text(answer.code, answer.body),
        None => Refusal::not_found().into(),
    }
}

/// `/metrics` in the Prometheus text format.
pub fn metrics(metrics: &Metrics) -> Reply {
    let body = Bytes::from(metrics.render());
    Reply::new(200, "text/plain; version=0.0.4; charset=utf-8", body)
}

/// `/debug/apiagg/status`: every APIService's availability, and how its streaming lists are
/// served.
pub fn status(book: &Statuses, routes: &RouteTable) -> Reply {
    let now = std::time::Instant::now();
    let upstreams: std::collections::HashMap<&str, &crate::backends::Upstream> = routes
        .upstreams
        .iter()
        .flatten()
        .filter(|u| u.remote)
        .map(|u| (u.label.as_str(), &**u))
        .collect();
    let document = book.document(|name| {
        upstreams
            .get(name)
            .map(|upstream| upstream.watch_list.describe(now))
    });
    Reply::json(200, document)
}

/// apiagg's own `/version` (served when there is no delegate to answer it): the Kubernetes
/// release whose API apiagg serves ([`apiagg_apis::KUBERNETES_MINOR`]), as kube-apiserver of
/// that release writes it, with apiagg's version as the pre-release part of `gitVersion`
/// (`v1.37.0-apiagg.0.1.0`): kubectl reads the minor from it and warns of no skew.
pub fn version() -> Reply {
    let minor = apiagg_apis::KUBERNETES_MINOR;
    let doc = serde_json::json!({
        "major": "1",
        "minor": minor.to_string(),
        "emulationMajor": "1",
        "emulationMinor": minor.to_string(),
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": minor.saturating_sub(1).to_string(),
        "gitVersion": format!("v1.{minor}.0-apiagg.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    });
    Reply::json(200, Bytes::from(doc.to_string()))
}

/// A precomputed document in the negotiated `format` (JSON or CBOR, both precomputed);
/// aggregated ones carry ETag (the JSON's hash for both formats, as upstream) and
/// `Cache-Control: public` and answer a matching `If-None-Match` with 304 (k8s.io/apiserver's
/// `pkg/endpoints/discovery/aggregated/etag.go`).
fn document(
    req: &RequestHeader,
    doc: &discovery::RenderedDoc,
    format: discovery::Format,
    cacheable: bool,
) -> Reply {
    let (body, content_type) = doc.body(format);
    if !cacheable {
        return Reply::new(200, content_type, body.clone());
    }
    let reply = if doc.not_modified(header(req, "if-none-match")) {
        Reply::not_modified()
    } else {
        Reply::new(200, content_type, body.clone())
    };
    reply
        .header(http::header::ETAG, doc.etag.clone())
        .header(http::header::CACHE_CONTROL, "public")
}

fn not_acceptable(e: &discovery::NotAcceptable) -> Reply {
    Refusal::new(Reason::NotAcceptable, e.message()).into()
}

/// `/apis` (aggregated or legacy by Accept) and `/apis/` (legacy only).
pub fn apis(
    req: &RequestHeader,
    routes: &RouteTable,
    aggregated: &Discovery,
    options: &NegotiateOptions,
    slash: bool,
) -> Reply {
    let endpoint = if slash {
        discovery::Endpoint::LegacyOnly
    } else {
        discovery::Endpoint::Root
    };
    let negotiated = match discovery::negotiate(header(req, "accept"), endpoint, options) {
        Ok(n) => n,
        Err(e) => return not_acceptable(&e),
    };
    let reply = match negotiated {
        discovery::Negotiated::Legacy { format } => {
            document(req, &routes.legacy.apis, format, false)
        }
        discovery::Negotiated::Aggregated {
            version, format, ..
        } => match aggregated.guard().as_deref() {
            Some(docs) => document(req, docs.get(version), format, true),
            None => Refusal::mux_incomplete().into(),
        },
    };
    if slash {
        reply
    } else {
        reply.header(http::header::VARY, "Accept")
    }
}

/// `/apis/<group>`: the legacy `APIGroup` built from the group's APIServices; `None` when no
/// APIService has that group (the delegate may know it).
pub fn group(
    req: &RequestHeader,
    routes: &RouteTable,
    options: &NegotiateOptions,
    group: &str,
) -> Option<Reply> {
    let doc = routes.legacy.groups.get(group)?;
    let accept = header(req, "accept");
    match discovery::negotiate(accept, discovery::Endpoint::LegacyOnly, options) {
        Ok(negotiated) => Some(document(req, doc, negotiated.format(), false)),
        Err(e) => Some(not_acceptable(&e)),
    }
}
