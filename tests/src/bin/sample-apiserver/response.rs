//! Response building: the body type, JSON answers and Kubernetes `Status` errors.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

/// Body of every response (full or streaming).
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

pub const JSON: &str = "application/json";

/// A complete body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

/// Bytes with a content type.
pub fn bytes(code: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = code;
    if let Ok(value) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(CONTENT_TYPE, value);
    }
    resp
}

/// A JSON value.
pub fn json(code: StatusCode, value: &Value) -> Response<Body> {
    bytes(code, JSON, serde_json::to_vec(value).unwrap_or_default())
}

/// Plain text (health endpoints).
pub fn text(body: &'static str) -> Response<Body> {
    bytes(StatusCode::OK, "text/plain; charset=utf-8", body)
}

/// A `metav1.Status` failure.
pub fn status(code: StatusCode, reason: &str, message: &str, details: Value) -> Response<Body> {
    json(
        code,
        &json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "details": details,
            "code": code.as_u16(),
        }),
    )
}

/// The `401` of kube-apiserver for a request it could not authenticate.
pub fn unauthorized() -> Response<Body> {
    json(
        StatusCode::UNAUTHORIZED,
        &json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }),
    )
}

/// The generic 404 of kube-apiserver.
pub fn not_found() -> Response<Body> {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        "the server could not find the requested resource",
        json!({}),
    )
}

pub fn bad_request(message: &str) -> Response<Body> {
    status(StatusCode::BAD_REQUEST, "BadRequest", message, json!({}))
}

pub fn method_not_allowed(method: &hyper::Method) -> Response<Body> {
    status(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        &format!("{method} is not supported on this path"),
        json!({}),
    )
}
