//! Answers `/openapi/v2`, `/openapi/v3` and `/openapi/v3/<key>` from the published snapshot
//! (as kube-openapi's `pkg/handler/handler.go` and `pkg/handler3/handler.go` answer them).
//! Nothing is built here: bytes, hashes and ETags were computed when the snapshot was published.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use pingora_http::RequestHeader;

use apiagg_discovery::{accepts_coding, media_ranges};
use apiagg_openapi_merge::OpenApiDocs;

use super::refusal::Refusal;
use super::reply::{self, Reply};
use apiagg_apis::Reason;

/// Which OpenAPI endpoint a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenApiPath<'a> {
    /// `/openapi/v2`
    V2,
    /// `/openapi/v3` (or `/openapi/v3/`)
    V3Index,
    /// `/openapi/v3/<key>`, with the `hash` query parameter (from the request's one parse)
    V3Document(&'a str, Option<&'a str>),
}

impl<'a> OpenApiPath<'a> {
    /// Classifies the part of a path after `/openapi/`.
    pub fn parse(rest: &'a str) -> Option<OpenApiPath<'a>> {
        match rest {
            "v2" => Some(OpenApiPath::V2),
            "v3" | "v3/" => Some(OpenApiPath::V3Index),
            _ => rest
                .strip_prefix("v3/")
                .map(|key| OpenApiPath::V3Document(key, None)),
        }
    }
}

/// Answers one OpenAPI request.
pub fn answer(req: &RequestHeader, path: OpenApiPath<'_>, docs: Option<&OpenApiDocs>) -> Reply {
    let Some(docs) = docs else {
        return not_ready("no OpenAPI document has been produced yet");
    };
    // A document that does not exist is 404 whatever the client accepts (the 404 `Status` is
    // negotiated, JSON or CBOR).
    if let OpenApiPath::V3Document(key, _) = path {
        if !docs.v3.contains_key(key) {
            return Refusal::not_found().into();
        }
    }
    let format = match negotiate(header(req, "accept"), path == OpenApiPath::V2) {
        Ok(format) => format,
        Err(reply) => return reply,
    };
    match path {
        OpenApiPath::V2 => v2(req, docs, format),
        OpenApiPath::V3Index => cached(req, 200, docs.v3_index.clone(), &docs.v3_index_etag)
            .header(http::header::VARY, "Accept"),
        OpenApiPath::V3Document(key, hash) => v3_document(req, docs, key, hash),
    }
}

fn header<'a>(req: &'a RequestHeader, name: &str) -> Option<&'a str> {
    req.headers.get(name).and_then(|v| v.to_str().ok())
}

fn not_ready(message: &str) -> Reply {
    Refusal::unavailable(message).retry_after(1).into()
}

/// What a client gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    /// gnostic protobuf (`/openapi/v2` only).
    Protobuf,
}

