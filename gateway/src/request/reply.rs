//! Responses apiagg writes itself; every error among them is a `metav1.Status`.

use bytes::Bytes;
use pingora_error::Result;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;
use serde_json::{json, Value};

/// `application/json`
pub const JSON: &str = "application/json";
/// `text/plain; charset=utf-8`
pub const TEXT: &str = "text/plain; charset=utf-8";

/// A complete response: status, content type, body and extra headers.
pub struct Reply {
    code: u16,
    content_type: &'static str,
    body: Bytes,
    headers: Vec<(&'static str, String)>,
}

impl Reply {
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
        }
    }

    /// `304 Not Modified` (no body, no content headers).
    pub fn not_modified() -> Reply {
        Reply::new(304, "", Bytes::new())
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }

    /// The status code.
    pub fn code(&self) -> u16 {
        self.code
    }

    /// Writes the response and ends it.
    pub async fn send(self, session: &mut Session) -> Result<()> {
        let mut resp = ResponseHeader::build(self.code, Some(4 + self.headers.len()))?;
        if self.code != 304 {
            resp.insert_header("Content-Type", self.content_type)?;
            resp.insert_header("Content-Length", self.body.len().to_string())?;
            resp.insert_header("X-Content-Type-Options", "nosniff")?;
        }
        for (name, value) in self.headers {
            resp.insert_header(name, value)?;
        }
        if self.code == 304 {
            return session.write_response_header(Box::new(resp), true).await;
        }
        session.write_response_header(Box::new(resp), false).await?;
        session.write_response_body(Some(self.body), true).await
    }
}

/// Renders a failure `Status` (`kind`, `apiVersion`, `metadata`, `status`, `message`, `reason`,
/// optional `details`, `code`, in the order kube-apiserver writes them).
pub fn failure(code: u16, reason: &str, message: &str, details: Option<Value>) -> Bytes {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    });
    if let (Some(details), Some(map)) = (details, status.as_object_mut()) {
        map.insert("details".into(), details);
    }
    if let Some(map) = status.as_object_mut() {
        map.insert("code".into(), json!(code));
    }
    Bytes::from(status.to_string())
}

/// 503 for a request that arrived before every route was installed (spec §3.4).
pub fn mux_incomplete() -> Bytes {
    failure(
        503,
        "ServiceUnavailable",
        "the request has been made before all known HTTP paths have been installed, please try again",
        Some(json!({"retryAfterSeconds": MUX_RETRY_AFTER_SECONDS})),
    )
}

/// The complete 503 reply for a request that arrived before mux completion.
pub fn mux_incomplete_reply() -> Reply {
    Reply::json(503, mux_incomplete()).header("Retry-After", MUX_RETRY_AFTER_SECONDS.to_string())
}

/// `Retry-After` sent with [`mux_incomplete`].
pub const MUX_RETRY_AFTER_SECONDS: u64 = 5;

/// The 404 for paths nothing serves.
pub fn not_found() -> Bytes {
    failure(
        404,
        "NotFound",
        "the server could not find the requested resource",
        Some(json!({})),
    )
}

/// A failure `Status` reply with the same code in the body and the response.
pub fn failure_reply(code: u16, reason: &str, message: &str) -> Reply {
    Reply::json(code, failure(code, reason, message, None))
}

/// 504 for a request that did not finish within its timeout (spec §3.5).
pub fn timeout_reply() -> Reply {
    let message = "Timeout: request did not complete within the allotted timeout";
    Reply::json(504, failure(504, "Timeout", message, Some(json!({}))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_order_matches_kube() {
        let body = mux_incomplete();
        assert_eq!(
            std::str::from_utf8(&body).expect("utf8"),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the request has been made before all known HTTP paths have been installed, please try again","reason":"ServiceUnavailable","details":{"retryAfterSeconds":5},"code":503}"#
        );
    }
}
