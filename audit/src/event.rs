//! Audit events (`audit.k8s.io/v1` `Event`) as the request path hands them over, raw, and as
//! the backends write them: JSON with kube-apiserver's field names and order, empty fields left
//! out as Go's `omitempty` leaves them out, timestamps in UTC with microseconds, maps (`extra`,
//! `annotations`) sorted by key. Serialization runs on the backends' threads.
//!
//! Bodies: `requestObject` (level `Request` and up) and `responseObject` (`RequestResponse`)
//! hold the JSON bodies the request path captured, compacted as Go compacts them; CBOR and YAML
//! request bodies are transcoded to JSON (encoding.rs). A body larger than the limit, or one
//! with no JSON form (protobuf, malformed CBOR or YAML), is left out and the annotation
//! `audit.apiagg.io/request-object` or `audit.apiagg.io/response-object` says why.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use serde_json::value::RawValue;

use super::id::AuditId;
use super::policy::{Level, Stage};
use super::request::{Begin, Identity, StatusSummary};
use super::sink::Reservation;

/// The group and version of events.
pub const API_VERSION: &str = "audit.k8s.io/v1";
/// The annotation saying why `requestObject` is missing.
pub const REQUEST_OBJECT_ANNOTATION: &str = "audit.apiagg.io/request-object";
/// The annotation saying why `responseObject` is missing.
pub const RESPONSE_OBJECT_ANNOTATION: &str = "audit.apiagg.io/response-object";
/// User agents longer than this are cut, as upstream (`maxUserAgentLength`).
const MAX_USER_AGENT: usize = 1024;

/// What every event of one request shares, copied once from the request when it is audited.
pub(super) struct Common {
    pub id: AuditId,
    pub user: Arc<dyn Identity>,
    pub verb: Cow<'static, str>,
    pub resource_request: bool,
    /// Request URI, user agent and the object reference in one allocation.
    text: String,
    ends: [usize; FIELDS],
    pub source_ips: Box<[IpAddr]>,
    pub received: SystemTime,
    /// `received` as written in events (formatted once, by the writer).
    received_text: std::sync::OnceLock<Vec<u8>>,
}

const FIELDS: usize = 8;
const URI: usize = 0;
const USER_AGENT: usize = 1;
const RESOURCE: usize = 2;
const NAMESPACE: usize = 3;
const NAME: usize = 4;
const GROUP: usize = 5;
const VERSION: usize = 6;
const SUBRESOURCE: usize = 7;

impl Common {
    pub fn new(begin: Begin<'_>) -> Common {
        let info = begin.info;
        let agent = begin.user_agent.unwrap_or("");
        let (agent, cut) = if agent.len() > MAX_USER_AGENT {
            let mut end = MAX_USER_AGENT;
            while !agent.is_char_boundary(end) {
                end -= 1;
            }
            (&agent[..end], "...TRUNCATED")
        } else {
            (agent, "")
        };
        let resource = |s| only_if(info.resource_request, s);
        let fields: [&[&str]; FIELDS] = [
            &[begin.request_uri],
            &[agent, cut],
            &[resource(info.resource)],
            &[resource(info.namespace)],
            &[resource(&info.name)],
            &[resource(info.group)],
            &[resource(info.version)],
            &[resource(info.subresource)],
        ];
        let len = fields.iter().flat_map(|f| f.iter()).map(|s| s.len()).sum();
        let mut text = String::with_capacity(len);
        let mut ends = [0; FIELDS];
        for (end, parts) in ends.iter_mut().zip(fields) {
            parts.iter().for_each(|p| text.push_str(p));
            *end = text.len();
        }
        Common {
            id: begin.id,
            user: begin.user,
            verb: info.verb.clone(),
            resource_request: info.resource_request,
            text,
            ends,
            source_ips: begin.source_ips.into(),
            received: begin.received,
            received_text: std::sync::OnceLock::new(),
        }
    }

    /// Field `i` of the packed text.
    fn field(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.text.get(start..self.ends[i]).unwrap_or("")
    }
}

fn only_if(keep: bool, s: &str) -> &str {
    if keep {
        s
    } else {
        ""
    }
}

/// `responseStatus`: the code, and for apiagg's own `Status` answers their details.
#[derive(Debug, Clone)]
pub(super) struct ResponseStatus {
    pub code: u16,
    pub summary: Option<StatusSummary>,
}

/// One event, as handed to the backends (shared by all of them).
pub(super) struct Event {
    pub common: Arc<Common>,
    pub level: Level,
    pub stage: Stage,
    pub stage_time: SystemTime,
    pub impersonated: Option<Arc<dyn Identity>>,
    pub status: Option<ResponseStatus>,
    pub annotations: Vec<(&'static str, String)>,
    pub request_object: Option<Arc<Body>>,
    pub response_object: Option<Arc<Body>>,
}

impl Event {
    /// The request URI.
    pub fn request_uri(&self) -> &str {
        self.common.field(URI)
    }

    /// The user agent (empty when none was sent).
    pub fn user_agent(&self) -> &str {
        self.common.field(USER_AGENT)
    }

