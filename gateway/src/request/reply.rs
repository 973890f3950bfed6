//! Responses apiagg writes itself; every error among them is a `metav1.Status`, made from a
//! [`Refusal`].

use apiagg_apis::Failure;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use http::{HeaderName, HeaderValue, StatusCode};
use pingora_core::protocols::http::ServerSession as Session;
use pingora_error::{ErrorType::InvalidHTTPHeader, OrErr, Result};
use pingora_http::ResponseHeader;

use super::refusal::Refusal;
use apiagg_audit::StatusSummary;

/// `application/json`
pub const JSON: &str = "application/json";
/// `text/plain; charset=utf-8`
pub const TEXT: &str = "text/plain; charset=utf-8";

/// A complete response: status, content type, body and extra headers.
pub struct Reply {
    code: u16,
    content_type: &'static str,
    body: Bytes,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// What the body says when it is a failure `Status`, for the audit (never parsed back).
    status: Option<Box<StatusSummary>>,
    /// The body is a `Status` apiagg rendered (not relayed): a client that asks for CBOR gets
    /// it in CBOR, as kube-apiserver 1.37 answers its errors.
    own_status: bool,
    /// The client connection closes after this answer.
    close: bool,
}

impl Reply {
    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Its code, `Content-Type` and body, for a caller that writes the head itself.
    pub fn into_parts(self) -> (u16, &'static str, Bytes) {
        (self.code, self.content_type, self.body)
    }

    /// A JSON response (Status objects, documents).
    pub fn json(code: u16, body: Bytes) -> Reply {
        Reply::new(code, JSON, body)
    }

    /// A plain-text response.
    pub fn text(code: u16, body: impl Into<Bytes>) -> Reply {
        Reply::new(code, TEXT, body.into())
    }

    /// A response with any content type.
    pub fn new(code: u16, content_type: &'static str, body: Bytes) -> Reply {
        Reply {
            code,
            content_type,
            body,
            headers: Vec::new(),
            status: None,
            own_status: false,
            close: false,
        }
    }

    /// A failure `metav1.Status` (its code in the body and the response), and what it says for
    /// the audit.
    pub fn failure(failure: &Failure) -> Reply {
        let body = Bytes::from(failure.to_json().to_string());
        let mut reply = Reply::json(failure.code, body);
        reply.status = Some(Box::new(StatusSummary {
            status: "Failure".into(),
            message: failure.message.clone(),
            reason: failure.reason.as_str().into(),
        }));
        reply.own_status = true;
        reply
    }

    /// The same reply in JSON whatever the request accepts: for an answer to a request whose
    /// head could not be read (there is no `Accept` to negotiate with).
    pub fn unnegotiated(mut self) -> Reply {
        self.own_status = false;
        self
    }

    /// What the body says, when it is a failure `Status`.
    pub fn status(&self) -> Option<&StatusSummary> {
        self.status.as_deref()
    }

    /// The same reply, its `Status` read from its body: for bodies apiagg relays rather than
    /// renders (a backend's).
    pub fn read_status(mut self) -> Reply {
        if self.code >= 400 && self.status.is_none() {
            self.status = status_of(&self.body).map(Box::new);
        }
        self
    }

    /// `304 Not Modified` (no body, no content headers).
    pub fn not_modified() -> Reply {
        Reply::new(304, "", Bytes::new())
    }

    /// Adds a header (a name may repeat: each value is sent). apiagg's values are always valid
    /// header values; one that is not (a bug) is left out and logged.
    pub fn header<V>(mut self, name: HeaderName, value: V) -> Reply
    where
        V: TryInto<HeaderValue>,
    {
        match value.try_into() {
            Ok(value) => self.headers.push((name, value)),
            Err(_) => tracing::warn!(header = %name, "left out a header with an invalid value"),
        }
        self
    }

    /// The same reply, after which the client connection closes (`Connection: close` on
    /// HTTP/1.1).
    pub fn closing(mut self) -> Reply {
        self.close = true;
        self
    }

    /// The status code.
    pub fn code(&self) -> u16 {
        self.code
    }

    /// Writes the response and ends it.
    ///
    /// The body is complete before the head goes out (Status objects, discovery and OpenAPI
    /// documents are rendered or published whole), so an answer written here cannot fail
    /// midway; what apiagg streams itself and can fail after its head ([`abandon`]) is not
    /// written here.
    ///
    /// The head is built as a plain header map, with names parsed once for the process: pingora's
    /// own setters parse each name again and keep a second map for their case, which costs more
    /// than the rest of a discovery answer. The names go out in lowercase, as over HTTP/2.
    pub async fn send(mut self, session: &mut Session) -> Result<()> {
        if self.own_status {
            self = self.negotiated(session.req_header());
        }
        let (mut head, ()) = http::Response::new(()).into_parts();
        head.status = StatusCode::from_u16(self.code).or_err(InvalidHTTPHeader, "status")?;
        head.headers.reserve(4 + self.headers.len());
        // As kube-apiserver's `WithCacheControl` marks every answer it writes itself.
        head.headers
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
        if self.code != 304 {
            let content_type = HeaderValue::from_static(self.content_type);
            head.headers.insert(CONTENT_TYPE, content_type);
            head.headers
                .insert(CONTENT_LENGTH, HeaderValue::from(self.body.len()));
            let nosniff = HeaderValue::from_static("nosniff");
            head.headers.insert(X_CONTENT_TYPE_OPTIONS, nosniff);
        }
        // The first value of a name replaces a default above; the next ones add to it.
        let mut named: Vec<HeaderName> = Vec::new();
        for (name, value) in self.headers {
            if named.contains(&name) {
                head.headers.append(name, value);
            } else {
                head.headers.insert(name.clone(), value);
                named.push(name);
            }
        }
        if self.close {
            session.set_keepalive(None);
        }
        let resp = ResponseHeader::from(head);
        if self.code == 304 {
            session.write_response_header(Box::new(resp)).await?;
            return session.finish_body().await;
        }
        session.write_response_header(Box::new(resp)).await?;
        session.write_response_body(self.body, true).await
    }
}

