//! REST handlers of the in-memory resource: list, watch, create, get, delete.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::debug::query_param;
use crate::response::{bad_request, json, method_not_allowed, status, Body};
use crate::selector::Selector;
use crate::store::{Store, StoreError};
use crate::watch::{self, WatchParams};

/// Largest accepted request body.
const MAX_BODY: usize = 3 * 1024 * 1024;

/// Names used in responses and messages.
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub kind: String,
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
    match *req.method() {
        Method::GET | Method::HEAD => {
            let query = req.uri().query();
            let selector = match label_selector(query) {
                Ok(s) => s,
                Err(message) => return bad_request(&message),
            };
            match watch_params(query) {
                Ok(Some(mut params)) => {
                    params.selector = selector;
                    watch::respond(store, namespace.map(str::to_string), params)
                }
                Ok(None) => list(info, store, namespace, &selector),
                Err(message) => bad_request(&message),
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
        Method::PUT => match read_object(req).await {
            Ok(object) => match store.replace(namespace, name, object) {
                Ok(object) => json(StatusCode::OK, &object),
                Err(e) => store_error(info, e),
            },
            Err(refused) => refused,
        },
        _ => method_not_allowed(method),
    }
}

fn list(
    info: &ResourceInfo,
    store: &Store,
    namespace: Option<&str>,
    selector: &Selector,
) -> Response<Body> {
    let (resource_version, mut items) = store.list(namespace);
    items.retain(|o| selector.matches(o));
    json(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", info.kind),
            "apiVersion": format!("{}/{}", info.group, info.version),
            "metadata": {"resourceVersion": resource_version.to_string()},
            "items": items,
        }),
    )
}

async fn create(
    info: &ResourceInfo,
    store: &Store,
    namespace: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    match read_object(req).await {
        Ok(object) => match store.create(namespace, object) {
            Ok(created) => json(StatusCode::CREATED, &created),
            Err(e) => store_error(info, e),
        },
        Err(refused) => refused,
    }
}

/// The request body as a JSON object, or the answer refusing it.
async fn read_object(req: Request<Incoming>) -> Result<Value, Response<Body>> {
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
    match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(bad_request("the request body must be a JSON object")),
        Err(e) => Err(bad_request(&format!(
            "invalid JSON in the request body: {e}"
        ))),
    }
}

/// The `labelSelector` query parameter, percent-decoded and parsed.
fn label_selector(query: Option<&str>) -> Result<Selector, String> {
    let Some(raw) = query_param(query, "labelSelector") else {
        return Ok(Selector::default());
    };
    let spaced = raw.replace('+', " ");
    let decoded = percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .map_err(|e| format!("labelSelector: {e}"))?;
    Selector::parse(&decoded).map_err(|e| format!("labelSelector: {e}"))
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

/// `Some` when the query asks for a watch (`watch=true|1`).
fn watch_params(query: Option<&str>) -> Result<Option<WatchParams>, String> {
    let watching = match query_param(query, "watch") {
        None | Some("" | "false" | "0" | "f" | "False" | "FALSE") => false,
        Some("true" | "1" | "t" | "True" | "TRUE") => true,
        Some(other) => return Err(format!("invalid value for watch: {other:?}")),
    };
    if !watching {
        return Ok(None);
    }
    let resource_version = match query_param(query, "resourceVersion") {
        None | Some("") => 0,
        Some(rv) => rv
            .parse()
            .map_err(|_| format!("invalid resourceVersion: {rv:?}"))?,
    };
    let timeout = match query_param(query, "timeoutSeconds") {
        None | Some("") => None,
        Some(t) => Some(Duration::from_secs(
            t.parse()
                .map_err(|_| format!("invalid timeoutSeconds: {t:?}"))?,
        )),
    };
    Ok(Some(WatchParams {
        resource_version,
        timeout,
        selector: Selector::default(),
    }))
}
