//! Events as JSON, field by field in kube-apiserver's order, leaving out what Go's `omitempty`
//! leaves out. Written by hand into a byte buffer: keys are constants, strings are checked for
//! characters to escape a whole string at a time and copied in one piece when there are none
//! (serde's writer escapes byte by byte, which was most of an event's cost), timestamps are
//! formatted without a formatting engine. Every request at `Metadata` writes two events, so
//! this is the audit's hot loop.

use std::io::Write as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use super::{
    Body, Event, Omitted, ResponseStatus, API_VERSION, GROUP, NAME, NAMESPACE,
    REQUEST_OBJECT_ANNOTATION, RESOURCE, RESPONSE_OBJECT_ANNOTATION, SUBRESOURCE, URI, USER_AGENT,
    VERSION,
};
use crate::request::Identity;

/// An event as JSON; `typed` adds `kind` and `apiVersion` (a log line has them, the items of an
/// `EventList` do not).
pub struct Json<'a> {
    pub event: &'a Event,
    pub typed: bool,
}

impl Json<'_> {
    /// Appends the event's JSON to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let e = self.event;
        let c = &*e.common;
        out.push(b'{');
        if self.typed {
            out.extend_from_slice(b"\"kind\":\"Event\",\"apiVersion\":\"");
            out.extend_from_slice(API_VERSION.as_bytes());
            out.extend_from_slice(b"\",");
        }
        out.extend_from_slice(b"\"level\":\"");
        out.extend_from_slice(e.level.as_str().as_bytes());
        out.extend_from_slice(b"\",\"auditID\":");
        string(out, c.id.as_str());
        out.extend_from_slice(b",\"stage\":\"");
        out.extend_from_slice(e.stage.as_str().as_bytes());
        out.extend_from_slice(b"\",\"requestURI\":");
        string(out, c.field(URI));
        out.extend_from_slice(b",\"verb\":");
        string(out, &c.verb);
        out.extend_from_slice(b",\"user\":");
        user(out, &*c.user);
        if let Some(impersonated) = &e.impersonated {
            out.extend_from_slice(b",\"impersonatedUser\":");
            user(out, &**impersonated);
        }
        if !c.source_ips.is_empty() {
            out.extend_from_slice(b",\"sourceIPs\":");
            ips(out, &c.source_ips);
        }
        entry(out, "userAgent", c.field(USER_AGENT));
        if c.resource_request {
            out.extend_from_slice(b",\"objectRef\":{");
            let start = out.len();
            for (key, field) in [
                ("resource", RESOURCE),
                ("namespace", NAMESPACE),
                ("name", NAME),
                ("apiGroup", GROUP),
                ("apiVersion", VERSION),
                ("subresource", SUBRESOURCE),
            ] {
                entry(out, key, c.field(field));
            }
            if out.len() > start {
                // The first entry's leading comma.
                out.remove(start);
            }
            out.push(b'}');
        }
        if let Some(s) = &e.status {
            out.extend_from_slice(b",\"responseStatus\":");
            status(out, s);
        }
        let (request, response) = (body(&e.request_object), body(&e.response_object));
        if let Some(Ok(raw)) = request {
            out.extend_from_slice(b",\"requestObject\":");
            out.extend_from_slice(raw.get().as_bytes());
        }
        if let Some(Ok(raw)) = response {
            out.extend_from_slice(b",\"responseObject\":");
            out.extend_from_slice(raw.get().as_bytes());
        }
        out.extend_from_slice(b",\"requestReceivedTimestamp\":\"");
        // Written by every event of the request: formatted once.
        let received = c.received_text.get_or_init(|| {
            let mut text = Vec::with_capacity(27);
            micro_time(&mut text, c.received);
            text
        });
        out.extend_from_slice(received);
        out.extend_from_slice(b"\",\"stageTimestamp\":\"");
        micro_time(out, e.stage_time);
        out.push(b'"');
        let mut notes: Vec<(&str, &str)> = e
            .annotations
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        // Rare (a body too large or not JSON): its reason is worded here.
        let why = |body: Option<Result<&RawValue, Omitted>>| body?.err().map(|o| o.to_string());
        let (request_why, response_why) = (why(request), why(response));
        if let Some(why) = &request_why {
            notes.push((REQUEST_OBJECT_ANNOTATION, why.as_str()));
        }
        if let Some(why) = &response_why {
            notes.push((RESPONSE_OBJECT_ANNOTATION, why.as_str()));
        }
        if !notes.is_empty() {
            notes.sort_by(|a, b| a.0.cmp(b.0));
            out.extend_from_slice(b",\"annotations\":{");
            for (i, (k, v)) in notes.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(out, k);
                out.push(b':');
                string(out, v);
            }
            out.push(b'}');
        }
        out.push(b'}');
    }
}

impl Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = Vec::with_capacity(1024);
        self.write_to(&mut out);
        raw(out).serialize(serializer)
    }
}

/// Bytes this module wrote as JSON.
fn raw(bytes: Vec<u8>) -> Box<RawValue> {
    let text = String::from_utf8(bytes).unwrap_or_default();
    RawValue::from_string(text).unwrap_or_else(|_| {
        // Unreachable: everything written here is JSON of valid UTF-8 input.
        RawValue::from_string("null".to_string()).expect("null is JSON")
    })
}

