//! Framing between the client's protocol and the backend's, for requests apiagg forwards:
//! the headers of one hop never pass (RFC 9110 §7.6.1, and what `Connection` names), a body is
//! framed once for the backend (a length, or chunked for HTTP/1.1), an HTTP/2 backend gets
//! `:scheme` and `:authority` for the endpoint, and an HTTP/1.1 client gets a framed answer.
//! pingora-core's HTTP sessions refuse malformed framing from the client (duplicate or
//! obfuscated `Content-Length` and `Transfer-Encoding`) before apiagg sees the request.

use http::{HeaderMap, HeaderName, HeaderValue};
use pingora_error::{ErrorType::InvalidHTTPHeader, OrErr, Result};
use pingora_http::{RequestHeader, ResponseHeader};

use crate::backends::ADDED_TO_ANSWERS;

/// Headers of one hop (RFC 9110 §7.6.1, and `Expect`, which apiagg answers itself): never
/// forwarded, in either direction. `Transfer-Encoding` goes too: apiagg frames what it writes.
const HOP_BY_HOP: [HeaderName; 9] = [
    http::header::CONNECTION,
    http::header::TE,
    http::header::TRAILER,
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
    http::header::PROXY_AUTHORIZATION,
    http::header::PROXY_AUTHENTICATE,
    http::header::EXPECT,
    HeaderName::from_static("keep-alive"),
];

/// More headers of one hop nobody should send (`Proxy-Connection`, `HTTP2-Settings`).
const ALSO_HOP_BY_HOP: [&str; 2] = ["proxy-connection", "http2-settings"];

/// The same for a backend's answer, keeping `Transfer-Encoding`: what the client connection
/// frames its body with (pingora drops it for HTTP/2 clients).
pub fn strip_response_hop_by_hop(head: &mut http::response::Parts) {
    for name in hop_by_hop(&head.headers, false) {
        head.headers.remove(&name);
    }
}

/// Whether `name` is a header of one hop (whatever `Connection` says).
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name) || ALSO_HOP_BY_HOP.contains(&name.as_str())
}

/// The headers `Connection` names (no allocation when it names none).
pub fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    let mut named: Vec<HeaderName> = Vec::new();
    for value in headers.get_all(http::header::CONNECTION) {
        for token in value.as_bytes().split(|&b| b == b',') {
            let token = token.trim_ascii();
            // The usual tokens name no header to drop (`keep-alive` is of one hop anyway).
            if token.eq_ignore_ascii_case(b"keep-alive") || token.eq_ignore_ascii_case(b"close") {
                continue;
            }
            if let Ok(name) = HeaderName::from_bytes(token) {
                named.push(name);
            }
        }
    }
    named
}

/// The hop-by-hop headers present, and those `Connection` names (`Transfer-Encoding` only
/// when `framing` is the caller's to choose).
fn hop_by_hop(headers: &HeaderMap, framing: bool) -> Vec<HeaderName> {
    let mut gone = connection_named(headers);
    for name in headers.keys() {
        if is_hop_by_hop(name) && (framing || name != http::header::TRANSFER_ENCODING) {
            gone.push(name.clone());
        }
    }
    if !framing {
        gone.retain(|name| name != http::header::TRANSFER_ENCODING);
    }
    gone
}