    /// The namespace of a resource request (empty otherwise).
    pub fn namespace(&self) -> &str {
        self.common.field(NAMESPACE)
    }
}

/// Why an event has no `requestObject` or `responseObject`: the text of its annotation. Not an
/// error of the request, and nothing to retry: the event is written without the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum Omitted {
    /// The body is larger than the capture limit (`body_limit`). Not retryable.
    #[error("omitted: the body is larger than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The queued events already hold the whole body budget. Not retried: the event goes
    /// without the body.
    #[error("omitted: the audit queues hold too much body data")]
    OverBudget,
    /// The body is not JSON (protobuf, or sent as JSON and malformed). Not retryable.
    #[error("omitted: the body is not JSON")]
    NotJson,
    /// The body was sent as CBOR or YAML (`from`) and has no JSON form: malformed, or YAML
    /// whose aliases expand past the bounded reader's limit. Not retryable.
    #[error("omitted: the {from} body cannot be transcoded to JSON")]
    NotTranscoded {
        /// `CBOR` or `YAML`.
        from: &'static str,
    },
}

/// A captured body, turned into compact JSON once, by whichever backend writes it first (the
/// raw bytes are freed then). Its bytes count against the sink's body budget until it is
/// dropped.
pub(super) struct Body {
    /// The captured bytes, until rendered.
    raw: Mutex<Option<Vec<u8>>>,
    /// Why there is no JSON, when known at capture (too large, over the budget).
    omitted: Option<Omitted>,
    omit_managed_fields: bool,
    /// How `raw` is encoded (CBOR and YAML are transcoded to JSON).
    encoding: Encoding,
    /// The capture limit, which transcoded JSON must fit too.
    limit: usize,
    rendered: OnceLock<Result<Box<RawValue>, Omitted>>,
    _reservation: Option<Reservation>,
}

impl Body {
    pub fn captured(
        bytes: Vec<u8>,
        omit_managed_fields: bool,
        encoding: Encoding,
        limit: usize,
        reservation: Reservation,
    ) -> Body {
        Body {
            raw: Mutex::new(Some(bytes)),
            omitted: None,
            omit_managed_fields,
            encoding,
            limit,
            rendered: OnceLock::new(),
            _reservation: Some(reservation),
        }
    }

    /// A body that is not recorded, and why.
    pub fn omitted(why: Omitted) -> Body {
        Body {
            raw: Mutex::new(None),
            omitted: Some(why),
            omit_managed_fields: false,
            encoding: Encoding::Json,
            limit: 0,
            rendered: OnceLock::new(),
            _reservation: None,
        }
    }

    /// The JSON to write, or why there is none.
    fn rendered(&self) -> Result<&RawValue, Omitted> {
        let rendered = self.rendered.get_or_init(|| {
            if let Some(why) = self.omitted {
                return Err(why);
            }
            let raw = self.raw.lock().unwrap_or_else(|e| e.into_inner()).take();
            let bytes = raw.ok_or(Omitted::NotJson)?;
            match encoding::transcode(&bytes, self.encoding) {
                None => render(&bytes, self.omit_managed_fields).ok_or(Omitted::NotJson),
                Some(value) => self.transcoded(value?),
            }
        });
        rendered.as_deref().map_err(|why| *why)
    }
}

impl Body {
    /// A transcoded body as compact JSON, within the capture limit.
    fn transcoded(&self, mut value: serde_json::Value) -> Result<Box<RawValue>, Omitted> {
        if self.omit_managed_fields {
            strip_all_managed_fields(&mut value);
        }
        let json = serde_json::to_string(&value).map_err(|_| Omitted::NotJson)?;
        if json.len() > self.limit {
            return Err(Omitted::TooLarge { limit: self.limit });
        }
        RawValue::from_string(json).map_err(|_| Omitted::NotJson)
    }
}

/// `bytes` as compact JSON; with `omit_managed_fields`, `metadata.managedFields` removed from the
/// object, from each of a list's `items` and each of a table's `rows[].object`, as upstream.
fn render(bytes: &[u8], omit_managed_fields: bool) -> Option<Box<RawValue>> {
    if omit_managed_fields {
        let mut value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        strip_all_managed_fields(&mut value);
        return serde_json::value::to_raw_value(&value).ok();
    }
    // Checked, then compacted byte for byte (numbers keep their exact text, as with Go).
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).ok()?;
    let text = std::str::from_utf8(bytes).ok()?;
    RawValue::from_string(compact(text)).ok()
}

/// `metadata.managedFields` removed from the object, its `items` and its `rows[].object`.
fn strip_all_managed_fields(value: &mut serde_json::Value) {
    strip_managed_fields(value);
    if let Some(items) = value.get_mut("items").and_then(|i| i.as_array_mut()) {
        items.iter_mut().for_each(strip_managed_fields);
    }
    if let Some(rows) = value.get_mut("rows").and_then(|r| r.as_array_mut()) {
        for row in rows {
            if let Some(object) = row.get_mut("object") {
                strip_managed_fields(object);
            }
        }
    }
}

fn strip_managed_fields(object: &mut serde_json::Value) {
    if let Some(metadata) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        metadata.shift_remove("managedFields");
    }
}

/// Valid JSON without the whitespace between tokens.
fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if !c.is_ascii_whitespace() {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

mod encoding;
mod json;

pub(crate) use encoding::Encoding;
pub(super) use json::{EventList, Json};

#[cfg(test)]
mod tests;