/// Protobuf media types of OpenAPI v2 (kube-openapi's `pkg/handler/handler.go`).
const PROTOBUF_TYPES: [&str; 2] = [
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
];
/// `Content-Type` of protobuf answers.
const PROTOBUF_CONTENT_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The most preferred acceptable clause of `Accept` wins (empty = JSON; `q=0` refuses, as
/// kube-openapi does); nothing acceptable → 406. Protobuf is offered only where `protobuf` is
/// set (`/openapi/v2`).
fn negotiate(accept: Option<&str>, protobuf: bool) -> Result<Format, Reply> {
    let accept = accept.map(str::trim).unwrap_or("");
    if accept.is_empty() {
        return Ok(Format::Json);
    }
    let chosen = media_ranges(accept).iter().find_map(|clause| {
        if clause.refused() {
            None
        } else if clause.accepts_json() {
            Some(Format::Json)
        } else if protobuf && PROTOBUF_TYPES.iter().any(|t| clause.is(t)) {
            Some(Format::Protobuf)
        } else {
            None
        }
    });
    chosen.ok_or_else(|| {
        let offered = if protobuf {
            "application/json, application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        } else {
            "application/json"
        };
        let message =
            format!("only the following media types are accepted: {offered}, not {accept:?}");
        Refusal::new(Reason::NotAcceptable, message).into()
    })
}

/// `If-None-Match` matches `etag` (list and weak aware, `*` matches anything).
fn matches(if_none_match: Option<&str>, etag: &str) -> bool {
    if_none_match.is_some_and(|value| {
        value.split(',').map(str::trim).any(|candidate| {
            candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == etag
        })
    })
}

/// 200 with `ETag`, or 304 when the client has it.
fn cached(req: &RequestHeader, code: u16, body: Bytes, etag: &str) -> Reply {
    let reply = if matches(header(req, "if-none-match"), etag) {
        Reply::not_modified()
    } else {
        Reply::json(code, body)
    };
    reply.header(http::header::ETAG, etag.to_string())
}

fn accepts_gzip(req: &RequestHeader) -> bool {
    header(req, "accept-encoding").is_some_and(|value| accepts_coding(value, "gzip"))
}

fn v2(req: &RequestHeader, docs: &OpenApiDocs, format: Format) -> Reply {
    let Some(doc) = &docs.v2 else {
        return not_ready("no OpenAPI v2 document is available yet");
    };
    let vary = "Accept, Accept-Encoding";
    if matches(header(req, "if-none-match"), &doc.etag) {
        return Reply::not_modified()
            .header(http::header::ETAG, doc.etag.clone())
            .header(http::header::VARY, vary);
    }
    let (content_type, plain, gzip) = match format {
        Format::Json => (reply::JSON, &doc.json, &doc.gzip),
        Format::Protobuf => (PROTOBUF_CONTENT_TYPE, &doc.proto, &doc.proto_gzip),
    };
    let reply = match (gzip, accepts_gzip(req)) {
        (Some(gzip), true) => Reply::new(200, content_type, gzip.clone())
            .header(http::header::CONTENT_ENCODING, "gzip"),
        _ => Reply::new(200, content_type, plain.clone()),
    };
    reply
        .header(http::header::ETAG, doc.etag.clone())
        .header(http::header::VARY, vary)
}

fn v3_document(req: &RequestHeader, docs: &OpenApiDocs, key: &str, hash: Option<&str>) -> Reply {
    let Some(served) = docs.v3.get(key) else {
        return Refusal::not_found().into();
    };
    let current = served.doc.hash.as_str();
    let reply = match hash {
        Some(hash) if hash == current => {
            let expires = SystemTime::now() + Duration::from_secs(365 * 24 * 3600);
            cached(req, 200, served.doc.json.clone(), &served.etag)
                .header(http::header::CACHE_CONTROL, "public, immutable")
                .header(http::header::EXPIRES, httpdate::fmt_http_date(expires))
        }
        Some(_) => Reply::json(301, Bytes::new())
            .header(
                http::header::LOCATION,
                format!("/openapi/v3/{key}?hash={current}"),
            )
            .header(http::header::ETAG, served.etag.clone()),
        None => cached(req, 200, served.doc.json.clone(), &served.etag),
    };
    reply.header(http::header::VARY, "Accept")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(OpenApiPath::parse("v2"), Some(OpenApiPath::V2));
        assert_eq!(OpenApiPath::parse("v3"), Some(OpenApiPath::V3Index));
        assert_eq!(
            OpenApiPath::parse("v3/apis/a.io/v1"),
            Some(OpenApiPath::V3Document("apis/a.io/v1", None))
        );
        assert_eq!(OpenApiPath::parse("v1"), None);
    }

    #[test]
    fn negotiation() {
        assert_eq!(negotiate(None, true).ok(), Some(Format::Json));
        assert_eq!(negotiate(Some("*/*"), true).ok(), Some(Format::Json));
        assert_eq!(
            negotiate(Some("application/json"), false).ok(),
            Some(Format::Json)
        );
        let proto = PROTOBUF_TYPES[0];
        assert_eq!(negotiate(Some(proto), true).ok(), Some(Format::Protobuf));
        assert_eq!(
            negotiate(Some(proto), false).err().map(|r| r.code()),
            Some(406)
        );
        let both = format!("application/json, {proto}");
        assert_eq!(negotiate(Some(&both), true).ok(), Some(Format::Json));
        assert!(negotiate(Some("application/json;q=0, text/html"), true).is_err());
    }

    #[test]
    fn if_none_match() {
        assert!(matches(Some("\"A\""), "\"A\""));
        assert!(matches(Some("\"B\", W/\"A\""), "\"A\""));
        assert!(matches(Some("*"), "\"A\""));
        assert!(!matches(Some("\"B\""), "\"A\""));
        assert!(!matches(None, "\"A\""));
    }
}
