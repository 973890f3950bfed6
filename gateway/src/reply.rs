//! Responses apiagg writes itself.

use bytes::Bytes;
use pingora_error::Result;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;

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