fn body(body: &Option<Arc<Body>>) -> Option<Result<&RawValue, Omitted>> {
    body.as_deref().map(Body::rendered)
}

/// `,"key":"value"` unless the value is empty (Go's `omitempty`).
fn entry(out: &mut Vec<u8>, key: &str, value: &str) {
    if value.is_empty() {
        return;
    }
    out.extend_from_slice(b",\"");
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
    string(out, value);
}

/// A JSON string: copied in one piece when nothing in it needs escaping.
fn string(out: &mut Vec<u8>, value: &str) {
    let bytes = value.as_bytes();
    out.push(b'"');
    if !needs_escape(bytes) {
        out.extend_from_slice(bytes);
    } else {
        escaped(out, bytes);
    }
    out.push(b'"');
}

/// Whether any byte is `"`, `\` or a control character, eight bytes at a time.
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Bytes of `x` below `n` (n <= 128) have their high bit set in the result.
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        let quote = below(x ^ (ONES * u64::from(b'"')), 1);
        let backslash = below(x ^ (ONES * u64::from(b'\\')), 1);
        if quote | backslash | below(x, 0x20) != 0 {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// The escaping serde_json does: `"`, `\` and control characters.
fn escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0x00..=0x1f => 0,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if short == 0 {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.extend_from_slice(&[b'\\', short]);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

/// `authentication.k8s.io/v1` `UserInfo`.
fn user(out: &mut Vec<u8>, user: &dyn Identity) {
    out.push(b'{');
    let start = out.len();
    entry(out, "username", user.username());
    entry(out, "uid", user.uid());
    if !user.groups().is_empty() {
        out.extend_from_slice(b",\"groups\":");
        strings(out, user.groups());
    }
    let extra = user.extra();
    if !extra.is_empty() {
        let mut sorted: Vec<&(String, Vec<String>)> = extra.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        out.extend_from_slice(b",\"extra\":{");
        for (i, (key, values)) in sorted.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            string(out, key);
            out.push(b':');
            strings(out, values);
        }
        out.push(b'}');
    }
    if out.len() > start {
        out.remove(start);
    }
    out.push(b'}');
}

fn strings(out: &mut Vec<u8>, values: &[String]) {
    out.push(b'[');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, v);
    }
    out.push(b']');
}

fn ips(out: &mut Vec<u8>, ips: &[IpAddr]) {
    out.push(b'[');
    for (i, ip) in ips.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match ip {
            IpAddr::V4(v4) => {
                out.push(b'"');
                for (k, octet) in v4.octets().into_iter().enumerate() {
                    if k > 0 {
                        out.push(b'.');
                    }
                    decimal(out, u64::from(octet));
                }
                out.push(b'"');
            }
            IpAddr::V6(v6) => {
                let _ = write!(out, "\"{v6}\"");
            }
        }
    }
    out.push(b']');
}

/// `metav1.Status` as upstream writes it in events: `metadata` always, `code` unless 0.
fn status(out: &mut Vec<u8>, s: &ResponseStatus) {
    out.extend_from_slice(b"{\"metadata\":{}");
    if let Some(summary) = &s.summary {
        entry(out, "status", &summary.status);
        entry(out, "message", &summary.message);
        entry(out, "reason", &summary.reason);
    }
    if s.code != 0 {
        out.extend_from_slice(b",\"code\":");
        decimal(out, u64::from(s.code));
    }
    out.push(b'}');
}

/// A number in decimal.
fn decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// RFC 3339 in UTC with microseconds (`2026-11-24T23:22:14.372125Z`), as Go's `MicroTime`.
fn micro_time(out: &mut Vec<u8>, time: SystemTime) {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = since.as_secs();
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil(days as i64);
    let (hour, minute, second) = (rest / 3600, rest % 3600 / 60, rest % 60);
    let micros = since.subsec_micros();
    let mut text = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |at: usize, width: usize, mut n: u64| {
        for i in (at..at + width).rev() {
            text[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, year as u64);
    put(5, 2, u64::from(month));
    put(8, 2, u64::from(day));
    put(11, 2, hour);
    put(14, 2, minute);
    put(17, 2, second);
    put(20, 6, u64::from(micros));
    out.extend_from_slice(&text);
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `audit.k8s.io/v1` `EventList`, the body of a webhook request.
pub struct EventList<'a>(pub &'a [Arc<Event>]);

impl EventList<'_> {
    /// The list as JSON bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1024 * self.0.len() + 128);
        out.extend_from_slice(b"{\"kind\":\"EventList\",\"apiVersion\":\"");
        out.extend_from_slice(API_VERSION.as_bytes());
        out.extend_from_slice(b"\",\"metadata\":{},\"items\":[");
        for (i, event) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            Json {
                event,
                typed: false,
            }
            .write_to(&mut out);
        }
        out.extend_from_slice(b"]}");
        out
    }
}

impl Serialize for EventList<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        raw(self.to_vec()).serialize(serializer)
    }
}

#[cfg(test)]
mod tests;
