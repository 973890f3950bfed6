//! Parsing what a backend sends: the response head (and how it frames the body), and the
//! chunked body.

use std::mem::MaybeUninit;

use bytes::{Buf, Bytes};
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version};
use pingora_error::{Error, ErrorType, Result};

use super::{
    connection_has, tokens, Body, Chunk, H1Client, ADDED_TO_ANSWERS, MAX_CHUNK_LINE, MAX_HEADERS,
    MAX_TRAILERS,
};

impl<S> H1Client<S> {
    /// Parses a complete response head at the start of the buffer (`None`: more bytes are
    /// needed), consumes it, and sets how the body is framed.
    pub(super) fn parse_head(&mut self) -> Result<Option<http::response::Parts>> {
        let mut headers = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut response,
            &self.buf,
            &mut headers,
        );
        let length = match parsed {
            Ok(httparse::Status::Complete(length)) => length,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => {
                let e = format!("the backend's response head does not parse: {e}");
                return Error::e_explain(ErrorType::InvalidHTTPHeader, e);
            }
        };
        let status = response
            .code
            .and_then(|c| StatusCode::from_u16(c).ok())
            .ok_or_else(|| Error::explain(ErrorType::InvalidHTTPHeader, "invalid status"))?;
        let version = match response.version {
            Some(1) => Version::HTTP_11,
            _ => Version::HTTP_10,
        };
        // Values are slices of the head's bytes (no copy).
        let base = self.buf.as_ptr() as usize;
        let mut fields = Vec::with_capacity(response.headers.len());
        let mut seen = Seen::default();
        for header in response.headers.iter() {
            let name = HeaderName::from_bytes(header.name.as_bytes())
                .map_err(|e| Error::because(ErrorType::InvalidHTTPHeader, "header name", e))?;
            seen.note(&name);
            let start = header.value.as_ptr() as usize - base;
            fields.push((name, start..start + header.value.len()));
        }
        let bytes = self.buf.split_to(length).freeze();
        let mut map = HeaderMap::with_capacity(fields.len() + ADDED_TO_ANSWERS);
        for (name, span) in fields {
            // httparse let through only field-value bytes.
            let value = HeaderValue::from_maybe_shared(bytes.slice(span))
                .map_err(|e| Error::because(ErrorType::InvalidHTTPHeader, "header value", e))?;
            map.append(name, value);
        }
        self.frame(&mut map, version, status, seen)?;
        let (mut parts, ()) = http::Response::new(()).into_parts();
        parts.status = status;
        parts.version = version;
        parts.headers = map;
        Ok(Some(parts))
    }

    /// How the body of an answer with `headers` is framed (RFC 9112 §6.3), and whether the
    /// connection is kept.
    fn frame(
        &mut self,
        headers: &mut HeaderMap,
        version: Version,
        status: StatusCode,
        seen: Seen,
    ) -> Result<()> {
        self.keep_alive = match (version, seen.connection) {
            (Version::HTTP_11, false) => true,
            (Version::HTTP_11, true) => !connection_has(headers, b"close"),
            (_, connection) => connection && connection_has(headers, b"keep-alive"),
        };
        let code = status.as_u16();
        if status.is_informational() {
            // Another head follows (a 101 is the caller's to refuse).
            self.body = Body::Unknown;
            return Ok(());
        }
        if self.head_request || code == 204 || code == 304 {
            self.body = Body::Done;
            return Ok(());
        }
        let codings = seen
            .transfer_encoding
            .then(|| last_value(headers, &TRANSFER_ENCODING))
            .flatten();
        if let Some(codings) = codings {
            let chunked = tokens(codings)
                .last()
                .is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
            if headers.remove(CONTENT_LENGTH).is_some() {
                // Both framings: Transfer-Encoding wins, and the connection is not trusted
                // with another request.
                self.keep_alive = false;
            }
            if chunked {
                self.body = Body::Chunked(Chunk::Size);
            } else {
                self.body = Body::UntilClose;
                self.keep_alive = false;
            }
            return Ok(());
        }
        let length = if seen.content_length {
            content_length(headers)?
        } else {
            None
        };
        match length {
            Some(length) => {
                if headers.get_all(CONTENT_LENGTH).iter().count() > 1 {
                    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
                }
                self.body = Body::Length(length);
            }
            None => {
                self.body = Body::UntilClose;
                self.keep_alive = false;
            }
        }
        Ok(())
    }

    /// Decodes chunked bytes in the buffer from state `chunk`: `Some(Some(piece))` for data,
    /// `Some(None)` at the end of the body, `None` when more bytes are needed.
    pub(super) fn decode_chunked(&mut self, mut chunk: Chunk) -> Result<Option<Option<Bytes>>> {
        loop {
            match chunk {
                Chunk::Size => {
                    let Some(line) = self.line(MAX_CHUNK_LINE, "chunk size")? else {
                        self.body = Body::Chunked(chunk);
                        return Ok(None);
                    };
                    let size = chunk_size(&line)?;
                    chunk = if size == 0 {
                        Chunk::Trailers(0)
                    } else {
                        Chunk::Data(size)
                    };
                }
                Chunk::Data(left) => {
                    if self.buf.is_empty() {
                        self.body = Body::Chunked(chunk);
                        return Ok(None);
                    }
                    let n = left.min(self.buf.len() as u64);
                    let piece = self.buf.split_to(n as usize).freeze();
                    self.body = Body::Chunked(if n == left {
                        Chunk::DataEnd
                    } else {
                        Chunk::Data(left - n)
                    });
                    return Ok(Some(Some(piece)));
                }
                Chunk::DataEnd => {
                    if self.buf.len() < 2 {
                        self.body = Body::Chunked(chunk);
                        return Ok(None);
                    }
                    if &self.buf[..2] != b"\r\n" {
                        return Error::e_explain(
                            ErrorType::InvalidHTTPHeader,
                            "chunk data not followed by CRLF",
                        );
                    }
                    self.buf.advance(2);
                    chunk = Chunk::Size;
                }
                Chunk::Trailers(read) => {
                    let Some(line) = self.line(MAX_TRAILERS - read, "trailers")? else {
                        self.body = Body::Chunked(Chunk::Trailers(read));
                        return Ok(None);
                    };
                    if line.is_empty() {
                        self.body = Body::Done;
                        return Ok(Some(None));
                    }
                    // The bound counts each line with its CRLF: a line that fits without its
                    // CRLF may still pass it, and the next line's room must not go below zero
                    // (it wrapped around to no bound at all in a release build).
                    let read = read + line.len() + 2;
                    if read > MAX_TRAILERS {
                        return too_long("trailers", MAX_TRAILERS);
                    }
                    chunk = Chunk::Trailers(read);
                }
            }
        }
    }

    /// Takes one CRLF-ended line from the buffer (without the CRLF); `None` when it is not
    /// complete yet; an error past `limit` bytes.
    fn line(&mut self, limit: usize, what: &str) -> Result<Option<Bytes>> {
        match self.buf.windows(2).position(|w| w == b"\r\n") {
            Some(end) if end <= limit => {
                let line = self.buf.split_to(end).freeze();
                self.buf.advance(2);
                Ok(Some(line))
            }
            Some(_) => too_long(what, limit),
            None if self.buf.len() > limit => too_long(what, limit),
            None => Ok(None),
        }
    }
}