impl From<Refusal> for Reply {
    fn from(refusal: Refusal) -> Reply {
        let mut reply = Reply::failure(&refusal.failure);
        reply.close = refusal.close;
        match refusal.retry_after {
            Some(seconds) => reply.header(http::header::RETRY_AFTER, seconds),
            None => reply,
        }
    }
}

impl Reply {
    /// The same reply for `req`: a `Status` apiagg rendered goes in CBOR when the request's
    /// `Accept` prefers it (as kube-apiserver's `responsewriters.ErrorNegotiated` writes its
    /// errors; anything else, or a failed encoding, stays JSON). For a caller that writes the
    /// reply itself ([`Reply::into_parts`]); [`Reply::send`] negotiates on its own.
    pub fn negotiated(mut self, req: &pingora_http::RequestHeader) -> Reply {
        if !std::mem::take(&mut self.own_status) {
            return self;
        }
        let accept = req
            .headers
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok());
        if apiagg_discovery::status_format(accept) != apiagg_discovery::Format::Cbor {
            return self;
        }
        if let Ok(cbor) = apiagg_apis::json_to_cbor(&self.body) {
            self.body = Bytes::from(cbor);
            self.content_type = apiagg_apis::CBOR;
        }
        self
    }
}

/// Abandons an answer whose head went out and whose body cannot be completed: an HTTP/2
/// stream is reset (`INTERNAL_ERROR`, as Go's server resets a handler that aborts with
/// `http.ErrAbortHandler`), an HTTP/1.1 connection is closed before the body's end. The client
/// sees a broken answer, never one that looks complete, nor a `Status` appended after part of
/// a body (kubernetes#140136). Nothing may be written to `session` after it.
pub async fn abandon(session: &mut Session) {
    session.set_keepalive(None);
    session.shutdown().await;
}

/// The head of a watch stream apiagg writes itself: `200`, JSON lines, not cached, with
/// `headers` (the audit and flow-control ones); chunked over HTTP/1.1.
pub fn watch_head(
    headers: Vec<(HeaderName, HeaderValue)>,
    http2: bool,
) -> Result<Box<ResponseHeader>> {
    let mut head = ResponseHeader::build(200, Some(headers.len() + 3))?;
    for (name, value) in headers {
        head.insert_header(name, value)?;
    }
    head.insert_header("Content-Type", JSON)?;
    head.insert_header("Cache-Control", "no-cache, private")?;
    if !http2 {
        head.insert_header("Transfer-Encoding", "chunked")?;
    }
    Ok(Box::new(head))
}

/// The status, message and reason of a `metav1.Status` body.
pub fn status_of(body: &[u8]) -> Option<StatusSummary> {
    let status: serde_json::Value = serde_json::from_slice(body).ok()?;
    let text = |key: &str| status.get(key).and_then(|v| v.as_str()).map(str::to_string);
    Some(StatusSummary {
        status: text("status")?.into(),
        message: text("message").unwrap_or_default(),
        reason: text("reason").unwrap_or_default().into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiagg_apis::Reason;
    use serde_json::{json, Value};

    #[test]
    fn a_failure_says_what_its_body_says_and_relayed_statuses_are_read() {
        let failure = Failure::new(Reason::Forbidden, "no").details(json!({"kind": "x"}));
        let refused = Reply::failure(&failure);
        let said = refused.status().cloned();
        assert_eq!(said, status_of(refused.body()));
        assert_eq!(
            said.map(|s| (s.reason, s.message)),
            Some(("Forbidden".into(), "no".into()))
        );
        let body = br#"{"kind":"Status","status":"Failure","message":"no","reason":"Forbidden","code":403}"#;
        let relayed = Reply::json(403, Bytes::from_static(body)).read_status();
        assert_eq!(relayed.status().map(|s| s.message.as_str()), Some("no"));
        assert!(status_of(b"not json").is_none());
        assert!(Reply::json(200, Bytes::new())
            .read_status()
            .status()
            .is_none());
    }

    #[test]
    fn the_404_is_kube_apiservers_status_in_json_or_cbor_as_asked() {
        let json = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}"#;
        let not_found = || Reply::from(Refusal::not_found());
        assert_eq!(not_found().body(), &Bytes::from_static(json));
        let mut req = pingora_http::RequestHeader::build("GET", b"/nowhere", None).expect("head");
        let (_, kind, body) = not_found().negotiated(&req).into_parts();
        assert_eq!((kind, &body[..]), (JSON, &json[..]));
        req.insert_header("Accept", "application/cbor, application/json")
            .expect("accept");
        let (_, kind, body) = not_found().negotiated(&req).into_parts();
        assert_eq!(kind, apiagg_apis::CBOR);
        let json: Value = serde_json::from_slice(json).expect("JSON");
        assert_eq!(apiagg_apis::from_cbor(&body).expect("CBOR"), json);
        // A document never negotiates.
        let document = Reply::json(200, Bytes::from_static(b"{}"));
        assert_eq!(document.negotiated(&req).into_parts().1, JSON);
    }

    #[test]
    fn field_order_matches_kube() {
        let reply = Reply::from(Refusal::mux_incomplete());
        let body = reply.body();
        assert_eq!(
            std::str::from_utf8(body).expect("utf8"),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the request has been made before all known HTTP paths have been installed, please try again","reason":"ServiceUnavailable","details":{"retryAfterSeconds":5},"code":503}"#
        );
    }
}
