//! Debug endpoints under the group-version: `echo`, `whoami`, `slow`, `redirect` and
//! `peer-unreachable`.

use std::collections::BTreeMap;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, LOCATION};
use hyper::{Request, Response, StatusCode};
use serde_json::json;

use crate::auth::Caller;
use crate::response::{bad_request, json, unauthorized, Body};

/// Longest accepted `slow?ms=`: ten minutes.
const MAX_SLEEP_MS: u64 = 600_000;

/// Describes the request as the backend saw it.
pub fn echo(req: &Request<Incoming>, server: &str) -> Response<Body> {
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in req.headers() {
        headers
            .entry(name.as_str().to_string())
            .or_default()
            .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    json(
        StatusCode::OK,
        &json!({
            "method": req.method().as_str(),
            "path": req.uri().path(),
            "query": req.uri().query().unwrap_or_default(),
            "headers": headers,
            "server": server,
            "protocol": format!("{:?}", req.version()),
        }),
    )
}

/// `whoami`: the authenticated caller of the request (see [`Caller::to_json`]).
pub fn whoami<B>(req: &Request<B>) -> Response<Body> {
    match req.extensions().get::<Caller>() {
        Some(caller) => json(StatusCode::OK, &caller.to_json()),
        // `routes::handle` authenticates every path that leads here.
        None => unauthorized(),
    }
}

/// Sleeps `ms` milliseconds, then answers.
pub async fn slow(query: Option<&str>) -> Response<Body> {
    let ms = match query_param(query, "ms").map(|v| v.parse::<u64>()) {
        Some(Ok(ms)) if ms <= MAX_SLEEP_MS => ms,
        Some(_) => return bad_request("ms must be an integer between 0 and 600000"),
        None => return bad_request("missing query parameter ms"),
    };
    tokio::time::sleep(Duration::from_millis(ms)).await;
    json(StatusCode::OK, &json!({"sleptMs": ms}))
}

/// What a kube-apiserver 1.36 answers while the peer that serves a group is unreachable
/// during an upgrade (its Mixed Version Proxy, KEP-4020): a 503 Status.
pub fn peer_unreachable() -> Response<Body> {
    crate::response::status(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        "error while proxying request to the peer apiserver: no peer endpoint serves this \
         resource",
        json!({}),
    )
}

/// `302 Found` pointing at `echo` in the same group-version.
pub fn redirect(group_version_path: &str) -> Response<Body> {
    let mut resp = json(StatusCode::FOUND, &json!({"redirect": "echo"}));
    if let Ok(location) =
        HeaderValue::from_str(&format!("{group_version_path}/echo?redirected=true"))
    {
        resp.headers_mut().insert(LOCATION, location);
    }
    resp
}

/// The first value of `name` in a query string (no percent-decoding: values here are simple).
pub fn query_param<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}
