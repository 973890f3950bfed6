//! REST handlers of the in-memory resource: list, watch, create, get, delete.

use std::sync::Arc;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::cbor::{self, Format};
use crate::listing::{self, Filter};
use crate::response::{bad_request, full, json, method_not_allowed, status, Body, JSON};
use crate::store::{Store, StoreError};
use crate::watch;

/// Largest accepted request body.
const MAX_BODY: usize = 3 * 1024 * 1024;

/// Names used in responses and messages.
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub kind: String,
    /// Reads and writes `application/cbor` too (off: `--no-cbor`, a server without CBOR).
    pub cbor: bool,
    /// How streaming lists are answered (`--watch-list`).
    pub watch_list: crate::args::WatchListMode,
    /// A watch from a compacted resourceVersion gets `410 Gone` (`--watch-expired-status`).
    pub expired_status: bool,
}

impl ResourceInfo {
    fn qualified(&self) -> String {
        format!("{}.{}", self.resource, self.group)
    }

    fn details(&self, name: &str) -> Value {
        json!({"name": name, "group": self.group, "kind": self.resource})
    }
}

/// `/<resource>` or `/namespaces/<ns>/<resource>`; `namespace` is `None` for a
/// list across all namespaces and `Some("")` for a cluster-scoped resource.
pub async fn collection(
    info: &ResourceInfo,
    store: &Arc<Store>,
    namespace: Option<&str>,
    req: Request<Incoming>,
) -> Response<Body> {
    let Some(format) = accepted(info, &req) else {
        return not_acceptable();
    };
    let resp = collection_as(info, store, namespace, format, req).await;
    encode_as(format, resp).await
}

async fn collection_as(
    info: &ResourceInfo,
    store: &Arc<Store>,
    namespace: Option<&str>,
    format: Format,
    req: Request<Incoming>,
) -> Response<Body> {
    match *req.method() {
        Method::GET | Method::HEAD => {
            let query = req.uri().query();
            let filter = match Filter::from_query(query) {
                Ok(f) => f,
                Err(message) => return bad_request(&message),
            };
            match listing::watch_params(query, info.watch_list, filter.clone(), format) {
                Ok(Some(mut params)) => {
                    // A streaming list is gzipped when the client accepts it (1.37's
                    // WatchListCompression); a plain watch never is.
                    params.gzip = params.initial_events && accepts_gzip(&req);
                    params.expired_status = info.expired_status;
                    store.watches_released().await;
                    watch::respond(store, namespace.map(str::to_string), params)
                }
                Ok(None) if store.gzip_bombs() => listing::gzip_bomb(info),
                Ok(None) => listing::list(info, store, namespace, query, &filter).await,
                Err(refused) => *refused,
            }
        }
        Method::POST => match namespace {
            Some(ns) => create(info, store, ns, req).await,
            None => method_not_allowed(req.method()),
        },
        _ => method_not_allowed(req.method()),
    }
}

/// `/<resource>/<name>` or `/namespaces/<ns>/<resource>/<name>`.
pub async fn item(
    info: &ResourceInfo,
    store: &Store,
    namespace: &str,
    name: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let Some(format) = accepted(info, &req) else {
        return not_acceptable();
    };
    let resp = item_as_json(info, store, namespace, name, req).await;
    encode_as(format, resp).await
}

async fn item_as_json(
    info: &ResourceInfo,
    store: &Store,
    namespace: &str,
    name: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let method = &req.method().clone();
    match *method {
        Method::GET | Method::HEAD => match store.get(namespace, name) {
            Some(object) => json(StatusCode::OK, &object),
            None => store_error(info, StoreError::NotFound(name.to_string())),
        },
        Method::DELETE => match store.delete(namespace, name) {
            Ok(object) => json(StatusCode::OK, &object),
            Err(e) => store_error(info, e),
        },
        Method::PUT => match read_object(info, store, req).await {
            Ok(object) => match store.replace(namespace, name, object) {
                Ok(object) => json(StatusCode::OK, &object),
                Err(e) => store_error(info, e),
            },
            Err(refused) => refused,
        },
        _ => method_not_allowed(method),
    }
}

async fn create(
    info: &ResourceInfo,
    store: &Store,
    namespace: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    match read_object(info, store, req).await {
        Ok(object) => match store.create(namespace, object) {
            Ok(created) => json(StatusCode::CREATED, &created),
            Err(e) => store_error(info, e),
        },
        Err(refused) => refused,
    }
}

/// The request body as a JSON object, or the answer refusing it: JSON, or CBOR when the server
/// speaks it (a `415` when it does not, as kube-apiserver without CBOR answers). The body is
/// recorded for `GET /debug/last-body`.
async fn read_object(
    info: &ResourceInfo,
    store: &Store,
    req: Request<Incoming>,
) -> Result<Value, Response<Body>> {
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(status(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                "the request body is too large",
                json!({}),
            ))
        }
        Err(e) => return Err(bad_request(&format!("reading the request body: {e}"))),
    };
    store.record_body(content_type.clone(), body.clone());
    if cbor::is_cbor(content_type.as_deref()) {
        if !info.cbor {
            return Err(status(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json, application/yaml, application/vnd.kubernetes.protobuf",
                json!({}),
            ));
        }
        return match cbor::decode(&body) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(_) => Err(bad_request("the request body must be a CBOR map")),
            Err(e) => Err(bad_request(&format!(
                "invalid CBOR in the request body: {e}"
            ))),
        };
    }
    match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(bad_request("the request body must be a JSON object")),
        Err(e) => Err(bad_request(&format!(
            "invalid JSON in the request body: {e}"
        ))),
    }
}

/// The answer format `Accept` asks for (`None`: none this server writes).
fn accepted(info: &ResourceInfo, req: &Request<Incoming>) -> Option<Format> {
    let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
    cbor::negotiate(accept, info.cbor)
}

/// kube-apiserver's `406` for an `Accept` it cannot satisfy.
fn not_acceptable() -> Response<Body> {
    status(
        StatusCode::NOT_ACCEPTABLE,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/yaml, \
         application/vnd.kubernetes.protobuf",
        json!({}),
    )
}

/// A complete JSON answer (object, list or `Status`) re-encoded as CBOR when that was asked
/// for; streams (watches) are already in their format.
async fn encode_as(format: Format, resp: Response<Body>) -> Response<Body> {
    let is_json = resp
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|ct| ct.as_bytes() == JSON.as_bytes());
    if format != Format::Cbor || !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(collected) = body.collect().await;
    let value: Value = serde_json::from_slice(&collected.to_bytes()).unwrap_or_default();
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static(cbor::CBOR));
    Response::from_parts(parts, full(cbor::encode(&value)))
}

fn store_error(info: &ResourceInfo, error: StoreError) -> Response<Body> {
    let qualified = info.qualified();
    match error {
        StoreError::NotFound(name) => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("{qualified} \"{name}\" not found"),
            info.details(&name),
        ),
        StoreError::AlreadyExists(name) => status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            &format!("{qualified} \"{name}\" already exists"),
            info.details(&name),
        ),
        StoreError::Invalid(message) => status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            &format!("{} is invalid: {message}", info.kind),
            json!({"group": info.group, "kind": info.kind}),
        ),
    }
}

/// Whether the request's `Accept-Encoding` names gzip.
fn accepts_gzip<B>(req: &Request<B>) -> bool {
    req.headers()
        .get_all(hyper::header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| coding.split(';').next().unwrap_or("").trim() == "gzip")
}