/// Whether the client waits for `100 Continue` before it sends its body.
pub fn expects_continue(request: &RequestHeader) -> bool {
    request
        .headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Frames a request for an HTTP/1.1 backend: a body without a length (chunked from the
/// client, or an HTTP/2 client's DATA frames) goes chunked; a body with one keeps it.
pub fn h1_framing(request: &mut RequestHeader, has_body: bool) -> Result<()> {
    // An HTTP/2 client's head says HTTP/2, which an HTTP/1.1 request line must not.
    request.set_version(http::Version::HTTP_11);
    if has_body && !request.headers.contains_key(http::header::CONTENT_LENGTH) {
        request.insert_header(http::header::TRANSFER_ENCODING, "chunked")?;
    }
    Ok(())
}

/// Targets a request at an HTTP/2 backend: `:scheme` and `:authority` name the endpoint,
/// `:path` is the request's origin form (an absolute-form target loses its authority).
pub fn h2_target(request: &mut RequestHeader, tls: bool, authority: &HeaderValue) -> Result<()> {
    let path = request
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    let authority = http::uri::Authority::try_from(authority.as_bytes())
        .or_err(InvalidHTTPHeader, "the endpoint's authority")?;
    let uri = http::Uri::builder()
        .scheme(if tls { "https" } else { "http" })
        .authority(authority)
        .path_and_query(path)
        .build()
        .or_err(InvalidHTTPHeader, "the request target for HTTP/2")?;
    request.set_uri(uri);
    request.remove_header(&http::header::HOST);
    Ok(())
}

/// The backend's answer head as the client gets it: a copy of its status and header map, not of
/// pingora's second, case-preserving map, with room for the headers added on the way (so the
/// map does not grow again).
pub fn relayed_head(backend: &ResponseHeader) -> http::response::Parts {
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = backend.status;
    parts.version = backend.version;
    let mut headers = HeaderMap::with_capacity(backend.headers.len() + ADDED_TO_ANSWERS);
    for (name, value) in &backend.headers {
        headers.append(name.clone(), value.clone());
    }
    parts.headers = headers;
    parts
}

/// An HTTP/1.1 client gets a framed body: an answer the backend delimited by closing its
/// connection (HTTP/1.0 style) is sent chunked, so the client's connection stays usable.
pub fn frame_for_http11(head: &mut http::response::Parts, head_request: bool) {
    // An HTTP/2 backend's head says HTTP/2, which an HTTP/1.1 status line must not.
    head.version = http::Version::HTTP_11;
    let bodiless = head_request || matches!(head.status.as_u16(), 204 | 304);
    let framed = head.headers.contains_key(http::header::CONTENT_LENGTH)
        || head.headers.contains_key(http::header::TRANSFER_ENCODING);
    if !bodiless && !framed {
        let chunked = HeaderValue::from_static("chunked");
        head.headers
            .insert(http::header::TRANSFER_ENCODING, chunked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(headers: &HeaderMap) -> Vec<&str> {
        let mut names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_never_pass() {
        let mut req = RequestHeader::build("PUT", b"/apis/a.io/v1/x", None).expect("req");
        for (name, value) in [
            ("Connection", "keep-alive, X-Secret , te"),
            ("Keep-Alive", "timeout=5"),
            ("X-Secret", "s"),
            ("TE", "trailers"),
            ("Transfer-Encoding", "chunked"),
            ("Proxy-Connection", "keep-alive"),
            ("Proxy-Authorization", "Basic x"),
            ("HTTP2-Settings", "AAMAAABkAAQAAP__"),
            ("Expect", "100-continue"),
            ("Upgrade", "h2c"),
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
        ] {
            req.append_header(name, value).expect("header");
        }
        assert!(expects_continue(&req));
        let named = connection_named(&req.headers);
        let headers = req.headers.clone();
        let mut req = RequestHeader::build("PUT", b"/apis/a.io/v1/x", None).expect("req");
        for (name, value) in &headers {
            if !is_hop_by_hop(name) && !named.contains(name) {
                req.append_header(name.clone(), value.clone())
                    .expect("header");
            }
        }
        assert_eq!(names(&req.headers), ["accept", "content-type"]);
        // Framed again for the backend: chunked for an HTTP/1.1 one, as the client sent it.
        req.set_version(http::Version::HTTP_2);
        h1_framing(&mut req, true).expect("framing");
        assert_eq!(req.headers["transfer-encoding"], "chunked");
        assert_eq!(req.version, http::Version::HTTP_11);
    }

    #[test]
    fn a_body_with_a_length_keeps_it_and_no_body_gets_no_framing() {
        let mut sized = RequestHeader::build("PUT", b"/x", None).expect("req");
        sized.insert_header("Content-Length", "3").expect("header");
        h1_framing(&mut sized, true).expect("framing");
        assert!(!sized.headers.contains_key("transfer-encoding"));
        let mut empty = RequestHeader::build("GET", b"/x", None).expect("req");
        h1_framing(&mut empty, false).expect("framing");
        assert!(empty.headers.is_empty());
    }

    #[test]
    fn answers_keep_their_framing_but_lose_what_belongs_to_the_backend_hop() {
        let (mut head, ()) = http::Response::new(()).into_parts();
        for (name, value) in [
            ("connection", "close, X-Backend-Hop"),
            ("x-backend-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("content-type", "application/json"),
        ] {
            head.headers.append(name, HeaderValue::from_static(value));
        }
        strip_response_hop_by_hop(&mut head);
        assert_eq!(names(&head.headers), ["content-type", "transfer-encoding"]);
    }

    #[test]
    fn an_unframed_answer_goes_chunked_to_an_http11_client_unless_it_has_no_body() {
        let (mut close_delimited, ()) = http::Response::new(()).into_parts();
        close_delimited.version = http::Version::HTTP_2;
        frame_for_http11(&mut close_delimited, false);
        assert_eq!(close_delimited.headers["transfer-encoding"], "chunked");
        assert_eq!(close_delimited.version, http::Version::HTTP_11);
        for (code, head_request) in [(204, false), (304, false), (200, true)] {
            let (mut bodiless, ()) = http::Response::new(()).into_parts();
            bodiless.status = http::StatusCode::from_u16(code).expect("status");
            frame_for_http11(&mut bodiless, head_request);
            assert!(
                !bodiless.headers.contains_key("transfer-encoding"),
                "{code}"
            );
        }
    }

    #[test]
    fn http2_backends_get_the_endpoint_as_scheme_and_authority() {
        let mut req = RequestHeader::build("GET", b"/apis/a.io/v1/x?watch=1", None).expect("req");
        req.insert_header("Host", "gateway").expect("header");
        h2_target(&mut req, true, &HeaderValue::from_static("10.0.0.1:443")).expect("target");
        assert_eq!(
            req.uri.to_string(),
            "https://10.0.0.1:443/apis/a.io/v1/x?watch=1"
        );
        assert!(!req.headers.contains_key("host"));
        let mut absolute =
            RequestHeader::build("GET", b"http://elsewhere/apis?x=1", None).expect("req");
        h2_target(&mut absolute, false, &HeaderValue::from_static("b:80")).expect("target");
        assert_eq!(absolute.uri.to_string(), "http://b:80/apis?x=1");
    }
}