/// Which framing headers a head has (noted while it is parsed, so the framing looks up only
/// those present).
#[derive(Default, Clone, Copy)]
struct Seen {
    connection: bool,
    content_length: bool,
    transfer_encoding: bool,
}

impl Seen {
    fn note(&mut self, name: &HeaderName) {
        if *name == http::header::CONNECTION {
            self.connection = true;
        } else if *name == CONTENT_LENGTH {
            self.content_length = true;
        } else if *name == TRANSFER_ENCODING {
            self.transfer_encoding = true;
        }
    }
}

fn too_long<T>(what: &str, limit: usize) -> Result<T> {
    let e = format!("the backend's {what} is over {limit} bytes");
    Error::e_explain(ErrorType::InvalidHTTPHeader, e)
}

/// The last value of header `name`.
fn last_value<'m>(headers: &'m HeaderMap, name: &HeaderName) -> Option<&'m HeaderValue> {
    headers.get_all(name).iter().next_back()
}

/// The `Content-Length` of a head: every value (repeated headers, comma lists) must be the same
/// number (RFC 9110 §8.6).
fn content_length(headers: &HeaderMap) -> Result<Option<u64>> {
    let mut length = None;
    for token in headers.get_all(CONTENT_LENGTH).iter().flat_map(tokens) {
        let parsed = std::str::from_utf8(token)
            .ok()
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|t| t.parse::<u64>().ok());
        match (parsed, length) {
            (None, _) => {
                return Error::e_explain(ErrorType::InvalidHTTPHeader, "invalid Content-Length")
            }
            (Some(n), Some(seen)) if n != seen => {
                return Error::e_explain(
                    ErrorType::InvalidHTTPHeader,
                    "conflicting Content-Length values",
                )
            }
            (Some(n), _) => length = Some(n),
        }
    }
    Ok(length)
}

/// The size of a chunk-size line (hex digits, then optional extensions after `;`).
fn chunk_size(line: &[u8]) -> Result<u64> {
    let digits = line.split(|&b| b == b';').next().unwrap_or_default();
    let digits = digits.trim_ascii_end();
    let valid =
        !digits.is_empty() && digits.len() <= 16 && digits.iter().all(u8::is_ascii_hexdigit);
    let size = valid
        .then(|| std::str::from_utf8(digits).ok())
        .flatten()
        .and_then(|d| u64::from_str_radix(d, 16).ok());
    size.ok_or_else(|| Error::explain(ErrorType::InvalidHTTPHeader, "invalid chunk size"))
}
